"""The collect stage's :class:`~rlmdistill.harness.trace.TraceWriter`: one episode's
``trajectories/<episode_id>.jsonl`` in the run folder (:func:`rlmdistill.traces.layout.
trajectory_path`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rlmdistill.harness.trace import TraceRecord
from rlmdistill.traces.store import append_records, sync_file

__all__ = ["TrajectoryFile"]


class TrajectoryFile:
    """Writes an episode's records as JSON lines to ``path``.

    :meth:`begin` removes what an interrupted attempt left there; :meth:`write` appends
    without ``fsync`` (one ``write`` per call, so concurrent sub-call batches never
    interleave inside a line); :meth:`commit` syncs the file once, before the runner appends
    the episode's summary (the commit record) to ``episodes.jsonl``, so a committed episode's
    trajectory is on disk. Raises ``OSError`` when the folder cannot be written."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def begin(self) -> None:
        """Make the folder; drop an earlier attempt's file."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)

    def write(self, records: Sequence[TraceRecord]) -> None:
        """Append ``records`` (not yet durable)."""
        append_records(self.path, list(records), fsync=False)

    def commit(self) -> None:
        """``fsync`` the file."""
        sync_file(self.path)
