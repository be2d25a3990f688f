"""Honest statistics for behaviour-shift reports (``analysis``) and the judge's evaluation
(``judge-eval``): intervals of means over rooms, paired differences, Wilcoxon signed-rank
tests and correlations, each with an explicit undefined result (``value=None`` plus
``reason``) for degenerate data (no variance, too few rooms).

Methods (named in every result's ``method`` field; sources in ``docs/analysis.md``):

- **Mean over rooms** (:func:`cluster_mean_interval`, :func:`mean_interval`): episodes are
  averaged per room first; the point value is the mean of the room means (every room weighs
  the same) and the interval is Student's t over the room means, clipped to the metric's
  range. Episodes of one room share the room's difficulty, so treating episodes as
  independent would understate the uncertainty. (A percentile bootstrap over rooms, used
  before, covered 77-92% at 4-12 rooms for a 95% interval; the t interval 88-98%.)
- **Mean of a rate over rooms** (:func:`rate_interval`, what the report uses for rates and
  shares): Korn & Graubard's (1998) Clopper-Pearson interval at the effective count, skewed
  away from 0 (zero-heavy pass rates: 94-97.5% at 4-20 rooms where t gave 88-94%); every room
  at 0 gives the one-sided bound ``1 - a^(1/n)`` over the n rooms.
- **Paired difference over rooms** (:func:`paired_comparison`): per room ``d = mean_B - mean_A``
  over the rooms both arms ran; the mean of ``d`` with the same t interval, and the
  two-sided Wilcoxon signed-rank test of ``d`` (:func:`wilcoxon_signed_rank`: zero
  differences dropped, p exact over all 2^n sign flips with tied ranks for n <= 50, computed
  here so that it does not depend on the scipy version; Wilcoxon 1945).
- **Equal values**: values within :data:`TIE_TOLERANCE` (relative) of each other are one
  value, so rounding noise of room means is no spread for a correlation or a mean.
- **Pearson r** (:func:`pearson`): ``scipy.stats.pearsonr``; interval by the Fisher z
  transform ``tanh(atanh(r) +- z_{1-a/2} / sqrt(n - 3))`` (Fisher 1921).
- **Spearman rho** (:func:`spearman`): ``scipy.stats.spearmanr``; two-sided p exact by
  permutation (all pairings, ``scipy.stats.permutation_test``) for n <= 8, else the t
  approximation; interval by the Fisher z transform with the Bonett-Wright standard error
  ``sqrt((1 + rho^2/2) / (n - 3))`` (Bonett & Wright 2000); no interval when |rho| = 1.
- **Change of a correlation between two arms** (:func:`correlation_change`): ``r_B - r_A`` of the
  correlation of room size with each arm's room-mean sub-calls on the same rooms; paired
  percentile bootstrap over rooms (the same resampled rooms for both arms; exhaustive over all
  ``n**n`` resamples when that is no more than B), two-sided bootstrap p-value
  (:data:`CORRELATION_CHANGE_P_METHOD`, Efron & Tibshirani 1993, sec. 15.4); beside it Zou's
  (2007) closed-form interval (:func:`zou_interval`), which keeps its coverage at few rooms
  where the percentile bootstrap's falls short, and Steiger's (1980) test
  (:func:`steiger_test`), whose false-positive rate stays near alpha where the bootstrap p's
  does not.
- **A grader's pass rate corrected for its errors** (:func:`corrected_pass_rate`): Rogan-Gladen
  with the delta-method interval over the three binomials (the grader's pass rate, its
  sensitivity and specificity from people's labels), smoothed as in Lee et al. (2025, arXiv
  2511.21140); sensitivity and specificity themselves with the Wilson interval
  (:func:`wilson_interval`).

Undefined rather than a made-up number: fewer than 3 units (rooms, pairs, points), zero
variance, every paired difference zero. No result ever holds NaN or infinity.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Literal, NamedTuple

import numpy as np
import scipy.stats
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CORRECTED_RATE_METHOD",
    "CORRELATION_CHANGE_P_METHOD",
    "COUNT",
    "DEFAULT_CONFIDENCE",
    "DEFAULT_RESAMPLES",
    "DIFF_DECIMALS",
    "EQUAL_VALUES_NOTE",
    "EXHAUSTIVE_MAX_RESAMPLES",
    "MEAN_METHOD",
    "MIN_CALIBRATION_LABELS",
    "MIN_UNITS",
    "RATE_METHOD",
    "SHARE",
    "SPEARMAN_EXACT_MAX_N",
    "STEIGER_METHOD",
    "TIE_TOLERANCE",
    "UNBOUNDED",
    "WILCOXON_EXACT_MAX_N",
    "WILCOXON_METHOD",
    "WILSON_METHOD",
    "ZOU_METHOD",
    "Bounds",
    "CorrectedRate",
    "Correlation",
    "CorrelationChange",
    "Estimate",
    "Kappa",
    "PairedComparison",
    "TestResult",
    "cluster_mean_interval",
    "cluster_means",
    "cohen_kappa",
    "corrected_pass_rate",
    "correlation_change",
    "ema",
    "fisher_z_interval",
    "mean_interval",
    "paired_comparison",
    "pearson",
    "rate_interval",
    "resampled_ranks",
    "spearman",
    "steiger_test",
    "wilcoxon_signed_rank",
    "wilson_interval",
    "zou_interval",
]

DEFAULT_RESAMPLES = 2000
"""Bootstrap resamples (B) used unless told otherwise."""
DEFAULT_CONFIDENCE = 0.95
"""Two-sided confidence level of every interval unless told otherwise."""
SPEARMAN_EXACT_MAX_N = 8
"""Up to this many points the Spearman p-value is exact (all n! pairings, 40,320 at n = 8)."""
MIN_UNITS = 3
"""Fewest independent units (rooms, pairs, points) for an interval, a test or a correlation."""

MEAN_METHOD = (
    "Student t interval over {unit}: mean +- t(n-1, 1-a/2) s / sqrt(n), s the standard "
    "deviation of the {unit}' values (ddof 1)"
)
"""Method of :func:`mean_interval` (``{unit}``: rooms, paired rooms, documents); the range it
clips to, if any, is added after it."""


class Estimate(BaseModel):
    """A point value with a confidence interval, either of which may be undefined.

    ``value is None``: no estimate at all (``reason`` says why). ``low``/``high`` ``None``:
    the value stands but no interval can be given (``reason`` says why). A degenerate but
    valid interval (all values equal: ``low == high == value``) carries a ``reason`` note too.
    """

    model_config = ConfigDict(extra="forbid")

    value: float | None
    low: float | None = None
    high: float | None = None
    confidence: float = DEFAULT_CONFIDENCE
    n: int
    """Independent units behind the value (rooms, room pairs, points)."""
    unit: str = "rooms"
    method: str
    reason: str | None = None
    one_sided: bool = False
    """The interval is a one-sided bound at ``confidence``: ``[0, high]`` when every unit's
    rate is 0, ``[low, 1]`` when every one is 1 (:func:`rate_interval`); ``False`` in reports
    before it."""

    @property
    def defined(self) -> bool:
        """Whether there is a point value."""
        return self.value is not None


class TestResult(BaseModel):
    """A hypothesis test's statistic and two-sided p-value, or an explicit undefined result."""

    model_config = ConfigDict(extra="forbid")

    statistic: float | None
    p_value: float | None
    n: int
    """Units entering the test (non-zero paired differences for Wilcoxon)."""
    method: str
    reason: str | None = None


class Correlation(BaseModel):
    """A correlation coefficient with its interval and p-value, or an explicit undefined result."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["pearson", "spearman"]
    value: float | None
    low: float | None = None
    high: float | None = None
    p_value: float | None = None
    confidence: float = DEFAULT_CONFIDENCE
    n: int
    method: str
    reason: str | None = None


class PairedComparison(BaseModel):
    """Arm B against arm A over the units (rooms) both have: differences ``b - a``."""

    model_config = ConfigDict(extra="forbid")

    n_pairs: int
    keys: list[str] = Field(default_factory=list)
    """Paired units in the order of ``differences``."""
    differences: list[float] = Field(default_factory=list)
    mean_difference: Estimate
    wilcoxon: TestResult
    n_improved: int
    """Pairs with ``b > a``."""
    n_declined: int
    n_tied: int
    only_in_a: list[str] = Field(default_factory=list)
    only_in_b: list[str] = Field(default_factory=list)


TIE_TOLERANCE = 1e-12
"""Two values ``a``, ``b`` with ``|b - a| <= TIE_TOLERANCE * max(1, |a|, |b|)`` are equal: a
paired difference that small is a tie, and values that close are one value to a correlation,
its ranks and the test of "all values equal" (rounding noise of room means is ~1e-16)."""


def _as_array(values: Sequence[float], what: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{what}: expected a flat sequence of numbers, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        bad = [i for i, v in enumerate(arr.tolist()) if not math.isfinite(v)]
        raise ValueError(f"{what}: non-finite values at positions {bad[:10]}")
    return arr


def _all_equal(arr: np.ndarray) -> bool:
    """Whether every value equals the first within :data:`TIE_TOLERANCE` (:func:`_snap_ties`):
    room means equal in exact arithmetic but not in floats (``0.1`` and
    ``0.10000000000000002``) are equal, so a "spread" of rounding noise is no spread."""
    if not arr.size:
        return False
    snapped = _snap_ties(arr)
    return bool(np.all(snapped == snapped[0]))


def _snap_ties(arr: np.ndarray) -> np.ndarray:
    """``arr`` with values equal within :data:`TIE_TOLERANCE` made exactly equal: sorted, each
    value within ``TIE_TOLERANCE * max(1, |v|, |w|)`` of the smallest value ``w`` of its group
    is replaced by ``w`` (a group is anchored at its first value, so tolerances never chain).

    Why: room means of equal values summed in another order differ in the last bits
    (``(0.2 + 0.4) / 2 - 0.3 = 5.6e-17``, three-episode rooms give ``0.1`` and
    ``0.10000000000000002``); a correlation or rank of such values would be one of rounding
    noise. Values further apart than the tolerance are unchanged. Shape: as ``arr``.
    """
    if arr.size < 2:
        return arr
    order = np.argsort(arr, kind="stable")
    srt = arr[order]
    out = srt.copy()
    anchor = float(srt[0])
    for i in range(1, srt.size):
        v = float(srt[i])
        if abs(v - anchor) <= TIE_TOLERANCE * max(1.0, abs(v), abs(anchor)):
            out[i] = anchor
        else:
            anchor = v
    res = np.empty_like(arr)
    res[order] = out
    return res


Bounds = tuple[float | None, float | None]
"""``(lowest, highest)`` value a mean can take (``None``: unbounded on that side): ``(0, 1)``
for a share or rate, ``(0, None)`` for a count; an interval is clipped to it."""

UNBOUNDED: Bounds = (None, None)
SHARE: Bounds = (0.0, 1.0)
"""Range of a share or rate (pass rate, coverage, memo rate, token shares)."""
COUNT: Bounds = (0.0, None)
"""Range of a count or other non-negative amount (sub-calls, turns, characters, USD, seconds)."""


def _bounds_text(bounds: Bounds) -> str:
    lo, hi = bounds
    if lo is None and hi is None:
        return ""
    left = "(-inf" if lo is None else f"[{lo:g}"
    right = "inf)" if hi is None else f"{hi:g}]"
    return f", clipped to the range {left}, {right}"


def mean_interval(
    values: Sequence[float],
    *,
    unit: str = "rooms",
    confidence: float = DEFAULT_CONFIDENCE,
    bounds: Bounds = UNBOUNDED,
) -> Estimate:
    """Mean of ``values`` (one per independent unit, e.g. room means) with a Student t
    interval ``mean +- t_(n-1, 1-a/2) * s / sqrt(n)``, ``s`` the sample standard deviation
    (ddof 1), ``a = 1 - confidence``, clipped to ``bounds`` (a rate's interval never leaves
    [0, 1]; clipping cannot lose coverage, the true mean lies inside the bounds).

    It replaced a percentile bootstrap, which at the report's few rooms covered far less than
    asked: 77-85% at 4 rooms, 87-92% at 8-12, against 95% (the t interval: 88-96% at 4 rooms,
    90-98% at 8-12; least on zero-inflated pass rates, 88% and 90%;
    ``benchmarks/bench_mean_interval.py``, figures in ``docs/analysis.md``). Source: Student
    (1908) *Biometrika* 6:1-25; for few clusters, the t interval over cluster means is the
    usual small-sample choice (Cameron & Miller 2015, *J. Human Resources* 50:317-372, sec. VI).

    Returns ``value=None`` for no values; the mean without an interval for fewer than
    :data:`MIN_UNITS` values; ``[v, v]`` with a note when every value equals ``v``.
    Raises ``ValueError`` for non-finite values.
    """
    arr = _as_array(values, "mean_interval")
    method = MEAN_METHOD.format(unit=unit) + _bounds_text(bounds)
    n = int(arr.size)
    if n == 0:
        return Estimate(value=None, n=0, unit=unit, method=method, reason=f"no {unit}")
    mean = float(arr.mean())
    if n < MIN_UNITS:
        v = float(arr[0]) if _all_equal(arr) else mean
        return Estimate(
            value=v,
            n=n,
            unit=unit,
            method=method,
            confidence=confidence,
            reason=f"interval needs >= {MIN_UNITS} {unit} (got {n})",
        )
    if _all_equal(arr):
        v = float(arr[0])
        return Estimate(
            value=v,
            low=v,
            high=v,
            n=n,
            unit=unit,
            method=method,
            confidence=confidence,
            reason=f"all {n} values equal {v:g}: no spread, so an interval of width 0",
        )
    half = float(scipy.stats.t.ppf(0.5 + confidence / 2, n - 1)) * float(arr.std(ddof=1))
    half /= math.sqrt(n)
    low, high = mean - half, mean + half
    lo, hi = bounds
    low = low if lo is None else max(low, lo)
    high = high if hi is None else min(high, hi)
    return Estimate(
        value=mean, low=low, high=high, n=n, unit=unit, method=method, confidence=confidence
    )


def cluster_means(values: Sequence[float], clusters: Sequence[Hashable]) -> dict[Hashable, float]:
    """Mean of ``values`` per cluster (e.g. episodes per room), in order of first appearance.

    Raises ``ValueError`` when the two sequences differ in length or a value is not finite.
    """
    if len(values) != len(clusters):
        raise ValueError(f"cluster_means: {len(values)} values but {len(clusters)} cluster labels")
    arr = _as_array(values, "cluster_means")
    sums: dict[Hashable, float] = {}
    counts: dict[Hashable, int] = {}
    for v, c in zip(arr.tolist(), clusters, strict=True):
        sums[c] = sums.get(c, 0.0) + v
        counts[c] = counts.get(c, 0) + 1
    return {c: sums[c] / counts[c] for c in sums}


def cluster_mean_interval(
    values: Sequence[float],
    clusters: Sequence[Hashable],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    unit: str = "rooms",
    bounds: Bounds = UNBOUNDED,
) -> Estimate:
    """Mean of the cluster (room) means with the Student t interval over clusters
    (:func:`mean_interval` of :func:`cluster_means`): episodes of one room share its
    difficulty, so the room, not the episode, is the independent unit.

    ``values[i]`` belongs to cluster ``clusters[i]``. ``n`` of the result is the number of
    clusters. Degenerate cases and errors as in :func:`mean_interval`.
    """
    means = cluster_means(values, clusters)
    return mean_interval(list(means.values()), unit=unit, confidence=confidence, bounds=bounds)


RATE_METHOD = (
    "Korn-Graubard interval over {unit}: Clopper-Pearson limits at the effective count n* = "
    "p(1 - p) / (s^2 / n) (z(1-a/2) / t(n-1, 1-a/2))^2, p the mean and s the standard "
    "deviation (ddof 1) of the {unit}' values in [0, 1], x* = p n*: [Beta(a/2; x*, n* - x* + 1), "
    "Beta(1 - a/2; x* + 1, n* - x*)]; every value 0: one-sided upper bound 1 - a^(1/n) "
    "(exact Clopper-Pearson at 0 of n {unit}), every value 1: lower bound a^(1/n)"
)
"""Method of :func:`rate_interval` (``{unit}``: rooms, ...)."""


def rate_interval(
    values: Sequence[float],
    *,
    unit: str = "rooms",
    confidence: float = DEFAULT_CONFIDENCE,
) -> Estimate:
    """Mean of rates in [0, 1] (one per independent unit, e.g. room pass rates) with the
    Korn-Graubard interval (:data:`RATE_METHOD`), for rates that pile up at 0.

    Method (Korn & Graubard 1998, *Survey Methodology* 24:193-201; the NCHS standard for
    proportions from clustered samples, Parker et al. 2017, *Vital Health Stat* 2(175)): the
    variance of the mean ``s^2 / n`` over units (rooms: episodes and criteria of one room
    share its difficulty, so the room is the unit, as in :func:`mean_interval`) gives the
    effective count ``n_eff = p(1 - p) / (s^2 / n)`` (the count of independent trials with
    the same variance: the pooled criteria divided by their design effect); it is shrunk by
    ``(z_(1-a/2) / t_(n-1, 1-a/2))^2`` for the ``n - 1`` degrees of freedom of ``s^2``, and the
    exact binomial (Clopper-Pearson) limits are taken at ``x* = p n*`` of ``n*`` (beta
    quantiles, defined for non-integer counts). Unlike Student's t (symmetric about ``p``,
    so short above a mean near 0), the limits are skewed away from the bound: on zero-heavy
    pass rates the t interval covered 88% at 4 rooms and 90% at 12 against 95%, this one
    96-97% (``benchmarks/bench_mean_interval.py``, figures in ``docs/analysis.md``).

    Every value 0 (no spread, so no ``n_eff``): the one-sided upper bound ``1 - a^(1/n)``
    at level ``confidence`` (``a = 1 - confidence``), ``n`` the units, with ``low = 0`` and
    ``one_sided=True``. It is the exact Clopper-Pearson bound for 0 events in ``n`` trials
    (the "rule of three" ``3/n`` is its large-n approximation, ``-ln(0.05) = 3.0``, and
    overstates it at few rooms: 0.75 against 0.53 at 4). ``n`` is the rooms, not the pooled
    criteria: a room's rate ``X`` in [0, 1] has ``P(X > 0) >= E[X]``, so ``P(all n rooms at
    0) <= (1 - mean)^n`` and the bound holds whatever the clustering inside rooms, while a
    count of criteria would assume them independent (and with no spread no design effect can
    be estimated). Every value 1: the lower bound ``a^(1/n)``, likewise. Any other constant
    value: ``[v, v]`` with a note, as :func:`mean_interval`.

    Returns ``value=None`` for no values; the mean without an interval for fewer than
    :data:`MIN_UNITS` values. Raises ``ValueError`` for non-finite values or values outside
    [0, 1] (naming the positions).
    """
    arr = _as_array(values, "rate_interval")
    bad = [i for i, v in enumerate(arr.tolist()) if not 0.0 <= v <= 1.0]
    if bad:
        raise ValueError(f"rate_interval: values outside [0, 1] at positions {bad[:10]}")
    method = RATE_METHOD.format(unit=unit)
    n = int(arr.size)
    base = {"n": n, "unit": unit, "method": method, "confidence": confidence}
    if n < MIN_UNITS or (_all_equal(arr) and 0.0 < float(arr[0]) < 1.0):
        est = mean_interval(arr.tolist(), unit=unit, confidence=confidence, bounds=SHARE)
        return est.model_copy(update={"method": method})
    alpha = 1.0 - confidence
    if _all_equal(arr):
        bound = alpha ** (1.0 / n)
        if float(arr[0]) == 0.0:
            return Estimate(
                value=0.0,
                low=0.0,
                high=1.0 - bound,
                one_sided=True,
                reason=(
                    f"all {n} {unit} at 0: one-sided {confidence:.0%} upper bound "
                    f"1 - {alpha:g}^(1/{n}) (exact Clopper-Pearson, n = {n} {unit})"
                ),
                **base,
            )
        return Estimate(
            value=1.0,
            low=bound,
            high=1.0,
            one_sided=True,
            reason=(
                f"all {n} {unit} at 1: one-sided {confidence:.0%} lower bound "
                f"{alpha:g}^(1/{n}) (exact Clopper-Pearson, n = {n} {unit})"
            ),
            **base,
        )
    p = float(arr.mean())
    var = float(arr.var(ddof=1)) / n
    shrink = (
        float(scipy.stats.norm.ppf(1 - alpha / 2)) / float(scipy.stats.t.ppf(1 - alpha / 2, n - 1))
    ) ** 2
    n_star = p * (1.0 - p) / var * shrink
    x_star = p * n_star
    low = (
        0.0 if x_star <= 0 else float(scipy.stats.beta.ppf(alpha / 2, x_star, n_star - x_star + 1))
    )
    high = (
        1.0
        if x_star >= n_star
        else float(scipy.stats.beta.ppf(1 - alpha / 2, x_star + 1, n_star - x_star))
    )
    return Estimate(value=p, low=min(low, p), high=max(high, p), **base)


WILCOXON_EXACT_MAX_N = 50
"""Up to this many non-zero differences the Wilcoxon p-value is exact (the whole sign-flip
distribution, ties included); above it, the normal approximation with the tie correction."""

WILCOXON_METHOD = (
    "Wilcoxon signed-rank test, two-sided, zero differences dropped (Wilcoxon's rule), "
    "T+ = sum of the average ranks of |d| over the positive d; p = min(1, 2 min(P(T+ <= t), "
    "P(T+ >= t))) under the exact sign-flip null (each non-zero d positive or negative with "
    f"probability 1/2, given its rank; all 2^n sign patterns, ties included) for n <= "
    f"{WILCOXON_EXACT_MAX_N}, else the normal approximation with the tie correction and no "
    "continuity correction; computed here, not by scipy.stats.wilcoxon, whose choice "
    "between exact, permutation and normal p changed across scipy versions"
)


def _signed_rank_null(ranks2: np.ndarray) -> np.ndarray:
    """Exact null distribution of ``2 T+`` given the doubled average ranks ``ranks2`` (integers,
    shape (n,)): ``out[k] = P(2 T+ = k)`` when each rank's sign is + or - with probability 1/2,
    independently (the sign-flip or permutation distribution of the signed-rank statistic,
    which holds with tied ranks; Lehmann 1975, *Nonparametrics* sec. 4.2). Built by
    convolving one rank at a time (the generating function ``prod (1 + s^r) / 2``), exactly
    in integer counts: shape (sum(ranks2) + 1,)."""
    total = int(ranks2.sum())
    counts = np.zeros(total + 1, dtype=object)  # exact integer counts up to 2^n
    counts[0] = 1
    top = 0
    for r in ranks2.tolist():
        counts[r : top + r + 1] = counts[r : top + r + 1] + counts[: top + 1]
        top += r
    return counts


def wilcoxon_signed_rank(differences: Sequence[float]) -> TestResult:
    """Two-sided Wilcoxon signed-rank test of paired differences against zero
    (:data:`WILCOXON_METHOD`; Wilcoxon 1945, *Biometrics Bulletin* 1:80-83).

    Zero differences are dropped; the others are ranked by ``|d|`` (average ranks for ties).
    ``statistic`` is ``min(T+, T-)``. For ``n <= WILCOXON_EXACT_MAX_N`` non-zero differences
    the p-value is exact over all ``2^n`` sign patterns with the observed (tied) ranks, so it
    is never below the smallest attainable ``2 / 2^n`` (5 rooms all improved: 0.0625,
    whatever the ties); above that, ``z = (T+ - n(n+1)/4) / sqrt(n(n+1)(2n+1)/24 -
    sum(t^3 - t)/48)`` (``t`` the sizes of tied groups) against the normal. Computed here
    so that the p-value does not depend on the scipy version (scipy 1.11-1.14 gave 0.041 for
    5 of 5 rooms improved with tied differences; 1.15+ the exact 0.0625 at n <= 13 only).

    Undefined (``p_value=None``) when fewer than :data:`MIN_UNITS` differences are non-zero
    (including every difference being zero). Raises ``ValueError`` for non-finite values.
    """
    d = _as_array(differences, "wilcoxon_signed_rank")
    nonzero = d[d != 0]
    n = int(nonzero.size)
    if n < MIN_UNITS:
        if d.size and n == 0:
            why = f"all {d.size} paired differences are zero"
        else:
            why = f"needs >= {MIN_UNITS} non-zero paired differences (got {n} of {d.size})"
        return TestResult(statistic=None, p_value=None, n=n, method=WILCOXON_METHOD, reason=why)
    ranks = scipy.stats.rankdata(np.abs(_snap_ties(nonzero)))  # average ranks: k or k + 1/2
    t_plus = float(ranks[nonzero > 0].sum())
    statistic = min(t_plus, n * (n + 1) / 2 - t_plus)
    if n <= WILCOXON_EXACT_MAX_N:
        ranks2 = np.rint(2 * ranks).astype(np.int64)
        counts = _signed_rank_null(ranks2)
        k = int(ranks2[nonzero > 0].sum())
        total = 2**n
        low_tail = sum(counts[: k + 1])  # P(2T+ <= k) * 2^n, exact integers
        high_tail = sum(counts[k:])
        p = min(1.0, 2 * min(low_tail, high_tail) / total)
    else:
        _, tie_sizes = np.unique(ranks, return_counts=True)
        var = n * (n + 1) * (2 * n + 1) / 24 - float((tie_sizes**3 - tie_sizes).sum()) / 48
        z = (t_plus - n * (n + 1) / 4) / math.sqrt(var)
        p = min(1.0, float(2 * scipy.stats.norm.sf(abs(z))))
    return TestResult(statistic=statistic, p_value=float(p), n=n, method=WILCOXON_METHOD)


def _tie_to_zero(b: float, a: float) -> float:
    d = b - a
    return 0.0 if abs(d) <= TIE_TOLERANCE * max(1.0, abs(a), abs(b)) else d


def paired_comparison(
    a: Mapping[str, float],
    b: Mapping[str, float],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    unit: str = "rooms",
    bounds: Bounds = UNBOUNDED,
) -> PairedComparison:
    """Compare per-unit values (e.g. room means) of arm B with arm A, paired by key.

    Only keys present in both mappings pair up (in ``a``'s order); the others are listed in
    ``only_in_a`` / ``only_in_b``. Differences are ``b - a``; one within
    :data:`TIE_TOLERANCE` (relative) of zero is a tie, 0 exactly: room means of equal values
    summed in another order differ by rounding only (``(0.2 + 0.4) / 2 - 0.3 = 5.6e-17``),
    and such a difference must count as tied, not declined, and drop out of the Wilcoxon test.
    The mean difference has the Student t interval of :func:`mean_interval` over the pairs,
    clipped to ``bounds`` (the range of a difference: ``(-1, 1)`` for rates).
    """
    keys = [k for k in a if k in b]
    diffs = [_tie_to_zero(float(b[k]), float(a[k])) for k in keys]
    mean_diff = mean_interval(diffs, unit=f"paired {unit}", confidence=confidence, bounds=bounds)
    return PairedComparison(
        n_pairs=len(keys),
        keys=list(keys),
        differences=diffs,
        mean_difference=mean_diff,
        wilcoxon=wilcoxon_signed_rank(diffs),
        n_improved=sum(1 for d in diffs if d > 0),
        n_declined=sum(1 for d in diffs if d < 0),
        n_tied=sum(1 for d in diffs if d == 0),
        only_in_a=[k for k in a if k not in b],
        only_in_b=[k for k in b if k not in a],
    )


def _degenerate_pair(x: np.ndarray, y: np.ndarray) -> str | None:
    n = int(x.size)
    if n < MIN_UNITS:
        return f"n = {n} < {MIN_UNITS} points: a correlation needs at least {MIN_UNITS}"
    for name, arr in (("x", x), ("y", y)):
        if _all_equal(arr):
            return f"no variance in {name} (all {n} values equal {float(arr[0]):g})"
    return None


def _xy(x: Sequence[float], y: Sequence[float], what: str) -> tuple[np.ndarray, np.ndarray]:
    """``x`` and ``y`` as arrays, values equal within :data:`TIE_TOLERANCE` made equal
    (:func:`_snap_ties`)."""
    if len(x) != len(y):
        raise ValueError(f"{what}: x has {len(x)} values but y has {len(y)}")
    return _snap_ties(_as_array(x, f"{what} x")), _snap_ties(_as_array(y, f"{what} y"))


EQUAL_VALUES_NOTE = (
    "values equal within a relative 1e-12 count as equal (a constant x or y, e.g. room means "
    "that differ by rounding only, leaves the correlation undefined)"
)
"""How a correlation treats values equal up to rounding (:data:`TIE_TOLERANCE`); ends the
``method`` of every correlation."""

PEARSON_METHOD = (
    "Pearson r (scipy.stats.pearsonr), two-sided p; interval by the Fisher z transform "
    "tanh(atanh(r) +- z/sqrt(n-3)); " + EQUAL_VALUES_NOTE
)


def fisher_z_interval(
    r: float, n: int, kind: Literal["pearson", "spearman"], confidence: float
) -> tuple[float, float]:
    """Interval ``tanh(atanh(r) +- z_{1-a/2} * se)`` of a correlation ``r`` of ``n`` points,
    ``a = 1 - confidence``: Pearson ``se = 1 / sqrt(n - 3)`` (Fisher 1921), Spearman ``se =
    sqrt((1 + r^2 / 2) / (n - 3))`` (Bonett & Wright 2000, *Psychometrika* 65:23-28).

    Raises ``ValueError`` when ``n < 4`` or ``|r| >= 1`` (the transform is infinite there);
    callers return an undefined interval with the reason instead.
    """
    if n < 4 or not abs(r) < 1.0:
        raise ValueError(f"fisher_z_interval: needs n >= 4 and |r| < 1 (got n={n}, r={r})")
    se = math.sqrt((1 + r * r / 2) / (n - 3)) if kind == "spearman" else 1 / math.sqrt(n - 3)
    half = float(scipy.stats.norm.ppf(0.5 + confidence / 2)) * se
    z = math.atanh(r)
    return math.tanh(z - half), math.tanh(z + half)


def pearson(
    x: Sequence[float], y: Sequence[float], *, confidence: float = DEFAULT_CONFIDENCE
) -> Correlation:
    """Pearson correlation of paired points with a Fisher z interval.

    Undefined for n < 3 or a constant x or y (``x=[1,1,1]`` -> "no variance in x";
    n = 2 never yields r = +-1). The interval needs n >= 4 and |r| < 1 (else ``low=high=None``
    with the reason). Raises ``ValueError`` on unequal lengths or non-finite values.
    """
    xa, ya = _xy(x, y, "pearson")
    n = int(xa.size)
    why = _degenerate_pair(xa, ya)
    if why is not None:
        return Correlation(
            kind="pearson",
            value=None,
            n=n,
            method=PEARSON_METHOD,
            reason=why,
            confidence=confidence,
        )
    res = scipy.stats.pearsonr(xa, ya)
    r = float(np.clip(res.statistic, -1.0, 1.0))
    p = float(res.pvalue)
    if n < 4:
        return Correlation(
            kind="pearson",
            value=r,
            p_value=p,
            n=n,
            method=PEARSON_METHOD,
            confidence=confidence,
            reason=f"Fisher z interval needs n >= 4 (got {n})",
        )
    if abs(r) >= 1.0:
        return Correlation(
            kind="pearson",
            value=r,
            p_value=p,
            n=n,
            method=PEARSON_METHOD,
            confidence=confidence,
            reason="|r| = 1 (points on a line): Fisher z is infinite, no interval",
        )
    low, high = fisher_z_interval(r, n, "pearson", confidence)
    return Correlation(
        kind="pearson",
        value=r,
        low=low,
        high=high,
        p_value=p,
        n=n,
        method=PEARSON_METHOD,
        confidence=confidence,
    )


def _rowwise_pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson r of each row of ``a`` with the same row of ``b``; NaN where a row is constant.

    A row is constant when all its values are equal (tested exactly, not through the centred
    sum of squares, which rounding can leave a hair above 0). Values are clipped to [-1, 1].
    """
    ac = a - a.mean(axis=1, keepdims=True)
    bc = b - b.mean(axis=1, keepdims=True)
    den = np.sqrt((ac * ac).sum(axis=1) * (bc * bc).sum(axis=1))
    num = (ac * bc).sum(axis=1)
    out = np.full(a.shape[0], np.nan)
    ok = ~(np.all(a == a[:, :1], axis=1) | np.all(b == b[:, :1], axis=1)) & (den > 0)
    out[ok] = np.clip(num[ok] / den[ok], -1.0, 1.0)
    return out


def resampled_ranks(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Average ranks within each resample: ``scipy.stats.rankdata(values[idx], axis=1)``.

    Shapes: ``values`` (n,) finite floats; ``idx`` (B, m) integer indices into ``values``
    (each row one bootstrap resample); returns (B, m) float64 ranks 1..m, ties given the
    average of the ranks they span. Computed by counting, not sorting each row: with the
    distinct values ``u_0 < ... < u_(K-1)`` of ``values`` and ``c_k`` the copies of ``u_k``
    in a row, an element equal to ``u_k`` has ``s_k = c_0 + ... + c_(k-1)`` smaller elements,
    so its average rank is ``s_k + (c_k + 1) / 2``: an integer or a half-integer, exactly
    representable, so the result equals ``rankdata``'s bit for bit
    (``tests/test_analysis_ranks.py::test_resampled_ranks_equal_rankdata``). O(B * (m + K))
    instead of O(B * m log m).
    """
    _, codes_of = np.unique(values, return_inverse=True)
    k = int(codes_of.max()) + 1 if codes_of.size else 0
    codes = codes_of.reshape(-1)[idx]
    b = codes.shape[0]
    flat = (codes + (np.arange(b, dtype=np.intp) * k)[:, None]).ravel()
    counts = np.bincount(flat, minlength=b * k).reshape(b, k)
    below = np.cumsum(counts, axis=1) - counts
    average = below + (counts + 1) / 2.0
    return np.take_along_axis(average, codes, axis=1)


SPEARMAN_METHOD = (
    "Spearman rho (scipy.stats.spearmanr); two-sided p {p}; interval by the Fisher z transform "
    "with the Bonett-Wright standard error tanh(atanh(rho) +- z*sqrt((1 + rho^2/2)/(n-3))); "
    + EQUAL_VALUES_NOTE
)


def spearman(
    x: Sequence[float], y: Sequence[float], *, confidence: float = DEFAULT_CONFIDENCE
) -> Correlation:
    """Spearman rank correlation of paired points with a Fisher z interval (Bonett-Wright).

    Ties get average ranks. The two-sided p-value is exact (every pairing of x with y) for
    n <= :data:`SPEARMAN_EXACT_MAX_N`, else the t approximation of ``scipy.stats.spearmanr``.
    The interval is ``tanh(atanh(rho) +- z_{1-a/2} * sqrt((1 + rho^2 / 2) / (n - 3)))``
    (Bonett & Wright 2000, *Psychometrika* 65:23-28; Fisher's z with the variance of a rank
    correlation). It replaced a percentile bootstrap over pairs, which with the report's data
    shape (room sizes 1-8, sub-call counts with many ties and zeros) covered the true rho in
    74-91% of samples at n = 6-12 against 95% asked, where this interval covers 97-99%
    (``benchmarks/bench_spearman_interval.py``, figures in ``docs/analysis.md``). Undefined for n < 3 or a constant x or y; no
    interval for n < 4 or |rho| = 1 (``low=high=None`` with the reason). Raises
    ``ValueError`` on unequal lengths or non-finite values.
    """
    xa, ya = _xy(x, y, "spearman")
    n = int(xa.size)
    exact = n <= SPEARMAN_EXACT_MAX_N
    method = SPEARMAN_METHOD.format(
        p="from the exact permutation distribution (scipy.stats.permutation_test)"
        if exact
        else "from the t approximation"
    )
    why = _degenerate_pair(xa, ya)
    if why is not None:
        return Correlation(
            kind="spearman", value=None, n=n, method=method, reason=why, confidence=confidence
        )
    res = scipy.stats.spearmanr(xa, ya)
    rho = float(np.clip(res.statistic, -1.0, 1.0))
    p = float(res.pvalue)
    if exact:
        rx = scipy.stats.rankdata(xa)
        ryc = scipy.stats.rankdata(ya) - (n + 1) / 2  # centred ranks of y

        def stat(a: np.ndarray, axis: int = -1) -> np.ndarray:
            """Pearson r of ranks ``a`` (permuted x ranks, along ``axis``) with y's ranks."""
            a = np.moveaxis(a, axis, -1)
            ac = a - a.mean(axis=-1, keepdims=True)
            return (ac * ryc).sum(axis=-1) / np.sqrt((ac * ac).sum(axis=-1) * (ryc * ryc).sum())

        perm = scipy.stats.permutation_test(
            (rx,), stat, permutation_type="pairings", n_resamples=np.inf, vectorized=True
        )
        p = float(min(1.0, perm.pvalue))
    low = high = None
    reason = None
    if n < 4:
        reason = f"Fisher z interval needs n >= 4 (got {n})"
    elif abs(rho) >= 1.0:
        reason = "|rho| = 1 (perfectly monotone): Fisher z is infinite, no interval"
    else:
        low, high = fisher_z_interval(rho, n, "spearman", confidence)
    return Correlation(
        kind="spearman",
        value=rho,
        low=low,
        high=high,
        p_value=p,
        n=n,
        method=method,
        confidence=confidence,
        reason=reason,
    )


EXHAUSTIVE_MAX_RESAMPLES = 1_000_000
"""Most resamples an exhaustive bootstrap may enumerate (``n**n``: n <= 7)."""
DIFF_DECIMALS = 12
"""Bootstrap differences of correlations are rounded to this many decimals, so that two equal
correlations (both arms at r = 1 in a resample, say) differ by exactly 0 and count on both
sides of 0 in the p-value rather than on a side chosen by rounding error."""

CORRELATION_CHANGE_P_METHOD = (
    "two-sided bootstrap p = min(1, 2 min(#{d* <= 0}, #{d* >= 0}) / B'), B' = resamples with "
    "both correlations defined: the achieved significance level of the percentile interval "
    "(Efron & Tibshirani 1993, sec. 15.4, one-sided ASL #{d* <= 0}/B), doubled for two sides"
)
"""Definition of :attr:`CorrelationChange.p_value` (quoted in its ``method``)."""

ZOU_METHOD = (
    "Zou (2007) interval of r_b - r_a (two correlations that share x): L = d - sqrt((r_b - "
    "l_b)^2 + (u_a - r_a)^2 - 2c(r_b - l_b)(u_a - r_a)), U = d + sqrt((u_b - r_b)^2 + (r_a - "
    "l_a)^2 - 2c(u_b - r_b)(r_a - l_a)), [l, u] each correlation's Fisher z interval (Spearman: "
    "Bonett-Wright standard error), c the estimated correlation of r_a and r_b: "
    "((r_ab - r_a r_b / 2)(1 - r_a^2 - r_b^2 - r_ab^2) + r_ab^3) / ((1 - r_a^2)(1 - r_b^2))"
)
"""Definition of :attr:`CorrelationChange.zou_low`/``zou_high`` (quoted in its ``method``).
Zou (2007), *Psychological Methods* 12:399-413, eq. 15 and the overlapping-correlation
covariance of eq. 12 (Olkin & Finn 1990)."""


def zou_interval(
    r_a: float,
    r_b: float,
    r_ab: float,
    n: int,
    *,
    kind: Literal["pearson", "spearman"],
    confidence: float = DEFAULT_CONFIDENCE,
) -> tuple[float, float]:
    """Zou's (2007) interval of ``r_b - r_a`` where ``r_a = corr(x, y_a)`` and ``r_b =
    corr(x, y_b)`` share ``x`` and are measured on the same ``n`` units, ``r_ab = corr(y_a,
    y_b)`` (:data:`ZOU_METHOD`). Each correlation's own interval is
    :func:`fisher_z_interval` of ``kind``; for Spearman the correlations are of ranks and the
    covariance term is used as for Pearson's (an approximation; its coverage is measured in
    ``benchmarks/bench_correlation_change_interval.py``).

    Returns ``(low, high)``, both in [-2, 2]. Raises ``ValueError`` when ``n < 4`` or
    ``|r_a|`` or ``|r_b|`` is 1 (no Fisher z interval).
    """
    l_a, u_a = fisher_z_interval(r_a, n, kind, confidence)
    l_b, u_b = fisher_z_interval(r_b, n, kind, confidence)
    c = ((r_ab - r_a * r_b / 2) * (1 - r_a * r_a - r_b * r_b - r_ab * r_ab) + r_ab**3) / (
        (1 - r_a * r_a) * (1 - r_b * r_b)
    )
    d = r_b - r_a
    # the variance terms are >= 0 for |c| <= 1; an estimate of c may stray past 1
    down = (r_b - l_b) ** 2 + (u_a - r_a) ** 2 - 2 * c * (r_b - l_b) * (u_a - r_a)
    up = (u_b - r_b) ** 2 + (r_a - l_a) ** 2 - 2 * c * (u_b - r_b) * (r_a - l_a)
    return max(-2.0, d - math.sqrt(max(down, 0.0))), min(2.0, d + math.sqrt(max(up, 0.0)))


STEIGER_METHOD = (
    "Steiger (1980) test of r_b = r_a (two correlations that share x, on the same units), "
    "two-sided: Z = (atanh(r_b) - atanh(r_a)) / sqrt(v (2 - 2 c)), r = (r_a + r_b) / 2 pooled "
    "under the null, c = (r_ab (1 - 2 r^2) - r^2 (1 - 2 r^2 - r_ab^2) / 2) / (1 - r^2)^2 the "
    "correlation of the two Fisher z, v the variance of one z: 1 / (n - 3) (Pearson), (1 + "
    "r^2 / 2) / (n - 3) (Spearman, Bonett-Wright); p = 2 (1 - Phi(|Z|))"
)
"""Definition of :attr:`CorrelationChange.steiger` (quoted in its ``method``)."""


def steiger_test(
    r_a: float,
    r_b: float,
    r_ab: float,
    n: int,
    *,
    kind: Literal["pearson", "spearman"],
) -> TestResult:
    """Two-sided test of ``r_a = r_b`` for ``r_a = corr(x, y_a)`` and ``r_b = corr(x, y_b)``
    measured on the same ``n`` units, ``r_ab = corr(y_a, y_b)`` (:data:`STEIGER_METHOD`).

    Which test: the two correlations are *dependent* (the same rooms) and *overlapping* (they
    share x, the room size; y_a and y_b are the two arms' sub-calls, two variables), so the
    tests for two independent samples, and Raghunathan, Rosenthal & Rubin's (1996) test for
    non-overlapping correlations (no shared variable), do not apply. Among the overlapping
    tests this is Steiger's (1980, *Psychological Bulletin* 87:245-251, eq. 14-15) Z-bar*:
    Dunn & Clark's (1969) z on Fisher's scale with the covariance of the two correlations
    (Pearson & Filon 1898; Olkin & Finn 1990) evaluated at the pooled ``r = (r_a + r_b) / 2``,
    the value both take under the null. It matches :func:`zou_interval`: both work with
    Fisher z and the same covariance formula (Zou's ``c`` at the two estimates instead of
    the pooled one), so the test and the interval rarely disagree; and pooling under the null
    keeps its false-positive rate near alpha where the unpooled z is liberal (Steiger 1980;
    Hittner, May & Silver 2003, *J. General Psychology* 130:149-168). Meng, Rosenthal &
    Rubin's (1992) z is the same test with ``r^2`` in ``c`` taken as the mean of the squares;
    at the report's few rooms the pooled form was chosen for its measured false-positive
    rate (``benchmarks/bench_correlation_change_interval.py``). For Spearman, the Fisher z of
    each rho has the Bonett-Wright variance and ``c`` is Pearson's formula on rank
    correlations (an approximation, as in Zou's interval for Spearman).

    Returns a :class:`TestResult` (``statistic`` = Z, ``n`` = units). Undefined (with the
    reason) when ``n < 4``, ``|r_a|`` or ``|r_b|`` is 1 (Fisher z infinite), or the estimated
    correlation of the two z is 1 or more (no variance left for their difference) while they
    differ; equal correlations give Z = 0, p = 1.
    """
    if n < 4:
        return TestResult(
            statistic=None,
            p_value=None,
            n=n,
            method=STEIGER_METHOD,
            reason=f"Steiger's test needs n >= 4 (got {n})",
        )
    if max(abs(r_a), abs(r_b)) >= 1.0:
        return TestResult(
            statistic=None,
            p_value=None,
            n=n,
            method=STEIGER_METHOD,
            reason="|r| = 1 in an arm: its Fisher z is infinite, no Steiger test",
        )
    diff = math.atanh(r_b) - math.atanh(r_a)
    rbar2 = ((r_a + r_b) / 2) ** 2
    psi = r_ab * (1 - 2 * rbar2) - 0.5 * rbar2 * (1 - 2 * rbar2 - r_ab * r_ab)
    c = psi / (1 - rbar2) ** 2
    var_z = (1 + rbar2 / 2 if kind == "spearman" else 1.0) / (n - 3)
    var = var_z * (2 - 2 * c)
    if diff == 0:
        return TestResult(statistic=0.0, p_value=1.0, n=n, method=STEIGER_METHOD)
    if var <= 0:
        return TestResult(
            statistic=None,
            p_value=None,
            n=n,
            method=STEIGER_METHOD,
            reason=(
                f"the estimated correlation of the two Fisher z is {c:.3g} >= 1: no variance "
                "left for their difference, no Steiger test"
            ),
        )
    z = diff / math.sqrt(var)
    return TestResult(
        statistic=z,
        p_value=float(min(1.0, 2 * scipy.stats.norm.sf(abs(z)))),
        n=n,
        method=STEIGER_METHOD,
    )


class CorrelationChange(BaseModel):
    """Change of a correlation with x between two arms measured on the same units (rooms).

    ``value = r_b - r_a`` where ``r_a = corr(x, y_a)`` and ``r_b = corr(x, y_b)`` over all units.
    ``low``/``high``: percentile interval of the paired bootstrap of ``r_b* - r_a*`` (the same
    resampled units for both arms); ``p_value``: see :data:`CORRELATION_CHANGE_P_METHOD`.
    ``value is None`` (with ``reason``) when either correlation is undefined; ``low``/``high``
    and ``p_value`` ``None`` (with ``reason``) when too few resamples have both defined.
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["pearson", "spearman"]
    a: str
    """Label of the first arm (the baseline)."""
    b: str
    r_a: float | None
    """Correlation of x with arm A's y over all units (``None``: undefined, see ``reason``)."""
    r_b: float | None
    value: float | None
    """``r_b - r_a``, in [-2, 2]."""
    low: float | None = None
    high: float | None = None
    p_value: float | None = None
    confidence: float = DEFAULT_CONFIDENCE
    n: int
    """Units (rooms) both arms have, i.e. points of each correlation."""
    unit: str = "rooms"
    n_resamples: int = 0
    """Resamples drawn (Monte Carlo) or enumerated (exhaustive: ``n**n``); 0 when none ran."""
    n_undefined: int = 0
    """Resamples in which x, y_a or y_b was constant (a correlation undefined): left out."""
    exhaustive: bool = False
    """Every one of the ``n**n`` resamples was enumerated (the exact bootstrap distribution)."""
    r_ab: float | None = None
    """Correlation of arm A's y with arm B's y over the units (enters Zou's interval)."""
    zou_low: float | None = None
    """Zou's (2007) interval of ``r_b - r_a`` (:data:`ZOU_METHOD`), beside the bootstrap's:
    it keeps its coverage at the report's few rooms, where the percentile bootstrap's is
    below the level asked (``benchmarks/bench_correlation_change_interval.py``). ``None``
    (reports before it, or with ``zou_reason``) when undefined."""
    zou_high: float | None = None
    zou_reason: str | None = None
    """Why Zou's interval is undefined (n < 4, or |r| = 1 in an arm)."""
    steiger: TestResult | None = None
    """Steiger's (1980) closed-form test of ``r_b = r_a`` (:func:`steiger_test`), beside the
    bootstrap p-value, which is liberal for Pearson at 8-12 rooms; ``None`` in reports before
    it and when the correlations are undefined."""
    method: str
    reason: str | None = None

    @property
    def defined(self) -> bool:
        """Whether there is a point value."""
        return self.value is not None


def _constant_y_reason(arm: str, y: np.ndarray, y_name: str, x_name: str, unit: str) -> str:
    n = int(y.size)
    v = float(y[0])
    if v == 0:
        return (
            f"arm {arm} made no {y_name} in any of the {n} {unit}: its correlation with "
            f"{x_name} is undefined"
        )
    return (
        f"arm {arm} has the same {y_name} ({v:g}) in all {n} {unit}: its correlation with "
        f"{x_name} is undefined"
    )


def _point_corr(kind: str, x: np.ndarray, y: np.ndarray) -> float:
    res = scipy.stats.pearsonr(x, y) if kind == "pearson" else scipy.stats.spearmanr(x, y)
    return float(np.clip(res.statistic, -1.0, 1.0))


def _resample_indices(
    n: int, n_resamples: int, exhaustive: bool | None, seed: int
) -> tuple[np.ndarray, bool]:
    """Rows of unit indices: all ``n**n`` tuples (exhaustive) or ``n_resamples`` drawn ones."""
    total = n**n
    if exhaustive is None:
        exhaustive = total <= n_resamples
    if exhaustive:
        if total > EXHAUSTIVE_MAX_RESAMPLES:
            raise ValueError(
                f"exhaustive bootstrap of {n} units needs {n}^{n} = {total:,} resamples, more "
                f"than {EXHAUSTIVE_MAX_RESAMPLES:,}; use the Monte Carlo bootstrap"
            )
        idx = np.stack(np.unravel_index(np.arange(total), (n,) * n), axis=1)
        return idx.astype(np.intp), True
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, size=(n_resamples, n)), False


def correlation_change(
    x: Sequence[float],
    y_a: Sequence[float],
    y_b: Sequence[float],
    *,
    kind: Literal["pearson", "spearman"] = "spearman",
    a: str = "A",
    b: str = "B",
    x_name: str = "x",
    y_name: str = "y",
    unit: str = "rooms",
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
    exhaustive: bool | None = None,
) -> CorrelationChange:
    """Change ``r_b - r_a`` of the correlation of ``x`` with ``y`` from arm A to arm B, with a
    paired bootstrap over units.

    Shapes: ``x``, ``y_a``, ``y_b`` are aligned, one value per unit (room): ``x[i]`` the room's
    size, ``y_a[i]``/``y_b[i]`` each arm's room-mean sub-calls in that room. The caller pairs
    the rooms (only rooms both arms ran).

    Method: resample the ``n`` units with replacement, the same indices for both arms (a
    room's size and both arms' values travel together, so the dependence between the two
    correlations is kept; resampling whole cases as for the bootstrap of a correlation,
    Efron & Tibshirani 1993, ch. 6), and compute ``d* = r_b* - r_a*`` in each resample; Pearson on the
    values, Spearman on the ranks within the resample (ties: average ranks). The interval is
    the percentile interval ``[G^-1(alpha/2), G^-1(1 - alpha/2)]``, ``alpha = 1 - confidence``,
    of the distribution ``G`` of the defined ``d*`` with ``G^-1(q) = min{v : G(v) >= q}``
    (``numpy.quantile(method="inverted_cdf")``, no interpolation; Efron & Tibshirani 1993,
    sec. 13.3). The p-value is defined in :data:`CORRELATION_CHANGE_P_METHOD`.

    Resamples: ``exhaustive=True`` enumerates all ``n**n`` index tuples (each has probability
    ``n**-n``, so ``G`` is the exact bootstrap distribution, no Monte Carlo error);
    ``False`` draws ``n_resamples`` (seeded by ``seed``); ``None`` (default) enumerates when
    ``n**n <= n_resamples`` (n <= 4 at B = 2000), else draws.

    Undefined resamples: one in which x, y_a or y_b is constant has no correlation; it is
    left out of ``G`` and counted in ``n_undefined`` (and in ``reason``), so ``G`` is the
    bootstrap distribution conditional on both correlations being defined. When fewer than
    half of the resamples are defined there is no interval and no p-value. Each ``d*`` is
    rounded to :data:`DIFF_DECIMALS` decimals so that equal correlations give exactly 0.

    Undefined result (``value=None`` with ``reason``): fewer than :data:`MIN_UNITS` units; x
    constant; y_a or y_b constant (e.g. "arm base made no sub-calls in any of the 4 rooms: its
    correlation with room size is undefined").

    Raises:
        ValueError: unequal lengths, non-finite values, an unknown ``kind``, or an exhaustive
            enumeration larger than :data:`EXHAUSTIVE_MAX_RESAMPLES`.
    """
    if kind not in ("pearson", "spearman"):
        raise ValueError(f"correlation_change: kind must be 'pearson' or 'spearman', got {kind!r}")
    if not (len(x) == len(y_a) == len(y_b)):
        raise ValueError(
            f"correlation_change: x has {len(x)} values, y_a {len(y_a)} and y_b {len(y_b)}"
        )
    # values equal within TIE_TOLERANCE are one value (rounding noise of room means)
    xa = _snap_ties(_as_array(x, "correlation_change x"))
    ya = _snap_ties(_as_array(y_a, f"correlation_change y of arm {a}"))
    yb = _snap_ties(_as_array(y_b, f"correlation_change y of arm {b}"))
    n = int(xa.size)
    name = "Pearson r" if kind == "pearson" else "Spearman rho (ranks within each resample)"

    def make(how: str, **fields: object) -> CorrelationChange:
        method = (
            f"change of {name} between arms, {b} - {a}; paired percentile bootstrap over "
            f"{unit} (same resampled units for both arms), {how}; resamples with a constant "
            f"{x_name} or {y_name} left out; {EQUAL_VALUES_NOTE}; {CORRELATION_CHANGE_P_METHOD}; "
            f"beside it, {ZOU_METHOD}; and {STEIGER_METHOD}"
        )
        return CorrelationChange.model_validate(
            {
                "kind": kind,
                "a": a,
                "b": b,
                "n": n,
                "unit": unit,
                "confidence": confidence,
                "method": method,
                **fields,
            }
        )

    if n < MIN_UNITS:
        why = f"n = {n} < {MIN_UNITS} {unit}: a correlation needs at least {MIN_UNITS}"
        return make("no resamples drawn", r_a=None, r_b=None, value=None, reason=why)
    if _all_equal(xa):
        why = (
            f"no variance in {x_name} (all {n} {unit} have {float(xa[0]):g}): no correlation "
            f"with {x_name} is defined"
        )
        return make("no resamples drawn", r_a=None, r_b=None, value=None, reason=why)
    r_a = None if _all_equal(ya) else _point_corr(kind, xa, ya)
    r_b = None if _all_equal(yb) else _point_corr(kind, xa, yb)
    if r_a is None or r_b is None:
        why = "; ".join(
            _constant_y_reason(arm, arr, y_name, x_name, unit)
            for arm, arr in ((a, ya), (b, yb))
            if _all_equal(arr)
        )
        return make("no resamples drawn", r_a=r_a, r_b=r_b, value=None, reason=why)
    r_ab = _point_corr(kind, ya, yb)
    zou: dict[str, object] = {"r_ab": r_ab}
    if n < 4 or max(abs(r_a), abs(r_b)) >= 1.0:
        zou["zou_reason"] = (
            f"Zou's interval needs n >= 4 (got {n})"
            if n < 4
            else "|r| = 1 in an arm: its Fisher z interval is infinite, no Zou interval"
        )
    else:
        zou["zou_low"], zou["zou_high"] = zou_interval(
            r_a, r_b, r_ab, n, kind=kind, confidence=confidence
        )
    zou["steiger"] = steiger_test(r_a, r_b, r_ab, n, kind=kind)
    idx, exact = _resample_indices(n, n_resamples, exhaustive, seed)
    total = int(idx.shape[0])
    how = f"exhaustive: all {n}^{n} = {total} resamples" if exact else f"B={total}, seed={seed}"
    if kind == "spearman":  # ranks within each resample (= scipy.stats.rankdata, faster)
        xs, yas, ybs = (resampled_ranks(v, idx) for v in (xa, ya, yb))
    else:
        xs, yas, ybs = xa[idx], ya[idx], yb[idx]
    # rounded so that equal correlations (both arms at r = 1, say) give d* = 0 exactly
    d = np.round(_rowwise_pearson(xs, ybs) - _rowwise_pearson(xs, yas), DIFF_DECIMALS)
    good = d[np.isfinite(d)]
    dropped = total - int(good.size)
    notes = []
    if dropped:
        notes.append(
            f"{dropped} of {total} resamples had a constant {x_name} or {y_name} (a "
            "correlation undefined) and were left out"
        )
    fields: dict[str, object] = {
        "r_a": r_a,
        "r_b": r_b,
        "value": r_b - r_a,
        "n_resamples": total,
        "n_undefined": dropped,
        "exhaustive": exact,
        **zou,
    }
    if good.size < total / 2:
        return make(how, **fields, reason="no interval or p-value: " + "; ".join(notes))
    alpha = (1 - confidence) / 2
    low, high = np.quantile(good, [alpha, 1 - alpha], method="inverted_cdf")
    below = int(np.count_nonzero(good <= 0))
    above = int(np.count_nonzero(good >= 0))
    p = min(1.0, 2 * min(below, above) / good.size)
    if p == 0:
        notes.append(
            f"no defined resample fell on the other side of 0 (read p as < {2 / good.size:.3g})"
        )
    return make(
        how,
        **fields,
        low=float(low),
        high=float(high),
        p_value=p,
        reason="; ".join(notes) or None,
    )


def ema(values: Sequence[float], beta: float = 0.9) -> list[float]:
    """Bias-corrected exponential moving average (as in Adam's moment estimates, Kingma & Ba
    2015): ``m_t = beta * m_{t-1} + (1 - beta) * x_t``, ``m_0 = 0``, reported as
    ``m_t / (1 - beta**t)`` so the first value equals ``x_1``. Same length as ``values``.

    Raises ``ValueError`` unless ``0 <= beta < 1`` or when a value is not finite.
    """
    if not 0.0 <= beta < 1.0:
        raise ValueError(f"ema: beta must be in [0, 1), got {beta}")
    arr = _as_array(values, "ema")
    out: list[float] = []
    m = 0.0
    for t, x in enumerate(arr.tolist(), start=1):
        m = beta * m + (1 - beta) * x
        out.append(m / (1 - beta**t))
    return out


# ------------------------------------------------------------ graders measured against people
MIN_CALIBRATION_LABELS = 3
"""Fewest labels of each true class (person PASS, person FAIL) for a corrected pass rate: with
fewer, the grader's sensitivity or specificity is not estimated at all."""

CORRECTED_RATE_METHOD = (
    "Rogan-Gladen theta = (p + q0 - 1) / (q0 + q1 - 1), clipped to [0, 1]; interval: delta "
    "method over the three binomials p (n graded), q0 (m0 person-FAIL labels), q1 (m1 "
    "person-PASS labels), with p smoothed as Agresti-Coull (+z^2/2 of z^2) and q0, q1 with one "
    "pseudo-label of each kind (+1 of 2) (Lee et al. 2025, arXiv 2511.21140)"
)
"""Method of :func:`corrected_pass_rate`."""

WILSON_METHOD = "Wilson score interval (Wilson 1927), scipy.stats.binomtest"
"""Method of :func:`wilson_interval`."""


def wilson_interval(k: int, n: int, *, confidence: float = DEFAULT_CONFIDENCE) -> Estimate:
    """``k / n`` with its Wilson score interval (Wilson 1927, via
    ``scipy.stats.binomtest(...).proportion_ci(method="wilson")``); undefined (``value=None``)
    when ``n == 0``. ``n`` is the count (``unit="labels"``). Raises ``ValueError`` unless
    ``0 <= k <= n``."""
    if not 0 <= k <= n:
        raise ValueError(f"wilson_interval: need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return Estimate(value=None, n=0, unit="labels", method=WILSON_METHOD, reason="no labels")
    ci = scipy.stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    return Estimate(
        value=k / n,
        low=float(ci.low),
        high=float(ci.high),
        confidence=confidence,
        n=n,
        unit="labels",
        method=WILSON_METHOD,
    )


class CorrectedRate(BaseModel):
    """A grader's raw pass rate and its Rogan-Gladen correction for the grader's errors."""

    model_config = ConfigDict(extra="forbid")

    raw: float | None
    """``p``: share graded PASS of the ``n`` graded items; ``None`` when ``n == 0``."""
    n: int
    """Items graded (criteria)."""
    sensitivity: float | None
    """``q1``: share the grader passed of the ``m1`` items a person labelled PASS."""
    specificity: float | None
    """``q0``: share the grader did not pass of the ``m0`` items a person labelled FAIL."""
    m1: int
    m0: int
    corrected: Estimate
    """``theta`` with its interval (``unit="labels"``, ``n = m0 + m1``); ``value=None`` with a
    ``reason`` when undefined (too few labels, or ``q0 + q1 <= 1``)."""


def corrected_pass_rate(
    n_pass: int,
    n: int,
    *,
    true_pass: int,
    m1: int,
    true_fail: int,
    m0: int,
    confidence: float = DEFAULT_CONFIDENCE,
    min_labels: int = MIN_CALIBRATION_LABELS,
) -> CorrectedRate:
    """Correct a grader's raw pass rate for its errors, measured on a labelled sample.

    The grader's raw pass rate ``p = n_pass / n`` is biased: ``E[p] = (q0 + q1 - 1) theta +
    (1 - q0)``, with sensitivity ``q1 = true_pass / m1`` (of the ``m1`` items a person labelled
    PASS, the share the grader passed) and specificity ``q0 = true_fail / m0`` (of the ``m0``
    a person labelled FAIL, the share the grader did not pass). The Rogan-Gladen estimator
    (Rogan & Gladen 1978) ``theta = (p + q0 - 1) / (q0 + q1 - 1)`` clipped to [0, 1] corrects
    it. Its interval carries the uncertainty of all three estimates, following Lee, Zeng,
    Jeong, Sohn & Lee (2025), "How to correctly report LLM-as-a-judge evaluations", arXiv
    2511.21140: the delta method gives ``Var(theta) = [p(1-p)/n + (1-theta)^2 q0(1-q0)/m0 +
    theta^2 q1(1-q1)/m1] / (q0 + q1 - 1)^2``, evaluated at smoothed estimates (``p`` as
    Agresti-Coull: ``(n_pass + z^2/2) / (n + z^2)`` over ``n + z^2``; ``q0``, ``q1`` with
    one pseudo-label of each kind: ``(k + 1) / (m + 2)`` over ``m + 2``), so a grader that
    made no error on a few labels still gets a width. Measured by
    ``benchmarks/bench_corrected_rate.py`` (q0, q1 in 0.7-0.99, 20-200 random labels, pass
    rates 0.05-0.9, 1,000 criteria): this interval held theta in 95.7-100% of data sets in
    every cell, the plain (unsmoothed) delta method in as few as 75% (20 labels, a grader with
    q0 = 0.99) (docs/curation.md has the table).

    Assumes the labelled items are a random sample of the graded ones given their true class
    (a random sample, or one stratified by the *person's* label), not one stratified by the
    grader's verdict, and treats items as independent.

    Args:
        n_pass, n: items the grader passed, items graded (``0 <= n_pass <= n``).
        true_pass, m1: of ``m1`` person-PASS labels, how many the grader passed.
        true_fail, m0: of ``m0`` person-FAIL labels, how many the grader did not pass.
        confidence: two-sided level of the interval.
        min_labels: fewest labels of each class (:data:`MIN_CALIBRATION_LABELS`).

    Returns:
        :class:`CorrectedRate`; ``corrected.value is None`` with the reason when ``n == 0``,
        ``m0`` or ``m1 < min_labels``, or ``q0 + q1 <= 1`` (the grader is no better than a
        coin, and the correction divides by zero or flips sign).

    Raises:
        ValueError: a count is negative or a part exceeds its whole.
    """
    for k, m, what in (
        (n_pass, n, "n_pass/n"),
        (true_pass, m1, "true_pass/m1"),
        (true_fail, m0, "true_fail/m0"),
    ):
        if not 0 <= k <= m:
            raise ValueError(f"corrected_pass_rate: need 0 <= {what} counts, got {k}/{m}")
    raw = n_pass / n if n else None
    q1 = true_pass / m1 if m1 else None
    q0 = true_fail / m0 if m0 else None

    def out(
        value: float | None = None,
        low: float | None = None,
        high: float | None = None,
        reason: str | None = None,
    ) -> CorrectedRate:
        est = Estimate(
            value=value,
            low=low,
            high=high,
            confidence=confidence,
            n=m0 + m1,
            unit="labels",
            method=CORRECTED_RATE_METHOD,
            reason=reason,
        )
        return CorrectedRate(
            raw=raw, n=n, sensitivity=q1, specificity=q0, m1=m1, m0=m0, corrected=est
        )

    if raw is None:
        return out(reason="no graded items")
    if m1 < min_labels or m0 < min_labels:
        return out(
            reason=f"too few labels: {m1} person-PASS and {m0} person-FAIL; need at least "
            f"{min_labels} of each"
        )
    assert q0 is not None and q1 is not None
    if q0 + q1 <= 1:
        return out(
            reason=f"undefined: q0 + q1 = {q0:.3g} + {q1:.3g} <= 1 (the grader is no better "
            "than chance on the labelled sample)"
        )
    theta = min(max((raw + q0 - 1) / (q0 + q1 - 1), 0.0), 1.0)
    z = float(scipy.stats.norm.ppf(0.5 + confidence / 2))
    ns = n + z * z
    ps = (n_pass + z * z / 2) / ns
    q0s, q1s = (true_fail + 1) / (m0 + 2), (true_pass + 1) / (m1 + 2)
    js = q0s + q1s - 1
    if js <= 0:  # smoothing pulled an unbalanced q0 + q1 just above 1 below it
        return out(theta, reason="no interval: the smoothed q0 + q1 is <= 1; label more items")
    ts = (ps + q0s - 1) / js
    var = (
        ps * (1 - ps) / ns
        + (1 - ts) ** 2 * q0s * (1 - q0s) / (m0 + 2)
        + ts**2 * q1s * (1 - q1s) / (m1 + 2)
    ) / js**2
    half = z * math.sqrt(var)
    low, high = max(ts - half, 0.0), min(ts + half, 1.0)
    # the interval is centred on the smoothed estimate; widened to hold the point value
    return out(theta, min(low, theta), max(high, theta))


class Kappa(NamedTuple):
    """Cohen's kappa, or why it is undefined."""

    value: float | None
    """Kappa in [-1, 1]; ``None`` when undefined."""
    reason: str | None
    """Why ``value`` is ``None`` (``None`` when defined)."""


def cohen_kappa(confusion: np.ndarray) -> Kappa:
    """Cohen's kappa of a square confusion matrix (rows: grader A's label, columns: B's).

    Args:
        confusion: ``(k, k)`` array of non-negative counts.

    Returns ``Kappa(None, reason)`` when there are no pairs or when chance agreement is 1.
    Raises ``ValueError`` for a non-square matrix or negative counts.
    """
    c = np.asarray(confusion, dtype=float)
    if c.ndim != 2 or c.shape[0] != c.shape[1]:
        raise ValueError(f"confusion matrix must be square, got shape {c.shape}")
    if (c < 0).any():
        raise ValueError("confusion matrix has negative counts")
    n = c.sum()
    if n == 0:
        return Kappa(None, "no pairs graded PASS/FAIL by both graders")
    p_o = float(np.trace(c)) / n
    p_e = float(c.sum(axis=1) @ c.sum(axis=0)) / (n * n)
    if np.isclose(p_e, 1.0):
        label = ("PASS", "FAIL")[int(np.argmax(c.sum(axis=1)))] if c.shape[0] == 2 else "one label"
        return Kappa(
            None, f"both graders gave every pair the same single label ({label}): no variance"
        )
    return Kappa((p_o - p_e) / (1.0 - p_e), None)
