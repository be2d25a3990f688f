"""The filter stage: rejection sampling over collected episodes.

``rlmdistill filter RUN [RUN ...] --out datasets/NAME`` selects episodes with
:class:`FilterRules` (:func:`select_episodes`, reading summaries and verdicts only), writes
``filter_report.{md,json}`` and ``decisions.jsonl`` (:func:`write_report`), then hands the
kept episodes to the export stage. See ``docs/filter.md``.
"""

from rlmdistill.filter.expr import FUNCTIONS, ExpressionError, compile_expression
from rlmdistill.filter.fields import EPISODE_FIELDS, episode_fields
from rlmdistill.filter.report import FilterReport, build_report, render_markdown, write_report
from rlmdistill.filter.rules import REASON_ORDER, DropReason, FilterRuleError, FilterRules
from rlmdistill.filter.select import FilterDecision, RoomThresholds, Selection, select_episodes

__all__ = [
    "EPISODE_FIELDS",
    "FUNCTIONS",
    "REASON_ORDER",
    "DropReason",
    "ExpressionError",
    "FilterDecision",
    "FilterReport",
    "FilterRuleError",
    "FilterRules",
    "RoomThresholds",
    "Selection",
    "build_report",
    "compile_expression",
    "episode_fields",
    "render_markdown",
    "select_episodes",
    "write_report",
]
