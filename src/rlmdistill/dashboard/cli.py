"""``rlmdistill dashboard [--workspace DIR] [--port P]``: serve the Streamlit dashboard.

:func:`dashboard_main` runs ``python -m streamlit run <app.py> -- --workspace DIR`` (the
workspace also goes in ``RLMDISTILL_WORKSPACE``) and returns its exit status;
:func:`register` adds the typer command to an app.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from rlmdistill.dashboard import ENV_WORKSPACE

__all__ = ["APP_PATH", "dashboard_command", "dashboard_main", "register"]

APP_PATH = Path(__file__).with_name("app.py")
"""The Streamlit entry script."""


def dashboard_command(
    workspace: Path, port: int, headless: bool, address: str | None = None
) -> list[str]:
    """The ``streamlit run`` argv for a workspace (usage statistics off; file watching off,
    since the app is installed code, not a script being edited)."""
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
    try:
        return subprocess.call(dashboard_command(ws, port, headless, address), env=env)
    except KeyboardInterrupt:
        return 130


def register(app: typer.Typer) -> None:
    """Add the ``dashboard`` command to ``app``."""

    @app.command("dashboard")
    def dashboard(
        workspace: Annotated[
            Path,
            typer.Option(help="Workspace folder holding runs/, datasets/, adapters/, reports/."),
        ] = Path("."),
        port: Annotated[int, typer.Option(help="Port to serve on.")] = 8501,
        headless: Annotated[
            bool, typer.Option(help="Do not open a browser (servers, CI).")
        ] = False,
        address: Annotated[
            str | None, typer.Option(help="Address to bind (default: streamlit's).")
        ] = None,
    ) -> None:
        """Serve the Streamlit dashboard over a workspace (runs, traces, filters, SFT jobs)."""
        raise typer.Exit(dashboard_main(workspace, port, headless, address))
