"""Group-relative advantages (GRPO) with hand-computed values, incl. the near-zero-spread case."""

from __future__ import annotations

import math

import pytest

from rlmdistill.export.advantages import DEFAULT_STD_FLOOR, group_advantages


def test_one_of_four_passes() -> None:
    # mean 0.25; sample var = (0.75^2 + 3 * 0.25^2) / 3 = 0.25 -> std 0.5
    g = group_advantages([1.0, 0.0, 0.0, 0.0])
    assert (g.mean, g.std, g.denominator) == (0.25, 0.5, 0.5)
    assert g.advantages == [1.5, -0.5, -0.5, -0.5]
    assert not g.zero_variance and not g.floored


def test_unscaled_variant() -> None:
    g = group_advantages([1.0, 0.0, 0.0, 0.0], scale="none")
    assert g.advantages == [0.75, -0.25, -0.25, -0.25]
    assert g.denominator == 1.0


def test_zero_variance_group_gives_exact_zeros() -> None:
    g = group_advantages([0.35] * 8)
    assert g.zero_variance and g.advantages == [0.0] * 8 and g.std == 0.0


def test_float_noise_is_zero_variance() -> None:
    # 0.1 + 0.2 != 0.3 in binary floating point: still the same reward
    g = group_advantages([0.3, 0.1 + 0.2, 0.3])
    assert g.zero_variance and g.advantages == [0.0, 0.0, 0.0]


def test_near_zero_spread_is_floored_nemo_rl_4161() -> None:
    # 7 rollouts at 0.35 and one 4.5e-4 above: mean = 0.35 + 5.625e-5,
    # sample std = sqrt((7 * 5.625e-5^2 + 3.9375e-4^2) / 7) = 1.591e-4 (the issue's ~1.6e-4).
    rewards = [0.35] * 7 + [0.35 + 4.5e-4]
    g = group_advantages(rewards)
    assert g.std == pytest.approx(1.591e-4, rel=1e-3)
    assert g.floored and g.denominator == DEFAULT_STD_FLOOR
    assert g.advantages[-1] == pytest.approx(3.9375e-4 / 0.01)  # 0.039, not 2.47
    assert g.advantages[0] == pytest.approx(-5.625e-5 / 0.01)
    unfloored = group_advantages(rewards, std_floor=1e-12)
    assert unfloored.advantages[-1] == pytest.approx(2.4749, rel=1e-3)
    assert math.fsum(g.advantages) == pytest.approx(0.0, abs=1e-12)


def test_group_of_one_has_no_signal() -> None:
    g = group_advantages([0.7])
    assert g.zero_variance and g.advantages == [0.0]


@pytest.mark.parametrize(
    ("rewards", "kw", "match"),
    [
        ([], {}, "at least one"),
        ([0.1, math.nan], {}, "non-finite"),
        ([0.1], {"std_floor": 0}, "std_floor"),
    ],
)
def test_bad_input(rewards: list[float], kw: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        group_advantages(rewards, **kw)
