"""Judging: memo x rubric -> one verdict per criterion, appended to ``verdicts/<grader>.jsonl``.

Public API: the :class:`Grader` protocol, :func:`pass_rates` / :class:`PassRates`, and the
deterministic :class:`ReferenceGrader` (grader id ``"reference"``).
"""

from rlmdistill.judge.base import Grader, PassRates, pass_rates
from rlmdistill.judge.reference import ReferenceGrader, split_passages

__all__ = ["Grader", "PassRates", "ReferenceGrader", "pass_rates", "split_passages"]
