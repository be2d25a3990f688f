"""Statistics of the analysis stage against hand-computed values (cases A1, A2)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.stats

from rlmdistill.stats import (
    cluster_mean_interval,
    cluster_means,
    correlation_change,
    ema,
    mean_interval,
    paired_comparison,
    pearson,
    rate_interval,
    spearman,
    steiger_test,
    wilcoxon_signed_rank,
    zou_interval,
)

X5 = [1.0, 2.0, 3.0, 4.0, 5.0]
Y5 = [2.0, 1.0, 4.0, 3.0, 5.0]
"""Hand-computed: dx = dy-sums give sum(dx*dy) = 8, sum(dx^2) = sum(dy^2) = 10, so r = 0.8;
ranks equal the values, so Spearman rho = 1 - 6 * 4 / (5 * 24) = 0.8 as well."""


def _no_nan(model) -> None:  # type: ignore[no-untyped-def]
    text = model.model_dump_json()
    assert "NaN" not in text and "Infinity" not in text
    for v in json.loads(text).values():
        assert not (isinstance(v, float) and not math.isfinite(v))


def test_correlation_no_variance_is_undefined_case_a1():
    for res in (pearson([1, 1, 1], [0.2, 0.5, 0.9]), spearman([1, 1, 1], [0.2, 0.5, 0.9])):
        assert res.value is None and res.low is None and res.high is None
        assert res.p_value is None
        assert res.reason == "no variance in x (all 3 values equal 1)"
        _no_nan(res)
    assert pearson([0.2, 0.5, 0.9], [3, 3, 3]).reason == "no variance in y (all 3 values equal 3)"


def test_correlation_two_points_is_undefined_never_r_one_case_a1():
    for res in (pearson([0.5, 0.25], [0.25, 0.4]), spearman([0.5, 0.25], [0.25, 0.4])):
        assert res.value is None
        assert res.n == 2
        assert res.reason == "n = 2 < 3 points: a correlation needs at least 3"
        _no_nan(res)


T2 = 4.302652729749464
"""t quantile at 0.975 with 2 degrees of freedom (tables: 4.303)."""
T3 = 3.182446305284263
"""t quantile at 0.975 with 3 degrees of freedom (tables: 3.182)."""


def test_mean_interval_identical_values_case_a2():
    res = mean_interval([1.0] * 10)
    assert (res.value, res.low, res.high) == (1.0, 1.0, 1.0)
    assert res.method.startswith("Student t interval over rooms")
    assert res.reason == "all 10 values equal 1: no spread, so an interval of width 0"
    _no_nan(res)
    # ten copies of 1.0 from one room: one unit, so no interval, with the reason
    one_room = cluster_mean_interval([1.0] * 10, ["r"] * 10)
    assert one_room.value == 1.0 and one_room.low is None and one_room.high is None
    assert one_room.n == 1
    assert one_room.reason == "interval needs >= 3 rooms (got 1)"
    _no_nan(one_room)


def test_mean_interval_small_and_empty():
    assert mean_interval([]).value is None
    assert mean_interval([]).reason == "no rooms"
    two = mean_interval([0.0, 1.0])
    assert (
        two.value == 0.5 and two.low is None and two.reason == "interval needs >= 3 rooms (got 2)"
    )
    # [0, 0, 1]: mean 1/3, s = sqrt((1/9 + 1/9 + 4/9) / 2) = sqrt(1/3), s / sqrt(3) = 1/3;
    # half-width t(2) / 3 = 1.434218 -> [-1.100884, 1.767551]; as a share: [0, 1]
    res = mean_interval([0.0, 0.0, 1.0])
    assert res.value == pytest.approx(1 / 3)
    assert (res.low, res.high) == (pytest.approx(1 / 3 - T2 / 3), pytest.approx(1 / 3 + T2 / 3))
    assert res.low == pytest.approx(-1.100884, abs=1e-6) and res.reason is None
    share = mean_interval([0.0, 0.0, 1.0], bounds=(0.0, 1.0))
    assert (share.low, share.high) == (0.0, 1.0)
    assert share.method.endswith(", clipped to the range [0, 1]")


def test_mean_interval_hand_computed_and_clipped_to_the_metric_range():
    # [0.1, 0.2, 0.3, 0.6]: mean 0.3, deviations -0.2 -0.1 0 0.3, sum of squares 0.14,
    # s = sqrt(0.14 / 3) = 0.216025, s / sqrt(4) = 0.108012; half-width t(3) x 0.108012 =
    # 0.343743 -> [-0.043743, 0.643743]
    res = mean_interval([0.1, 0.2, 0.3, 0.6])
    assert res.value == pytest.approx(0.3)
    assert res.low == pytest.approx(0.3 - T3 * math.sqrt(0.14 / 3) / 2)
    assert (res.low, res.high) == (
        pytest.approx(-0.043743, abs=1e-6),
        pytest.approx(0.643743, abs=1e-6),
    )
    # a share cannot be negative: clipped at 0, the upper end unchanged
    share = mean_interval([0.1, 0.2, 0.3, 0.6], bounds=(0.0, 1.0))
    assert share.low == 0.0 and share.high == pytest.approx(0.643743, abs=1e-6)
    count = mean_interval([0.1, 0.2, 0.3, 0.6], bounds=(0.0, None))
    assert count.low == 0.0 and count.method.endswith("clipped to the range [0, inf)")
    # 90%: t(3) at 0.95 = 2.353363
    ninety = mean_interval([0.1, 0.2, 0.3, 0.6], confidence=0.9)
    assert ninety.high == pytest.approx(0.3 + 2.353363 * 0.108012, abs=1e-6)
    # paired: differences b - a = [0.1, 0.2, 0.3, 0.6] over 4 rooms, clipped to [-1, 1]
    a = {"r1": 0.0, "r2": 0.1, "r3": 0.2, "r4": 0.0}
    b = {"r1": 0.1, "r2": 0.3, "r3": 0.5, "r4": 0.6}
    paired = paired_comparison(a, b, bounds=(-1.0, 1.0))
    assert paired.differences == pytest.approx([0.1, 0.2, 0.3, 0.6])
    md = paired.mean_difference
    assert (md.low, md.high) == (
        pytest.approx(-0.043743, abs=1e-6),
        pytest.approx(0.643743, abs=1e-6),
    )
    assert md.unit == "paired rooms" and md.method.endswith("[-1, 1]")


@pytest.mark.parametrize("n", [3, 4, 10, 500])
@pytest.mark.parametrize("confidence", [0.95, 0.9, 0.5])
def test_mean_interval_equals_scipy_one_sample_t_interval(n: int, confidence: float) -> None:
    rng = np.random.default_rng(100 + n)
    values = np.round(rng.random(n) * 3, 2)  # room means with ties
    got = mean_interval(values.tolist(), confidence=confidence)
    ci = scipy.stats.ttest_1samp(values, 0.0).confidence_interval(confidence_level=confidence)
    assert (got.low, got.high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert got.value == pytest.approx(float(values.mean()))


def test_cluster_mean_interval_weighs_rooms_not_episodes():
    values = [1.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    rooms = ["a", "a", "b", "c", "c", "c"]
    assert cluster_means(values, rooms) == {"a": 0.5, "b": 1.0, "c": 0.0}
    res = cluster_mean_interval(values, rooms)
    assert res.value == pytest.approx(0.5)  # the episode-level mean would be 1/3
    assert res.n == 3 and res.unit == "rooms"
    # room means 0.5, 1, 0: s = 0.5, s / sqrt(3) = 0.288675, half-width t(2) x 0.288675 =
    # 1.242068 (three rooms, not six episodes: the interval is that wide)
    assert res.high == pytest.approx(0.5 + T2 * 0.5 / math.sqrt(3))
    assert res.high == pytest.approx(1.742068, abs=1e-6)
    share = cluster_mean_interval(values, rooms, bounds=(0.0, 1.0))
    assert (share.low, share.high) == (0.0, 1.0)
    with pytest.raises(ValueError, match="3 values but 2 cluster labels"):
        cluster_means([1, 2, 3], ["a", "b"])


def test_wilcoxon_hand_computed():
    # |d| ranks: 0.5->1, 1->2, 2->3, 3->4, 4->5; W- = 1, W+ = 14; exact two-sided
    # p = 2 * P(W <= 1) = 2 * 2/32 = 0.125
    res = wilcoxon_signed_rank([1.0, 2.0, -0.5, 3.0, 4.0])
    assert res.statistic == 1.0
    assert res.p_value == pytest.approx(0.125)
    assert res.n == 5
    zero = wilcoxon_signed_rank([0.0, 0.0, 0.0])
    assert zero.p_value is None and zero.reason == "all 3 paired differences are zero"
    few = wilcoxon_signed_rank([0.0, 0.3, -0.1])
    assert few.p_value is None
    assert few.reason == "needs >= 3 non-zero paired differences (got 2 of 3)"


def test_paired_comparison_pairs_by_room_key():
    a = {"r1": 0.2, "r2": 0.5, "r3": 0.4, "r4": 0.1}
    b = {"r1": 0.4, "r2": 0.5, "r3": 0.9, "r5": 1.0}
    res = paired_comparison(a, b)
    assert res.keys == ["r1", "r2", "r3"]
    assert res.differences == pytest.approx([0.2, 0.0, 0.5])
    assert res.mean_difference.value == pytest.approx(0.7 / 3)
    assert res.mean_difference.n == 3
    assert (res.n_improved, res.n_declined, res.n_tied) == (2, 0, 1)
    assert res.wilcoxon.p_value is None  # only two non-zero differences
    assert res.only_in_a == ["r4"] and res.only_in_b == ["r5"]
    _no_nan(res)
    # (0.2 + 0.4) / 2 is 0.30000000000000004: a tie with 0.3 up to rounding, not a decline
    tie = paired_comparison({"r1": (0.2 + 0.4) / 2, "r2": 0.1}, {"r1": 0.3, "r2": 0.2})
    assert tie.differences[0] == 0.0
    assert (tie.n_improved, tie.n_declined, tie.n_tied) == (1, 0, 1)


def test_pearson_hand_computed_with_fisher_interval():
    res = pearson(X5, Y5)
    assert res.value == pytest.approx(0.8)
    # z = atanh(0.8) = 1.098612; half-width = 1.959964 / sqrt(2) = 1.385904
    assert res.low == pytest.approx(math.tanh(1.098612 - 1.385904), abs=1e-5)  # -0.27964
    assert res.high == pytest.approx(math.tanh(1.098612 + 1.385904), abs=1e-5)  # 0.98620
    # t = 0.8 * sqrt(3) / 0.6 = 2.3094 on 3 df -> two-sided p = 0.1041
    assert res.p_value == pytest.approx(0.1041, abs=1e-4)
    assert "Fisher z" in res.method
    three = pearson([1, 2, 3], [1, 3, 2])
    assert three.value == pytest.approx(0.5)
    assert three.low is None and three.reason == "Fisher z interval needs n >= 4 (got 3)"
    line = pearson([1, 2, 3, 4], [2, 4, 6, 8])
    assert line.value == pytest.approx(1.0) and line.low is None
    assert line.reason is not None and "|r| = 1" in line.reason


def test_spearman_hand_computed_with_bonett_wright_interval():
    res = spearman(X5, Y5)
    assert res.value == pytest.approx(0.8)
    # Fisher z, Bonett-Wright se: sqrt((1 + 0.8^2 / 2) / (5 - 3)) = sqrt(0.66) = 0.812404;
    # half-width 1.959964 x 0.812404 = 1.592282 around atanh(0.8) = 1.098612
    assert res.low == pytest.approx(math.tanh(1.098612 - 1.592282), abs=1e-6)  # -0.457124
    assert res.high == pytest.approx(math.tanh(1.098612 + 1.592282), abs=1e-6)  # 0.990843
    assert res.low == pytest.approx(-0.457124, abs=1e-6) and res.reason is None
    assert "Bonett-Wright" in res.method and "bootstrap" not in res.method
    # wider than Pearson's Fisher z for the same r (se sqrt(1 / (n - 3)) = 0.707107)
    r = pearson(X5, Y5)
    assert r.value == pytest.approx(0.8) and r.low is not None and res.low < r.low
    # a 90% interval: z = 1.644854
    ninety = spearman(X5, Y5, confidence=0.9)
    assert ninety.high == pytest.approx(math.tanh(1.098612 + 1.644854 * 0.812404), abs=1e-6)
    # n = 3: rho, no interval
    three = spearman([1, 2, 3], [1, 3, 2])
    assert three.value == pytest.approx(0.5) and three.low is None
    assert three.reason == "Fisher z interval needs n >= 4 (got 3)"
    # exact p: of the 5! = 120 pairings, rho >= 0.8 (sum d^2 <= 4) for the identity, the 4
    # adjacent swaps and the 3 pairs of disjoint adjacent swaps; 8 more mirror them (<= -0.8)
    assert res.p_value == pytest.approx(16 / 120)
    assert "exact permutation" in res.method
    # perfectly monotone: rho = 1, exact p = 2 / 4! ; no interval (Fisher z infinite)
    mono = spearman([1, 2, 3, 4], [10, 20, 30, 45])
    assert mono.value == 1.0 and mono.p_value == pytest.approx(2 / 24)
    assert mono.low is None and mono.reason is not None and "|rho| = 1" in mono.reason
    # with ties (average ranks): rx = [1, 2.5, 2.5, 4], ry = [1, 3, 2, 4]
    # sum(dx*dy) = 4.5, sum(dx^2) = 4.5, sum(dy^2) = 5 -> rho = 4.5 / sqrt(22.5) = 0.948683
    tied = spearman([1, 2, 2, 3], [1, 3, 2, 4])
    assert tied.value == pytest.approx(4.5 / math.sqrt(22.5))
    # rho = 0.948683, n = 4: se sqrt(1 + 0.45) = 1.204159, half-width 2.360108
    assert (tied.low, tied.high) == (
        pytest.approx(-0.494246, abs=1e-6),
        pytest.approx(0.999531, abs=1e-6),
    )
    _no_nan(tied)


def test_ema_bias_corrected_hand_computed():
    # beta = 0.5: m1 = 0.5 -> 0.5 / 0.5 = 1; m2 = 0.25 -> 0.25 / 0.75 = 1/3
    assert ema([1.0, 0.0], beta=0.5) == pytest.approx([1.0, 1 / 3])
    assert ema([2.0, 2.0, 2.0]) == pytest.approx([2.0, 2.0, 2.0])
    with pytest.raises(ValueError, match="beta must be in"):
        ema([1.0], beta=1.0)


def test_bad_input_raises_naming_the_problem():
    with pytest.raises(ValueError, match=r"non-finite values at positions \[1\]"):
        mean_interval([1.0, float("nan"), 2.0])
    with pytest.raises(ValueError, match="x has 3 values but y has 2"):
        pearson([1, 2, 3], [1, 2])


# ------------------------------------------------------------ change of a correlation (issue 21)
# Three rooms: x = room size, y = each arm's room-mean sub-calls. Exhaustive bootstrap: all
# 3^3 = 27 resamples of room indices, each with probability 1/27.
#   - 3 resamples repeat one room: x is constant, no correlation (left out);
#   - 6 are permutations of the three rooms: the full-sample correlations;
#   - 18 hold exactly two distinct rooms (6 per pair): two distinct points lie on a line, so
#     each correlation is +1 or -1 (the sign of dx * dy), for Pearson and Spearman alike.
X3 = [1.0, 2.0, 3.0]
YA3 = [3.0, 1.0, 2.0]
"""r_a: dx = [-1, 0, 1], dy = [1, -1, 0]: sum dx dy = -1, sum dx^2 = sum dy^2 = 2, r = -0.5
(ranks equal the values, so Spearman's rho is -0.5 too)."""
YB3 = [1.0, 2.0, 10.0]
"""Pearson r_b: mean y = 13/3, dy = [-10/3, -7/3, 17/3]: sum dx dy = 27/3 = 9, sum dy^2 = 438/9,
r = 9 / sqrt(2 * 438 / 9) = 27 / sqrt(876) = 0.912245; Spearman: ranks [1, 2, 3], rho = 1."""


def test_correlation_change_exhaustive_bootstrap_hand_computed():
    r_b = 27 / math.sqrt(876)
    for kind, full in (("pearson", r_b + 0.5), ("spearman", 1.5)):
        res = correlation_change(X3, YA3, YB3, kind=kind, a="base", b="r1")
        assert res.kind == kind and (res.a, res.b) == ("base", "r1")
        assert res.r_a == pytest.approx(-0.5)
        assert res.r_b == pytest.approx(r_b if kind == "pearson" else 1.0)
        assert res.value == pytest.approx(full)
        assert res.exhaustive and res.n_resamples == 27 and res.n_undefined == 3
        assert res.n == 3
        # two-room resamples: rooms (0, 1): x up, y_a down, y_b up -> d = 1 - (-1) = 2;
        # rooms (0, 2): likewise d = 2; rooms (1, 2): x, y_a, y_b all up -> d = 0.
        # Defined: 24 = d 0 x 6, d `full` x 6, d 2 x 12; G(0) = 1/4, G(full) = 1/2, G(2) = 1.
        # 95 %: G^-1(0.025) = 0, G^-1(0.975) = 2
        assert (res.low, res.high) == (pytest.approx(0.0), pytest.approx(2.0))
        # p = 2 * min(#{d <= 0} = 6, #{d >= 0} = 24) / 24 = 0.5
        assert res.p_value == pytest.approx(0.5)
        assert res.reason == (
            "3 of 27 resamples had a constant x or y (a correlation undefined) and were left out"
        )
        assert "exhaustive: all 3^3 = 27 resamples" in res.method
        assert "Efron & Tibshirani 1993, sec. 15.4" in res.method
        _no_nan(res)
        # 20 %: G^-1(0.4) = full (G(0) = 0.25 < 0.4 <= G(full) = 0.5), G^-1(0.6) = 2
        narrow = correlation_change(X3, YA3, YB3, kind=kind, confidence=0.2)
        assert (narrow.low, narrow.high) == (pytest.approx(full), pytest.approx(2.0))
        assert narrow.p_value == pytest.approx(0.5)


def test_zou_interval_reproduces_zou_2007_worked_example():
    # Zou (2007), Psychological Methods 12:399-413, overlapping correlations: r12 = .396,
    # r13 = .179, r23 = .088, n = 66 -> 95% CI of r12 - r13 = (-.093, .517)
    low, high = zou_interval(0.179, 0.396, 0.088, 66, kind="pearson")
    assert (round(low, 3), round(high, 3)) == (-0.093, 0.517)
    with pytest.raises(ValueError, match="n >= 4 and \\|r\\| < 1"):
        zou_interval(1.0, 0.5, 0.5, 10, kind="pearson")


def test_correlation_change_zou_interval_hand_computed():
    # x = 1..5, y_a = [1, 3, 2, 5, 4], y_b = [1, 2, 3, 5, 4] (no ties: Pearson = Spearman):
    # r_a = 8/10 = 0.8, r_b = 9/10 = 0.9, r_ab = 9/10 = 0.9 (deviations -2 0 -1 2 1 and
    # -2 -1 0 2 1). c = ((0.9 - 0.36)(1 - 0.64 - 0.81 - 0.81) + 0.729) / (0.36 x 0.19)
    #   = 0.0486 / 0.0684 = 0.710526.
    # Pearson: se 1/sqrt(2), half 1.385904: [l_a, u_a] = [-0.279640, 0.986196],
    #   [l_b, u_b] = [0.086102, 0.993438];
    #   L = 0.1 - sqrt(0.813902^2 + 0.186196^2 - 2c x 0.813902 x 0.186196) = -0.594079,
    #   U = 0.1 + sqrt(0.093438^2 + 1.079640^2 - 2c x 0.093438 x 1.079640) = 1.115381.
    # Spearman: se sqrt((1 + r^2/2) / 2): 0.812404 (r 0.8), 0.838153 (r 0.9):
    #   [l_a, u_a] = [-0.457124, 0.990843], [l_b, u_b] = [-0.168896, 0.996069];
    #   L = 0.1 - sqrt(1.068896^2 + 0.190843^2 - 2c x 1.068896 x 0.190843) = -0.842909,
    #   U = 0.1 + sqrt(0.096069^2 + 1.257124^2 - 2c x 0.096069 x 1.257124) = 1.290786.
    x, ya, yb = X5, [1.0, 3.0, 2.0, 5.0, 4.0], [1.0, 2.0, 3.0, 5.0, 4.0]
    for kind, low, high in (("pearson", -0.594079, 1.115381), ("spearman", -0.842909, 1.290786)):
        res = correlation_change(x, ya, yb, kind=kind)
        assert (res.r_a, res.r_b, res.r_ab) == (
            pytest.approx(0.8),
            pytest.approx(0.9),
            pytest.approx(0.9),
        )
        assert res.zou_low == pytest.approx(low, abs=1e-6)
        assert res.zou_high == pytest.approx(high, abs=1e-6)
        assert res.zou_reason is None and "Zou (2007)" in res.method
        assert res.low is not None  # the bootstrap interval is still there, beside it
    # n = 3: the bootstrap runs (exhaustively), Zou's interval is undefined with the reason
    three = correlation_change(X3, YA3, YB3, kind="pearson")
    assert three.zou_low is None and three.zou_reason == "Zou's interval needs n >= 4 (got 3)"
    # |r_b| = 1: Fisher z infinite
    mono = correlation_change(x, ya, [2.0, 4.0, 6.0, 8.0, 10.0], kind="pearson")
    assert mono.r_b == pytest.approx(1.0) and mono.zou_low is None
    assert mono.zou_reason is not None and "|r| = 1" in mono.zou_reason


def test_correlation_change_counts_and_leaves_out_undefined_resamples():
    # y_a = [0, 0, 1]: r_a = sqrt(3)/2 (Pearson: sum dx dy = 1, sum dy^2 = 2/3,
    # r = 1 / sqrt(4/3); Spearman: ranks [1.5, 1.5, 3], 1.5 / sqrt(2 * 1.5)); r_b = 1.
    # Undefined: 3 one-room resamples + 6 resamples of rooms (0, 1), where y_a is constant.
    # Defined 18: rooms (0, 2) and (1, 2) give +1 for both arms (d = 0, 12 resamples), the 6
    # permutations give d = 1 - sqrt(3)/2.
    for kind in ("pearson", "spearman"):
        res = correlation_change(X3, [0.0, 0.0, 1.0], X3, kind=kind)
        small = 1 - math.sqrt(3) / 2
        assert res.r_a == pytest.approx(math.sqrt(3) / 2)
        assert res.value == pytest.approx(small)
        assert (res.n_resamples, res.n_undefined) == (27, 9)
        assert (res.low, res.high) == (pytest.approx(0.0), pytest.approx(small))
        assert res.p_value == pytest.approx(1.0)  # min(1, 2 * 18 / 18)
        assert res.reason is not None and res.reason.startswith("9 of 27 resamples")
    # x = [0.1, 0.1, 0.7]: the 8 resamples drawn from rooms 0 and 1 only have a constant x
    # (0.1 is not exact in binary: the test is equality, not a rounded variance), plus the
    # one-room resample of room 2: 9 left out.
    res = correlation_change([0.1, 0.1, 0.7], X3, YA3, kind="pearson")
    assert (res.n_resamples, res.n_undefined) == (27, 9)
    # more than half undefined: y_a constant on rooms {0, 1} (8 resamples), y_b on {1, 2}
    # (8), overlap (1, 1, 1): 15 of 27 -> no interval, no p, the value stands
    few = correlation_change(X3, [0.0, 0.0, 1.0], [1.0, 0.0, 0.0], kind="pearson")
    assert few.value == pytest.approx(-math.sqrt(3))
    assert few.low is None and few.high is None and few.p_value is None
    assert few.n_undefined == 15
    assert few.reason is not None and few.reason.startswith("no interval or p-value: 15 of 27")
    _no_nan(few)


def test_correlation_change_every_resample_one_side_gives_p_zero_with_note():
    # r_a = -1, r_b = +1 in every resample with two or more distinct rooms: d = 2 always;
    # 4^4 = 256 resamples, 4 repeat one room
    res = correlation_change([1, 2, 3, 4], [4, 3, 2, 1], [1, 2, 3, 4], kind="spearman")
    assert res.exhaustive and (res.n_resamples, res.n_undefined) == (256, 4)
    assert res.value == pytest.approx(2.0)
    assert (res.low, res.high) == (pytest.approx(2.0), pytest.approx(2.0))
    assert res.p_value == 0.0
    assert res.reason is not None
    assert res.reason.endswith(
        "no defined resample fell on the other side of 0 (read p as < 0.00794)"
    )


def test_correlation_change_undefined_with_reason():
    names = {"a": "base", "b": "r1", "x_name": "room size", "y_name": "sub-calls"}
    none = correlation_change([1, 2, 3], [0, 0, 0], [1, 2, 4], **names)
    assert none.value is None and none.r_a is None and none.r_b == pytest.approx(1.0)
    assert none.low is None and none.p_value is None and none.n_resamples == 0
    assert none.reason == (
        "arm base made no sub-calls in any of the 3 rooms: its correlation with room size is "
        "undefined"
    )
    _no_nan(none)
    same = correlation_change([1, 2, 3], [1, 2, 4], [2, 2, 2], kind="pearson", **names)
    assert same.value is None and same.r_a == pytest.approx(0.9819805)  # 3 / sqrt(2 * 14/3)
    assert same.reason == (
        "arm r1 has the same sub-calls (2) in all 3 rooms: its correlation with room size is "
        "undefined"
    )
    both = correlation_change([1, 2, 3], [0, 0, 0], [2, 2, 2], **names)
    assert both.reason is not None and both.reason.count("its correlation") == 2
    flat = correlation_change([5, 5, 5], [1, 2, 3], [3, 2, 1], **names)
    assert flat.value is None and flat.r_a is None and flat.r_b is None
    assert flat.reason == (
        "no variance in room size (all 3 rooms have 5): no correlation with room size is defined"
    )
    two = correlation_change([1, 2], [1, 2], [2, 1], **names)
    assert two.value is None
    assert two.reason == "n = 2 < 3 rooms: a correlation needs at least 3"
    with pytest.raises(ValueError, match="x has 3 values, y_a 3 and y_b 2"):
        correlation_change([1, 2, 3], [1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="y of arm B: non-finite values at positions"):
        correlation_change([1, 2, 3], [1, 2, 3], [1, float("inf"), 2])
    with pytest.raises(ValueError, match=r"8\^8 = 16,777,216 resamples"):
        correlation_change(range(8), range(8), range(8), exhaustive=True)


def test_correlation_change_monte_carlo_agrees_with_exhaustive():
    # an independent path: the exact bootstrap distribution (5^5 = 3125 resamples) against
    # 20,000 seeded draws; the p-value's Monte Carlo sd is about 2 * sqrt(p(1-p)/B) <= 0.007
    x = [1.0, 2.0, 3.0, 5.0, 8.0]
    ya = [2.0, 1.0, 2.0, 1.0, 3.0]
    yb = [1.0, 2.0, 4.0, 5.0, 9.0]
    for kind in ("pearson", "spearman"):
        ex = correlation_change(x, ya, yb, kind=kind, exhaustive=True)
        mc = correlation_change(x, ya, yb, kind=kind, n_resamples=20_000, seed=1, exhaustive=False)
        assert ex.exhaustive and ex.n_resamples == 3125 and not mc.exhaustive
        assert mc.value == ex.value
        assert ex.p_value is not None and mc.p_value is not None
        assert abs(mc.p_value - ex.p_value) < 0.03
        # undefined: 5 one-room resamples + y_a constant on rooms {0, 2} or {1, 3}: 2 * (2^5 - 2)
        assert ex.n_undefined == 65
        assert mc.n_undefined / 20_000 == pytest.approx(65 / 3125, abs=0.01)
    # default at B = 2000: 5^5 > 2000, so 2000 seeded draws, reproducible
    default = correlation_change(x, ya, yb)
    assert not default.exhaustive and default.n_resamples == 2000
    assert correlation_change(x, ya, yb) == default
    assert "B=2000, seed=0" in default.method
    assert correlation_change(x[:4], ya[:4], yb[:4]).exhaustive  # 4^4 = 256 <= 2000


# ----------------------------------------------------------------------------- Wilcoxon, exact
def _t_plus(d: np.ndarray, axis: int = -1) -> np.ndarray:
    """Signed-rank statistic T+ (average ranks of |d|) along ``axis``: scipy's own sign-flip
    enumerator (``permutation_test``) is the independent reference below."""
    ranks = scipy.stats.rankdata(np.abs(d), axis=axis)
    return np.sum(ranks * (d > 0), axis=axis)


@pytest.mark.parametrize("n", [5, 8, 13, 14, 20])
def test_wilcoxon_all_same_sign_with_ties_is_exactly_two_over_two_to_the_n(n, monkeypatch):
    # n rooms all improved, differences tied in pairs: T+ is its maximum n(n+1)/2, reached only
    # when every sign is +, so P(T+ >= t) = 1 / 2^n and the two-sided p is 2 / 2^n: never below
    # it (scipy 1.11-1.14 gave 0.041 at n = 5, below 0.0625; scipy 1.17 gives the normal
    # approximation for tied n >= 14). The test must not depend on scipy's wilcoxon at all.
    monkeypatch.setattr(scipy.stats, "wilcoxon", None)
    d = [0.1 * (1 + i // 2) for i in range(n)]  # 0.1, 0.1, 0.2, 0.2, ...
    res = wilcoxon_signed_rank(d)
    assert res.p_value == 2 / 2**n
    assert res.statistic == 0.0 and res.n == n
    neg = wilcoxon_signed_rank([-v for v in d])
    assert neg.p_value == 2 / 2**n


def test_wilcoxon_tied_mixed_signs_equal_the_exact_sign_flip_distribution():
    # reference: every one of the 2^n sign patterns, scipy.stats.permutation_test
    rng = np.random.default_rng(3)
    for n in (5, 7, 9, 12, 16):  # 16: scipy 1.15+ itself falls back to the normal there
        for _ in range(5):
            d = rng.integers(-3, 6, size=n).astype(float)
            d = d[d != 0]
            if d.size < 3:
                continue
            ref = scipy.stats.permutation_test(
                (d,), _t_plus, permutation_type="samples", n_resamples=np.inf, vectorized=True
            )
            assert wilcoxon_signed_rank(d.tolist()).p_value == pytest.approx(
                min(1.0, ref.pvalue), rel=1e-12
            )
    # hand-computed: d = [1, 1, 2, -2, 3]: |d| ranks 1.5, 1.5, 3.5, 3.5, 5; T+ = 11.5, T- = 3.5;
    # 2T+ = 23 of the 32 patterns of doubled ranks (3, 3, 7, 7, 10): P(2T+ >= 23) = #{sums of
    # the negated subset <= 7} / 32 = {}, {3}, {3}, {7}, {7}, {3, 3} -> 6 / 32; p = 12/32
    res = wilcoxon_signed_rank([1.0, 1.0, 2.0, -2.0, 3.0])
    assert res.statistic == 3.5 and res.p_value == 12 / 32


def test_wilcoxon_without_ties_equals_scipy_exact_and_large_n_its_normal_approximation():
    rng = np.random.default_rng(4)
    for n in (6, 10, 25):
        d = rng.normal(0.3, 1.0, size=n)
        ref = scipy.stats.wilcoxon(d, method="exact")
        res = wilcoxon_signed_rank(d.tolist())
        assert res.p_value == pytest.approx(float(ref.pvalue), rel=1e-12)
        assert res.statistic == float(ref.statistic)
    # n > 50: the normal approximation with the tie correction, no continuity correction
    d = np.round(rng.normal(0.3, 1.0, size=80), 1)
    d = d[d != 0]
    ref = scipy.stats.wilcoxon(d, method="asymptotic", correction=False)
    assert wilcoxon_signed_rank(d.tolist()).p_value == pytest.approx(float(ref.pvalue))
    assert "exact sign-flip null" in wilcoxon_signed_rank(d.tolist()).method


# ----------------------------------------------------------------------------- rounding noise
NOISY = (0.1 + 0.1 + 0.1) / 3
"""A three-episode room mean of 0.1: 0.10000000000000002 in floats, 0.1 in exact arithmetic."""


def test_correlations_of_rounding_noise_are_undefined():
    assert NOISY != 0.1  # the premise: the floats differ
    x = [1.0, 2.0, 3.0, 4.0]
    y = [0.1, NOISY, 0.1, NOISY]
    for res in (pearson(x, y), spearman(x, y)):
        assert res.value is None and res.p_value is None
        assert res.reason == "no variance in y (all 4 values equal 0.1)"
    change = correlation_change(x, y, [1.0, 3.0, 2.0, 4.0], kind="pearson")
    assert change.value is None
    assert change.reason == (
        "arm A has the same y (0.1) in all 4 rooms: its correlation with x is undefined"
    )
    # values that are close but really differ keep their correlation
    assert pearson(x, [0.1, 0.1 + 1e-9, 0.1, 0.1 + 1e-9]).value == pytest.approx(0.4472136)
    # ranks: equal within the tolerance is a tie (rho of x with [a, b, a, c], a tie at rank 1.5)
    rho = spearman(x, [0.1, 0.3, NOISY, 0.2]).value
    assert rho == pytest.approx(scipy.stats.spearmanr(x, [0.1, 0.3, 0.1, 0.2]).statistic)
    # a mean of such values has no spread
    est = mean_interval([0.1, NOISY, NOISY])
    assert (est.low, est.high) == (0.1, 0.1)
    assert est.reason == "all 3 values equal 0.1: no spread, so an interval of width 0"


# ----------------------------------------------------------------------------- rates
def test_rate_interval_korn_graubard_hand_computed():
    # values 0, 0, 0.1, 0.3: p = 0.1, s^2 = (0.01 + 0.01 + 0 + 0.04) / 3 = 0.02, s^2 / 4 =
    # 0.005; n_eff = 0.1 x 0.9 / 0.005 = 18, times (1.959964 / 3.182446)^2 = 0.379292:
    # n* = 6.827261, x* = 0.682726; limits Beta(0.025; x*, n* - x* + 1), Beta(0.975; x* + 1,
    # n* - x*)
    res = rate_interval([0.0, 0.0, 0.1, 0.3])
    n_star = 18 * (scipy.stats.norm.ppf(0.975) / T3) ** 2
    assert n_star == pytest.approx(6.827261, abs=1e-6)
    x_star = 0.1 * n_star
    assert res.value == pytest.approx(0.1)
    assert res.low == pytest.approx(scipy.stats.beta.ppf(0.025, x_star, n_star - x_star + 1))
    assert res.high == pytest.approx(scipy.stats.beta.ppf(0.975, x_star + 1, n_star - x_star))
    assert (round(res.low, 6), round(res.high, 6)) == (0.000558, 0.539964)
    assert res.one_sided is False and res.method.startswith("Korn-Graubard interval over rooms")
    with pytest.raises(ValueError, match="outside \\[0, 1\\] at positions \\[1\\]"):
        rate_interval([0.2, 1.5, 0.1])


def test_rate_interval_covers_zero_heavy_pass_rates_where_t_fell_short():
    # the benchmark's "pass rate" shape (bench_mean_interval.py): 0 with probability 0.4, else
    # Beta(2, 20); true mean 0.6 x 2/22. Seeded, 600 sets of 4 rooms (Wilson half-width of a
    # share near 0.95: about 0.018)
    rng = np.random.default_rng(11)
    true = 0.6 * 2 / 22
    hits_rate = hits_t = sets = 0
    while sets < 600:
        v = np.where(rng.random(4) < 0.4, 0.0, rng.beta(2, 20, size=4))
        if np.all(v == v[0]):
            continue
        sets += 1
        r = rate_interval(v.tolist())
        t = mean_interval(v.tolist(), bounds=(0.0, 1.0))
        assert r.low is not None and r.high is not None
        assert t.low is not None and t.high is not None
        hits_rate += r.low <= true <= r.high
        hits_t += t.low <= true <= t.high
    assert hits_t / sets < 0.93  # Student t: short
    assert hits_rate / sets >= 0.94


def test_rate_interval_all_zero_is_a_one_sided_upper_bound():
    # 0 of n rooms: exact Clopper-Pearson one-sided bound 1 - 0.05^(1/n) (rule of three 3/n
    # overstates it at few rooms: 0.75 at 4)
    for n, bound in ((4, 0.527129), (12, 0.220922), (30, 0.095034)):
        res = rate_interval([0.0] * n)
        assert (res.value, res.low) == (0.0, 0.0)
        assert res.high == pytest.approx(bound, abs=1e-6)
        assert res.high == pytest.approx(1 - 0.05 ** (1 / n))
        assert res.one_sided is True
    assert rate_interval([0.0] * 4).reason == (
        "all 4 rooms at 0: one-sided 95% upper bound 1 - 0.05^(1/4) (exact Clopper-Pearson, "
        "n = 4 rooms)"
    )
    ones = rate_interval([1.0] * 4)
    assert (ones.value, ones.high, ones.one_sided) == (1.0, 1.0, True)
    assert ones.low == pytest.approx(0.05**0.25)
    # the mean interval of before gave [0, 0]: no uncertainty at all
    assert (mean_interval([0.0] * 4).low, mean_interval([0.0] * 4).high) == (0.0, 0.0)


# ----------------------------------------------------------------------------- Steiger
def test_steiger_test_hand_computed():
    # r_a = 0.4, r_b = 0.5, r_ab = 0.1, n = 103: r = 0.45, r^2 = 0.2025;
    # psi = 0.1 (1 - 0.405) - 0.5 x 0.2025 (1 - 0.405 - 0.01) = 0.0595 - 0.05923125 = 0.00026875,
    # c = psi / 0.7975^2 = 0.00042256; var = (2 - 2c) / 100 = 0.01999155;
    # atanh(0.5) - atanh(0.4) = 0.549306 - 0.423649 = 0.125657: Z = 0.888718, p = 0.374154
    res = steiger_test(0.4, 0.5, 0.1, 103, kind="pearson")
    assert res.statistic == pytest.approx(0.888718, abs=1e-6)
    assert res.p_value == pytest.approx(0.374154, abs=1e-6)
    assert res.n == 103 and res.method.startswith("Steiger (1980)")
    # Zou's worked example (r .179 -> .396, r_ab .088, n 66): his interval (-.093, .517)
    # holds 0, and the test agrees: p = 0.171 > 0.05
    zou_ex = steiger_test(0.179, 0.396, 0.088, 66, kind="pearson")
    assert zou_ex.p_value == pytest.approx(0.171383, abs=1e-6)
    assert steiger_test(0.3, 0.3, 0.5, 10, kind="pearson").p_value == 1.0
    assert steiger_test(0.3, 0.5, 0.5, 3, kind="pearson").reason == (
        "Steiger's test needs n >= 4 (got 3)"
    )


def test_correlation_change_reports_steiger_beside_the_bootstrap():
    # x = 1..5 example of the Zou test above: r_a 0.8, r_b 0.9, r_ab 0.9, n 5; r = 0.85,
    # r^2 = 0.7225: psi = 0.9 (1 - 1.445) - 0.36125 (1 - 1.445 - 0.81) = 0.05286875,
    # c = psi / 0.2775^2 = 0.686551; atanh(0.9) - atanh(0.8) = 0.373607.
    # Pearson: var = (2 - 2c) / 2: Z = 0.373607 / sqrt(0.313449) = 0.667317, p = 0.504570;
    # Spearman: var times (1 + r^2 / 2) = 1.36125: Z = 0.571957, p = 0.567351
    x, ya, yb = X5, [1.0, 3.0, 2.0, 5.0, 4.0], [1.0, 2.0, 3.0, 5.0, 4.0]
    for kind, z, p in (("pearson", 0.667317, 0.504570), ("spearman", 0.571957, 0.567351)):
        res = correlation_change(x, ya, yb, kind=kind)
        assert res.steiger is not None
        assert res.steiger.statistic == pytest.approx(z, abs=1e-6)
        assert res.steiger.p_value == pytest.approx(p, abs=1e-6)
        assert res.p_value is not None  # the bootstrap p stays, beside it
        assert "Steiger (1980)" in res.method
    mono = correlation_change(x, ya, [2.0, 4.0, 6.0, 8.0, 10.0], kind="pearson")
    assert mono.steiger is not None and mono.steiger.p_value is None
    assert mono.steiger.reason == "|r| = 1 in an arm: its Fisher z is infinite, no Steiger test"
