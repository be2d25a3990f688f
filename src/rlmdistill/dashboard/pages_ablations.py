"""Ablations page: depth-1 vs depth-2 (paired per room) and root x subagent grids, over the
runs of the workspace, plus the analysis stage's ablation figures from saved reports."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from rlmdistill.dashboard.data import Workspace
from rlmdistill.dashboard.pages_compare import _graders, episodes_of
from rlmdistill.dashboard.reports import (
    depth_frame,
    fmt_estimate,
    grid_frame,
    load_report,
    pick_report,
    show_report,
)
from rlmdistill.dashboard.widgets import pick_runs
from rlmdistill.traces.scores import read_no_memo


def depth_table(episodes: pd.DataFrame) -> pd.DataFrame:
    """Per room: mean pass rate at depth 1 and depth 2, their difference, and the episodes at
    each depth that read the room but wrote no memo (coverage > 0, no memo:
    :func:`rlmdistill.traces.scores.read_no_memo`, as in the report). Rooms seen at one depth
    only have ``NA`` for the other and the difference."""
    rows = []
    for room, g in episodes.groupby("room_id", sort=True):
        row: dict[str, object] = {"room": room}
        means: dict[int, float | None] = {}
        for d in (1, 2):
            gd = g[g["depth"] == d]
            v = pd.to_numeric(gd["pass_rate"], errors="coerce").dropna()
            means[d] = float(v.mean()) if len(v) else None
            row[f"depth {d} pass rate"] = means[d]
            row[f"depth {d} n"] = len(gd)
            row[f"depth {d} read, no memo"] = sum(
                read_no_memo(None if pd.isna(cov) else float(cov), bool(memo)) is True
                for cov, memo in zip(gd["coverage"], gd["memo"], strict=True)
            )
        a, b = means[1], means[2]
        row["change"] = None if a is None or b is None else b - a
        rows.append(row)
    return pd.DataFrame(rows)


def grid(episodes: pd.DataFrame) -> pd.DataFrame:
    """Mean pass rate per (root model, sub model) pair: rows root, columns sub; ``NA`` for a
    pair never run."""
    e = episodes.assign(pass_rate=pd.to_numeric(episodes["pass_rate"], errors="coerce"))
    return e.pivot_table(
        index="root_model", columns="sub_model", values="pass_rate", aggfunc="mean"
    )


def render(ws: Workspace) -> None:
    """Render the Ablations page."""
    run_dirs = pick_runs(ws, "ablation_runs", default_n=100)
    if run_dirs:
        graders = _graders(run_dirs)
        grader = st.selectbox("Grader", graders, key="ablation_grader") if graders else None
        episodes = episodes_of(run_dirs, grader)
        st.subheader("Depth 1 vs depth 2 (per room)")
        dt = depth_table(episodes)
        changed = dt["change"].dropna()
        c = st.columns(3)
        c[0].metric("rooms improved at depth 2", int((changed > 0).sum()))
        c[1].metric("rooms declined at depth 2", int((changed < 0).sum()))
        c[2].metric("mean change", f"{changed.mean():+.3f}" if len(changed) else "n/a")
        st.dataframe(dt, hide_index=True, width="stretch")
        st.subheader("Root x subagent: mean pass rate")
        g = grid(episodes)
        st.dataframe(g, width="stretch")
        if g.notna().sum().sum() >= 2:
            st.caption(
                "gap best-worst root per subagent: "
                + ", ".join(f"{col}: {g[col].max() - g[col].min():.3f}" for col in g.columns)
            )
    st.subheader("From a saved report (analysis stage)")
    report_dir = pick_report(ws, "ablation_report")
    if report_dir is None:
        return
    report = load_report(report_dir)
    if report is not None:
        for d in report.depth_ablations:
            mean = d.paired.mean_difference
            st.markdown(
                f"**{d.depth2_arm} vs {d.depth1_arm}** ({d.metric}): rooms improved "
                f"{d.paired.n_improved}, declined {d.paired.n_declined}, tied {d.paired.n_tied}; "
                f"mean change {fmt_estimate(mean)}" + (f" — {d.note}" if d.note else "")
            )
        st.dataframe(depth_frame(report), hide_index=True, width="stretch")
        st.dataframe(grid_frame(report), hide_index=True, width="stretch")
    show_report(report_dir, figure_filter="depth")
    show_report(report_dir, figure_filter="grid")
