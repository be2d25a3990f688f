"""Statistics of the analysis stage against hand-computed values (cases A1, A2)."""

from __future__ import annotations

import json
import math

import pytest

from rlmdistill.analysis.stats import (
    bootstrap_mean,
    cluster_bootstrap_mean,
    cluster_means,
    ema,
    paired_comparison,
    pearson,
    spearman,
    wilcoxon_signed_rank,
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


def test_bootstrap_identical_values_case_a2():
    res = bootstrap_mean([1.0] * 10)
    assert (res.value, res.low, res.high) == (1.0, 1.0, 1.0)
    assert res.method.startswith("percentile bootstrap")
    assert "B=2000" in res.method
    assert res.reason == "all 10 values equal 1: every resample has the same mean"
    _no_nan(res)
    # ten copies of 1.0 from one room: one unit, so no interval, with the reason
    one_room = cluster_bootstrap_mean([1.0] * 10, ["r"] * 10)
    assert one_room.value == 1.0 and one_room.low is None and one_room.high is None
    assert one_room.n == 1
    assert one_room.reason == "interval needs >= 3 rooms (got 1)"
    _no_nan(one_room)


def test_bootstrap_small_and_empty():
    assert bootstrap_mean([]).value is None
    assert bootstrap_mean([]).reason == "no rooms"
    two = bootstrap_mean([0.0, 1.0])
    assert (
        two.value == 0.5 and two.low is None and two.reason == "interval needs >= 3 rooms (got 2)"
    )
    # [0, 0, 1]: resample means lie in {0, 1/3, 2/3, 1}; P(0) = 8/27 and P(1) = 1/27 both exceed
    # 2.5 %, so the 95 % percentile interval is [0, 1]
    res = bootstrap_mean([0.0, 0.0, 1.0])
    assert res.value == pytest.approx(1 / 3)
    assert (res.low, res.high) == (0.0, 1.0)
    assert bootstrap_mean([0.0, 0.0, 1.0]) == res  # fixed seed: reproducible


def test_cluster_bootstrap_weighs_rooms_not_episodes():
    values = [1.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    rooms = ["a", "a", "b", "c", "c", "c"]
    assert cluster_means(values, rooms) == {"a": 0.5, "b": 1.0, "c": 0.0}
    res = cluster_bootstrap_mean(values, rooms)
    assert res.value == pytest.approx(0.5)  # the episode-level mean would be 1/3
    assert res.n == 3 and res.unit == "rooms"
    # resample means of {0.5, 1, 0} range over multiples of 1/6; the extremes 0 and 1 have
    # probability 1/27 each (> 2.5 %), so the interval is [0, 1]
    assert (res.low, res.high) == (0.0, 1.0)
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


def test_spearman_hand_computed_with_bootstrap_interval():
    res = spearman(X5, Y5)
    assert res.value == pytest.approx(0.8)
    assert res.low is not None and res.high is not None
    assert -1.0 <= res.low <= 0.8 <= res.high <= 1.0
    assert "bootstrap" in res.method and "B=2000" in res.method
    assert spearman(X5, Y5) == res  # fixed seed
    # exact p: of the 5! = 120 pairings, rho >= 0.8 (sum d^2 <= 4) for the identity, the 4
    # adjacent swaps and the 3 pairs of disjoint adjacent swaps; 8 more mirror them (<= -0.8)
    assert res.p_value == pytest.approx(16 / 120)
    assert "exact permutation" in res.method
    # perfectly monotone: rho = 1, exact p = 2 / 4! ; no bootstrap interval (all resamples = 1)
    mono = spearman([1, 2, 3, 4], [10, 20, 30, 45])
    assert mono.value == 1.0 and mono.p_value == pytest.approx(2 / 24)
    assert mono.low is None and mono.reason is not None and "|rho| = 1" in mono.reason
    # with ties (average ranks): rx = [1, 2.5, 2.5, 4], ry = [1, 3, 2, 4]
    # sum(dx*dy) = 4.5, sum(dx^2) = 4.5, sum(dy^2) = 5 -> rho = 4.5 / sqrt(22.5) = 0.948683
    tied = spearman([1, 2, 2, 3], [1, 3, 2, 4])
    assert tied.value == pytest.approx(4.5 / math.sqrt(22.5))
    _no_nan(tied)


def test_ema_bias_corrected_hand_computed():
    # beta = 0.5: m1 = 0.5 -> 0.5 / 0.5 = 1; m2 = 0.25 -> 0.25 / 0.75 = 1/3
    assert ema([1.0, 0.0], beta=0.5) == pytest.approx([1.0, 1 / 3])
    assert ema([2.0, 2.0, 2.0]) == pytest.approx([2.0, 2.0, 2.0])
    with pytest.raises(ValueError, match="beta must be in"):
        ema([1.0], beta=1.0)


def test_bad_input_raises_naming_the_problem():
    with pytest.raises(ValueError, match=r"non-finite values at positions \[1\]"):
        bootstrap_mean([1.0, float("nan"), 2.0])
    with pytest.raises(ValueError, match="x has 3 values but y has 2"):
        pearson([1, 2, 3], [1, 2])
