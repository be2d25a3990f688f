"""The grader's pass rate corrected for its errors (Rogan-Gladen with the smoothed delta-method
interval, ``rlmdistill.stats.corrected_pass_rate``) and the Wilson interval, on hand-computed
values."""

from __future__ import annotations

import math

import pytest

from rlmdistill.stats import MIN_CALIBRATION_LABELS, corrected_pass_rate, wilson_interval

Z = 1.959963984540054  # the 97.5% normal quantile


def test_corrected_rate_and_interval_by_hand() -> None:
    # grader passed 300 of 1000 criteria; people: 20 PASS (grader passed 18), 30 FAIL (grader
    # failed 27). p = 0.3, q1 = 0.9, q0 = 0.9, J = 0.8, theta = (0.3 + 0.9 - 1) / 0.8 = 0.25.
    got = corrected_pass_rate(300, 1000, true_pass=18, m1=20, true_fail=27, m0=30)
    assert (got.raw, got.sensitivity, got.specificity, got.m1, got.m0) == (0.3, 0.9, 0.9, 20, 30)
    assert got.corrected.value == pytest.approx(0.25)
    # interval at the smoothed estimates: p~ = (300 + z^2/2) / (1000 + z^2) = 0.300765,
    # q0~ = 28/32 = 0.875, q1~ = 19/22 = 0.863636, J~ = 0.738636,
    # theta~ = (0.300765 + 0.875 - 1) / 0.738636 = 0.237959;
    # Var = [p~(1-p~)/1003.84 + (1-theta~)^2 q0~(1-q0~)/32 + theta~^2 q1~(1-q1~)/22] / J~^2
    #     = [0.00020954 + 0.00198469 + 0.00030137] / 0.545584 = 0.0045776, sd 0.067658
    # -> 0.237959 -+ 1.96 * 0.067658 = [0.10535, 0.37057]
    assert got.corrected.low == pytest.approx(0.10535, abs=1e-5)
    assert got.corrected.high == pytest.approx(0.37057, abs=1e-5)
    assert got.corrected.n == 50 and got.corrected.reason is None


def test_perfect_grader_keeps_a_width() -> None:
    # 0 errors on 10 + 10 labels: the plain delta method's labelled-variance terms are 0;
    # the smoothed q0~ = q1~ = 11/12 keep the calibration uncertainty in the interval.
    got = corrected_pass_rate(500, 1000, true_pass=10, m1=10, true_fail=10, m0=10)
    assert got.corrected.value == pytest.approx(0.5)
    assert got.corrected.low is not None and got.corrected.high is not None
    plain_half = Z * math.sqrt(0.25 / 1000)  # 0.031
    assert got.corrected.high - got.corrected.low > 4 * plain_half


def test_clipped_to_the_unit_interval() -> None:
    # p = 0.05 below the false-pass rate 1 - q0 = 0.1: theta = (0.05 - 0.1) / 0.8 < 0 -> 0
    got = corrected_pass_rate(50, 1000, true_pass=9, m1=10, true_fail=9, m0=10)
    assert got.corrected.value == 0.0
    assert got.corrected.low == 0.0 and got.corrected.high is not None


def test_undefined_with_reasons() -> None:
    few = corrected_pass_rate(30, 100, true_pass=2, m1=2, true_fail=10, m0=12)
    assert few.corrected.value is None
    assert few.corrected.reason == (
        f"too few labels: 2 person-PASS and 12 person-FAIL; need at least "
        f"{MIN_CALIBRATION_LABELS} of each"
    )
    coin = corrected_pass_rate(30, 100, true_pass=5, m1=10, true_fail=5, m0=10)
    assert coin.corrected.value is None
    assert "q0 + q1 = 0.5 + 0.5 <= 1" in (coin.corrected.reason or "")
    none = corrected_pass_rate(0, 0, true_pass=5, m1=10, true_fail=5, m0=10)
    assert none.raw is None and none.corrected.reason == "no graded items"
    with pytest.raises(ValueError, match="true_pass/m1"):
        corrected_pass_rate(3, 10, true_pass=5, m1=4, true_fail=1, m0=1)


def test_wilson_by_hand() -> None:
    # 18 / 20: centre (18 + z^2/2) / (20 + z^2) = 0.835536; half-width
    # z sqrt(20 * 0.9 * 0.1 + z^2/4) / (20 + z^2) = 0.136583 -> [0.69896, 0.97213]
    got = wilson_interval(18, 20)
    assert got.value == 0.9
    assert got.low == pytest.approx(0.69896, abs=1e-5)
    assert got.high == pytest.approx(0.97213, abs=1e-5)
    assert wilson_interval(0, 0).value is None
