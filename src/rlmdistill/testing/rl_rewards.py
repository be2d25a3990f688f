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


def mean_root_logprob(summary: EpisodeSummary, trajectory: Any) -> float:
    """Mean recorded logprob of the ids the root generated (0.0 when none were recorded).

    A random tiny model samples ids that are all distinct (so :func:`distinct_root_tokens`
    is constant there) but never with equal logprobs, so this reward always varies within a
    group. Example: logprobs ``[-1.0, -3.0]`` and ``[-2.0]`` -> -2.0.
    """
    values: list[float] = []
    for turn in trajectory.turns:
        if turn.tokens is not None and turn.tokens.logprobs is not None:
            values.extend(turn.tokens.logprobs)
    return sum(values) / len(values) if values else 0.0


__all__ = ["distinct_root_tokens", "mean_root_logprob"]
