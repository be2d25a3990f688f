"""Rewards for tests and toy runs of ``rlmdistill rl`` (``reward: rlmdistill.testing.rl_rewards:NAME``).

The embedded root passes almost no rubric criterion and rarely writes a memo, so its rubric
reward is 0 for every episode and every group has zero variance: nothing to learn from. These
rewards vary within a group whenever the sampled root turns differ, which is what a test of
the training path needs.
"""

from __future__ import annotations

from typing import Any

from rlmdistill.traces.schema import EpisodeSummary


def distinct_root_tokens(summary: EpisodeSummary, trajectory: Any) -> float:
    """Distinct token ids the root generated over the episode, divided by 10.

    Example: turns generating ids ``[5, 6, 5]`` and ``[7]`` -> ``{5, 6, 7}`` -> 0.3.
    """
    ids: set[int] = set()
    for turn in trajectory.turns:
        if turn.tokens is not None and turn.tokens.completion_ids is not None:
            ids.update(turn.tokens.completion_ids)
    return len(ids) / 10.0


__all__ = ["distinct_root_tokens"]
