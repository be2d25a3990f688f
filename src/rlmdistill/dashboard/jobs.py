"""Background CLI jobs started from the dashboard (the SFT jobs page).

A job is one ``rlmdistill <args>`` command run as a subprocess of the CLI (``python -m
rlmdistill.cli``), so a job started here does exactly what the same command does in a shell.
It runs under a small wrapper (``python -m rlmdistill.dashboard.jobs RC_FILE -- CMD...``) that
writes the command's exit status to a file when it ends, so any later page load (another
browser tab, a restarted server) can tell running from finished without holding the process.

Files, one pair per job, under ``DIR/.dashboard/jobs/``::

    <name>.json   JobRecord: name, command, pid, started_at, log and rc file paths
    <name>.log    the command's stdout and stderr, interleaved, as it runs
    <name>.rc     the exit status, written by the wrapper when the command ends
"""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["JobError", "JobRecord", "JobState", "job_state", "list_jobs", "read_log", "start_job"]

JobState = Literal["running", "succeeded", "failed", "lost"]
"""``lost``: no exit status was written and the process is gone (killed, machine restarted)."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class JobError(ValueError):
    """A job cannot be started (bad name, a job of that name is still running)."""


class JobRecord(BaseModel):
    """``<name>.json``: one dashboard job."""

    model_config = ConfigDict(extra="forbid")

    name: str
    command: list[str]
    """The full argv run (``python -m rlmdistill.cli ...``)."""
    cwd: str
    pid: int
    """Process id of the wrapper (the command is its child)."""
    started_at: dt.datetime
    log: str
    rc_file: str
    out_dir: str | None = None
    """The folder the job writes (e.g. ``adapters/NAME`` for SFT), relative to ``cwd``."""


def jobs_dir(workspace: Path) -> Path:
    """``DIR/.dashboard/jobs``."""
    return Path(workspace) / ".dashboard" / "jobs"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # our own child that ended: reap it (a zombie still answers kill(pid, 0))
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        stat = Path(f"/proc/{pid}/stat")
        return not (stat.exists() and ") Z " in stat.read_text())


def job_state(job: JobRecord) -> tuple[JobState, int | None]:
    """``(state, exit status)`` of a job; exit status ``None`` while running or when lost."""
    rc_path = Path(job.rc_file)
    if rc_path.exists():
        text = rc_path.read_text().strip()
        if text:
            rc = int(text)
            return ("succeeded" if rc == 0 else "failed"), rc
    return ("running" if _alive(job.pid) else "lost"), None


def start_job(
    workspace: Path,
    name: str,
    cli_args: list[str],
    *,
    module: str = "rlmdistill.cli",
    out_dir: str | None = None,
) -> JobRecord:
    """Start ``python -m <module> <cli_args>`` in the background (by default the ``rlmdistill``
    CLI; ``rlmdistill.sft`` is ``rlmdistill sft``), with the workspace as working folder.

    Raises :class:`JobError` when ``name`` is not a plain file name or a job of that name is
    still running. A finished job of the same name is replaced (its log is overwritten).
    """
    if not _NAME.match(name):
        raise JobError(f"job name {name!r}: use letters, digits, '.', '_' or '-' (max 100)")
    folder = jobs_dir(workspace)
    folder.mkdir(parents=True, exist_ok=True)
    record_path = folder / f"{name}.json"
    if record_path.exists():
        old = JobRecord.model_validate_json(record_path.read_text(encoding="utf-8"))
        if job_state(old)[0] == "running":
            raise JobError(f"job {name!r} is still running (pid {old.pid})")
    log, rc_file = folder / f"{name}.log", folder / f"{name}.rc"
    rc_file.unlink(missing_ok=True)
    command = [sys.executable, "-m", module, *cli_args]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rlmdistill.dashboard.jobs", str(rc_file), "--", *command],
            cwd=workspace,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    job = JobRecord(
        name=name,
        command=command,
        cwd=str(workspace),
        pid=proc.pid,
        started_at=dt.datetime.now(dt.UTC),
        log=str(log),
        rc_file=str(rc_file),
        out_dir=out_dir,
    )
    record_path.write_text(job.model_dump_json(indent=2), encoding="utf-8")
    return job


def list_jobs(workspace: Path) -> list[JobRecord]:
    """Every job record of the workspace, newest first (unreadable records are skipped)."""
    out = []
    for p in jobs_dir(workspace).glob("*.json"):
        try:
            out.append(JobRecord.model_validate_json(p.read_text(encoding="utf-8")))
        except ValueError:
            continue
    return sorted(out, key=lambda j: j.started_at, reverse=True)


def read_log(job: JobRecord, tail_chars: int = 20_000) -> str:
    """The last ``tail_chars`` characters of a job's log ('' before it wrote anything)."""
    path = Path(job.log)
    if not path.exists():
        return ""
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - 4 * tail_chars))
        text = f.read().decode("utf-8", errors="replace")
    return text[-tail_chars:]


def _wrapper(argv: list[str]) -> int:
    """``jobs RC_FILE -- CMD...``: run CMD, write its exit status to RC_FILE, return it."""
    if len(argv) < 3 or argv[1] != "--":
        raise SystemExit("usage: python -m rlmdistill.dashboard.jobs RC_FILE -- CMD...")
    rc_file = Path(argv[0])
    try:
        rc = subprocess.call(argv[2:])
    except OSError as exc:  # the command could not be started at all
        sys.stderr.write(f"cannot start {argv[2]!r}: {exc}\n")
        rc = 127
    tmp = rc_file.with_suffix(".rc.tmp")
    tmp.write_text(f"{rc}\n")
    tmp.replace(rc_file)
    return rc


if __name__ == "__main__":
    raise SystemExit(_wrapper(sys.argv[1:]))
