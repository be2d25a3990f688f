"""Where an episode's trace goes: the :class:`TraceWriter` protocol the harness writes through.

An episode records, in order, one :class:`~rlmdistill.traces.schema.EpisodeStart`, its
:class:`~rlmdistill.traces.schema.TurnRecord`, :class:`~rlmdistill.traces.schema.SubCallRecord`
and :class:`~rlmdistill.traces.schema.SubagentTurnRecord` lines as they happen (sub-call
records from several threads, each call's list in one piece), then one
:class:`~rlmdistill.traces.schema.EpisodeEnd`. The harness does not know where they go: the
collect stage writes them to the run's ``trajectories/<episode_id>.jsonl``
(:class:`rlmdistill.collect.trajectory.TrajectoryFile`), a test may keep them in memory
(:class:`MemoryTrace`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

from rlmdistill.traces.schema import EpisodeEnd, EpisodeStart, SubCallRecord, TurnBase

__all__ = ["MemoryTrace", "TraceRecord", "TraceWriter"]

TraceRecord = EpisodeStart | TurnBase | SubCallRecord | EpisodeEnd
"""One line of an episode's trace: ``traces.schema.TrajectoryRecord`` without its
discriminator (a ``TurnBase`` is a root ``TurnRecord`` or a ``SubagentTurnRecord``)."""


class TraceWriter(Protocol):
    """What an episode calls to record itself. Implementations must accept :meth:`write`
    from several threads at once (sub-call batches end on their own threads)."""

    def begin(self) -> None:
        """Start the trace afresh: records of an earlier, interrupted attempt of the same
        episode are dropped. Called once, before the first :meth:`write`."""

    def write(self, records: Sequence[TraceRecord]) -> None:
        """Append ``records`` in order, in one piece (need not be durable yet). Raises
        ``OSError`` when the destination cannot be written."""

    def commit(self) -> None:
        """Make everything written durable. Called once, after the
        :class:`~rlmdistill.traces.schema.EpisodeEnd` record and before the episode returns
        its summary (whose recording commits the episode)."""


class MemoryTrace:
    """A :class:`TraceWriter` that keeps the records in a list (tests, callers that need no
    file). ``records`` holds what was written since the last :meth:`begin`; ``committed``
    says whether :meth:`commit` was called since."""

    def __init__(self) -> None:
        self.records: list[TraceRecord] = []
        self.committed = False
        self._lock = threading.Lock()

    def begin(self) -> None:
        """Drop what was written before."""
        with self._lock:
            self.records, self.committed = [], False

    def write(self, records: Sequence[TraceRecord]) -> None:
        """Append ``records`` under a lock (in one piece)."""
        with self._lock:
            self.records.extend(records)

    def commit(self) -> None:
        """Mark the trace complete."""
        self.committed = True
