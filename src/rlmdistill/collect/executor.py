"""The seam between the runner and where episodes run: the :class:`Executor` protocol, the
plan it is handed (:class:`EpisodePlan`) and the driver-side commit of one episode.

Episodes run on an *executor*: this process's thread pool (``executor: thread``, the default,
:class:`rlmdistill.collect.thread_executor.ThreadExecutor`) or the nodes of a Ray cluster
(``executor: ray``, :class:`rlmdistill.collect.ray_executor.RayExecutor`). The config's
``executor`` field names one; :func:`rlmdistill.collect.runner.executor_for` resolves the name
once, and the stage calls only the protocol's two methods. Whatever runs them, the driver
process alone writes the run's commit records through :func:`commit_episode`, so every
executor gives the same guarantees: an episode is recorded once, a failed attempt goes to
``attempts.jsonl``, and a re-run (with either executor: the executor is operational, out of
episode ids) finishes the run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from rlmdistill.collect.attempts import ATTEMPTS_FILE, attempt_record
from rlmdistill.collect.config import CollectConfig
from rlmdistill.harness.episode import RoomHandle
from rlmdistill.models.base import InfrastructureError, ModelClient
from rlmdistill.rooms import DataRoom
from rlmdistill.traces import layout
from rlmdistill.traces.schema import AttemptRecord, EpisodeSummary, RunManifest
from rlmdistill.traces.store import append_records

__all__ = [
    "EPISODES_FILE",
    "CollectResult",
    "EpisodePlan",
    "Executor",
    "commit_episode",
    "run_limits",
]

EPISODES_FILE = layout.EPISODES
"""The commit record of a run: an episode is done when its summary line is here."""


class CollectResult(NamedTuple):
    """What :func:`collect` did."""

    run_dir: Path
    summaries: list[EpisodeSummary]
    """Episodes finished by this call (not those skipped as already done)."""
    skipped: int
    """Episodes already in ``episodes.jsonl`` before this call."""
    unfinished: Sequence[AttemptRecord] = ()
    """Failed attempts of this call that left their episode unfinished (not ``final``)."""
    not_started: int = 0
    """Episodes not started because the serving infrastructure had failed (see
    :mod:`rlmdistill.collect.attempts`)."""
    failed_attempts: Sequence[AttemptRecord] = ()
    """Every failed attempt of this call, final ones included."""


@dataclass(frozen=True)
class EpisodePlan:
    """What the runner hands an executor: one run and the episodes of it still to run."""

    config: CollectConfig
    """The run's config as it defines its episodes (:func:`~rlmdistill.collect.config.
    for_run`)."""
    run_dir: Path
    run_id: str
    rooms: Sequence[DataRoom]
    """The rooms of ``config.rooms``, loaded, in order."""
    episodes: Sequence[tuple[RoomHandle, int, str]]
    """``(room, sample index, episode id)`` of every episode not yet in ``episodes.jsonl``,
    in order."""
    skipped: int
    """Episodes already finished before this call."""
    attempts_before: Mapping[str, int]
    """Failed attempts per episode id already in ``attempts.jsonl``."""
    manifest: Future[RunManifest]
    """``run.json`` being written; an executor waits for it before its first commit record
    (its ``result()`` raises what writing it raised)."""
    root: ModelClient
    """This process's open root client (``thread`` runs episodes with it)."""
    sub: ModelClient
    """This process's open sub client (the same object as ``root`` when the specs are equal)."""
    open_specs: Mapping[str, str]
    """Spec as recorded -> spec to open, for executors that open their own clients (``ray``'s
    nodes)."""


class Executor(Protocol):
    """Where a run's episodes run. Implemented by
    :class:`~rlmdistill.collect.thread_executor.ThreadExecutor` (``thread``) and
    :class:`~rlmdistill.collect.ray_executor.RayExecutor` (``ray``); resolved from
    ``CollectConfig.executor`` once (:func:`rlmdistill.collect.runner.executor_for`)."""

    name: str
    """The ``CollectConfig.executor`` value it implements."""

    def check(self, config: CollectConfig) -> None:
        """Fail fast, before any model request and before anything is written, when this
        executor cannot run ``config``'s episodes (``thread``: the local sandbox; ``ray``: the
        extra and the cluster address). Raises a ``ValueError`` subclass naming the cause."""

    def run(self, job: EpisodePlan, *, progress: bool = True) -> CollectResult:
        """Run every episode of ``job`` and commit each through :func:`commit_episode`;
        ``progress`` shows a bar. Stops starting episodes after a serving failure (they count
        as ``not_started``). Raises ``ValueError`` when the episodes cannot start (sandbox,
        cluster), ``OSError`` when the run folder cannot be written."""


def commit_episode(
    run_dir: Path,
    summary: EpisodeSummary,
    failure: tuple[str, str, InfrastructureError] | None,
    n_prior: int,
    max_attempts: int,
) -> AttemptRecord | None:
    """Record one ended episode attempt (its trajectory file already written and synced).

    ``failure`` is the serving failure that cut the attempt short (``Episode.
    infrastructure_failure``: who, model id, error) or ``None``; ``n_prior`` the attempts of
    this episode already in ``attempts.jsonl``. Without a failure the summary is appended to
    ``episodes.jsonl`` and ``None`` returned. With one, an :class:`AttemptRecord` (attempt
    ``n_prior + 1``) is appended to ``attempts.jsonl`` and returned; when it is the
    ``max_attempts``-th (``final``) the summary is appended to ``episodes.jsonl`` too, so no
    episode is retried forever. Raises ``OSError`` when the run folder cannot be written.
    """
    if failure is not None:
        attempt = attempt_record(summary, failure, n_prior + 1, max_attempts)
        append_records(run_dir / ATTEMPTS_FILE, [attempt])
        if not attempt.final:
            return attempt
        append_records(run_dir / EPISODES_FILE, [summary])
        return attempt
    append_records(run_dir / EPISODES_FILE, [summary])
    return None


def run_limits(config: CollectConfig) -> Any:
    """The run's :class:`~rlmdistill.models.limits.RunLimits`: ``max_usd``,
    ``requests_per_minute`` and the price table of ``config.prices`` (default: the packaged
    example table; :func:`~rlmdistill.models.limits.load_prices`). Raises
    ``FileNotFoundError`` / ``ValueError`` naming the file for a missing or invalid price file."""
    from rlmdistill.models.limits import RunLimits, load_prices

    return RunLimits(
        max_usd=config.max_usd,
        requests_per_minute=config.requests_per_minute,
        prices=load_prices(config.prices),
    )
