"""Compare page: pick runs; the behaviour-shift table and figures, and the analysis stage's
saved reports (``DIR/reports/*``)."""

from __future__ import annotations

from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st

from rlmdistill.dashboard import data
from rlmdistill.dashboard.data import Workspace
from rlmdistill.dashboard.reports import (
    build_analysis_report,
    comparison_frame,
    load_report,
    pick_report,
    show_report,
)
from rlmdistill.dashboard.widgets import pick_runs

METRICS = {
    "pass rate": "pass_rate",
    "coverage": "coverage",
    "memo present": "memo",
    "sub-calls": "n_sub_calls",
    "sub-call batches": "n_sub_batches",
    "turns": "n_turns",
    "memo chars": "memo_chars",
    "root prompt tokens": "root_prompt_tokens",
    "sub prompt tokens": "sub_prompt_tokens",
    "wall time (s)": "wall_time_s",
}
"""Metric label -> column of :func:`episodes_of` (``pass_rate`` is the chosen grader's)."""


def episodes_of(run_dirs: list[Path], grader: str | None) -> pd.DataFrame:
    """The run tables of ``run_dirs`` stacked, with a ``run`` column (folder name) and
    ``pass_rate`` = the ``pass_rate:<grader>`` column (NA when that grader did not grade)."""
    frames = []
    for rd in run_dirs:
        t = data.run_table(rd).copy()
        t.insert(0, "run", rd.name)
        col = f"pass_rate:{grader}"
        t["pass_rate"] = t[col] if col in t else pd.array([None] * len(t), dtype="Float64")
        t["memo"] = t["memo"].astype(float)
        frames.append(t)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def shift_table(episodes: pd.DataFrame, runs: list[str]) -> pd.DataFrame:
    """One row per metric: ``n`` and mean per run, and the change of each later run's mean
    from the first run's (``Δ <run>``). Means over episodes with a value; ``NA`` when a run
    has none (never a made-up number, case A1)."""
    rows = []
    for label, col in METRICS.items():
        row: dict[str, object] = {"metric": label}
        means = {}
        for r in runs:
            v = pd.to_numeric(episodes.loc[episodes["run"] == r, col], errors="coerce").dropna()
            means[r] = float(v.mean()) if len(v) else None
            row[f"{r} (n)"] = len(v)
            row[f"{r} mean"] = means[r]
        for r in runs[1:]:
            a, b = means[runs[0]], means[r]
            row[f"Δ {r}"] = None if a is None or b is None else b - a
        rows.append(row)
    return pd.DataFrame(rows)


def _graders(run_dirs: list[Path]) -> list[str]:
    out: set[str] = set()
    for rd in run_dirs:
        out |= {
            c.split(":", 1)[1] for c in data.run_table(rd).columns if c.startswith("pass_rate:")
        }
    return sorted(out)


def render(ws: Workspace) -> None:
    """Render the Compare page."""
    run_dirs = pick_runs(ws, "compare_runs")
    if len(run_dirs) < 1:
        st.info("Pick at least one run (two to see changes).")
    else:
        graders = _graders(run_dirs)
        grader = st.selectbox("Grader", graders, key="compare_grader") if graders else None
        episodes = episodes_of(run_dirs, grader)
        runs = [rd.name for rd in run_dirs]
        st.subheader("Behaviour shift (means per run; Δ from the first run)")
        st.dataframe(shift_table(episodes, runs), hide_index=True, width="stretch")
        left, right = st.columns(2)
        with left:
            st.markdown("**Pass rate vs coverage (one point per episode)**")
            pts = episodes.dropna(subset=["coverage", "pass_rate"])
            if pts.empty:
                st.caption("No episode has both a pass rate and a coverage.")
            else:
                chart = (
                    alt.Chart(pts.astype({"pass_rate": float}))
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
                    x="n_documents",
                    y="n_sub_calls",
                    color="run",
                    tooltip=["run", "episode_id", "room_id", "n_sub_calls"],
                )
            )
            st.altair_chart(chart, width="stretch")
    if len(run_dirs) >= 1:
        _build_form(ws, run_dirs)
    st.subheader("Behaviour-shift reports (analysis stage)")
    report_dir = pick_report(ws, "compare_report")
    if report_dir is not None:
        report = load_report(report_dir)
        if report is not None:
            st.caption(
                "arms: " + ", ".join(a.label for a in report.arms) + " (first = baseline); "
                "means of room means with bootstrap intervals over rooms"
            )
            st.dataframe(comparison_frame(report), hide_index=True, width="stretch")
        show_report(report_dir)


def _build_form(ws: Workspace, run_dirs: list[Path]) -> None:
    with st.form("compare_build"):
        st.markdown(
            "**Build a report** of the picked runs (first = baseline), as `rlmdistill report`"
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
            build_analysis_report(run_dirs, ws.reports / name.strip(), overwrite)
    except (ValueError, OSError) as exc:
        st.error(f"report failed: {exc}")
        return
    st.session_state["compare_report"] = name.strip()
    st.success(f"wrote reports/{name.strip()}")
