"""Small widgets shared by the dashboard pages (run pickers labelled train/eval, number
formatting, the settings of the live analysis tables, settings kept across pages)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import streamlit as st

from rlmdistill.dashboard.data import Workspace, list_runs
from rlmdistill.dashboard.live import Arms, LiveSettings
from rlmdistill.dashboard.roles import WorkspaceRoles, role_label, workspace_roles
from rlmdistill.dashboard.runview import RunView

if TYPE_CHECKING:
    import pandas as pd

KEEP_PREFIX = "keep:"
"""Session-state prefix of the copy :func:`keep` holds of a widget's value."""


def keep(key: str, default: Any) -> None:
    """Give the widget ``key`` its value from before a visit to another page, else
    ``default``; call before drawing the widget, drawn with no ``value``/``default`` of its own,
    and call :func:`remember` after drawing.

    Streamlit forgets the state of every widget that a rerun did not draw (the other pages'
    widgets), so a page's settings are copied to a session key that is not a widget's
    (``keep:<key>``) and put back from it."""
    if key not in st.session_state:
        st.session_state[key] = st.session_state.get(KEEP_PREFIX + key, default)


def remember(keys: Sequence[str]) -> None:
    """Copy each drawn widget's value of ``keys`` to its ``keep:<key>`` session key."""
    for key in keys:
        if key in st.session_state:
            st.session_state[KEEP_PREFIX + key] = st.session_state[key]


def roles_of(ws: Workspace) -> WorkspaceRoles:
    """The workspace's run roles and held-out rooms (:mod:`rlmdistill.dashboard.roles`)."""
    return workspace_roles(ws.root, [r.name for r in list_runs(ws)])


def fmt_points(x: float | None, digits: int = 1) -> str:
    """A difference of two shares in percentage points: ``0.09 -> "+9.0 points"``."""
    if x is None or x != x:
        return "n/a"
    return f"{x * 100:+.{digits}f} points"


def fmt_p(p: float | None) -> str:
    """A p-value for people: ``"p = 0.002"``, ``"p < 0.001"``; ``None`` -> ``"p undefined"``."""
    if p is None or p != p:
        return "p undefined"
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def fmt_pct(x: float | None) -> str:
    """``0.4567 -> "45.7%"``; ``None``/NaN -> ``"n/a"`` (never a made-up number)."""
    if x is None or x != x:
        return "n/a"
    return f"{x:.1%}"


def fmt_num(x: float | None, digits: int = 2) -> str:
    """A number with ``digits`` decimals; ``None``/NaN -> ``"n/a"``."""
    if x is None or x != x:
        return "n/a"
    return f"{x:.{digits}f}"


def trace_link(run: str, episode_id: str) -> str:
    """The Trace viewer's deep link of one episode: ``?page=trace&run=<run>&episode=<id>``
    (URL-encoded; relative, so it opens on the same server)."""
    from urllib.parse import urlencode

    return "?" + urlencode({"page": "trace", "run": run, "episode": episode_id})


EPISODE_LINK_COLUMNS = ["arm", "run", "room", "episode", "status", "pass rate", "coverage", "sub-calls", "trace"]  # fmt: skip
"""Columns of :func:`episode_links`."""


def episode_links(
    arms: Arms,
    names: dict[str, str] | None = None,
    rooms: set[str] | None = None,
    episode_ids: set[str] | None = None,
) -> pd.DataFrame:
    """The episodes behind a selection: those of ``arms`` in the rooms labelled ``rooms`` or
    with an id in ``episode_ids`` (either may be empty), one row each with its arm (shown
    through ``names``), run folder, room, status, pass rate, coverage, sub-calls and the
    :func:`trace_link` of its trace. Arms are labelled by run folder name (as
    :func:`~rlmdistill.dashboard.live.live_arms` labels them)."""
    import pandas as pd

    names = names or {}
    rooms, episode_ids = rooms or set(), episode_ids or set()
    by_hash = {h: r.label for h, r in arms.rooms.items()}
    rows = [
        {
            "arm": names.get(run, run),
            "run": run,
            "room": by_hash.get(r.room_hash, r.room_id),
            "episode": r.episode_id,
            "status": r.status,
            "pass rate": r.pass_rate,
            "coverage": r.coverage,
            "sub-calls": r.n_sub_calls,
            "trace": trace_link(run, r.episode_id),
        }
        for run, rs in arms.rows.items()
        for r in rs
        if by_hash.get(r.room_hash, r.room_id) in rooms or r.episode_id in episode_ids
    ]
    return pd.DataFrame(rows, columns=EPISODE_LINK_COLUMNS)


def pick_run(ws: Workspace, key: str, label: str = "Run") -> Path | None:
    """A select box over the workspace's runs, each labelled train or eval when the loop
    recorded it; the choice follows the ``run`` URL parameter.

    Returns the run directory, or ``None`` (with an info box) when the workspace has no run.
    """
    runs = list_runs(ws)
    if not runs:
        st.info(
            f"No runs in `runs/` of workspace {ws.root.name} (a run is a folder with run.json, made by `collect`)."
        )
        return None
    names = [r.name for r in runs]
    if key not in st.session_state:
        wanted = st.query_params.get("run")
        st.session_state[key] = wanted if wanted in names else names[0]
    roles = roles_of(ws)
    name = st.selectbox(label, names, key=key, format_func=lambda n: role_label(n, roles))
    if st.query_params.get("run") != name:
        st.query_params["run"] = name
    return ws.runs / str(name)


def pick_runs(
    ws: Workspace,
    key: str,
    label: str = "Runs",
    default: Callable[[list[str], WorkspaceRoles], list[str]] | None = None,
) -> list[Path]:
    """A multiselect over the workspace's runs, each labelled train or eval when known.

    ``default(names, roles)`` gives the runs picked at start (default: the first two); the
    choice is kept across visits to other pages (:func:`keep`)."""
    names = [r.name for r in list_runs(ws)]
    roles = roles_of(ws)
    picked = default(names, roles) if default is not None else names[:2]
    keep(key, picked)
    st.session_state[key] = [n for n in st.session_state[key] if n in names]
    chosen = st.multiselect(label, names, key=key, format_func=lambda n: role_label(n, roles))
    remember([key])
    return [ws.runs / n for n in chosen]


def runs_with_role(role: str) -> Callable[[list[str], WorkspaceRoles], list[str]]:
    """A :func:`pick_runs` default: the runs of ``role`` (``train``/``eval``); when the
    workspace records no role, every run."""

    def pick(names: list[str], roles: WorkspaceRoles) -> list[str]:
        if not roles.roles:
            return list(names)
        return [n for n in names if roles.roles.get(n) == role]

    return pick


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
