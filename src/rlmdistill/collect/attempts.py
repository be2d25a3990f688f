"""Episode attempts cut short by the serving infrastructure (``runs/<run>/attempts.jsonl``).

An episode whose root turn a server failure ended (connection refused or reset, unknown model
id, refused key, retries spent: :class:`~rlmdistill.models.base.InfrastructureError`) is not
a finished episode: it ended because of the outage, not the model. (A failed sub-call is only
that prompt's error.) The runner appends an
:class:`~rlmdistill.traces.schema.AttemptRecord` here instead of a line to ``episodes.jsonl``,
stops starting new episodes, and the command exits :data:`EXIT_INFRASTRUCTURE`; running the
same command again retries exactly those episodes. The ``max_attempts``-th failed attempt of
an episode is final: it is written to both files, so no episode is retried forever.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from rlmdistill.models.base import InfrastructureError
from rlmdistill.traces import layout
from rlmdistill.traces.schema import AttemptRecord, EpisodeSummary
from rlmdistill.traces.store import parse_records

__all__ = [
    "ATTEMPTS_FILE",
    "EXIT_INFRASTRUCTURE",
    "UnfinishedEpisodes",
    "attempt_record",
    "cause_counts",
    "prior_attempts",
]

ATTEMPTS_FILE = layout.ATTEMPTS
"""File of :class:`AttemptRecord` lines under a run directory."""

EXIT_INFRASTRUCTURE = 3
"""Exit status of ``collect``/``loop`` when infrastructure failures left episodes unfinished."""


def prior_attempts(run_dir: Path) -> dict[str, int]:
    """Failed attempts per episode id so far (``{}`` without ``attempts.jsonl``)."""
    counts: Counter[str] = Counter(
        a.episode_id for a in parse_records(Path(run_dir) / ATTEMPTS_FILE, AttemptRecord)
    )
    return dict(counts)


def attempt_record(
    summary: EpisodeSummary,
    failure: tuple[str, str, InfrastructureError],
    attempt: int,
    max_attempts: int,
) -> AttemptRecord:
    """The :class:`AttemptRecord` of an episode whose attempt number ``attempt`` (1-based)
    hit ``failure`` = (``"root"``/``"sub"``, failing client's ``model_id``, the error);
    final when ``attempt >= max_attempts``."""
    who, model, exc = failure
    return AttemptRecord(
        episode_id=summary.episode_id,
        run_id=summary.run_id,
        attempt=attempt,
        max_attempts=max_attempts,
        final=attempt >= max_attempts,
        status=summary.status,
        error_kind=exc.kind,
        cause=exc.cause,
        who="root" if who == "root" else "sub",
        model=model,
        error=str(exc),
        http_attempts=exc.attempts,
        wall_time_s=summary.wall_time_s,
        started_at=summary.started_at,
        ended_at=dt.datetime.now(dt.UTC),
    )


def cause_counts(attempts: Sequence[AttemptRecord]) -> dict[str, int]:
    """``{"<who> <cause> (<model>)": n}`` over ``attempts``, most frequent first."""
    counts = Counter(f"{a.who} {a.cause} ({a.model})" for a in attempts)
    return dict(counts.most_common())


class UnfinishedEpisodes(RuntimeError):
    """``collect`` stopped with episodes unfinished because the serving infrastructure failed.

    ``attempts``: the failed attempts of this call; ``not_started``: episodes not started after
    the first failure. The message names the run, the causes and the fix (run the same command
    again once the server is back). The CLI exits :data:`EXIT_INFRASTRUCTURE`.
    """

    def __init__(self, run_dir: Path, attempts: Sequence[AttemptRecord], not_started: int) -> None:
        causes = "; ".join(f"{k}: {n}" for k, n in cause_counts(attempts).items()) or "none"
        retry = [a for a in attempts if not a.final]
        first = attempts[0].error if attempts else ""
        super().__init__(
            f"{run_dir}: {len(retry)} episode(s) cut short by the serving infrastructure and "
            f"{not_started} not started (causes: {causes}). First error: {first[:300]}. "
            "Finished episodes are kept; fix the server and run the same command again to "
            f"retry these (failed attempts are in {Path(run_dir) / ATTEMPTS_FILE})."
        )
        self.run_dir = Path(run_dir)
        self.attempts = list(attempts)
        self.not_started = not_started
