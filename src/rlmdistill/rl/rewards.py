"""Rewards of finished rollout episodes (one float per episode, in episode order).

Built in:

- ``pass_rate`` / ``weighted_pass_rate``: the reference grader
  (:class:`~rlmdistill.judge.reference.ReferenceGrader`) grades the step's run folder
  (``verdicts/reference.jsonl``), and the rate comes from
  :func:`~rlmdistill.traces.scores.run_scores`, the same reading ``export-grpo`` uses. An
  episode without a memo gets 0 (every criterion fails).
- ``cited_documents``: how many room documents the memo cites (``EpisodeSummary.cited_documents``).
- ``coverage``: share of the room's characters that reached any model input (``coverage.overall``).

Anything else is ``package.module:function``, called as ``function(summary, trajectory)`` with
the episode's :class:`~rlmdistill.traces.schema.EpisodeSummary` and
:class:`~rlmdistill.traces.runs.Trajectory`, returning a float.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlmdistill.traces.schema import EpisodeSummary

EpisodeReward = Callable[[EpisodeSummary, Any], float]


def load_reward_function(spec: str) -> EpisodeReward:
    """Import ``package.module:function``; ``ValueError`` naming the spec when it fails."""
    module_name, _, attr = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"reward {spec!r}: cannot import it ({exc})") from exc
    if not callable(fn):
        raise ValueError(f"reward {spec!r}: not callable")
    return fn  # type: ignore[no-any-return]


def episode_rewards(
    kind: str, run_dir: Path, summaries: Sequence[EpisodeSummary], trajectories: Sequence[Any]
) -> list[float]:
    """Reward of each of ``summaries`` (same order), under ``kind`` (see the module doc).

    Raises ``ValueError`` when a custom reward returns something that is not a finite float.
    """
    if kind in ("pass_rate", "weighted_pass_rate"):
        from rlmdistill.judge.reference import ReferenceGrader
        from rlmdistill.judge.run import judge_run
        from rlmdistill.traces.scores import run_scores

        grader = ReferenceGrader()
        judge_run(run_dir, grader)
        scores = run_scores(run_dir, grader.grader_id).scores
        out = []
        for s in summaries:
            score = scores.get(s.episode_id)
            value = getattr(score.rates, kind) if score is not None else None
            out.append(float(value) if value is not None else 0.0)
        return out
    if kind == "cited_documents":
        return [float(len(s.cited_documents)) for s in summaries]
    if kind == "coverage":
        return [float(s.coverage.overall) if s.coverage is not None else 0.0 for s in summaries]
    fn = load_reward_function(kind)
    out = []
    for s, t in zip(summaries, trajectories, strict=True):
        value = fn(s, t)
        if not isinstance(value, int | float) or value != value or abs(value) == float("inf"):
            raise ValueError(f"reward {kind!r} gave {value!r} for episode {s.episode_id}")
        out.append(float(value))
    return out


__all__ = ["EpisodeReward", "episode_rewards", "load_reward_function"]
