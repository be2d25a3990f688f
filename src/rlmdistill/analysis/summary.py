"""Run summary behind ``rlmdistill show``: status counts, usage, coverage and pass rates.

Reads ``run.json``, ``episodes.jsonl``, ``attempts.jsonl``, ``verdicts/*.jsonl`` and the rooms'
``task.json`` only (never a trajectory), so it stays fast for runs of many thousands of
episodes.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from rlmdistill.traces.memo_errors import memo_sub_call_errors
from rlmdistill.traces.runs import (
    grader_ids,
    load_attempts,
    load_manifest,
    load_room_tasks,
    load_summaries,
    load_verdicts,
)
from rlmdistill.traces.schema import EpisodeSummary
from rlmdistill.traces.scores import score_episodes


class Stat(BaseModel):
    """Mean, standard deviation (sample, n-1; None when n < 2), min, max and n of a metric."""

    n: int
    mean: float | None
    sd: float | None
    min: float | None
    max: float | None

    @classmethod
    def of(cls, values: list[float]) -> Stat:
        """The statistics of ``values`` (all ``None`` but ``n`` when empty)."""
        if not values:
            return cls(n=0, mean=None, sd=None, min=None, max=None)
        return cls(
            n=len(values),
            mean=statistics.fmean(values),
            sd=statistics.stdev(values) if len(values) > 1 else None,
            min=min(values),
            max=max(values),
        )


class GraderScores(BaseModel):
    """Pass rates of one grader over a run's episodes (one value per graded episode: an
    episode with a verdict of its current memo, :func:`rlmdistill.traces.scores.score_episodes`;
    verdicts of an older memo only do not make it graded)."""

    grader: str
    n_episodes: int
    pass_rate: Stat
    """Passed / all criteria of the room, unweighted; ungradable and missing count as failed."""
    graded_pass_rate: Stat
    weighted_pass_rate: Stat
    n_ungradable: int
    """Ungradable verdicts over all episodes."""
    per_episode: dict[str, float | None] = Field(default_factory=dict)


class AttemptSummary(BaseModel):
    """Episode attempts the serving infrastructure cut short (``attempts.jsonl``)."""

    n_attempts: int
    """Failed attempts recorded (one episode may have several)."""
    n_episodes: int
    """Episodes with at least one failed attempt."""
    n_unfinished: int
    """Of those, episodes still not in ``episodes.jsonl`` (a re-run retries them)."""
    n_final: int
    """Episodes finished by their last allowed attempt (``max_attempts``)."""
    by_cause: dict[str, int]
    """Failed attempts per ``"<root|sub> <cause> (<model id>)"``, most frequent first."""


class CacheHits(BaseModel):
    """Share of prompt tokens served from the server's prefix cache, root and sub.

    Only requests whose server reported cached tokens count (vllm#16162: vLLM reports them
    only with ``--enable-prompt-tokens-details``); ``n_unknown`` episodes did not say."""

    root_rate: float | None
    """Cached / prompt tokens of root requests over episodes that reported it."""
    sub_rate: float | None
    n_unknown_root: int
    """Episodes whose root usage has unknown cached tokens."""
    n_unknown_sub: int


class RunSummary(BaseModel):
    """Everything ``rlmdistill show`` prints, as data."""

    run_id: str
    root: str
    sub: str
    rooms: list[str]
    n_planned: int
    n_episodes: int
    status_counts: dict[str, int]
    memo_with_citation: int
    """Episodes whose memo cites at least one document id of the room."""
    memo_with_sub_call_errors: int = 0
    """Episodes whose memo carries the error text of a failed sub-call
    (:func:`~rlmdistill.traces.memo_errors.memo_sub_call_errors`): never training data, the
    filter drops them (rule ``sub_call_error_text``)."""
    metrics: dict[str, Stat]
    graders: list[GraderScores]
    episodes: list[EpisodeSummary]
    attempts: AttemptSummary | None = None
    """Failed attempts by cause; ``None`` when the run has none."""
    cache_hits: CacheHits | None = None
    task_problems: list[str] = Field(default_factory=list)
    """Rooms without a usable ``task.json`` (not found, or another task than the episodes
    ran), one message naming the file each: their episodes have no pass rate."""


def summarize_run(run_dir: Path) -> RunSummary:
    """Summarise a run directory.

    Raises :class:`~rlmdistill.traces.runs.NotARunError` (a ``FileNotFoundError``) when
    ``run.json`` is missing, :class:`~rlmdistill.traces.store.TraceFileError` when it or
    ``episodes.jsonl`` is corrupt, and
    :class:`~rlmdistill.traces.runs.RoomTaskError` (a ``ValueError`` naming the file) when a
    room's ``task.json`` exists but is not a valid task; a room whose task is not found or is
    another task than its episodes ran is listed in ``task_problems`` and left unscored.
    """
    manifest = load_manifest(run_dir)
    episodes = load_summaries(run_dir)
    cfg = manifest.config

    def col(f: Callable[[EpisodeSummary], float]) -> Stat:
        return Stat.of([float(f(e)) for e in episodes])

    metrics = {
        "turns": col(lambda e: e.n_turns),
        "sub_calls": col(lambda e: e.n_sub_calls),
        "sub_call_errors": col(lambda e: e.n_sub_call_errors),
        "root_prompt_tokens": col(lambda e: e.tokens.root.prompt_tokens),
        "root_completion_tokens": col(lambda e: e.tokens.root.completion_tokens),
        "sub_prompt_tokens": col(lambda e: e.tokens.sub.prompt_tokens),
        "sub_completion_tokens": col(lambda e: e.tokens.sub.completion_tokens),
        "wall_time_s": col(lambda e: e.wall_time_s),
        "memo_chars": col(lambda e: e.memo_chars),
        "cited_share": col(lambda e: len(e.cited_documents) / max(1, e.room.n_documents)),
        "coverage": Stat.of([e.coverage.overall for e in episodes if e.coverage is not None]),
    }
    room_tasks = load_room_tasks(manifest, episodes, on_error="raise_invalid", run_dir=run_dir)
    tasks = room_tasks.tasks
    graders = []
    for grader in grader_ids(run_dir):
        scores = score_episodes(episodes, load_verdicts(run_dir, grader), tasks)
        rates, graded, weighted, per_ep = [], [], [], {}
        n_ungradable = 0
        for e in episodes:
            score = scores.get(e.episode_id)
            if score is None:
                continue
            pr = score.rates
            n_ungradable += pr.n_ungradable
            per_ep[e.episode_id] = pr.pass_rate
            if pr.pass_rate is not None:
                rates.append(pr.pass_rate)
            if pr.graded_pass_rate is not None:
                graded.append(pr.graded_pass_rate)
            if pr.weighted_pass_rate is not None:
                weighted.append(pr.weighted_pass_rate)
        graders.append(
            GraderScores(
                grader=grader,
                n_episodes=len(per_ep),
                pass_rate=Stat.of(rates),
                graded_pass_rate=Stat.of(graded),
                weighted_pass_rate=Stat.of(weighted),
                n_ungradable=n_ungradable,
                per_episode=per_ep,
            )
        )
    return RunSummary(
        attempts=_attempts(run_dir, {e.episode_id for e in episodes}),
        cache_hits=_cache_hits(episodes),
        run_id=manifest.run_id,
        root=str(cfg.root),
        sub=str(cfg.sub),
        rooms=[r.room_id for r in manifest.rooms],
        n_planned=len(manifest.rooms) * cfg.episodes,
        n_episodes=len(episodes),
        status_counts=dict(Counter(e.status for e in episodes)),
        memo_with_citation=sum(1 for e in episodes if e.memo and e.cited_documents),
        memo_with_sub_call_errors=sum(1 for e in episodes if memo_sub_call_errors(e) > 0),
        metrics=metrics,
        graders=graders,
        episodes=episodes,
        task_problems=[p.message for p in room_tasks.problems],
    )


def _attempts(run_dir: Path, finished: set[str]) -> AttemptSummary | None:
    attempts = load_attempts(run_dir)
    if not attempts:
        return None
    episodes = {a.episode_id for a in attempts}
    counts = Counter(f"{a.who} {a.cause} ({a.model})" for a in attempts)
    return AttemptSummary(
        n_attempts=len(attempts),
        n_episodes=len(episodes),
        n_unfinished=len(episodes - finished),
        n_final=len({a.episode_id for a in attempts if a.final}),
        by_cause=dict(counts.most_common()),
    )


def _cache_hits(episodes: list[EpisodeSummary]) -> CacheHits:
    def rate(side: str) -> tuple[float | None, int]:
        cached = prompt = unknown = 0
        for e in episodes:
            usage = getattr(e.tokens, side)
            if usage.cached_tokens is None:
                unknown += 1
            else:
                cached += usage.cached_tokens
                prompt += usage.prompt_tokens
        return (cached / prompt if prompt else None), unknown

    root_rate, n_root = rate("root")
    sub_rate, n_sub = rate("sub")
    return CacheHits(
        root_rate=root_rate, sub_rate=sub_rate, n_unknown_root=n_root, n_unknown_sub=n_sub
    )
