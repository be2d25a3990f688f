"""Compare page: the headline of each comparison as a card (the analysis stage's comparison
section computed live over the picked runs, :mod:`rlmdistill.dashboard.live`), the whole
behaviour-shift table in words and in full precision, the rooms and scatter points behind the
numbers with links to each episode's trace, and the saved reports (``DIR/reports/*``).

It opens on the loop's own report arms (its baseline against the last tuned arm at the
baseline's depth: :func:`rlmdistill.dashboard.roles.compare_default`). Every number is
computed once per (runs, stamps, settings) and cached (``live.py``), so a warm rerun only
draws.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from rlmdistill.dashboard import data
from rlmdistill.dashboard.data import Workspace
from rlmdistill.dashboard.live import Arms, LiveComparison, LiveSettings, live_arms, live_comparison
from rlmdistill.dashboard.reports import (
    build_analysis_report,
    load_report,
    pick_report,
    show_report,
)
from rlmdistill.dashboard.roles import WorkspaceRoles, compare_default
from rlmdistill.dashboard.runview import RunView
from rlmdistill.dashboard.tables import (
    arm_frame,
    comparison_frame,
    headline,
    number_format,
    readable_comparison_frame,
)
from rlmdistill.dashboard.widgets import (
    episode_links,
    live_settings,
    pick_runs,
    roles_of,
)

POINT_COLUMNS = ["run", "episode_id", "room_id", "room_documents", "coverage", "pass_rate", "n_sub_calls", "depth"]  # fmt: skip
"""Columns of :func:`episode_points`."""

MARKERS = ["circle", "triangle-up", "square", "diamond", "cross", "triangle-down", "wedge"]
"""Vega-Lite point shapes, one per arm in pick order."""


def episode_points(arms: Arms) -> pd.DataFrame:
    """One row per episode of every arm, from its metrics rows (the report's
    :class:`~rlmdistill.analysis.metrics.EpisodeMetrics`): ``run, episode_id, room_id,
    room_documents, coverage, pass_rate, n_sub_calls, depth`` (``NaN`` where undefined)."""
    rows = [
        {
            "run": label,
            "episode_id": r.episode_id,
            "room_id": r.room_id,
            "room_documents": r.room_documents,
            "coverage": float("nan") if r.coverage is None else r.coverage,
            "pass_rate": float("nan") if r.pass_rate is None else r.pass_rate,
            "n_sub_calls": r.n_sub_calls,
            "depth": r.depth,
        }
        for label, rs in arms.rows.items()
        for r in rs
    ]
    return pd.DataFrame(rows, columns=POINT_COLUMNS)


def report_names(ws: Workspace, roles: WorkspaceRoles) -> dict[str, str]:
    """Run folder name -> the label the loop's newest report gives its arm (e.g.
    ``r2-eval-tuned -> tuned-r2``); empty without a loop report or ``report.json``."""
    if roles.report is None:
        return {}
    try:
        report = load_report(ws.root / roles.report)
    except ValueError:
        return {}
    if report is None:
        return {}
    return {a.run_id: a.label for a in report.arms} | {
        Path(a.run_dir).name: a.label for a in report.arms
    }


def _legend(label: str, depth: int, live: LiveComparison, names: dict[str, str]) -> str:
    """``"tuned-r2 · depth 1 · r = 0.61"``: the arm, its depth and the report's Pearson r of
    room-mean sub-calls against room documents (``r undefined`` with none)."""
    r = next(
        (s.pearson for s in live.size_correlations if s.arm == label and s.x == "room_documents"),
        None,
    )
    rtext = "r undefined" if r is None or r.value is None else f"r = {r.value:.2f}"
    return f"{names.get(label, label)} · depth {depth} · {rtext}"


def room_frame(arms: Arms, live: LiveComparison, names: dict[str, str]) -> pd.DataFrame:
    """The headline metric (pass rate) per room and arm: ``room, documents`` and one column
    per arm with its room mean (the report's ``ArmMetric.room_means``), in room order."""
    rooms = sorted(arms.rooms.values(), key=lambda r: (r.n_documents, r.label))
    cols: dict[str, dict[str, float]] = {}
    for arm, metrics in live.per_arm.items():
        m = next((x for x in metrics if x.metric == "pass_rate"), None)
        cols[names.get(arm, arm)] = m.room_means if m is not None else {}
    return pd.DataFrame(
        [
            {"room": r.label, "documents": r.n_documents}
            | {arm: means.get(r.label, float("nan")) for arm, means in cols.items()}
            for r in rooms
        ]
    )


def _episodes(arms: Arms, names: dict[str, str], rooms: set[str], ids: set[str]) -> None:
    """The episodes of the selected rooms (room labels) or points (episode ids), with links
    to their traces."""
    frame = episode_links(arms, names, rooms=rooms, episode_ids=ids)
    st.markdown(f"**Episodes behind the selection** ({len(frame)})")
    st.dataframe(
        frame,
        hide_index=True,
        width="stretch",
        column_config={
            "trace": st.column_config.LinkColumn("trace", display_text="open trace"),
            "pass rate": st.column_config.NumberColumn(format="percent"),
            "coverage": st.column_config.NumberColumn(format="percent"),
        },
    )


def _selected_points(event: Any, name: str) -> set[str]:
    try:
        picked = event.selection[name]
    except (AttributeError, KeyError, TypeError):
        return set()
    return {str(p.get("episode_id")) for p in picked or [] if p.get("episode_id")}


def _scatter(
    pts: pd.DataFrame, x: alt.X, y: str, legend: dict[str, str], order: list[str], name: str
) -> Any:
    pick = alt.selection_point(name=name, fields=["episode_id"], on="click")
    pts = pts.assign(arm=pts["run"].map(legend))
    domain = [legend[o] for o in order]
    base = alt.Chart(pts)
    points = (
        base.mark_point(size=90, filled=True, opacity=0.75)
        .encode(
            x=x,
            y=alt.Y(y),
            color=alt.Color("arm:N", scale=alt.Scale(domain=domain, scheme="set1"), title="arm"),
            shape=alt.Shape("arm:N", scale=alt.Scale(domain=domain, range=MARKERS[: len(domain)])),
            tooltip=["arm", "episode_id", "room_id", x.shorthand, y],
        )
        .add_params(pick)
    )
    fit = (
        base.transform_regression(x.shorthand, y, groupby=["arm"])
        .mark_line(strokeDash=[4, 2])
        .encode(
            x=x, y=alt.Y(y), color=alt.Color("arm:N", scale=alt.Scale(domain=domain, scheme="set1"))
        )
    )
    return st.altair_chart(
        (points + fit).properties(height=380),
        width="stretch",
        on_select="rerun",
        key=f"compare_{name}",
    )


def _headlines(live: LiveComparison, names: dict[str, str]) -> None:
    if not live.comparisons:
        st.caption("One run picked: its means below (pick two to see changes).")
        return
    cols = st.columns(min(len(live.comparisons), 3))
    for i, comp in enumerate(live.comparisons):
        h = headline(comp, "pass_rate", names)
        if h is None:
            continue
        with cols[i % len(cols)].container(border=True):
            st.markdown(f"**pass rate · {h.title}**")
            st.markdown(h.detail)


def _live(
    ws: Workspace, views: list[RunView], settings: LiveSettings, names: dict[str, str]
) -> None:
    try:
        with st.spinner("computing the report's sections over the picked runs..."):
            arms = live_arms(views, settings)
            live = live_comparison(views, settings)
    except (ValueError, FileNotFoundError) as exc:
        st.error(f"cannot compare these runs: {exc}")
        return
    _headlines(live, names)
    st.caption(
        "means of room means (each room weighs the same) with t intervals over rooms; "
        "B - A paired over the rooms both runs ran; differences of shares in percentage "
        "points; as `rlmdistill report` computes them"
    )
    st.subheader("Behaviour shift (each run against the first)")
    if live.comparisons:
        st.dataframe(
            readable_comparison_frame(live.comparisons, names), hide_index=True, width="stretch"
        )
        with st.expander("Full-precision numbers (as report.json)"):
            table = comparison_frame(live.comparisons)
            st.dataframe(
                table, hide_index=True, width="stretch", column_config=number_format(table)
            )
    per_arm = arm_frame(live.per_arm)
    with st.expander("Means per run (every metric of the report)", expanded=not live.comparisons):
        st.dataframe(
            per_arm, hide_index=True, width="stretch", column_config=number_format(per_arm)
        )
    st.markdown("**Pass rate per room** (select rooms to see their episodes)")
    rooms = room_frame(arms, live, names)
    share_cols = {
        c: st.column_config.NumberColumn(format="percent")
        for c in rooms.columns
        if c not in ("room", "documents")
    }
    picked = st.dataframe(
        rooms,
        hide_index=True,
        width="stretch",
        column_config=share_cols,
        on_select="rerun",
        selection_mode="multi-row",
        key="compare_rooms",
    )
    rows = list(getattr(getattr(picked, "selection", None), "rows", []) or [])
    chosen_rooms = {str(rooms.iloc[i]["room"]) for i in rows}
    episodes = episode_points(arms)
    order = list(arms.rows)
    depth = {a.label: a.depth for a in arms.arms}
    legend = {label: _legend(label, depth[label], live, names) for label in order}
    left, right = st.columns(2)
    ids: set[str] = set()
    with left:
        st.markdown("**Sub-calls vs room size (documents)**: dashed = least-squares fit")
        ev = _scatter(
            episodes,
            alt.X("room_documents", title="documents in the room"),
            "n_sub_calls",
            legend,
            order,
            "size",
        )
        ids |= _selected_points(ev, "size")
        st.caption("r: Pearson of room-mean sub-calls against room documents (the report's)")
    with right:
        st.markdown("**Pass rate vs coverage (one point per episode)**")
        pts = episodes.dropna(subset=["coverage", "pass_rate"])
        pts = pts[pts["coverage"] > 0]  # a log axis: coverage 0 is left off, as in the report
        if pts.empty:
            st.caption("No episode has both a pass rate and a coverage > 0.")
        else:
            ev = _scatter(
                pts,
                alt.X("coverage", scale=alt.Scale(type="log")),
                "pass_rate",
                legend,
                order,
                "cov",
            )
            ids |= _selected_points(ev, "cov")
    if chosen_rooms or ids:
        _episodes(arms, names, chosen_rooms, ids)
    else:
        st.caption("Select table rows or click points to list their episodes, with trace links.")


def render(ws: Workspace) -> None:
    """Render the Compare page."""
    roles = roles_of(ws)
    run_dirs = pick_runs(
        ws, "compare_runs", default=lambda names, r: compare_default(ws.runs, names, r)
    )
    names = report_names(ws, roles)
    if len(run_dirs) < 1:
        st.info("Pick at least one run (two to see changes).")
    else:
        views = [data.run_view(rd) for rd in run_dirs]
        settings = live_settings(views, "compare")
        _live(ws, views, settings, names)
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
            st.dataframe(
                readable_comparison_frame(report.comparisons), hide_index=True, width="stretch"
            )
            with st.expander("Full-precision numbers (report.json)"):
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
