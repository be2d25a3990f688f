"""Coverage of the report's interval of a mean over rooms (``analysis.stats.mean_interval``:
Student t over the room means, clipped to the metric's range) against the percentile bootstrap
over rooms it replaced.

A report gives each arm's mean of room means (pass rate, coverage, sub-calls, ...) and each
paired difference with a 95% interval over its 4 (quickstart) to 12 (room_scaling) held-out
rooms. A 95% interval should contain the true mean in 95% of samples. This draws
``--samples`` sets of n room means for each n in ``--n`` and each shape, computes both
intervals, and prints the share that contain the true mean, with a 95% Wilson interval of
that share (Wilson 1927, ``scipy.stats.binomtest``). Sets whose values are all equal (an
interval of width 0 for both methods) are left out and the number counted is printed.

Shapes (one value per room):
- ``pass rate``: 0 with probability 0.4 (the root passed nothing), else Beta(2, 20) (mean
  0.09): the weak root's pass rates, skewed and bounded at 0;
- ``coverage``: Beta(2, 15) (mean 0.12);
- ``difference``: a tuned minus a base pass rate, each as ``pass rate`` with zero
  probabilities 0.3 and 0.6;
- ``sub-calls``: Poisson(8) (a count);
- ``normal``: Normal(0.3, 0.1).

    python benchmarks/bench_mean_interval.py [--samples 400] [--n 4 8 12 20] [--seed 0]
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from coverage_common import coverage_cell, parse_args

from rlmdistill.analysis.stats import Bounds, mean_interval

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
    share: Bounds = (0.0, 1.0)
    shapes: list[tuple[str, Draw, float, Bounds]] = [
        ("pass rate", _zero_inflated(0.4), 0.6 * 2 / 22, share),
        ("coverage", lambda g, n: g.beta(2, 15, size=n), 2 / 17, share),
        (
            "difference",
            lambda g, n: _zero_inflated(0.3)(g, n) - _zero_inflated(0.6)(g, n),
            (0.7 - 0.4) * 2 / 22,
            (-1.0, 1.0),
        ),
        ("sub-calls", lambda g, n: g.poisson(8.0, size=n).astype(float), 8.0, (0.0, None)),
        ("normal", lambda g, n: g.normal(0.3, 0.1, size=n), 0.3, (None, None)),
    ]
    print(f"{args.samples} sets per row; 95% intervals; coverage [95% Wilson interval]")
    print(f"{'shape':<12}{'true':>7}{'n':>4}  {'percentile bootstrap (old)':<36}{'t (now)':<36}")
    for name, draw, true, bounds in shapes:
        for n in args.n:
            hit = {"old": 0, "new": 0}
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
                hit["new"] += est.low <= true <= est.high
            old, new = (coverage_cell(hit[k], counted) for k in ("old", "new"))
            print(f"{name:<12}{true:>7.3f}{n:>4}  {old:<36}{new:<36}")


if __name__ == "__main__":
    main()
