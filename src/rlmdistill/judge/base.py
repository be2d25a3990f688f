"""The grader plug point and pass-rate arithmetic shared by every grader.

A grader turns one memo plus a task's rubric into one :class:`~rlmdistill.traces.schema.Verdict`
per criterion (PASS, FAIL or UNGRADABLE); verdicts are appended to
``runs/<run>/verdicts/<grader_id>.jsonl`` by the caller.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple, Protocol, TypeVar, runtime_checkable

from rlmdistill.rooms.room import DataRoom
from rlmdistill.rooms.task import Criterion, Task
from rlmdistill.traces.schema import Verdict

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


_V = TypeVar("_V", bound="MemoVerdict")


class MemoVerdict(Protocol):
    """A verdict that names the memo it graded (by sha256)."""

    @property
    def memo_sha256(self) -> str | None:
        """sha256 of the memo graded."""
        ...


def current_memo_verdicts(verdicts: Iterable[_V], memo_sha256: str | None) -> list[_V]:
    """The verdicts of an episode that grade its current memo (``memo_sha256``); verdicts of
    an earlier memo of the same episode id are ignored, as every pass rate requires."""
    return [v for v in verdicts if v.memo_sha256 == memo_sha256]


def pass_rates(verdicts: Iterable[VerdictLike], criteria: list[Criterion]) -> PassRates:
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
