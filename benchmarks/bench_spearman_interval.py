"""Coverage of the Spearman interval the report uses (``rlmdistill.stats.spearman``: Fisher z with
the Bonett-Wright standard error) against the percentile bootstrap over pairs it replaced.

A 95% interval should contain the true rho in 95% of samples. This draws ``--samples`` data
sets of n points for each n in ``--n`` and each shape, computes both intervals, and prints the
share of intervals that contain the true rho, with a 95% Wilson interval for that share
(Wilson 1927, ``scipy.stats.binomtest(...).proportion_ci(method="wilson")``).
Shapes:

- ``rooms``: the report's data shape: x = room size in documents, uniform on 1..8; y = a
  room's sub-calls, Poisson(lam * x), lam 0.1 (mostly zeros, many ties) and 0.5. True rho: the
  sample rho of 400,000 draws.
- ``normal``: bivariate normal with Pearson rho 0.5; true Spearman rho
  ``6 / pi * asin(rho / 2)`` (Pearson 1907).

Bootstrap resamples where x or y is constant have no rho; as the old code did, they are left
out, and a data set whose interval is undefined is left out of that method's count (the
number counted is printed).

    python benchmarks/bench_spearman_interval.py [--samples 400] [--n 6 8 12 20] [--seed 0]
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import scipy.stats
from coverage_common import coverage_cell, parse_args

from rlmdistill.stats import resampled_ranks, spearman

Draw = Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]]


def _old_bootstrap(x: np.ndarray, y: np.ndarray, rng: np.random.Generator, b: int) -> tuple:
    """The replaced interval: percentile bootstrap over (x, y) pairs, 95%."""
    n = x.size
    idx = rng.integers(0, n, size=(b, n))
    rx, ry = resampled_ranks(x, idx), resampled_ranks(y, idx)
    rxc = rx - rx.mean(axis=1, keepdims=True)
    ryc = ry - ry.mean(axis=1, keepdims=True)
    den = np.sqrt((rxc * rxc).sum(axis=1) * (ryc * ryc).sum(axis=1))
    ok = den > 0
    rhos = (rxc * ryc).sum(axis=1)[ok] / den[ok]
    if rhos.size < b / 2:
        return None, None
    lo, hi = np.quantile(rhos, [0.025, 0.975])
    return float(lo), float(hi)


def _rooms(lam: float) -> Draw:
    def draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        x = rng.integers(1, 9, size=n).astype(float)
        return x, rng.poisson(lam * x).astype(float)

    return draw


def _normal(r: float) -> Draw:
    def draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        xy = rng.multivariate_normal([0.0, 0.0], [[1.0, r], [r, 1.0]], size=n)
        return xy[:, 0], xy[:, 1]

    return draw


def main() -> None:
    args = parse_args(__doc__ or "", [6, 8, 12, 20], 1000)
    rng = np.random.default_rng(args.seed)
    shapes: list[tuple[str, Draw, float]] = []
    for lam in (0.1, 0.5):
        x, y = _rooms(lam)(rng, 400_000)
        shapes.append((f"rooms lam={lam}", _rooms(lam), float(scipy.stats.spearmanr(x, y)[0])))
    shapes.append(("normal r=0.5", _normal(0.5), 6 / math.pi * math.asin(0.25)))
    print(f"{args.samples} data sets per row; 95% intervals; coverage [95% Wilson interval]")
    print(
        f"{'shape':<16}{'true rho':>9}{'n':>4}  {'bootstrap (old)':<28}{'Bonett-Wright (now)':<28}"
    )
    for name, draw, true in shapes:
        for n in args.n:
            hit = {"old": 0, "new": 0}
            cnt = {"old": 0, "new": 0}
            for _ in range(args.samples):
                x, y = draw(rng, n)
                res = spearman(x, y)
                if res.low is not None and res.high is not None:
                    cnt["new"] += 1
                    hit["new"] += res.low <= true <= res.high
                if res.value is not None and abs(res.value) < 1:
                    lo, hi = _old_bootstrap(x, y, rng, args.resamples)
                    if lo is not None and hi is not None:
                        cnt["old"] += 1
                        hit["old"] += lo <= true <= hi
            cells = [coverage_cell(hit[k], cnt[k]) for k in ("old", "new")]
            print(f"{name:<16}{true:>9.3f}{n:>4}  {cells[0]:<28}{cells[1]:<28}")


if __name__ == "__main__":
    main()
