"""Sub-call selection (``rlmdistill filter --target sub``): which sub-calls become training
data for the sub model.

Two steps, with the same rules as the root's selection:

1. the episode rules (every rule of :class:`~rlmdistill.filter.rules.FilterRules` but
   ``where``: status, memo, pass rates, coverage, people's rejects, duplicates, top-k) pick
   the episodes, exactly as :func:`~rlmdistill.filter.select.select_episodes` does for the
   root (``target="sub"``);
2. each sub-call of a kept episode (depth 1 and 2, plain and subagent) is kept when every
   ``where`` expression holds on its fields: the episode's
   (:data:`~rlmdistill.filter.fields.EPISODE_FIELDS`) plus its own
   (:data:`~rlmdistill.filter.fields.SUB_CALL_FIELDS`: ``error``, ``used_in_memo``,
   ``supports_pass``, ... from :mod:`rlmdistill.traces.sub_credit`). An expression that reads
   a ``None`` field (``supports_pass`` of an ungraded episode) does not hold.

Reads the trajectories of the kept episodes (the root's selection reads none). Pure: writes
nothing; :func:`write_sub_decisions` writes ``sub_decisions.jsonl``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rlmdistill.filter.expr import false_expressions
from rlmdistill.filter.fields import episode_fields, sub_call_fields
from rlmdistill.filter.rules import FilterRules
from rlmdistill.filter.select import Selection, select_episodes
from rlmdistill.mdtable import markdown_table
from rlmdistill.traces.runs import load_trajectory
from rlmdistill.traces.store import TraceFileError, append_records
from rlmdistill.traces.sub_credit import (
    METHOD,
    SUB_DECISIONS,
    SubCallDecision,
    sub_call_credit,
)

__all__ = ["SubSelection", "render_sub_section", "select_sub_calls", "write_sub_decisions"]


@dataclass
class SubSelection:
    """The result of :func:`select_sub_calls`: the episode selection and one decision per
    sub-call of each kept episode (episodes in selection order, calls in trajectory order)."""

    episodes: Selection
    decisions: list[SubCallDecision]
    warnings: list[str] = field(default_factory=list)
    """Kept episodes whose sub-calls could not be read (no or a broken trajectory)."""

    @property
    def n_kept(self) -> int:
        """Sub-calls kept."""
        return sum(1 for d in self.decisions if d.kept)

    def counts(self) -> dict[str, int]:
        """``{what: sub-calls}``: all, kept, kept subagents, kept plain depth 1 / depth 2,
        failed, used in the memo, supporting a pass (over all sub-calls of kept episodes)."""
        ds = self.decisions
        kept = [d for d in ds if d.kept]
        return {
            "sub-calls of kept episodes": len(ds),
            "kept": len(kept),
            "kept: subagent trajectories": sum(d.subagent for d in kept),
            "kept: depth-1 completions": sum(not d.subagent and d.call_depth == 1 for d in kept),
            "kept: depth-2 completions": sum(not d.subagent and d.call_depth == 2 for d in kept),
            "error": sum(d.error for d in ds),
            "used_in_memo": sum(d.used_in_memo for d in ds),
            "supports_pass": sum(bool(d.supports_pass) for d in ds),
        }


def select_sub_calls(runs: Sequence[Path], rules: FilterRules) -> SubSelection:
    """Select the sub-calls of ``runs`` under ``rules`` (see the module docstring).

    Raises what :func:`~rlmdistill.filter.select.select_episodes` raises, and
    :class:`~rlmdistill.filter.expr.ExpressionError` when a ``where`` expression fails on a
    sub-call for another reason than a ``None`` field (the message names the episode and
    call). A kept episode without a readable trajectory is skipped with a warning.
    """
    selection = select_episodes(runs, rules, target="sub")
    expressions = rules.expressions("sub")
    evaluators = [e.evaluator() for e in expressions]
    decisions: list[SubCallDecision] = []
    warnings: list[str] = []
    for d in selection.decisions:
        if not d.kept:
            continue
        inp = selection.inputs[(d.run_dir, d.episode_id)]
        try:
            traj = load_trajectory(Path(d.run_dir), d.episode_id)
        except (FileNotFoundError, TraceFileError, ValueError) as exc:
            warnings.append(f"{d.run_dir}: episode {d.episode_id}: sub-calls not read: {exc}")
            continue
        credits = sub_call_credit(traj.sub_calls, inp.summary.memo, inp.verdicts, inp.task)
        n_turns = Counter(t.call_id for t in traj.subagent_turns)
        base = episode_fields(inp.summary, inp.scores, inp.human)
        for rec, credit in zip(traj.sub_calls, credits, strict=True):
            values = {**base, **sub_call_fields(rec, credit, n_turns[rec.call_id])}
            where = f"{d.run_dir}:{d.episode_id} call {rec.call_id}"
            false = false_expressions(expressions, evaluators, values, where)
            decisions.append(
                SubCallDecision(
                    run_id=d.run_id,
                    run_dir=d.run_dir,
                    episode_id=d.episode_id,
                    call_id=rec.call_id,
                    call_depth=rec.depth,
                    subagent=rec.subagent,
                    kept=not false,
                    reason="where" if false else None,
                    detail="false: " + "; ".join(false) if false else "",
                    error=credit.error,
                    used_in_memo=credit.used_in_memo,
                    memo_share=credit.memo_share,
                    supports_pass=credit.supports_pass,
                    supported_criteria=list(credit.supported_criteria),
                )
            )
    return SubSelection(selection, decisions, warnings)


def render_sub_section(sub: SubSelection) -> str:
    """The Markdown section on the sub-call selection (appended to ``filter_report.md`` and
    to the dataset card): counts, the ``where`` expressions and the credit method."""
    where = sub.episodes.rules.where
    lines = [
        "## Sub-calls (--target sub)",
        "",
        f"Episodes kept by the episode rules: {sub.episodes.n_kept}; their sub-calls judged by "
        + (", ".join(f"`{w}`" for w in where) if where else "no where expression (all kept)")
        + f"; credit method `{METHOD}` (docs/filter.md).",
        "",
        *markdown_table(["sub-calls", "n"], [[k, v] for k, v in sub.counts().items()]),
        "",
    ]
    lines += [f"- warning: {w}" for w in sub.warnings]
    return "\n".join(lines).rstrip() + "\n"


def write_sub_decisions(sub: SubSelection, out_dir: Path) -> Path:
    """Write ``sub_decisions.jsonl`` (one :class:`~rlmdistill.traces.sub_credit.SubCallDecision`
    per line) into ``out_dir`` and return its path. Refuses (``FileExistsError``) to replace
    one."""
    path = Path(out_dir) / SUB_DECISIONS
    if path.exists():
        raise FileExistsError(f"{path} already exists")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    append_records(path, sub.decisions)
    return path
