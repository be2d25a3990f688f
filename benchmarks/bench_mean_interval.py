"""Coverage of the report's intervals of a mean over rooms against the percentile bootstrap
over rooms they replaced: Student t over the room means, clipped to the metric's range
(``rlmdistill.stats.mean_interval``), for every shape, and for rates and shares (values in
[0, 1]) the Korn-Graubard interval the report now uses for them
(``rlmdistill.stats.rate_interval``).

A report gives each arm's mean of room means (pass rate, coverage, sub-calls, ...) and each
paired difference with a 95% interval over its 4 (quickstart) to 12 (room_scaling) held-out
rooms. A 95% interval should contain the true mean in 95% of samples. This draws
``--samples`` sets of n room means for each n in ``--n`` and each shape, computes the
intervals, and prints the share that contain the true mean, with a 95% Wilson interval of
that share (Wilson 1927, ``scipy.stats.binomtest``), and the mean width of the t and
Korn-Graubard intervals. Sets whose values are all equal (an interval of width 0 for the
bootstrap and t; a one-sided bound for Korn-Graubard at all 0) are left out and the number
counted is printed.

Shapes (one value per room):
- ``pass rate``: 0 with probability 0.4 (the root passed nothing), else Beta(2, 20) (mean
  0.09): the weak root's pass rates, skewed and bounded at 0;
- ``pass rate 0.7``: the same with zero probability 0.7 (a weaker root still);
- ``coverage``: Beta(2, 15) (mean 0.12);
- ``memo rate``: Beta(8, 2) (mean 0.8: a rate piled up near 1);
- ``difference``: a tuned minus a base pass rate, each as ``pass rate`` with zero
  probabilities 0.3 and 0.6 (t only: a difference is not a rate);
- ``sub-calls``: Poisson(8) (a count; t only);
- ``normal``: Normal(0.3, 0.1) (t only).

    python benchmarks/bench_mean_interval.py [--samples 400] [--n 4 8 12 20] [--seed 0]
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from coverage_common import coverage_cell, parse_args

from rlmdistill.stats import SHARE, Bounds, mean_interval, rate_interval

Draw = Callable[[np.random.Generator, int], np.ndarray]


def _percentile(values: np.ndarray, rng: np.random.Generator, b: int) -> tuple[float, float]:
    """The replaced interval: percentile bootstrap of the mean over rooms, 95%
    (``scipy.stats.bootstrap(method="percentile")``'s steps)."""
    means = values[rng.integers(0, values.size, size=(b, values.size))].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    return float(low), float(high)


def _zero_inflated(p_zero: float) -> Draw:
    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        return np.where(rng.random(n) < p_zero, 0.0, rng.beta(2, 20, size=n))

    return draw


def main() -> None:
    args = parse_args(__doc__ or "", [4, 8, 12, 20], 2000)
    rng = np.random.default_rng(args.seed)
    shapes: list[tuple[str, Draw, float, Bounds]] = [
        ("pass rate", _zero_inflated(0.4), 0.6 * 2 / 22, SHARE),
        ("pass rate 0.7", _zero_inflated(0.7), 0.3 * 2 / 22, SHARE),
        ("coverage", lambda g, n: g.beta(2, 15, size=n), 2 / 17, SHARE),
        ("memo rate", lambda g, n: g.beta(8, 2, size=n), 0.8, SHARE),
        (
            "difference",
            lambda g, n: _zero_inflated(0.3)(g, n) - _zero_inflated(0.6)(g, n),
            (0.7 - 0.4) * 2 / 22,
            (-1.0, 1.0),
        ),
        ("sub-calls", lambda g, n: g.poisson(8.0, size=n).astype(float), 8.0, (0.0, None)),
        ("normal", lambda g, n: g.normal(0.3, 0.1, size=n), 0.3, (None, None)),
    ]
    print(f"{args.samples} sets per row; 95% intervals; coverage [95% Wilson interval], N")
    print(
        f"{'shape':<14}{'true':>7}{'n':>4}  {'percentile bootstrap (old)':<32}"
        f"{'t':<32}{'Korn-Graubard (rates)':<32}{'width t / KG':>14}"
    )
    for name, draw, true, bounds in shapes:
        rate = bounds == SHARE
        for n in args.n:
            hit = {"old": 0, "t": 0, "kg": 0}
            width = {"t": 0.0, "kg": 0.0}
            counted = 0
            for _ in range(args.samples):
                values = draw(rng, n)
                if np.all(values == values[0]):
                    continue
                counted += 1
                lo, hi = _percentile(values, rng, args.resamples)
                hit["old"] += lo <= true <= hi
                est = mean_interval(values.tolist(), bounds=bounds)
                assert est.low is not None and est.high is not None
                hit["t"] += est.low <= true <= est.high
                width["t"] += est.high - est.low
                if rate:
                    kg = rate_interval(values.tolist())
                    assert kg.low is not None and kg.high is not None
                    hit["kg"] += kg.low <= true <= kg.high
                    width["kg"] += kg.high - kg.low
            old, t = (coverage_cell(hit[k], counted) for k in ("old", "t"))
            kg_cell = coverage_cell(hit["kg"], counted) if rate else "-"
            widths = (
                f"{width['t'] / counted:.3f} / {width['kg'] / counted:.3f}"
                if rate
                else f"{width['t'] / counted:.3f}"
            )
            print(
                f"{name:<14}{true:>7.3f}{n:>4}  {old:<32}{t:<32}{kg_cell:<32}{widths:>14}",
                flush=True,
            )


if __name__ == "__main__":
    main()
