"""Coverage and false-positive rate of the report's correlation change between two arms
(``rlmdistill.stats.correlation_change``: paired percentile bootstrap over rooms) against Zou's
(2007) closed-form interval for two dependent correlations that share a variable.

The report gives ``r_B - r_A``, the change from arm A to arm B of the correlation of room size
with the room's sub-calls, on the same rooms. A 95% interval should contain the true change in
95% of samples, and its p-value should fall below 0.05 in 5% of samples when there is no
change. This draws ``--samples`` data sets of n rooms for each n in ``--n`` and each shape and
prints, for the bootstrap and for Zou's interval: the share of intervals that contain the true
change (with a 95% Wilson interval of that share, ``scipy.stats.binomtest``) and, for the null
shapes, the share of p-values < 0.05 of the bootstrap and of Steiger's (1980) closed-form test
(``CorrelationChange.steiger``, ``rlmdistill.stats.steiger_test``) that the report gives beside it;
for the other shapes, the share of Steiger p < 0.05 is the test's power.

Zou's interval (Zou 2007, *Psychological Methods* 12:399-413, eq. 15 with the correlation of
two overlapping correlations of Olkin & Finn 1990 / Dunn & Clark 1969): ``L = d - sqrt((r_b -
l_b)^2 + (u_a - r_a)^2 - 2 c (r_b - l_b)(u_a - r_a))``, ``U = d + sqrt((u_b - r_b)^2 + (r_a -
l_a)^2 - 2 c (u_b - r_b)(r_a - l_a))``, where ``[l, u]`` are each correlation's own interval
(Pearson: Fisher z; Spearman: Fisher z with the Bonett-Wright standard error, as
``rlmdistill.stats.spearman``) and ``c`` the estimated correlation of ``r_a`` and ``r_b``: the
report's own (``CorrelationChange.zou_low``/``zou_high``; a separate implementation here gave
the same figures to the last digit).

Shapes (x = room size in documents, uniform on 1..8; a room effect ``u`` shared by both arms,
as a room's difficulty is):
- ``shift``: ``y_A = Poisson(0.2 x e^u)``, ``y_B = Poisson(1.0 x e^u)``, ``u ~ N(0, 0.3^2)``
  (arm B delegates in proportion to the room, A barely: the loop's base -> tuned change);
- ``strong``: ``y_A = Poisson(x e^u)``, ``u ~ N(0, 0.8^2)`` (r about 0.4), ``y_B = 2 x +
  Poisson(1)`` (r about 0.98): the shape of room_scaling's tuned-r1 -> tuned-r2;
- ``null``: both ``Poisson(0.5 x e^u)`` (same behaviour; true change 0);
- ``normal``: trivariate normal, corr(x, y_A) = 0.3, corr(x, y_B) = 0.7, corr(y_A, y_B) = 0.5.
True correlations: sample correlations of 400,000 draws.

    python benchmarks/bench_correlation_change_interval.py [--samples 400] [--n 6 8 12 20]
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.stats
from coverage_common import coverage_cell, parse_args

from rlmdistill.stats import correlation_change

Draw = Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray, np.ndarray]]


def _corr(kind: str, u: np.ndarray, v: np.ndarray) -> float:
    if kind == "spearman":
        return float(scipy.stats.spearmanr(u, v)[0])
    return float(np.corrcoef(u, v)[0, 1])


def _rooms(lam_a: float, lam_b: float) -> Draw:
    def draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x = rng.integers(1, 9, size=n).astype(float)
        room = np.exp(rng.normal(0.0, 0.3, size=n))
        ya = rng.poisson(lam_a * x * room).astype(float)
        yb = rng.poisson(lam_b * x * room).astype(float)
        return x, ya, yb

    return draw


def _weak_to_strong() -> Draw:
    """Like room_scaling's tuned-r1 -> tuned-r2: A's sub-calls loosely follow the room (r about
    0.4), B's closely (2 per document plus Poisson(1) others; r about 0.98)."""

    def draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x = rng.integers(1, 9, size=n).astype(float)
        ya = rng.poisson(x * np.exp(rng.normal(0.0, 0.8, size=n))).astype(float)
        yb = 2 * x + rng.poisson(1.0, size=n)
        return x, ya, yb

    return draw


def _normal(r_a: float, r_b: float, r_ab: float) -> Draw:
    cov = np.array([[1.0, r_a, r_b], [r_a, 1.0, r_ab], [r_b, r_ab, 1.0]])

    def draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        v = rng.multivariate_normal(np.zeros(3), cov, size=n)
        return v[:, 0], v[:, 1], v[:, 2]

    return draw


def main() -> None:
    args = parse_args(__doc__ or "", [6, 8, 12, 20], 2000)
    rng = np.random.default_rng(args.seed)
    shapes: list[tuple[str, Draw]] = [
        ("shift", _rooms(0.2, 1.0)),
        ("strong", _weak_to_strong()),
        ("null", _rooms(0.5, 0.5)),
        ("normal", _normal(0.3, 0.7, 0.5)),
    ]
    print(f"{args.samples} data sets per row; 95% intervals; coverage [95% Wilson interval], N")
    head = f"{'shape':<8}{'kind':<10}{'true d':>8}{'n':>4}  "
    print(
        head + f"{'bootstrap (report)':<30}{'Zou 2007':<30}{'boot p<0.05':>12}"
        f"{'Steiger p<0.05':>16}"
    )
    for name, draw in shapes:
        big = draw(rng, 400_000)
        for kind in ("pearson", "spearman"):
            true = _corr(kind, big[0], big[2]) - _corr(kind, big[0], big[1])
            if name == "null":
                true = 0.0
            for n in args.n:
                hit = {"boot": 0, "zou": 0}
                cnt = {"boot": 0, "zou": 0}
                small_p = 0
                steiger_small = steiger_n = 0
                for _ in range(args.samples):
                    x, ya, yb = draw(rng, n)
                    res = correlation_change(
                        x, ya, yb, kind=kind, n_resamples=args.resamples,
                        seed=int(rng.integers(2**31)),
                    )  # fmt: skip
                    if res.low is not None and res.high is not None:
                        cnt["boot"] += 1
                        hit["boot"] += res.low <= true <= res.high
                        small_p += res.p_value is not None and res.p_value < 0.05
                    st = res.steiger
                    if st is not None and st.p_value is not None:
                        steiger_n += 1
                        steiger_small += st.p_value < 0.05
                    if res.zou_low is not None and res.zou_high is not None:
                        cnt["zou"] += 1
                        hit["zou"] += res.zou_low <= true <= res.zou_high
                cells = [coverage_cell(hit[k], cnt[k]) for k in ("boot", "zou")]
                rate = f"{small_p / cnt['boot']:.3f}" if name == "null" and cnt["boot"] else "-"
                steiger = f"{steiger_small / steiger_n:.3f} N={steiger_n}" if steiger_n else "-"
                print(
                    f"{name:<8}{kind:<10}{true:>8.3f}{n:>4}  {cells[0]:<30}{cells[1]:<30}{rate:>12}"
                    f"{steiger:>16}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
