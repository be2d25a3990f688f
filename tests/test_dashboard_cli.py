"""``rlmdistill dashboard`` never leaves its Streamlit server behind (issue #25 item 4).

The real command runs as a subprocess over an empty workspace, headless on a loopback port;
once the server answers, the command is stopped (SIGTERM, or SIGKILL which it cannot catch)
and every process it started must be gone. Waits poll for exits with generous bounds (a busy
2-core machine); nothing asserts how fast.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
STARTUP_BOUND_S = 180.0
"""Generous bound for Streamlit to start answering on a busy machine."""
EXIT_BOUND_S = 60.0
"""Generous bound for the processes to exit once stopped."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_dashboard(workspace: Path) -> tuple[subprocess.Popen[bytes], list[psutil.Process]]:
    """Start ``rlmdistill dashboard`` and wait until its server accepts a connection; return
    the command's process and the processes it started."""
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = [sys.executable, "-m", "rlmdistill.cli", "dashboard", "--workspace", str(workspace),
           "--port", str(port), "--headless", "--address", "127.0.0.1"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + STARTUP_BOUND_S
    while True:
        assert proc.poll() is None, f"dashboard exited early with {proc.returncode}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"dashboard did not answer on port {port}")
            time.sleep(0.5)
    children = psutil.Process(proc.pid).children(recursive=True)
    assert children, "the server runs as a child of the command"
    return proc, children


def _gone(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Processes of ``procs`` still alive after waiting up to :data:`EXIT_BOUND_S`."""
    _, alive = psutil.wait_procs(procs, timeout=EXIT_BOUND_S)
    return alive


def _kill(procs: list[psutil.Process]) -> None:
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()


def test_sigterm_to_the_dashboard_leaves_no_process_behind(tmp_path: Path) -> None:
    proc, children = _start_dashboard(tmp_path)
    try:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=EXIT_BOUND_S)
        alive = _gone(children)
    finally:  # never leave a server behind, even when the test fails
        _kill([*psutil.Process().children(recursive=True), *children])
    assert alive == [], f"left behind: {alive}"
    # the forwarded SIGTERM ends Streamlit; it exits 0 on SIGTERM, else 128 + 15
    assert code in (0, 128 + signal.SIGTERM), code


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_server_ends_when_the_dashboard_is_killed(tmp_path: Path) -> None:
    proc, children = _start_dashboard(tmp_path)
    try:
        proc.kill()  # SIGKILL: no handler runs, the kernel's parent-death signal must act
        proc.wait(timeout=EXIT_BOUND_S)
        alive = _gone(children)
    finally:  # never leave a server behind, even when the test fails
        _kill([*psutil.Process().children(recursive=True), *children])
    assert alive == [], f"left behind: {alive}"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_run_child_forwards_the_signal_and_reports_it_shell_style(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """A signal sent to the parent while the child runs is forwarded and ends the child, whose
    status comes back as 128 + N (SIGTERM 143, SIGINT 130: Python ends itself with SIGINT after
    KeyboardInterrupt; SIGHUP 129). The child writes a marker, then signals its parent, then
    would sleep 600 s; the parent's handlers are in place before the child starts, and the
    parent's own handlers are back afterwards."""
    from rlmdistill.dashboard.cli import run_child

    before = signal.getsignal(signum)
    marker = tmp_path / "started"
    script = (
        "import os, pathlib, time\n"
        f"pathlib.Path({str(marker)!r}).write_text('x')\n"
        f"os.kill(os.getppid(), {int(signum)})\n"
        "time.sleep(600)\n"
    )
    code = run_child([sys.executable, "-c", script], dict(os.environ))
    assert marker.exists()
    assert code == 128 + signum
    assert signal.getsignal(signum) == before
