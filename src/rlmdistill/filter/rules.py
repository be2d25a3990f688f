"""Filter rules: the rejection-sampling config of ``rlmdistill filter`` (YAML/JSON loadable).

Every field carries its help text (``Field(description=...)``); :meth:`FilterRules.load`
reads a YAML or JSON file, and :meth:`FilterRules.with_overrides` applies CLI flags on top.
Rules are checked when built: unknown keys, out-of-range thresholds and unsafe or unknown
``where`` expressions are refused with an error naming the file and field.

Rules are applied per episode in this order; the first one an episode fails is its primary
reason, and every rule it fails is recorded (see :data:`REASON_ORDER`):

1. ``status``      status not in ``required_status``
2. ``no_memo``     ``require_memo`` and the memo is empty
3. ``sub_call_error_text``  always: the memo carries the error text of a failed sub-call
                   (``[llm_query error (<kind>): ...]``, field ``memo_sub_call_errors``):
                   harness error text never becomes training data
4. ``turns``       ``n_turns`` outside ``[min_turns, max_turns]``
5. ``sub_calls``   ``n_sub_calls < min_sub_calls``
6. ``ungraded``    a pass-rate rule is set and the grader has no verdicts for this memo
7. ``pass_rate``   below ``min_pass_rate`` or the room's ``min_pass_rate_quantile``
8. ``no_coverage`` a coverage rule is set and the episode has no coverage
9. ``coverage``    below ``min_coverage`` or the room's ``min_coverage_quantile``
10. ``where``      a ``where`` expression is false (or reads a field that is ``None``);
                   e.g. ``truncated_turns == 0`` drops episodes with a turn cut by
                   ``max_tokens``
11. ``human_reject`` ``human_reject_wins`` (default) and a person's latest label of this memo
                   is reject (``labels.jsonl``): whatever the grader and rules say, a person's
                   reject drops the episode (it is then the primary reason only when rules
                   1-10 kept it: the episodes people overruled)
12. ``duplicate``  among episodes passing 1-11: same memo (and/or root completions) as a
                   better-ranked one
13. ``top_k``      among episodes passing 1-12: not in the room's ``top_k_per_room`` best
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rlmdistill.cliconfig import ConfigFileError, read_config_file
from rlmdistill.filter.expr import ExpressionError, WhereExpression, compile_expression
from rlmdistill.filter.fields import (
    EPISODE_FIELDS,
    SCORE_FIELDS,
    SUB_CALL_FIELDS,
    SUB_SCORE_FIELDS,
    SUB_TARGET_FIELDS,
)
from rlmdistill.traces.artefacts import DropReason
from rlmdistill.traces.schema import EpisodeStatus

__all__ = [
    "REASON_ORDER",
    "DedupKey",
    "DropReason",
    "FilterRuleError",
    "FilterRules",
    "FilterTarget",
    "QuantileMethod",
    "ScoreName",
]

REASON_ORDER: tuple[DropReason, ...] = get_args(DropReason)
"""Rule order: an episode's primary drop reason is the first of these it fails."""

ScoreName = Literal["pass_rate", "graded_pass_rate", "weighted_pass_rate", "coverage"]
"""A score that thresholds and ranking can use."""

PassRateName = Literal["pass_rate", "graded_pass_rate", "weighted_pass_rate"]

DedupKey = Literal["memo", "completions"]
"""``memo``: equal ``memo_sha256`` (from the summary, fast). ``completions``: equal sequence of
root assistant messages (prefill + completion), read from the trajectory of each episode still
kept after rules 1-10 -- slower, not for dashboard previews."""

QuantileMethod = Literal[
    "linear",
    "lower",
    "higher",
    "midpoint",
    "nearest",
    "inverted_cdf",
    "averaged_inverted_cdf",
    "closest_observation",
    "interpolated_inverted_cdf",
    "hazen",
    "weibull",
    "median_unbiased",
    "normal_unbiased",
]
"""``method`` of :func:`numpy.quantile` (default ``linear``: Hyndman & Fan type 7)."""


FilterTarget = Literal["root", "sub"]
"""What a filter exports: ``root`` turns (episodes), or ``sub`` calls (depth 1: prompt ->
answer; depth 2: the subagent's trajectory), each judged by the ``where`` expressions over
:data:`~rlmdistill.filter.fields.SUB_TARGET_FIELDS` (``docs/filter.md``)."""


def _compile(text: str, target: FilterTarget) -> WhereExpression:
    """``text`` compiled for ``target``. Root: a name of a sub-call field only is refused
    with a message that says so (before the generic unknown-name message)."""
    if target == "sub":
        return compile_expression(text, SUB_TARGET_FIELDS)
    try:
        return compile_expression(text, EPISODE_FIELDS)
    except ExpressionError:
        try:
            sub = compile_expression(text, SUB_TARGET_FIELDS)
        except ExpressionError:
            sub = None
        if sub is None:
            raise
        names = ", ".join(sorted(sub.names & set(SUB_CALL_FIELDS) - set(EPISODE_FIELDS)))
        raise ExpressionError(
            f"where expression {text!r} reads sub-call field(s) {names}: only with "
            "--target sub (FilterConfig.target)"
        ) from None


class FilterRuleError(ValueError):
    """Filter rules are invalid, or cannot be applied to the given runs (message says why)."""


class FilterRules(BaseModel):
    """Which episodes of one or more runs become training data (rejection sampling).

    Thresholds are inclusive (``>=``). An absolute threshold and a quantile threshold on the
    same score both apply. Quantiles are per room (same room content hash and task) over
    every episode of that room, in all given runs, that has the score, computed with
    :func:`numpy.quantile` and ``quantile_method``.
    """

    model_config = ConfigDict(extra="forbid")

    grader: str | None = Field(
        None,
        description="Grader whose verdicts give the pass rate (verdicts/<grader>.jsonl). "
        "Default: the only grader present in the runs; an error lists them when several are.",
    )
    required_status: list[EpisodeStatus] = Field(
        default=["completed"],
        description="Keep only episodes with one of these statuses (empty list: any status).",
    )
    require_memo: bool = Field(True, description="Drop episodes without a memo.")
    min_turns: int | None = Field(None, ge=0, description="Drop episodes with fewer root turns.")
    max_turns: int | None = Field(None, ge=0, description="Drop episodes with more root turns.")
    min_sub_calls: int | None = Field(
        None, ge=0, description="Drop episodes that made fewer sub-calls."
    )
    pass_rate_field: PassRateName = Field(
        "pass_rate",
        description="Which pass rate the pass-rate thresholds use: pass_rate (passed / all "
        "criteria), graded_pass_rate (passed / graded) or weighted_pass_rate.",
    )
    min_pass_rate: float | None = Field(
        None, ge=0.0, le=1.0, description="Keep episodes whose pass rate is >= this (0..1)."
    )
    min_pass_rate_quantile: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Keep episodes whose pass rate is >= this quantile of their room's pass "
        "rates (0.75: at or above the room's 75th percentile).",
    )
    min_coverage: float | None = Field(
        None, ge=0.0, le=1.0, description="Keep episodes whose coverage is >= this (0..1)."
    )
    min_coverage_quantile: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Keep episodes whose coverage is >= this quantile of their room's coverages.",
    )
    quantile_method: QuantileMethod = Field(
        "linear",
        description="numpy.quantile method for the per-room quantiles (default linear, "
        "Hyndman & Fan type 7).",
    )
    top_k_per_room: int | None = Field(
        None,
        ge=1,
        description="Best-of-n: keep at most this many episodes per room (after all other "
        "rules), ranked by rank_by.",
    )
    rank_by: list[ScoreName] = Field(
        default=["pass_rate", "coverage"],
        min_length=1,
        description="Scores ranking episodes for top_k_per_room and for which duplicate is "
        "kept: compared in order, higher first, missing scores last; ties broken by "
        "episode_id, then run id.",
    )
    dedup: list[DedupKey] = Field(
        default=["memo"],
        description="Drop duplicates, keeping the best-ranked: memo (same memo_sha256) and/or "
        "completions (same root completions; reads trajectories). Empty list: no dedup.",
    )
    human_reject_wins: bool = Field(
        True,
        description="Drop every episode whose current memo a person labelled reject "
        "(runs/NAME/labels.jsonl), whatever the other rules say.",
    )
    where: list[str] = Field(
        default_factory=list,
        description="Safe expressions over episode fields, all of which must hold, e.g. "
        "'n_sub_calls >= 2 and depth == 1' (see docs/filter.md for fields and functions).",
    )

    @field_validator("where")
    @classmethod
    def _check_where(cls, value: list[str]) -> list[str]:
        for text in value:  # raises ExpressionError (a ValueError)
            try:
                compile_expression(text, EPISODE_FIELDS)
            except ExpressionError:
                try:  # sub-call fields pass here; expressions() refuses them for the root
                    compile_expression(text, SUB_TARGET_FIELDS)
                except ExpressionError:
                    pass
                else:
                    continue
                raise
        return value

    @field_validator("required_status", "rank_by", "dedup")
    @classmethod
    def _no_repeats(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"repeated entries in {value}")
        return value

    @model_validator(mode="after")
    def _turn_range(self) -> FilterRules:
        if (
            self.min_turns is not None
            and self.max_turns is not None
            and self.min_turns > self.max_turns
        ):
            raise ValueError(f"min_turns ({self.min_turns}) > max_turns ({self.max_turns})")
        return self

    # ------------------------------------------------------------------ derived views
    def expressions(self, target: FilterTarget = "root") -> list[WhereExpression]:
        """The ``where`` expressions, compiled for ``target`` (checked at construction).

        Raises :class:`FilterRuleError` for ``target="root"`` when an expression reads a
        sub-call field (:data:`~rlmdistill.filter.fields.SUB_CALL_FIELDS`)."""
        try:
            return [_compile(text, target) for text in self.where]
        except ExpressionError as exc:
            raise FilterRuleError(str(exc)) from exc

    def needs_pass_rate(self) -> bool:
        """``True`` when any rule reads a grader's scores (then a grader must exist)."""
        if self.min_pass_rate is not None or self.min_pass_rate_quantile is not None:
            return True
        if self.top_k_per_room is not None and any(s != "coverage" for s in self.rank_by):
            return True
        scores = (*SCORE_FIELDS, *SUB_SCORE_FIELDS)
        return any(name in scores for e in self.expressions("sub") for name in e.names)

    def needs_coverage(self) -> bool:
        """``True`` when a coverage threshold is set."""
        return self.min_coverage is not None or self.min_coverage_quantile is not None

    # ------------------------------------------------------------------ construction
    @classmethod
    def load(cls, path: Path) -> FilterRules:
        """Read rules from a YAML, JSON or TOML file (any other suffix is read as YAML, as
        before TOML was read), through :func:`rlmdistill.cliconfig.read_config_file`, the one
        config-file reader. An empty file gives defaults.

        Raises :class:`FilterRuleError` naming the file for a missing/unreadable file, a
        top level that is not a mapping, or invalid rules (unknown key, bad value, bad
        ``where`` expression).
        """
        path = Path(path)
        try:
            data = read_config_file(path, other_suffix_as_yaml=True)
        except OSError as exc:
            raise FilterRuleError(f"{path}: cannot read filter rules: {exc}") from exc
        except ConfigFileError as exc:
            raise FilterRuleError(f"filter rules: {exc}") from exc
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "filter rules") -> FilterRules:
        """Validate ``data``; raises :class:`FilterRuleError` naming ``source`` and the field."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(rules)'}: {e['msg']}"
                for e in exc.errors()
            )
            raise FilterRuleError(f"{source}: invalid filter rules: {problems}") from exc
        except (ExpressionError, ValueError) as exc:
            raise FilterRuleError(f"{source}: invalid filter rules: {exc}") from exc

    def with_overrides(self, **overrides: Any) -> FilterRules:
        """A copy with the given fields replaced (``None`` values are ignored; ``where`` is
        appended to the existing expressions). Re-validated; raises :class:`FilterRuleError`."""
        data = self.model_dump()
        for key, value in overrides.items():
            if value is None:
                continue
            if key == "where":
                data["where"] = [*data["where"], *value]
            else:
                data[key] = value
        return FilterRules.from_dict(data, source="filter rules with command-line overrides")
