"""Ablations page: the analysis stage's depth-1 vs depth-2 ablations (paired per room, with
what each depth costs) and root x subagent grids over the picked runs (the evaluation runs at
start: a training run beside them would pair unlike rooms), computed live by the report's own
section functions (:mod:`rlmdistill.dashboard.live`), then those of a saved report and its
figures."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from rlmdistill.dashboard import data
from rlmdistill.dashboard.data import Workspace
from rlmdistill.dashboard.live import LiveAblations, live_ablations
from rlmdistill.dashboard.reports import fmt_estimate, load_report, pick_report, show_report
from rlmdistill.dashboard.tables import (
    depth_cost_frame,
    depth_frame,
    depth_summary_frame,
    gap_frame,
    grid_frame,
    number_format,
)
from rlmdistill.dashboard.widgets import live_settings, pick_runs, runs_with_role

NAME_COLUMNS = ("root", "sub", "model", "best", "worst", "arms", "depth 1 arm", "depth 2 arm")
"""Columns holding model or arm names: drawn wide, never cut."""


def _table(frame: pd.DataFrame, extra: dict[str, Any] | None = None) -> None:
    config: dict[str, Any] = {
        c: st.column_config.TextColumn(width="large") for c in NAME_COLUMNS if c in frame.columns
    }
    st.dataframe(
        frame,
        hide_index=True,
        width="stretch",
        column_config=number_format(frame) | config | (extra or {}),
    )


def _show(sections: LiveAblations, where: str) -> None:
    """The depth and grid tables of ``sections`` (live or from a report)."""
    st.markdown(f"**Depth 1 vs depth 2** ({where}: pass rate per room, paired by room)")
    if not sections.depth_ablations:
        st.caption("No depth ablation: it needs a depth-1 and a depth-2 run.")
    for d in sections.depth_ablations:
        p = d.paired
        st.markdown(
            f"**{d.depth2_arm} vs {d.depth1_arm}** ({d.metric}): rooms improved "
            f"{p.n_improved}, declined {p.n_declined}, tied {p.n_tied}; "
            f"mean change {fmt_estimate(p.mean_difference)}" + (f" — {d.note}" if d.note else "")
        )
    if sections.depth_ablations:
        pct = st.column_config.NumberColumn(format="percent")
        st.markdown("**What each depth costs** (means of room means; tokens per episode)")
        _table(
            depth_cost_frame(sections.depth_ablations, sections.per_arm, sections.token_shares),
            {
                "pass rate": pct,
                "coverage": pct,
                "wall time (s)": st.column_config.NumberColumn(format="%.0f s"),
                "tokens per episode": st.column_config.NumberColumn(format="%.0f"),
            },
        )
        _table(
            depth_frame(sections.depth_ablations),
            {c: pct for c in ("depth 1", "depth 2", "change")},
        )
        _table(depth_summary_frame(sections.depth_ablations))
    st.markdown(f"**Root x subagent: mean pass rate** ({where})")
    if not sections.grids:
        st.caption("No grid: at each depth the runs share one root and one subagent model.")
        return
    for frame in (grid_frame(sections.grids), gap_frame(sections.grids)):
        _table(frame)


def render(ws: Workspace) -> None:
    """Render the Ablations page."""
    run_dirs = pick_runs(ws, "ablation_runs", default=runs_with_role("eval"))
    if run_dirs:
        views = [data.run_view(rd) for rd in run_dirs]
        settings = live_settings(views, "ablation")
        try:
            with st.spinner("computing the report's ablations over the picked runs..."):
                live = live_ablations(views, settings)
        except (ValueError, FileNotFoundError) as exc:
            st.error(f"cannot compute the ablations of these runs: {exc}")
        else:
            st.subheader("Over the picked runs (the report's sections)")
            _show(live, "picked runs")
    st.subheader("From a saved report (analysis stage)")
    report_dir = pick_report(ws, "ablation_report")
    if report_dir is None:
        return
    report = load_report(report_dir)
    if report is not None:
        _show(
            LiveAblations(
                report.depth_ablations, report.grids, report.per_arm, report.token_shares
            ),
            f"report {report_dir.name}",
        )
    show_report(report_dir, figure_filter="depth_ablation")
    show_report(report_dir, figure_filter="grid_")
