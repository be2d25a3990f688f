"""Runs page: every run of the workspace with its config, status counts, headline metrics and
lineage, then one run's episodes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from rlmdistill.dashboard import data
from rlmdistill.dashboard.data import Workspace
from rlmdistill.dashboard.widgets import fmt_num, fmt_pct, pick_run


def runs_frame(ws: Workspace) -> pd.DataFrame:
    """One row per run: name, run id, root, sub, depth, rooms, episodes done/planned, status
    counts, mean coverage, mean pass rate per grader, mean sub-calls and turns."""
    rows: list[dict[str, object]] = []
    for run_dir in data.list_runs(ws):
        try:
            o = data.run_overview(run_dir)
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


def _lineage(ws: Workspace, run_dir: Path) -> None:
    """Show a lineage file (``<run>/lineage.json`` or ``DIR/lineage.json``) when one exists."""
    for path in (run_dir / "lineage.json", ws.root / "lineage.json"):
        lineage = data.load_json(path)
        if lineage is not None:
            with st.expander(f"Lineage ({path.relative_to(ws.root)})"):
                st.json(lineage)
            return
    st.caption("No lineage file for this run.")


def render(ws: Workspace) -> None:
    """Render the Runs page."""
    table = runs_frame(ws)
    if table.empty:
        st.info(f"No runs in `{ws.runs}`.")
        return
    st.subheader(f"{len(table)} run(s)")
    st.dataframe(table, hide_index=True, width="stretch")
    run_dir = pick_run(ws, "runs_run")
    if run_dir is None:
        return
    o = data.run_overview(run_dir)
    cols = st.columns(5)
    cols[0].metric("episodes", f"{o.n_episodes}/{o.n_planned}")
    cols[1].metric("mean coverage", fmt_pct(o.mean_coverage))
    cols[2].metric("mean sub-calls", fmt_num(o.mean_sub_calls, 1))
    cols[3].metric("mean turns", fmt_num(o.mean_turns, 1))
    for g, v in list(o.mean_pass_rate.items())[:1]:
        cols[4].metric(f"pass rate ({g})", fmt_pct(v))
    left, right = st.columns([1, 2])
    with left:
        st.markdown("**Episodes by status**")
        counts = pd.DataFrame(
            sorted(o.status_counts.items(), key=lambda kv: -kv[1]), columns=["status", "episodes"]
        )
        st.dataframe(counts, hide_index=True)
    with right:
        manifest = data.run_manifest(run_dir)
        with st.expander("Config (run.json)"):
            st.json(manifest.config)
        st.caption(
            f"created {manifest.created_at:%Y-%m-%d %H:%M} UTC · commit "
            f"{(manifest.git_commit or 'unknown')[:10]}{' (dirty)' if manifest.git_dirty else ''}"
        )
        _lineage(ws, run_dir)
    st.markdown("**Episodes**")
    st.dataframe(
        data.run_table(run_dir),
        hide_index=True,
        width="stretch",
        column_config={"coverage": st.column_config.ProgressColumn(min_value=0, max_value=1)},
    )
