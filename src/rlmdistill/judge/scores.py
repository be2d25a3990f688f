"""Per-episode scores of one run under one grader: the one reading from verdicts to pass rates.

An episode's score is computed from the grader's verdicts *of its current memo*
(:func:`~rlmdistill.judge.base.current_memo_verdicts`) against the rubric of the room it ran in
(:func:`~rlmdistill.traces.runs.load_room_tasks`), with :func:`~rlmdistill.judge.base.pass_rates`.
Besides the rates it keeps the per-criterion labels in rubric order, which is what a weighted
rubric reward or a per-criterion analysis needs.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from rlmdistill.judge.base import PassRates, current_memo_verdicts, pass_rates
from rlmdistill.rooms.task import Criterion
from rlmdistill.traces.runs import (
    RoomTaskProblem,
    TaskErrorPolicy,
    load_manifest,
    load_room_tasks,
    load_summaries,
    load_verdicts,
)
from rlmdistill.traces.schema import EpisodeSummary, Verdict

CriterionLabel = str
"""``PASS``, ``FAIL``, ``UNGRADABLE`` or ``MISSING`` (no verdict for that criterion)."""


class EpisodeScore(NamedTuple):
    """One episode's score under one grader."""

    rates: PassRates
    criterion_ids: list[str]
    """The room's rubric criteria, in task order."""
    labels: list[CriterionLabel]
    """One label per criterion of ``criterion_ids``."""
    weights: list[float]
    """One weight per criterion of ``criterion_ids`` (task weights)."""


class RunScores(NamedTuple):
    """Scores of every episode of a run under one grader."""

    grader: str
    summaries: list[EpisodeSummary]
    """The run's episode summaries, in file order."""
    scores: dict[str, EpisodeScore]
    """By episode id; an episode is absent when it has no verdict of its current memo or its
    room has no usable task (see ``problems``)."""
    problems: list[RoomTaskProblem]


def episode_score(
    verdicts: list[Verdict], summary: EpisodeSummary, task_criteria: list[Criterion]
) -> EpisodeScore | None:
    """Score of one episode from its verdicts (any memo) and its room's criteria.

    Returns ``None`` when none of ``verdicts`` grades the episode's current memo.
    """
    mine = current_memo_verdicts(verdicts, summary.memo_sha256)
    if not mine:
        return None
    by_id = {v.criterion_id: v.verdict for v in mine}
    return EpisodeScore(
        rates=pass_rates(mine, task_criteria),
        criterion_ids=[c.id for c in task_criteria],
        labels=[by_id.get(c.id, "MISSING") for c in task_criteria],
        weights=[float(c.weight) for c in task_criteria],
    )


def run_scores(run_dir: Path, grader: str, *, on_error: TaskErrorPolicy = "report") -> RunScores:
    """Score every episode of ``run_dir`` with the verdicts of ``grader``.

    Args:
        run_dir: a run folder (``run.json``, ``episodes.jsonl``, ``verdicts/<grader>.jsonl``).
        grader: grader id (the stem of a ``verdicts/*.jsonl`` file).
        on_error: what a room without a usable task does (:data:`TaskErrorPolicy`).

    Raises:
        NotARunError: no ``run.json``.
        RoomTaskError: a room's task is unusable and ``on_error`` raises on it.
    """
    manifest = load_manifest(run_dir)
    summaries = load_summaries(run_dir)
    verdicts = load_verdicts(run_dir, grader)
    by_ep: dict[str, list[Verdict]] = {}
    for v in verdicts:
        by_ep.setdefault(v.episode_id, []).append(v)
    tasks = load_room_tasks(manifest, summaries, on_error=on_error)
    scores: dict[str, EpisodeScore] = {}
    for s in summaries:
        task = tasks.tasks.get(s.room.room_hash)
        if task is None:
            continue
        score = episode_score(by_ep.get(s.episode_id, []), s, task.criteria)
        if score is not None:
            scores[s.episode_id] = score
    return RunScores(grader, summaries, scores, tasks.problems)


__all__ = ["CriterionLabel", "EpisodeScore", "RunScores", "episode_score", "run_scores"]
