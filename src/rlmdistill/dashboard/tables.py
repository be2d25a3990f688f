"""The tables the Compare and Ablations pages display, built from the analysis stage's
report sections only (:mod:`rlmdistill.analysis.schema` records), never from episodes.

The same function turns a saved report's section (``report.json``) and the live section of
the picked runs (:mod:`rlmdistill.dashboard.live`) into a table, so the two show the same
numbers for the same runs. Every number stays a number (``float``, ``NaN`` where the report
has none) at full precision; an undefined value's reason is in the row's ``why undefined``
column, never a made-up number (as ``test_bootstrap_identical_values_case_a2`` and
``test_correlation_no_variance_is_undefined_case_a1`` in ``tests/test_analysis_stats.py`` hold for
the statistics). The pages format them for display.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import pandas as pd

from rlmdistill.analysis import sections
from rlmdistill.analysis.schema import (
    ArmMetric,
    Comparison,
    ComparisonRow,
    DepthAblation,
    Grid,
    TokenShares,
)
from rlmdistill.stats import SHARE, Estimate

__all__ = [
    "ARM_COLUMNS",
    "COMPARISON_COLUMNS",
    "DEPTH_COLUMNS",
    "DEPTH_COST_COLUMNS",
    "DEPTH_SUMMARY_COLUMNS",
    "GAP_COLUMNS",
    "GRID_COLUMNS",
    "READABLE_COMPARISON_COLUMNS",
    "Headline",
    "arm_frame",
    "comparison_frame",
    "depth_cost_frame",
    "depth_frame",
    "depth_summary_frame",
    "fmt_difference",
    "fmt_value",
    "gap_frame",
    "grid_frame",
    "headline",
    "is_share",
    "number_format",
    "readable_comparison_frame",
]

COMPARISON_COLUMNS = [
    "comparison", "metric", "A", "A low", "A high", "B", "B low", "B high",
    "B - A", "B - A low", "B - A high", "Wilcoxon p", "rooms paired", "episodes A",
    "episodes B", "why undefined",
]  # fmt: skip
"""Columns of :func:`comparison_frame`."""
ARM_COLUMNS = ["arm", "metric", "mean", "low", "high", "rooms", "episodes", "why undefined"]
"""Columns of :func:`arm_frame`."""
DEPTH_COLUMNS = ["depth 1 arm", "depth 2 arm", "room", "depth 1", "depth 2", "change"]
"""Columns of :func:`depth_frame` (the values are the ablation's metric, the pass rate)."""
DEPTH_SUMMARY_COLUMNS = [
    "depth 1 arm", "depth 2 arm", "metric", "rooms paired", "improved", "declined", "tied",
    "mean change", "low", "high", "Wilcoxon p", "depth 1 read, no memo",
    "depth 2 read, no memo", "depth 1 no memo", "depth 2 no memo", "depth 1 episodes",
    "depth 2 episodes", "note", "why undefined",
]  # fmt: skip
"""Columns of :func:`depth_summary_frame`."""
GRID_COLUMNS = ["depth", "root", "sub", "mean pass rate", "low", "high", "rooms", "episodes", "arms"]  # fmt: skip
"""Columns of :func:`grid_frame`."""
GAP_COLUMNS = ["depth", "fixed", "model", "best", "worst", "best value", "worst value", "gap", "why undefined"]  # fmt: skip
"""Columns of :func:`gap_frame`."""


def _v(x: float | None) -> float:
    return float("nan") if x is None else float(x)


def _why(*parts: tuple[str, Estimate | str | None]) -> str:
    """``"A: reason; B - A: reason"`` over ``(label, estimate or reason)`` parts: the reason
    of each part whose value or interval is undefined (or carries a note)."""
    out = []
    for label, e in parts:
        reason = e if isinstance(e, str) or e is None else e.reason
        if reason:
            out.append(f"{label}: {reason}")
    return "; ".join(out)


def comparison_frame(comparisons: Sequence[Comparison]) -> pd.DataFrame:
    """The behaviour-shift table: one row per (comparison, metric), in the report's order.

    ``A``/``B`` are the arms' means of room means with their t interval over rooms
    (``low``/``high``), ``B - A`` the mean paired difference over the rooms both ran, with
    its interval; then the Wilcoxon signed-rank p-value, rooms paired and episodes with a
    value per arm (all from :class:`~rlmdistill.analysis.schema.ComparisonRow`)."""
    rows = []
    for comp in comparisons:
        for r in comp.rows:
            d = r.paired.mean_difference
            w = r.paired.wilcoxon
            rows.append(
                {
                    "comparison": f"{comp.b} vs {comp.a}",
                    "metric": r.metric,
                    "A": _v(r.a.value),
                    "A low": _v(r.a.low),
                    "A high": _v(r.a.high),
                    "B": _v(r.b.value),
                    "B low": _v(r.b.low),
                    "B high": _v(r.b.high),
                    "B - A": _v(d.value),
                    "B - A low": _v(d.low),
                    "B - A high": _v(d.high),
                    "Wilcoxon p": _v(w.p_value),
                    "rooms paired": r.paired.n_pairs,
                    "episodes A": r.n_episodes_a,
                    "episodes B": r.n_episodes_b,
                    "why undefined": _why(
                        ("A", r.a), ("B", r.b), ("B - A", d), ("Wilcoxon", w.reason)
                    ),
                }
            )
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def arm_frame(per_arm: dict[str, list[ArmMetric]]) -> pd.DataFrame:
    """Per-arm means: one row per (arm, metric): mean of room means with its interval, rooms
    and episodes with a value (:class:`~rlmdistill.analysis.schema.ArmMetric`)."""
    rows = [
        {
            "arm": arm,
            "metric": m.metric,
            "mean": _v(m.mean.value),
            "low": _v(m.mean.low),
            "high": _v(m.mean.high),
            "rooms": m.mean.n,
            "episodes": m.episodes.n,
            "why undefined": m.mean.reason or "",
        }
        for arm, metrics in per_arm.items()
        for m in metrics
    ]
    return pd.DataFrame(rows, columns=ARM_COLUMNS)


def depth_frame(ablations: Sequence[DepthAblation]) -> pd.DataFrame:
    """Depth 1 vs depth 2 per room: one row per (ablation, room), rooms by label, with each
    depth's room mean of the ablation's metric (the pass rate) and ``change`` = depth 2 -
    depth 1 (``NaN`` where a room ran at one depth only)."""
    rows = []
    for d in ablations:
        for room in sorted(set(d.depth1_room_means) | set(d.depth2_room_means)):
            a, b = d.depth1_room_means.get(room), d.depth2_room_means.get(room)
            rows.append(
                {
                    "depth 1 arm": d.depth1_arm,
                    "depth 2 arm": d.depth2_arm,
                    "room": room,
                    "depth 1": _v(a),
                    "depth 2": _v(b),
                    "change": float("nan") if a is None or b is None else b - a,
                }
            )
    return pd.DataFrame(rows, columns=DEPTH_COLUMNS)


def depth_summary_frame(ablations: Sequence[DepthAblation]) -> pd.DataFrame:
    """One row per depth ablation: rooms paired, improved / declined / tied at depth 2, the
    mean paired change with its interval and Wilcoxon p, and per arm the episodes that read
    but wrote no memo (coverage > 0, no memo), those with no memo, and all episodes."""
    rows = []
    for d in ablations:
        p, a, b = d.paired, d.depth1_arm, d.depth2_arm
        rows.append(
            {
                "depth 1 arm": a,
                "depth 2 arm": b,
                "metric": d.metric,
                "rooms paired": p.n_pairs,
                "improved": p.n_improved,
                "declined": p.n_declined,
                "tied": p.n_tied,
                "mean change": _v(p.mean_difference.value),
                "low": _v(p.mean_difference.low),
                "high": _v(p.mean_difference.high),
                "Wilcoxon p": _v(p.wilcoxon.p_value),
                "depth 1 read, no memo": d.read_no_memo.get(a),
                "depth 2 read, no memo": d.read_no_memo.get(b),
                "depth 1 no memo": d.no_memo.get(a),
                "depth 2 no memo": d.no_memo.get(b),
                "depth 1 episodes": d.n_episodes.get(a),
                "depth 2 episodes": d.n_episodes.get(b),
                "note": d.note or "",
                "why undefined": _why(
                    ("mean change", p.mean_difference), ("Wilcoxon", p.wilcoxon.reason)
                ),
            }
        )
    return pd.DataFrame(rows, columns=DEPTH_SUMMARY_COLUMNS)


def grid_frame(grids: Sequence[Grid]) -> pd.DataFrame:
    """Root x subagent grids: one row per filled cell (depth, root, sub short names), the mean
    of room means of the pass rate pooled over the arms that ran the pair, its interval,
    rooms and episodes with a value, and those arms."""
    rows = [
        {
            "depth": g.depth,
            "root": c.root,
            "sub": c.sub,
            "mean pass rate": _v(c.mean.value),
            "low": _v(c.mean.low),
            "high": _v(c.mean.high),
            "rooms": c.mean.n,
            "episodes": c.n_episodes,
            "arms": ", ".join(c.arms),
        }
        for g in grids
        for c in g.cells
    ]
    return pd.DataFrame(rows, columns=GRID_COLUMNS)


def gap_frame(grids: Sequence[Grid]) -> pd.DataFrame:
    """Best minus worst mean pass rate of each grid: per sub (``fixed`` = ``sub``: the roots
    vary), then per root (the subs vary); ``NaN`` with the reason when fewer than two cells
    have a mean."""
    rows = [
        {
            "depth": g.depth,
            "fixed": gap.fixed_role,
            "model": gap.fixed,
            "best": gap.best,
            "worst": gap.worst,
            "best value": _v(gap.best_value),
            "worst value": _v(gap.worst_value),
            "gap": _v(gap.gap),
            "why undefined": gap.reason or "",
        }
        for g in grids
        for gap in [*g.root_gaps, *g.sub_gaps]
    ]
    return pd.DataFrame(rows, columns=GAP_COLUMNS)


def number_format(frame: pd.DataFrame, digits: int = 3) -> dict[str, Any]:
    """``column_config`` for ``st.dataframe`` showing the float columns of ``frame`` with
    ``digits`` decimals (the values stay full-precision floats)."""
    import streamlit as st

    return {
        c: st.column_config.NumberColumn(format=f"%.{digits}f")
        for c in frame.columns
        if pd.api.types.is_float_dtype(frame[c])
    }


# ------------------------------------------------------------------- for people, not machines
_METRICS = {
    m.name: m
    for m in [*sections.BASE_METRICS, sections.TIMEOUT_METRIC, sections.SUB_CALL_ERROR_METRIC]
}


def is_share(metric: str) -> bool:
    """Whether the report's ``metric`` is a share in [0, 1] (its bounds are
    :data:`~rlmdistill.stats.SHARE`): pass rates, coverage, memo rate, ... and their
    per-type/per-folder forms (``pass_rate[finding]``, ``coverage[License]``)."""
    m = _METRICS.get(metric) or _METRICS.get(metric.split("[", 1)[0])
    return m is not None and m.bounds == SHARE


def _num(x: float, digits: int = 3) -> str:
    """A plain number for people: thousands separated, never in exponent notation."""
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:,.1f}"
    return f"{x:.{digits}g}" if x else "0"


def fmt_value(metric: str, x: float | None) -> str:
    """A value of ``metric``: shares as percentages (``0.09 -> "9.0%"``), other values as
    plain numbers (``11850.4 -> "11,850"``); ``None``/NaN -> ``"Undefined"``."""
    if x is None or x != x:
        return "Undefined"
    return f"{x:.1%}" if is_share(metric) else _num(x)


def fmt_difference(metric: str, e: Estimate) -> str:
    """A paired difference with its interval: ``"+9.0 points [5.6, 12.9]"`` for a share,
    ``"+1.25 [0.5, 2]"`` otherwise; ``"Undefined (reason)"`` without a value."""
    if e.value is None:
        return f"Undefined ({e.reason})" if e.reason else "Undefined"
    if is_share(metric):
        scale, unit = 100.0, " points"
        head = f"{e.value * scale:+.1f}{unit}"
        span = (
            ""
            if e.low is None or e.high is None
            else f" [{e.low * scale:+.1f}, {e.high * scale:+.1f}]"
        )
    else:
        head = ("+" if e.value > 0 else "") + _num(e.value)
        span = "" if e.low is None or e.high is None else f" [{_num(e.low)}, {_num(e.high)}]"
    return head + span


def _p(p: float | None) -> str:
    if p is None or p != p:
        return "Undefined"
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


class Headline(NamedTuple):
    """The card of one comparison: ``title`` (``"tuned-r2 9.0% vs base 0.0%"``) and
    ``detail`` (difference with interval, rooms up/down/tied, Wilcoxon p), both plain text."""

    metric: str
    title: str
    detail: str


def headline(
    comp: Comparison, metric: str = "pass_rate", names: Mapping[str, str] | None = None
) -> Headline | None:
    """The headline of ``comp`` (arm B against baseline A) for ``metric``: both arms' means
    of room means, B - A paired over rooms with its interval, rooms where B is above, below
    and equal to A, and the Wilcoxon signed-rank p (all from the report's
    :class:`~rlmdistill.analysis.schema.ComparisonRow`). ``names`` maps an arm label to the
    name to show (e.g. the loop report's label of a run). ``None`` when ``comp`` has no row
    of ``metric``. Undefined values read ``Undefined (reason)``."""
    row: ComparisonRow | None = next((r for r in comp.rows if r.metric == metric), None)
    if row is None:
        return None
    names = names or {}
    a, b = names.get(comp.a, comp.a), names.get(comp.b, comp.b)
    va, vb = fmt_value(metric, row.a.value), fmt_value(metric, row.b.value)
    p = row.paired
    title = f"{b} {vb} vs {a} {va}"
    rooms = (
        f"{p.n_improved} of {p.n_pairs} rooms up, {p.n_declined} down, {p.n_tied} tied"
        if p.n_pairs
        else "no paired rooms"
    )
    pv = p.wilcoxon.p_value
    test = f"p = {_p(pv)}" if pv is not None else f"p Undefined ({p.wilcoxon.reason or 'no test'})"
    detail = f"{fmt_difference(metric, p.mean_difference)} · {rooms} · {test} (Wilcoxon)"
    return Headline(metric, title, detail)


READABLE_COMPARISON_COLUMNS = [
    "comparison", "metric", "A", "B", "B - A [interval]", "rooms up / down / tied",
    "Wilcoxon p", "note",
]  # fmt: skip
"""Columns of :func:`readable_comparison_frame`."""


def readable_comparison_frame(
    comparisons: Sequence[Comparison], names: Mapping[str, str] | None = None
) -> pd.DataFrame:
    """:func:`comparison_frame` as text for people: shares as percentages and differences of
    shares in points, plain numbers otherwise, ``Undefined`` with its reason in ``note``
    (the reasons of :func:`comparison_frame`'s ``why undefined``)."""
    names = names or {}
    rows = []
    for comp in comparisons:
        a, b = names.get(comp.a, comp.a), names.get(comp.b, comp.b)
        for r in comp.rows:
            p = r.paired
            rows.append(
                {
                    "comparison": f"{b} vs {a}",
                    "metric": r.metric,
                    "A": fmt_value(r.metric, r.a.value),
                    "B": fmt_value(r.metric, r.b.value),
                    "B - A [interval]": fmt_difference(r.metric, p.mean_difference),
                    "rooms up / down / tied": f"{p.n_improved} / {p.n_declined} / {p.n_tied}",
                    "Wilcoxon p": _p(p.wilcoxon.p_value),
                    "note": _why(
                        ("A", r.a),
                        ("B", r.b),
                        ("B - A", p.mean_difference),
                        ("Wilcoxon", p.wilcoxon.reason),
                    ),
                }
            )
    return pd.DataFrame(rows, columns=READABLE_COMPARISON_COLUMNS)


DEPTH_COST_COLUMNS = [
    "depth 1 arm", "depth 2 arm", "arm", "depth", "pass rate", "coverage", "wall time (s)",
    "tokens per episode", "episodes",
]  # fmt: skip
"""Columns of :func:`depth_cost_frame`."""


def depth_cost_frame(
    ablations: Sequence[DepthAblation],
    per_arm: Mapping[str, Sequence[ArmMetric]],
    token_shares: Sequence[TokenShares],
) -> pd.DataFrame:
    """What each depth costs: per depth ablation, one row per arm with its mean of room means
    of the pass rate, coverage and wall time (seconds per episode), from the report's
    per-arm metrics, and its tokens per episode (root + sub, prompt + completion: the
    report's token totals over the arm's episodes, divided by its episodes; ``NaN`` when
    an arm has none)."""
    tokens = {t.arm: t.total for t in token_shares}
    rows = []
    for d in ablations:
        for arm, depth in ((d.depth1_arm, 1), (d.depth2_arm, 2)):
            means = {m.metric: m.mean.value for m in per_arm.get(arm, [])}
            n = d.n_episodes.get(arm, 0)
            total = tokens.get(arm)
            rows.append(
                {
                    "depth 1 arm": d.depth1_arm,
                    "depth 2 arm": d.depth2_arm,
                    "arm": arm,
                    "depth": depth,
                    "pass rate": _v(means.get("pass_rate")),
                    "coverage": _v(means.get("coverage")),
                    "wall time (s)": _v(means.get("wall_time_s")),
                    "tokens per episode": (float("nan") if total is None or not n else total / n),
                    "episodes": n,
                }
            )
    return pd.DataFrame(rows, columns=DEPTH_COST_COLUMNS)
