"""Small widgets shared by the dashboard pages (run pickers, number formatting)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from rlmdistill.dashboard.data import Workspace, list_runs


def fmt_pct(x: float | None) -> str:
    """``0.4567 -> "45.7%"``; ``None``/NaN -> ``"n/a"`` (never a made-up number, case A1)."""
    if x is None or x != x:
        return "n/a"
    return f"{x:.1%}"


def fmt_num(x: float | None, digits: int = 2) -> str:
    """A number with ``digits`` decimals; ``None``/NaN -> ``"n/a"``."""
    if x is None or x != x:
        return "n/a"
    return f"{x:.{digits}f}"


def pick_run(ws: Workspace, key: str, label: str = "Run") -> Path | None:
    """A select box over the workspace's runs; the choice follows the ``run`` URL parameter.

    Returns the run directory, or ``None`` (with an info box) when the workspace has no run.
    """
    runs = list_runs(ws)
    if not runs:
        st.info(f"No runs in `{ws.runs}` (a run is a folder with run.json, made by `collect`).")
        return None
    names = [r.name for r in runs]
    if key not in st.session_state:
        wanted = st.query_params.get("run")
        st.session_state[key] = wanted if wanted in names else names[0]
    name = st.selectbox(label, names, key=key)
    if st.query_params.get("run") != name:
        st.query_params["run"] = name
    return ws.runs / str(name)


def pick_runs(ws: Workspace, key: str, label: str = "Runs", default_n: int = 2) -> list[Path]:
    """A multiselect over the workspace's runs (first ``default_n`` selected at start)."""
    runs = list_runs(ws)
    names = [r.name for r in runs]
    chosen = st.multiselect(label, names, default=names[:default_n], key=key)
    return [ws.runs / n for n in chosen]
