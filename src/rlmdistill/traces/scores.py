"""The one reading from a run's verdicts to per-episode scores, for every stage that scores.

Filter, analysis (``show`` and the report), the dashboard, ``export-grpo`` and the RL rewards
all score episodes here, so their numbers cannot disagree:

- the memo hash that joins collect to judge (:func:`memo_sha256`);
- which of an episode's verdicts count: those of its *current* memo
  (:func:`current_memo_verdicts`; verdicts of an earlier memo of the same episode id never
  count, and an episode with no verdict of its current memo is *not graded*, never 0);
- pass-rate arithmetic over the room's whole rubric (:func:`pass_rates`);
- one episode's score (:func:`episode_score`), every episode's (:func:`score_episodes`), a
  whole run's under one grader (:func:`run_scores`);
- which grader scores a set of runs (:func:`resolve_grader`);
- "read the room but wrote no memo" (:func:`read_no_memo`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple, Protocol, TypeVar

from rlmdistill.rooms.task import Criterion, Task
from rlmdistill.traces.runs import (
    RoomTaskProblem,
    TaskErrorPolicy,
    load_manifest,
    load_room_tasks,
    load_summaries,
    load_verdicts,
)
from rlmdistill.traces.schema import EpisodeSummary

__all__ = [
    "CriterionLabel",
    "EpisodeKey",
    "EpisodeScore",
    "GraderChoiceError",
    "MemoVerdict",
    "PassRates",
    "RunScores",
    "VerdictLike",
    "current_memo_verdicts",
    "episode_score",
    "memo_sha256",
    "pass_rates",
    "read_no_memo",
    "resolve_grader",
    "run_scores",
    "score_episodes",
]


def memo_sha256(memo: str) -> str:
    """sha256 hex digest of a memo's UTF-8 bytes (lone surrogates kept: ``surrogatepass``).

    The key that joins an episode (``EpisodeSummary.memo_sha256``, written by collect) to the
    verdicts of that memo (``Verdict.memo_sha256``) and to the LLM judge's cache.
    """
    return hashlib.sha256(memo.encode("utf-8", "surrogatepass")).hexdigest()


class PassRates(NamedTuple):
    """Scores of one episode's verdicts against a rubric (rates in [0, 1])."""

    n_criteria: int
    """Criteria of the room's task."""
    n_pass: int
    n_fail: int
    n_ungradable: int
    n_missing: int
    """Criteria without any verdict."""
    pass_rate: float | None
    """PASS / all criteria, unweighted (UNGRADABLE and missing count as failed); ``None``
    for a task without criteria."""
    graded_pass_rate: float | None
    """PASS / (PASS + FAIL); ``None`` when no criterion was graded PASS or FAIL."""
    weighted_pass_rate: float | None
    """Sum of weights of passed criteria / total weight; ``None`` when total weight is 0."""


class VerdictLike(Protocol):
    """What :func:`pass_rates` reads of a verdict (a :class:`Verdict`, or a light row)."""

    @property
    def criterion_id(self) -> str:
        """Id of the rubric criterion graded."""
        ...

    @property
    def verdict(self) -> str:
        """``PASS``, ``FAIL`` or ``UNGRADABLE``."""
        ...


class MemoVerdict(VerdictLike, Protocol):
    """A verdict that names the memo it graded (by sha256)."""

    @property
    def memo_sha256(self) -> str | None:
        """sha256 of the memo graded."""
        ...


_V = TypeVar("_V", bound=MemoVerdict)


def current_memo_verdicts(verdicts: Iterable[_V], memo_sha256: str | None) -> list[_V]:
    """The verdicts of an episode that grade its current memo (``memo_sha256``); verdicts of
    an earlier memo of the same episode id are ignored, as every pass rate requires."""
    return [v for v in verdicts if v.memo_sha256 == memo_sha256]


def pass_rates(verdicts: Iterable[VerdictLike], criteria: Sequence[Criterion]) -> PassRates:
    """Pass rates of ``verdicts`` over ``criteria`` (the whole rubric of the room).

    Verdicts for criteria outside ``criteria`` are ignored; when a criterion has several
    verdicts the last one counts.
    """
    by_id = {v.criterion_id: v.verdict for v in verdicts}
    n_pass = n_fail = n_ungradable = n_missing = 0
    weight_pass = weight_total = 0.0
    for criterion in criteria:
        label = by_id.get(criterion.id)
        weight_total += criterion.weight
        if label == "PASS":
            n_pass += 1
            weight_pass += criterion.weight
        elif label == "FAIL":
            n_fail += 1
        elif label == "UNGRADABLE":
            n_ungradable += 1
        else:
            n_missing += 1
    n = len(criteria)
    graded = n_pass + n_fail
    return PassRates(
        n_criteria=n,
        n_pass=n_pass,
        n_fail=n_fail,
        n_ungradable=n_ungradable,
        n_missing=n_missing,
        pass_rate=n_pass / n if n else None,
        graded_pass_rate=n_pass / graded if graded else None,
        weighted_pass_rate=weight_pass / weight_total if weight_total > 0 else None,
    )


CriterionLabel = str
"""``PASS``, ``FAIL``, ``UNGRADABLE`` or ``MISSING`` (no verdict for that criterion)."""


class EpisodeScore(NamedTuple):
    """One episode's score under one grader (its current memo's verdicts, its room's rubric)."""

    rates: PassRates
    criterion_ids: list[str]
    """The room's rubric criteria, in task order."""
    labels: list[CriterionLabel]
    """One label per criterion of ``criterion_ids``."""
    weights: list[float]
    """One weight per criterion of ``criterion_ids`` (task weights)."""
    types: list[str]
    """One criterion type per criterion of ``criterion_ids`` (``finding``, ``citation``, ...)."""

    def pass_rate_by_type(self) -> dict[str, float]:
        """Pass rate (PASS / criteria of that type) per criterion type, types sorted."""
        out: dict[str, float] = {}
        for t in sorted(set(self.types)):
            labels = [lab for lab, ty in zip(self.labels, self.types, strict=True) if ty == t]
            out[t] = sum(1 for lab in labels if lab == "PASS") / len(labels)
        return out


def episode_score(
    verdicts: Iterable[MemoVerdict], memo_sha256: str | None, criteria: Sequence[Criterion]
) -> EpisodeScore | None:
    """Score of one episode from its verdicts (of any memo) and its room's criteria.

    Args:
        verdicts: the grader's verdicts of this episode id, in file order.
        memo_sha256: the episode's current memo hash (``EpisodeSummary.memo_sha256``).
        criteria: the room's rubric.

    Returns ``None`` (not graded) when none of ``verdicts`` grades the current memo.
    """
    mine = current_memo_verdicts(verdicts, memo_sha256)
    if not mine:
        return None
    by_id = {v.criterion_id: v.verdict for v in mine}
    return EpisodeScore(
        rates=pass_rates(mine, criteria),
        criterion_ids=[c.id for c in criteria],
        labels=[by_id.get(c.id, "MISSING") for c in criteria],
        weights=[float(c.weight) for c in criteria],
        types=[c.type for c in criteria],
    )


class EpisodeKey(NamedTuple):
    """What scoring needs of one episode (a summary, or three columns of ``episodes.jsonl``)."""

    episode_id: str
    room_hash: str
    memo_sha256: str | None


def score_episodes(
    episodes: Iterable[EpisodeKey | EpisodeSummary],
    verdicts: Iterable[MemoVerdict] | Mapping[str, Sequence[MemoVerdict]],
    tasks: Mapping[str, Task],
) -> dict[str, EpisodeScore]:
    """Score of every episode that has one, by episode id.

    Args:
        episodes: summaries, or :class:`EpisodeKey` rows (a columnar read).
        verdicts: one grader's verdicts (each with ``episode_id``), or already grouped by
            episode id.
        tasks: usable task per room hash (:func:`~rlmdistill.traces.runs.load_room_tasks`).

    An episode is absent from the result when its room has no usable task or no verdict
    grades its current memo.
    """
    if isinstance(verdicts, Mapping):
        by_ep: Mapping[str, Sequence[MemoVerdict]] = verdicts
    else:
        grouped: dict[str, list[MemoVerdict]] = {}
        for v in verdicts:
            grouped.setdefault(v.episode_id, []).append(v)  # type: ignore[attr-defined]
        by_ep = grouped
    out: dict[str, EpisodeScore] = {}
    for e in episodes:
        if isinstance(e, EpisodeSummary):
            e = EpisodeKey(e.episode_id, e.room.room_hash, e.memo_sha256)
        task = tasks.get(e.room_hash)
        if task is None:
            continue
        score = episode_score(by_ep.get(e.episode_id, ()), e.memo_sha256, task.criteria)
        if score is not None:
            out[e.episode_id] = score
    return out


class RunScores(NamedTuple):
    """Scores of every episode of a run under one grader."""

    grader: str
    summaries: list[EpisodeSummary]
    """The run's episode summaries, in file order."""
    scores: dict[str, EpisodeScore]
    """By episode id; an episode is absent when it has no verdict of its current memo or its
    room has no usable task (see ``problems``)."""
    problems: list[RoomTaskProblem]
    tasks: dict[str, Task]
    """Usable task per room hash."""


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
    tasks = load_room_tasks(manifest, summaries, on_error=on_error, run_dir=run_dir)
    scores = score_episodes(summaries, load_verdicts(run_dir, grader), tasks.tasks)
    return RunScores(grader, summaries, scores, tasks.problems, tasks.tasks)


class GraderChoiceError(ValueError):
    """No grader can be chosen for a set of runs: the asked one has no verdicts, several are
    present and none was asked, or none is present where scores are needed."""


def resolve_grader(
    available: Mapping[str, Sequence[str]],
    grader: str | None = None,
    *,
    required: bool = False,
    all_runs: bool = False,
    hint: str = "--grader NAME",
) -> str | None:
    """The grader whose verdicts score a set of runs.

    Args:
        available: graders with a verdict file (:func:`~rlmdistill.traces.runs.grader_ids`),
            by run (its path as text).
        grader: the grader asked for, or ``None`` to pick the only one present.
        required: scores are needed, so "no grader at all" is an error (else ``None``).
        all_runs: every run must have the asked grader's verdicts (else at least one must,
            unless ``required``).
        hint: how the caller's user names a grader, for the messages.

    Raises:
        GraderChoiceError: the asked grader has no verdicts (in any run; in some run when
            ``required`` or ``all_runs``), several graders are present and none was asked,
            or none is present and ``required``. Messages list the graders per run.
    """
    union = sorted({g for ids in available.values() for g in ids})
    listing = "; ".join(f"{run}: {', '.join(ids) or 'none'}" for run, ids in available.items())
    if grader is not None:
        missing = [run for run, ids in available.items() if grader not in ids]
        if len(missing) == len(available) or (missing and (required or all_runs)):
            raise GraderChoiceError(
                f"grader {grader!r} has no verdicts in {', '.join(missing)} "
                f"(no verdicts/{grader}.jsonl); graders available: {listing}"
            )
        return grader
    if len(union) > 1:
        raise GraderChoiceError(
            f"several graders have verdicts ({', '.join(union)}); choose one with "
            f"{hint}; graders per run: {listing}"
        )
    if not union:
        if required:
            raise GraderChoiceError(
                f"no run has verdicts (graders per run: {listing}); run `rlmdistill judge RUN` first"
            )
        return None
    return union[0]


def read_no_memo(coverage: float | None, has_memo: bool) -> bool | None:
    """Whether an episode read the room but wrote no memo: coverage > 0 and no memo.

    ``coverage`` is the share of the room's characters that reached a model
    (``EpisodeSummary.coverage.overall``); ``None`` (not measured) gives ``None`` (unknown).
    The one definition used by the report, ``show`` and the dashboard, so the three never disagree.
    """
    if coverage is None:
        return None
    return coverage > 0 and not has_memo
