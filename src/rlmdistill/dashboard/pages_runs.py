"""Runs page: every run of the workspace with its config, status counts, headline metrics and
lineage, then one run's episodes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from rlmdistill.dashboard import data
from rlmdistill.dashboard.data import Workspace
from rlmdistill.dashboard.widgets import fmt_num, fmt_pct, pick_run


def runs_frame(ws: Workspace, views: dict[Path, data.RunView] | None = None) -> pd.DataFrame:
    """One row per run: name, run id, root, sub, depth, rooms, episodes done/planned, status
    counts, and means of room means (as in the report) of coverage, pass rate per grader,
    sub-calls and turns. A run that cannot be read gets a row with its ``error``. ``views``: the
    rerun's views by run folder (computed here for the runs it lacks)."""
    rows: list[dict[str, object]] = []
    views = views or {}
    for run_dir in data.list_runs(ws):
        try:
            o = data.run_overview(views.get(run_dir) or run_dir)
        except ValueError as exc:  # a corrupt run must not hide the others
            rows.append({"run": run_dir.name, "error": str(exc)})
            continue
        row: dict[str, object] = {
            "run": run_dir.name,
            "run_id": o.run_id,
            "root": o.root,
            "sub": o.sub,
            "depth": o.depth,
            "rooms": ", ".join(o.rooms),
            "episodes": f"{o.n_episodes}/{o.n_planned}",
            "status": ", ".join(f"{k} {v}" for k, v in sorted(o.status_counts.items())),
            "coverage": fmt_pct(o.mean_coverage),
            "sub-calls": fmt_num(o.mean_sub_calls, 1),
            "turns": fmt_num(o.mean_turns, 1),
        }
        for g, v in o.mean_pass_rate.items():
            row[f"pass rate ({g})"] = fmt_pct(v)
        rows.append(row)
    return pd.DataFrame(rows)


def lineage_of(ws: Workspace, run_dir: Path) -> tuple[list[str], list[str]] | None:
    """``(made_from, used_by)`` of a run in the workspace lineage (``DIR/lineage.jsonl``,
    written by ``rlmdistill loop``): the artefacts the run was made from (e.g. the adapter of
    its root) and those made from it (datasets, reports), as workspace-relative paths.
    ``None`` when the workspace has no lineage file."""
    from rlmdistill.traces.lineage import latest_records, lineage_path

    if not lineage_path(ws.root).exists():
        return None
    latest = latest_records(ws.root)
    me = str(run_dir.relative_to(ws.root)) if run_dir.is_relative_to(ws.root) else str(run_dir)
    rec = latest.get(me)
    made_from = list(rec.inputs) if rec is not None else []
    used_by = sorted(a for a, r in latest.items() if me in r.inputs)
    return made_from, used_by


def _lineage(ws: Workspace, run_dir: Path) -> None:
    """Show the run's place in the workspace lineage, when a lineage file exists."""
    found = lineage_of(ws, run_dir)
    if found is None:
        st.caption("No lineage file in this workspace (`rlmdistill loop` writes one).")
        return
    made_from, used_by = found
    st.markdown(
        "**Lineage** — made from: "
        + (", ".join(f"`{a}`" for a in made_from) or "nothing recorded")
        + " · used by: "
        + (", ".join(f"`{a}`" for a in used_by) or "nothing yet")
    )
    from rlmdistill.traces.lineage import render_tree

    with st.expander("Workspace lineage tree"):
        st.code(render_tree(ws.root), language="text")


def render(ws: Workspace) -> None:
    """Render the Runs page."""
    views = {rd: data.run_view(rd) for rd in data.list_runs(ws)}
    table = runs_frame(ws, views)
    if table.empty:
        st.info(f"No runs in `runs/` of workspace {ws.root.name}.")
        return
    st.subheader(f"{len(table)} run(s)")
    st.dataframe(table, hide_index=True, width="stretch")
    run_dir = pick_run(ws, "runs_run")
    if run_dir is None:
        return
    view = views.get(run_dir) or data.run_view(run_dir)
    head = st.container()
    left, right = st.columns([1, 2])
    try:
        o = data.run_overview(view)
    except ValueError as exc:  # e.g. an invalid task.json: named; the episodes still show
        head.error(str(exc))
    else:
        _headline(o, head, left)
    with right:
        manifest = view.manifest
        with st.expander("Config (run.json)"):
            st.json(manifest.config.model_dump(mode="json"))
        st.caption(
            f"created {manifest.created_at:%Y-%m-%d %H:%M} UTC · commit "
            f"{(manifest.git_commit or 'unknown')[:10]}{' (dirty)' if manifest.git_dirty else ''}"
        )
        _lineage(ws, run_dir)
    st.markdown("**Episodes**")
    st.dataframe(
        view.table(),
        hide_index=True,
        width="stretch",
        column_config={"coverage": st.column_config.ProgressColumn(min_value=0, max_value=1)},
    )


def _headline(o: data.RunOverview, head: DeltaGenerator, left: DeltaGenerator) -> None:
    """The run's headline metrics in ``head``, and its status counts in the ``left`` column."""
    head.caption("means of room means (each room weighs the same), as in the report")
    cols = head.columns(5)
    cols[0].metric("episodes", f"{o.n_episodes}/{o.n_planned}")
    cols[1].metric("mean coverage", fmt_pct(o.mean_coverage))
    cols[2].metric("mean sub-calls", fmt_num(o.mean_sub_calls, 1))
    cols[3].metric("mean turns", fmt_num(o.mean_turns, 1))
    for g, v in list(o.mean_pass_rate.items())[:1]:
        cols[4].metric(f"pass rate ({g})", fmt_pct(v))
    with left:
        st.markdown("**Episodes by status**")
        counts = pd.DataFrame(
            sorted(o.status_counts.items(), key=lambda kv: -kv[1]), columns=["status", "episodes"]
        )
        st.dataframe(counts, hide_index=True)
