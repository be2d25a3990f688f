"""Background CLI jobs started from the dashboard (the SFT jobs page).

A job is one ``rlmdistill <args>`` command run as a subprocess of the CLI (``python -m
rlmdistill.cli``), so a job started here does exactly what the same command does in a shell.
It runs under a small wrapper (``python -m rlmdistill.dashboard.jobs RC_FILE -- CMD...``) that
writes the command's exit status to a file when it ends, so any later page load (another
browser tab, a restarted server) can tell running from finished without holding the process.

A job may also run on a Ray cluster (:func:`submit_remote`, ``rlmdistill submit`` and the
SFT page's "Ray address"): the command goes through the head's Jobs API
(:mod:`rlmdistill.cluster.jobs`) and its record says where (``where``: the Jobs URL; ``local``
for the jobs above, and for records written before the field). The cluster holds such a job's
state and log; :func:`refresh` copies them into the same files.

Files, one set per job, under ``DIR/.dashboard/jobs/``::

    <name>.json      JobRecord: name, command, where, pid (local) or ray_job_id, started_at,
                     log and rc file paths
    <name>.log       the command's stdout and stderr, interleaved, as it runs (a Ray job's:
                     the Jobs API's log as of the last refresh)
    <name>.rc        the exit status, written by the wrapper when the command ends (a Ray job:
                     by the refresh that saw it end, when Ray knows the status)
    <name>.ray.json  RemoteStatus: a Ray job's last known status (Ray jobs only)
"""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from rlmdistill.cluster import jobs as ray_jobs

__all__ = [
    "LOCAL",
    "JobError",
    "JobRecord",
    "JobState",
    "RemoteStatus",
    "find_job",
    "follow_remote",
    "job_state",
    "list_jobs",
    "read_log",
    "refresh",
    "start_job",
    "stop_job",
    "submit_remote",
]

JobState = Literal["pending", "running", "succeeded", "failed", "stopped", "lost", "unknown"]
"""``lost``: no exit status was written and the process is gone (killed, machine restarted),
or the cluster no longer knows the Ray job; ``pending`` and ``stopped``: Ray jobs only (not
started yet; stopped on request); ``unknown``: a Ray job whose cluster has not answered yet."""

LOCAL = "local"
"""``JobRecord.where`` of a job run on this machine."""

_RAY_STATES: dict[str, JobState] = {
    "PENDING": "pending",
    "RUNNING": "running",
    "SUCCEEDED": "succeeded",
    "FAILED": "failed",
    "STOPPED": "stopped",
}

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
    """The folder the command runs in: the workspace (a Ray job with ``files="upload"``: its
    copy on the cluster, uploaded from here)."""
    pid: int | None = None
    """Process id of the wrapper (the command is its child); ``None`` for a Ray job."""
    started_at: dt.datetime
    log: str
    rc_file: str
    out_dir: str | None = None
    """The folder the job writes (e.g. ``adapters/NAME`` for SFT), relative to ``cwd``."""
    where: str = LOCAL
    """Where the job runs: ``local`` (this machine; records without the field) or the Ray
    Jobs URL of the cluster's head (``http://HOST:8265``)."""
    ray_job_id: str | None = None
    """The Ray job's submission id (``ray job status ID``); ``None`` for a local job."""
    files: ray_jobs.FileMode | None = None
    """A Ray job's access to the workspace: ``shared`` (it ran in this workspace's path on the
    head, so its outputs are here) or ``upload`` (in a copy; its outputs stay there)."""

    @property
    def remote(self) -> bool:
        """Whether the job runs on a Ray cluster."""
        return self.where != LOCAL


class RemoteStatus(BaseModel):
    """``<name>.ray.json``: a Ray job's status as the cluster last told it."""

    model_config = ConfigDict(extra="forbid")

    status: str
    """Ray's ``JobStatus`` (``PENDING`` ... ``STOPPED``), or ``LOST`` when the cluster no
    longer knows the job."""
    message: str | None = None
    """Ray's one-line explanation (``Job finished successfully.``, why it failed)."""
    exit_code: int | None = None
    """The entrypoint's exit status once it ended (``None`` before, or when Ray does not know
    it)."""
    synced_at: dt.datetime
    """When this was read from the cluster (UTC)."""


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


def _status_path(job: JobRecord) -> Path:
    return Path(job.rc_file).with_suffix(".ray.json")


def read_remote_status(job: JobRecord) -> RemoteStatus | None:
    """A Ray job's last synced :class:`RemoteStatus` (``None``: never synced, or unreadable)."""
    try:
        return RemoteStatus.model_validate_json(_status_path(job).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def job_state(job: JobRecord) -> tuple[JobState, int | None]:
    """``(state, exit status)`` of a job; exit status ``None`` while running or when lost.

    A Ray job's state is the one its files hold (:func:`refresh` updates them); no request
    is made here."""
    if job.remote:
        st = read_remote_status(job)
        if st is None:
            return "unknown", None
        return _RAY_STATES.get(st.status, "lost"), st.exit_code
    rc_path = Path(job.rc_file)
    if rc_path.exists():
        text = rc_path.read_text().strip()
        if text:
            rc = int(text)
            return ("succeeded" if rc == 0 else "failed"), rc
    return ("running" if job.pid is not None and _alive(job.pid) else "lost"), None


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
    record_path = _check_name(workspace, name)
    folder = record_path.parent
    folder.mkdir(parents=True, exist_ok=True)
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


def _check_name(workspace: Path, name: str) -> Path:
    """The record path of a new job ``name``; :class:`JobError` for a bad name or a job of
    that name that is still running (or, on a cluster, may be)."""
    if not _NAME.match(name):
        raise JobError(f"job name {name!r}: use letters, digits, '.', '_' or '-' (max 100)")
    record_path = jobs_dir(workspace) / f"{name}.json"
    if record_path.exists():
        old = JobRecord.model_validate_json(record_path.read_text(encoding="utf-8"))
        if job_state(old)[0] in ("running", "pending", "unknown"):
            raise JobError(f"job {name!r} is still running ({_where_text(old)})")
    return record_path


def _where_text(job: JobRecord) -> str:
    return f"Ray job {job.ray_job_id} at {job.where}" if job.remote else f"pid {job.pid}"


def submit_remote(
    workspace: Path,
    name: str,
    address: str,
    cli_args: list[str],
    *,
    files: ray_jobs.FileMode = "shared",
    python: str = "python",
    ship_code: bool = True,
    out_dir: str | None = None,
) -> JobRecord:
    """Submit ``rlmdistill <cli_args>`` to the Ray cluster whose head's dashboard is
    ``address`` (``http://HOST:8265``) and record it as job ``name`` of ``workspace``.

    ``files="shared"``: the job runs in ``workspace``'s absolute path on the head (a shared
    filesystem, or the head on this machine), so paths in ``cli_args`` relative to the
    workspace work and its outputs land here; ``"upload"``: the workspace travels as the
    job's ``working_dir`` and its outputs stay in that copy on the cluster. ``python`` is
    the interpreter on the cluster; ``ship_code`` sends this machine's rlmdistill package
    along (:func:`rlmdistill.cluster.jobs.runtime_env`). The Ray submission id is
    ``<name>-<8 hex digits>`` (Ray never reuses one).

    Raises :class:`JobError` (bad name, a job of that name still running) and
    :class:`rlmdistill.cluster.jobs.RayJobsError` (no Ray job client, the head does not
    answer, the submit was refused); nothing is recorded then.
    """
    root = Path(workspace).resolve()
    record_path = _check_name(root, name)
    url = ray_jobs.jobs_address(address)
    cwd = str(root) if files == "shared" else None
    entry = ray_jobs.entrypoint(cli_args, python=python, cwd=cwd)
    env = ray_jobs.runtime_env(root, files=files, ship_code=ship_code)
    job_id = ray_jobs.submit(
        url,
        entry,
        env,
        submission_id=f"{name}-{uuid.uuid4().hex[:8]}",
        metadata={"rlmdistill_job": name, "workspace": str(root)},
    )
    folder = record_path.parent
    folder.mkdir(parents=True, exist_ok=True)
    log, rc_file = folder / f"{name}.log", folder / f"{name}.rc"
    rc_file.unlink(missing_ok=True)
    log.write_text("", encoding="utf-8")
    job = JobRecord(
        name=name,
        command=[python, "-m", "rlmdistill.cli", *cli_args],
        cwd=str(root),
        started_at=dt.datetime.now(dt.UTC),
        log=str(log),
        rc_file=str(rc_file),
        out_dir=out_dir,
        where=url,
        ray_job_id=job_id,
        files=files,
    )
    _write_status(job, RemoteStatus(status="PENDING", synced_at=dt.datetime.now(dt.UTC)))
    record_path.write_text(job.model_dump_json(indent=2), encoding="utf-8")
    return job


def _write_status(job: JobRecord, status: RemoteStatus) -> None:
    path = _status_path(job)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(status.model_dump_json(indent=2), encoding="utf-8")
    tmp.replace(path)


def _sync(job: JobRecord, info: ray_jobs.JobInfo | None, logs: str | None) -> JobState:
    """Write what the cluster said (``info`` ``None``: it does not know the job) into the
    job's files; returns the state."""
    now = dt.datetime.now(dt.UTC)
    if logs is not None:
        tmp = Path(job.log).with_suffix(".log.tmp")
        tmp.write_text(logs, encoding="utf-8")
        tmp.replace(job.log)
    if info is None:
        _write_status(job, RemoteStatus(status="LOST", synced_at=now))
        return "lost"
    _write_status(
        job,
        RemoteStatus(
            status=info.status, message=info.message, exit_code=info.exit_code, synced_at=now
        ),
    )
    if info.status in ray_jobs.FINAL_STATUSES and info.exit_code is not None:
        Path(job.rc_file).write_text(f"{info.exit_code}\n", encoding="utf-8")
    return _RAY_STATES.get(info.status, "lost")


def refresh(job: JobRecord) -> JobState:
    """Bring a Ray job's files up to date from its cluster (status, log, exit status) and
    return its state; a local job's state, or a Ray job that had already ended, needs no
    request. When the cluster does not answer, the files are left as they were and their
    state is returned; a cluster that no longer knows the job makes it ``lost``."""
    state = job_state(job)[0]
    if not job.remote or state in ("succeeded", "failed", "stopped", "lost"):
        return state
    assert job.ray_job_id is not None
    try:
        info = ray_jobs.job_info(job.where, job.ray_job_id)
        logs = ray_jobs.job_logs(job.where, job.ray_job_id)
    except ray_jobs.RayJobsError as exc:
        if "does not exist" in str(exc):  # the head answered: a restarted cluster forgets
            return _sync(job, None, None)
        return state
    return _sync(job, info, logs)


def follow_remote(
    job: JobRecord, on_logs: Callable[[str], None], *, poll_s: float = 1.0
) -> JobState:
    """Follow a Ray job until it ends: ``on_logs`` gets the whole log after each poll that
    changed it, and the job's files are written after each poll; returns the final state.
    Raises :class:`rlmdistill.cluster.jobs.RayJobsError` when the cluster stops answering
    (the files keep the last state)."""
    if not job.remote or job.ray_job_id is None:
        raise JobError(f"job {job.name!r} runs on this machine; follow its log file {job.log}")
    state = job_state(job)[0]
    if state in ("succeeded", "failed", "stopped", "lost"):
        on_logs(read_log(job, 10**9))
        return state

    def seen(info: ray_jobs.JobInfo, text: str) -> None:
        _sync(job, info, text)
        on_logs(text)

    info = ray_jobs.follow(job.where, job.ray_job_id, seen, poll_s=poll_s)
    return _RAY_STATES.get(info.status, "lost")


def stop_job(job: JobRecord) -> bool:
    """Stop a Ray job (the cluster sends its entrypoint SIGTERM, then SIGKILL); True when it
    was still running. Raises :class:`JobError` for a local job (stop its process, pid in the
    record) and :class:`rlmdistill.cluster.jobs.RayJobsError` when the cluster does not
    answer."""
    if not job.remote or job.ray_job_id is None:
        raise JobError(f"job {job.name!r} runs on this machine (pid {job.pid}): stop its process")
    stopped = ray_jobs.stop(job.where, job.ray_job_id)
    refresh(job)
    return stopped


def find_job(workspace: Path, key: str) -> JobRecord:
    """The job of ``workspace`` named ``key``, or whose Ray submission id is ``key``. Raises
    :class:`JobError` naming the workspace's job folder when there is none."""
    for job in list_jobs(workspace):
        if key in (job.name, job.ray_job_id):
            return job
    raise JobError(f"no job {key!r} in {jobs_dir(workspace)}")


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
