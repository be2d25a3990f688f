"""Coverage of the corrected pass rate's interval (``rlmdistill.stats.corrected_pass_rate``:
Rogan-Gladen with the smoothed delta-method interval of Lee et al. 2025, arXiv 2511.21140)
over simulated graders, beside the plain (unsmoothed) delta method.

Each data set: ``--items`` criteria (default 1,000), each truly PASS with probability theta
(the pass rate); a grader passes a true PASS with probability q1 (sensitivity) and fails a
true FAIL with probability q0 (specificity); a person labels ``m`` of the criteria drawn at
random (the Review page's random sampler), which gives ``m1`` person-PASS and ``m0``
person-FAIL labels. The raw pass rate is over all criteria. A 95% interval should hold theta
in 95% of data sets; the target is >= 93% in every cell where the rate is defined (too few
labels of one class, fewer than ``MIN_CALIBRATION_LABELS``, or q0 + q1 <= 1 on the labels
make it undefined: those data sets are counted apart, as the share defined).

Grid: q0, q1 in {0.7, 0.85, 0.99}; m in {20, 50, 200} labels; theta in {0.05, 0.3, 0.9}.
Printed per cell: coverage [95% Wilson interval of that share] of the project's interval, of
the plain delta method, the share of data sets where the rate is defined, and the mean
width. The ``result:`` line is the lowest coverage of the project's interval over the cells
with at least 50 defined data sets.

    python benchmarks/bench_corrected_rate.py [--samples 1000] [--items 1000] [--seed 0]
"""

from __future__ import annotations

import argparse
import itertools
import math

import numpy as np
from coverage_common import coverage_cell

from rlmdistill.hardware import machine_line
from rlmdistill.stats import corrected_pass_rate

Z95 = 1.959963984540054


def _plain(n_pass: int, n: int, tp: int, m1: int, tn: int, m0: int) -> tuple[float, float]:
    """The plain delta-method interval at the raw estimates (no smoothing), clipped."""
    p, q1, q0 = n_pass / n, tp / m1, tn / m0
    j = q0 + q1 - 1
    t = (p + q0 - 1) / j
    var = (p * (1 - p) / n + (1 - t) ** 2 * q0 * (1 - q0) / m0 + t**2 * q1 * (1 - q1) / m1) / j**2
    half = Z95 * math.sqrt(var)
    return max(t - half, 0.0), min(t + half, 1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(machine_line())
    rng = np.random.default_rng(args.seed)
    qs, ms, thetas = (0.7, 0.85, 0.99), (20, 50, 200), (0.05, 0.3, 0.9)
    print(f"{args.samples} data sets per cell, {args.items} criteria each; 95% intervals")
    print(
        f"{'q0':>5}{'q1':>6}{'m':>5}{'theta':>7}  {'coverage (smoothed, ours)':<34}"
        f"{'coverage (plain delta)':<34}{'defined':>8}{'width':>7}"
    )
    worst = (2.0, "")
    for q0, q1, m, theta in itertools.product(qs, qs, ms, thetas):
        hits = plain_hits = counted = 0
        width = 0.0
        for _ in range(args.samples):
            truth = rng.random(args.items) < theta
            u = rng.random(args.items)
            graded = np.where(truth, u < q1, u >= q0)
            lab = rng.choice(args.items, size=m, replace=False)
            t_lab, g_lab = truth[lab], graded[lab]
            m1 = int(t_lab.sum())
            m0 = m - m1
            tp = int((t_lab & g_lab).sum())
            tn = int((~t_lab & ~g_lab).sum())
            n_pass = int(graded.sum())
            res = corrected_pass_rate(
                n_pass, args.items, true_pass=tp, m1=m1, true_fail=tn, m0=m0
            ).corrected
            if res.value is None or res.low is None or res.high is None:
                continue
            counted += 1
            hits += res.low <= theta <= res.high
            width += res.high - res.low
            lo, hi = _plain(n_pass, args.items, tp, m1, tn, m0)
            plain_hits += lo <= theta <= hi
        share = counted / args.samples
        ours = coverage_cell(hits, counted)
        plain = coverage_cell(plain_hits, counted)
        w = f"{width / counted:.3f}" if counted else "-"
        print(
            f"{q0:>5}{q1:>6}{m:>5}{theta:>7}  {ours:<34}{plain:<34}{share:>8.2f}{w:>7}",
            flush=True,
        )
        if counted >= 50 and hits / counted < worst[0]:
            worst = (hits / counted, f"q0={q0} q1={q1} m={m} theta={theta}")
    print(f"result: lowest coverage {worst[0]:.3f} ({worst[1]}) over cells with >= 50 defined")


if __name__ == "__main__":
    main()
