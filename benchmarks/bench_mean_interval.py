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

import argparse
import math
import os
import platform
from collections.abc import Callable

import numpy as np
import scipy.stats

from rlmdistill.analysis.stats import Bounds, mean_interval

Draw = Callable[[np.random.Generator, int], np.ndarray]


def _wilson(k: int, n: int) -> tuple[float, float]:
    """95% Wilson score interval of a share k / n (Wilson 1927; ``scipy.stats.binomtest``)."""
    if n == 0:
        return math.nan, math.nan
    ci = scipy.stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


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
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--n", type=int, nargs="+", default=[4, 8, 12, 20])
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
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
    print(f"{'shape':<12}{'true':>7}{'n':>4}  {'percentile bootstrap (old)':<30}{'t (now)':<30}")
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
            cells = []
            for k in ("old", "new"):
                wl, wh = _wilson(hit[k], counted)
                cells.append(f"{hit[k] / counted:.3f} [{wl:.3f}, {wh:.3f}]")
            print(f"{name:<12}{true:>7.3f}{n:>4}  {cells[0]:<30}{cells[1]:<30}N={counted}")


if __name__ == "__main__":
    main()
