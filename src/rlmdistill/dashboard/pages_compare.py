"""Compare page: pick runs; the analysis stage's behaviour-shift table over them (computed live
by the report's own section functions, :mod:`rlmdistill.dashboard.live`), scatter plots of
its per-episode metrics, and the saved reports (``DIR/reports/*``)."""

from __future__ import annotations

from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st

from rlmdistill.dashboard import data
from rlmdistill.dashboard.data import Workspace
from rlmdistill.dashboard.live import Arms, LiveSettings, live_arms, live_comparison
from rlmdistill.dashboard.reports import (
    build_analysis_report,
    load_report,
    pick_report,
    show_report,
)
from rlmdistill.dashboard.runview import RunView
from rlmdistill.dashboard.tables import arm_frame, comparison_frame, number_format
from rlmdistill.dashboard.widgets import live_settings, pick_runs

POINT_COLUMNS = ["run", "episode_id", "room_id", "room_documents", "coverage", "pass_rate", "n_sub_calls"]  # fmt: skip
"""Columns of :func:`episode_points`."""


def episode_points(arms: Arms) -> pd.DataFrame:
    """One row per episode of every arm, from its metrics rows (the report's
    :class:`~rlmdistill.analysis.metrics.EpisodeMetrics`): ``run, episode_id, room_id,
    room_documents, coverage, pass_rate, n_sub_calls`` (``NaN`` where undefined)."""
    rows = [
        {
            "run": label,
            "episode_id": r.episode_id,
            "room_id": r.room_id,
            "room_documents": r.room_documents,
            "coverage": float("nan") if r.coverage is None else r.coverage,
            "pass_rate": float("nan") if r.pass_rate is None else r.pass_rate,
            "n_sub_calls": r.n_sub_calls,
        }
        for label, rs in arms.rows.items()
        for r in rs
    ]
    return pd.DataFrame(rows, columns=POINT_COLUMNS)


def _live(views: list[RunView], settings: LiveSettings) -> None:
    try:
        with st.spinner("computing the report's sections over the picked runs..."):
            arms = live_arms(views, settings)
            live = live_comparison(views, settings)
    except (ValueError, FileNotFoundError) as exc:
        st.error(f"cannot compare these runs: {exc}")
        return
    st.subheader("Behaviour shift (the report's comparisons of each run with the first)")
    st.caption(
        "means of room means (each room weighs the same) with t intervals over rooms; "
        "B - A paired over the rooms both runs ran; as `rlmdistill report` computes them"
    )
    if live.comparisons:
        table = comparison_frame(live.comparisons)
        st.dataframe(table, hide_index=True, width="stretch", column_config=number_format(table))
    else:
        st.caption("One run picked: its means below (pick two to see changes).")
    per_arm = arm_frame(live.per_arm)
    with st.expander("Means per run (every metric of the report)", expanded=not live.comparisons):
        st.dataframe(
            per_arm, hide_index=True, width="stretch", column_config=number_format(per_arm)
        )
    episodes = episode_points(arms)
    left, right = st.columns(2)
    with left:
        st.markdown("**Pass rate vs coverage (one point per episode)**")
        pts = episodes.dropna(subset=["coverage", "pass_rate"])
        pts = pts[pts["coverage"] > 0]  # a log axis: coverage 0 is left off, as in the report
        if pts.empty:
            st.caption("No episode has both a pass rate and a coverage > 0.")
        else:
            chart = (
                alt.Chart(pts)
                .mark_circle(size=60)
                .encode(
                    x=alt.X("coverage", scale=alt.Scale(type="log")),
                    y="pass_rate",
                    color="run",
                    tooltip=["run", "episode_id", "room_id", "coverage", "pass_rate"],
                )
            )
            st.altair_chart(chart, width="stretch")
    with right:
        st.markdown("**Sub-calls vs room size (documents)**")
        chart = (
            alt.Chart(episodes)
            .mark_circle(size=60)
            .encode(
                x="room_documents",
                y="n_sub_calls",
                color="run",
                tooltip=["run", "episode_id", "room_id", "n_sub_calls"],
            )
        )
        st.altair_chart(chart, width="stretch")


def render(ws: Workspace) -> None:
    """Render the Compare page."""
    run_dirs = pick_runs(ws, "compare_runs")
    if len(run_dirs) < 1:
        st.info("Pick at least one run (two to see changes).")
    else:
        views = [data.run_view(rd) for rd in run_dirs]
        settings = live_settings(views, "compare")
        _live(views, settings)
        _build_form(ws, run_dirs, settings)
    st.subheader("Behaviour-shift reports (analysis stage)")
    report_dir = pick_report(ws, "compare_report")
    if report_dir is not None:
        report = load_report(report_dir)
        if report is not None:
            st.caption(
                "arms: " + ", ".join(a.label for a in report.arms) + " (first = baseline); "
                "means of room means with the report's intervals over rooms"
            )
            table = comparison_frame(report.comparisons)
            st.dataframe(
                table, hide_index=True, width="stretch", column_config=number_format(table)
            )
        show_report(report_dir)


def _build_form(ws: Workspace, run_dirs: list[Path], settings: LiveSettings) -> None:
    with st.form("compare_build"):
        st.markdown(
            "**Build a report** of the picked runs (first = baseline), as `rlmdistill report` "
            "(with the grader and interval settings above; trajectory metrics included)"
        )
        name = st.text_input("Report name (reports/NAME)", key="compare_report_name")
        overwrite = st.checkbox("Replace an existing report", key="compare_overwrite")
        go = st.form_submit_button("Build report")
    if not go:
        return
    if not name.strip():
        st.error("Give the report a name.")
        return
    try:
        with st.spinner("building the report..."):
            build_analysis_report(
                run_dirs,
                ws.reports / name.strip(),
                overwrite,
                grader=settings.grader,
                resamples=settings.resamples,
                seed=settings.seed,
            )
    except (ValueError, OSError) as exc:
        st.error(f"report failed: {exc}")
        return
    st.session_state["compare_report"] = name.strip()
    st.success(f"wrote reports/{name.strip()}")
