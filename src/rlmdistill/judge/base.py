"""The grader plug point and pass-rate arithmetic shared by every grader.

A grader turns one memo plus a task's rubric into one :class:`~rlmdistill.traces.schema.Verdict`
per criterion (PASS, FAIL or UNGRADABLE); verdicts are appended to
``runs/<run>/verdicts/<grader_id>.jsonl`` by the caller. The pass-rate arithmetic and the
current-memo rule live in :mod:`rlmdistill.traces.scores` (the one reading every stage
scores with) and are re-exported here for graders.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from rlmdistill.rooms.room import DataRoom
from rlmdistill.rooms.task import Task
from rlmdistill.traces.schema import Verdict
from rlmdistill.traces.scores import (
    MemoVerdict,
    PassRates,
    VerdictLike,
    current_memo_verdicts,
    pass_rates,
)

__all__ = [
    "Grader",
    "MemoVerdict",
    "PassRates",
    "VerdictLike",
    "current_memo_verdicts",
    "pass_rates",
]


@runtime_checkable
class Grader(Protocol):
    """Grades a memo against every criterion of a task."""

    grader_id: str
    """Stable id; also the verdict file name (``verdicts/<grader_id>.jsonl``)."""
    version: str
    """Version of the grading logic; bump when verdicts could change."""

    def grade(
        self,
        memo: str | None,
        task: Task,
        room: DataRoom | None,
        *,
        episode_id: str,
        memo_sha256: str | None,
    ) -> list[Verdict]:
        """Return one verdict per criterion of ``task``, in task order.

        ``memo`` is ``None`` when the episode produced none (graders must then FAIL, not
        raise). ``room`` may be ``None`` when the grader does not need the documents.
        """
        ...
