"""Small widgets shared by the dashboard pages (run pickers, number formatting, the settings
of the live analysis tables)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from rlmdistill.dashboard.data import Workspace, list_runs
from rlmdistill.dashboard.live import LiveSettings
from rlmdistill.dashboard.runview import RunView


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


def live_settings(views: list[RunView], key: str) -> LiveSettings:
    """Widgets choosing how the live tables are computed (:class:`LiveSettings`): the grader
    (among those of the picked runs), whether to read trajectories for the trajectory
    metrics, and the bootstrap of the correlation changes (resamples, seed; ``rlmdistill
    report``'s defaults)."""
    graders = sorted({g for v in views for g in v.graders})
    grader = st.selectbox("Grader", graders, key=f"{key}_grader") if graders else None
    defaults = LiveSettings()
    with st.expander("Settings (as `rlmdistill report`)"):
        trajectories = st.checkbox(
            "trajectory metrics (reads every trajectory file)",
            value=defaults.trajectories,
            key=f"{key}_trajectories",
        )
        c = st.columns(2)
        resamples = c[0].number_input(
            "bootstrap resamples (correlation changes)",
            min_value=100,
            value=defaults.resamples,
            key=f"{key}_resamples",
        )
        seed = c[1].number_input("seed", min_value=0, value=defaults.seed, key=f"{key}_seed")
    return LiveSettings(
        grader=None if grader is None else str(grader),
        trajectories=bool(trajectories),
        resamples=int(resamples),
        seed=int(seed),
        confidence=defaults.confidence,
    )
