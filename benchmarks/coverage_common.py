"""What the interval-coverage benchmarks share (``bench_mean_interval.py``,
``bench_spearman_interval.py``, ``bench_correlation_change_interval.py``): their command line,
the machine line they print first, and the Wilson interval of a coverage share."""

from __future__ import annotations

import argparse
import math

import scipy.stats

from rlmdistill.hardware import machine_line


def parse_args(doc: str, n: list[int], resamples: int) -> argparse.Namespace:
    """``--samples`` (data sets per row, 400), ``--n`` (units per data set, ``n``),
    ``--resamples`` (B of a bootstrap, ``resamples``), ``--seed`` (0); prints the machine line
    (:func:`rlmdistill.hardware.machine_line`, which ``benchmarks/record.py`` keeps)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--n", type=int, nargs="+", default=n)
    ap.add_argument("--resamples", type=int, default=resamples)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(machine_line())
    return args


def wilson(k: int, n: int) -> tuple[float, float]:
    """95% Wilson score interval of a share k / n (Wilson 1927; ``scipy.stats.binomtest``);
    NaN for n = 0."""
    if n == 0:
        return math.nan, math.nan
    ci = scipy.stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


def coverage_cell(hits: int, counted: int) -> str:
    """``share [Wilson low, high] N=counted`` of intervals that held the truth."""
    low, high = wilson(hits, counted)
    share = hits / counted if counted else math.nan
    return f"{share:.3f} [{low:.3f}, {high:.3f}] N={counted}"
