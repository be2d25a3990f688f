"""Group-relative advantages for GRPO rollout groups, with a floor on the group spread.

GRPO (Shao et al. 2024, "DeepSeekMath", section 4.1.2) scores each of the K rollouts of one
prompt against its own group: ``A_i = (r_i - mean(r)) / std(r)``. Two known hazards:

- **Zero-variance groups.** Every rollout got the same reward: ``std = 0``, the advantage is
  0/0. Such a group carries no learning signal; it is counted, its advantages are exactly 0,
  and the export can drop it.
- **Near-zero spread.** When rewards differ by a hair, the division blows the advantage up.
  Seen in NVIDIA-NeMo/RL#4161: a 7-vs-1 split of a 0.35 reward computed in fp32 gave a std of
  about 1.6e-4 and advantages ~4000x too large. Here rewards and statistics are float64, and
  the denominator is ``max(std, std_floor)`` (default :data:`DEFAULT_STD_FLOOR`), so
  ``|A_i| <= |r_i - mean| / std_floor``.

``std`` is the sample standard deviation (ddof = 1), as TRL's ``GRPOTrainer`` computes it
(``rewards.view(-1, G).std(dim=1)``); ``scale="none"`` gives the unscaled ``r_i - mean``
variant of Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"), which has no
division at all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, NamedTuple

AdvantageScale = Literal["std", "none"]
"""``std``: ``(r - mean) / max(std, floor)`` (GRPO); ``none``: ``r - mean`` (Dr. GRPO)."""

DEFAULT_STD_FLOOR = 0.01
"""Smallest group std the advantage is divided by (reward units; a pass rate is in [0, 1]).

Why 0.01: a pass rate moves in steps of 1/n_criteria; with 100 criteria, one rollout of 8
passing one more criterion gives a sample std of 0.0035 and, without the floor, advantages of
2.5 for a 1-point difference. With the floor that rollout gets 0.875, and no group can give
more than ``(max - min) / 0.01``."""

ZERO_SPREAD_TOL = 1e-9
"""A group whose rewards differ by at most this (max - min) is a zero-variance group: floating
point noise in equal rewards must not become a signal."""


class GroupAdvantages(NamedTuple):
    """Advantages of one rollout group and the statistics they came from."""

    advantages: list[float]
    """One per rollout, in input order (0.0 for every rollout of a zero-variance group)."""
    mean: float
    std: float
    """Sample std (ddof = 1; 0.0 for a group of one)."""
    denominator: float
    """What ``r - mean`` was divided by (``max(std, floor)``; 1.0 for ``scale="none"``)."""
    zero_variance: bool
    floored: bool
    """The std was below the floor, so the floor was used."""


def group_advantages(
    rewards: Sequence[float],
    *,
    scale: AdvantageScale = "std",
    std_floor: float = DEFAULT_STD_FLOOR,
) -> GroupAdvantages:
    """Group-normalised advantages of one rollout group.

    Args:
        rewards: the K rewards of the group (K >= 1), in any order.
        scale: :data:`AdvantageScale`.
        std_floor: smallest denominator for ``scale="std"`` (> 0).

    Returns:
        :class:`GroupAdvantages`.

    Raises:
        ValueError: an empty group, a non-finite reward, or ``std_floor <= 0``.
    """
    if not rewards:
        raise ValueError("a rollout group needs at least one reward")
    if std_floor <= 0:
        raise ValueError(f"std_floor must be > 0, got {std_floor}")
    values = [float(r) for r in rewards]
    bad = [r for r in values if not math.isfinite(r)]
    if bad:
        raise ValueError(f"non-finite reward(s) {bad} in a rollout group")
    k = len(values)
    mean = math.fsum(values) / k
    std = math.sqrt(math.fsum((r - mean) ** 2 for r in values) / (k - 1)) if k > 1 else 0.0
    zero = max(values) - min(values) <= ZERO_SPREAD_TOL
    if zero:
        return GroupAdvantages([0.0] * k, mean, std, 1.0, True, False)
    if scale == "none":
        return GroupAdvantages([r - mean for r in values], mean, std, 1.0, False, False)
    denominator = max(std, std_floor)
    return GroupAdvantages(
        [(r - mean) / denominator for r in values], mean, std, denominator, False, std < std_floor
    )


__all__ = [
    "DEFAULT_STD_FLOOR",
    "ZERO_SPREAD_TOL",
    "AdvantageScale",
    "GroupAdvantages",
    "group_advantages",
]
