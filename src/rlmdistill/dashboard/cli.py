"""``rlmdistill dashboard [--workspace DIR] [--port P]``: serve the Streamlit dashboard.

:func:`dashboard_main` runs ``python -m streamlit run <app.py> -- --workspace DIR`` (the
workspace also goes in ``RLMDISTILL_WORKSPACE``) under :func:`run_child`, which ends the
server with the command: SIGTERM, SIGINT and SIGHUP are forwarded to it, and on Linux the
server is also sent SIGTERM when the command dies without a chance to forward (SIGKILL).
:func:`register` adds the typer command to an app.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType

import typer
from pydantic import BaseModel, ConfigDict

from rlmdistill.cliconfig import config_command
from rlmdistill.dashboard import ENV_WORKSPACE

__all__ = [
    "APP_PATH",
    "FORWARDED_SIGNALS",
    "DashboardOptions",
    "dashboard_command",
    "dashboard_main",
    "register",
    "run_child",
]

FORWARDED_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""Signals :func:`run_child` passes on to the child's process group."""

STOP_GRACE_S = 10.0
"""Seconds a child is given to exit after SIGTERM when the parent leaves early, then SIGKILL."""

APP_PATH = Path(__file__).with_name("app.py")
"""The Streamlit entry script."""


def dashboard_command(
    workspace: Path, port: int, headless: bool, address: str | None = None
) -> list[str]:
    """The ``streamlit run`` argv for a workspace (usage statistics off; file watching off,
    since the app is installed code, not a script being edited; the toolbar in ``viewer``
    mode, so no "Deploy" button)."""
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP_PATH),
        "--server.port",
        str(port),
        "--server.headless",
        "true" if headless else "false",
        "--server.fileWatcherType",
        "none",
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "viewer",
    ]
    if address is not None:
        cmd += ["--server.address", address]
    return [*cmd, "--", "--workspace", str(workspace)]


def dashboard_main(
    workspace: Path, port: int = 8501, headless: bool = False, address: str | None = None
) -> int:
    """Serve the dashboard over ``workspace`` until interrupted; returns streamlit's exit
    status (2, with a message on stderr, when ``workspace`` is not a folder)."""
    ws = Path(workspace).expanduser().resolve()
    if not ws.is_dir():
        typer.echo(f"error: workspace {workspace} is not a folder", err=True)
        return 2
    env = {**os.environ, ENV_WORKSPACE: str(ws)}
    return run_child(dashboard_command(ws, port, headless, address), env)


def _die_with_parent(parent_pid: int) -> None:
    """In the forked child before exec: ask Linux to send SIGTERM when the parent dies
    (``prctl(PR_SET_PDEATHSIG)``); exit at once if the parent is already gone."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1  # <linux/prctl.h>
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died between fork and prctl
        os._exit(1)


def run_child(cmd: list[str], env: dict[str, str]) -> int:
    """Run ``cmd`` as a child that never outlives this process; return its exit status.

    The child runs in its own session (process group), so a terminal's Ctrl-C reaches it once,
    through us: each of :data:`FORWARDED_SIGNALS` received here is sent to the child's group.
    On Linux the child also gets SIGTERM from the kernel when this process dies unannounced
    (SIGKILL, a crash). If this function leaves while the child still runs (an exception),
    the group gets SIGTERM, then SIGKILL after :data:`STOP_GRACE_S`.

    Returns:
        The child's exit code; ``128 + N`` when signal ``N`` ended it (shell convention).
    """
    parent = os.getpid()
    procs: list[subprocess.Popen[bytes]] = []
    pending: list[int] = []  # signals received before the child existed

    def forward(signum: int, _frame: FrameType | None) -> None:
        if not procs:
            pending.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(procs[0].pid, signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED_SIGNALS}
    try:
        proc = subprocess.Popen(
            cmd, env=env, start_new_session=True, preexec_fn=lambda: _die_with_parent(parent)
        )
    except BaseException:
        for s, handler in previous.items():
            signal.signal(s, handler)
        raise
    procs.append(proc)
    for signum in pending:
        forward(signum, None)
    try:
        code = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return 128 - code if code < 0 else code


class DashboardOptions(BaseModel):
    """``rlmdistill dashboard``: which workspace, served where."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    workspace: Path = Path(".")
    """Workspace folder holding runs/, datasets/, adapters/, reports/."""
    port: int = 8501
    """Port to serve on."""
    headless: bool = False
    """Do not open a browser (servers, CI)."""
    address: str | None = None
    """Address to bind (default: streamlit's)."""


def register(app: typer.Typer) -> None:
    """Add the ``dashboard`` command to ``app``."""

    @config_command(app, "dashboard", config_flag=None)
    def dashboard(options: DashboardOptions) -> None:
        """Serve the Streamlit dashboard over a workspace (runs, traces, filters, SFT jobs)."""
        raise typer.Exit(
            dashboard_main(options.workspace, options.port, options.headless, options.address)
        )
