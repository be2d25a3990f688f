"""Ray Jobs: run one ``rlmdistill`` command on a Ray cluster through the head's dashboard
(``http://HEAD:8265``, the Jobs REST API, :class:`ray.job_submission.JobSubmissionClient`).

What travels in the job's ``runtime_env`` (:func:`runtime_env`): this machine's ``rlmdistill``
package as ``py_modules`` (``ship_code``, so the cluster runs the submitter's code over its
own dependencies), ``PYTHONUNBUFFERED=1`` (logs as they are printed), and, with
``files="upload"``, the workspace itself as ``working_dir`` (config files included; Ray's
package limit, the gRPC message size of 512 MiB by default, and :data:`DEFAULT_EXCLUDES`
apply). With ``files="shared"`` nothing of the workspace is uploaded: the job changes into
the workspace's absolute path, which the head must see (a shared filesystem, or the head on
this machine), and writes its outputs there.

The workspace's record of a job (name, address, Ray's submission id, log) is kept by
:mod:`rlmdistill.dashboard.jobs`; this module only talks to the cluster. Nothing here imports
Ray at module level; Ray's job client needs the ``ray`` extra (``ray[default]``).
"""

from __future__ import annotations

import os
import shlex
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple
from urllib.parse import urlsplit

__all__ = [
    "DEFAULT_EXCLUDES",
    "DEFAULT_JOBS_PORT",
    "FINAL_STATUSES",
    "FileMode",
    "JobInfo",
    "RayJobsError",
    "entrypoint",
    "follow",
    "job_info",
    "job_logs",
    "jobs_address",
    "runtime_env",
    "stop",
    "submit",
]

DEFAULT_JOBS_PORT = 8265
"""The port of Ray's dashboard (and Jobs API) on the head."""

FINAL_STATUSES = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
"""Ray job statuses after which nothing changes (``PENDING`` and ``RUNNING`` are not)."""

DEFAULT_EXCLUDES = (".git", ".venv", ".cache", ".dashboard", "__pycache__")
"""Left out of an uploaded workspace (``files="upload"``): version control, environments,
caches and the dashboard's own job records."""

FileMode = Literal["shared", "upload"]
"""How the job reaches the workspace: ``shared`` (the same path on the head) or ``upload``
(a copy as the job's ``working_dir``; outputs stay on the cluster)."""

ENV_ADDRESS = "RAY_API_SERVER_ADDRESS"
"""Ray's own variable for the Jobs API address (``ray job submit`` reads it too)."""


class RayJobsError(ValueError):
    """The Jobs API cannot be used: Ray's job client is not installed, the address is not a
    dashboard address, the head does not answer, or the cluster refused the call (the CLI
    exits 2)."""


class JobInfo(NamedTuple):
    """What the cluster says of one job (:func:`job_info`)."""

    status: str
    """``PENDING``, ``RUNNING``, ``SUCCEEDED``, ``FAILED`` or ``STOPPED`` (Ray's
    ``JobStatus``)."""
    message: str | None
    """Ray's one-line explanation (``Job finished successfully.``, the failure)."""
    exit_code: int | None
    """The entrypoint's exit status once it ended (``None`` before, or when Ray does not know
    it, e.g. a job stopped before it started)."""
    start_time_ms: int | None
    """Unix time in milliseconds the entrypoint started."""
    end_time_ms: int | None
    """Unix time in milliseconds it ended."""


def jobs_address(address: str | None) -> str:
    """The Jobs API URL of ``address`` (``None``: ``$RAY_API_SERVER_ADDRESS``): ``HOST``,
    ``HOST:PORT`` or ``http(s)://HOST[:PORT]``; no scheme means ``http://``, no port
    :data:`DEFAULT_JOBS_PORT`. ``http://127.0.0.1`` -> ``http://127.0.0.1:8265``.

    Raises :class:`RayJobsError` for no address at all, a Ray Client (``ray://``) or other
    scheme, or a URL without a host.
    """
    text = (address or os.environ.get(ENV_ADDRESS) or "").strip()
    if not text:
        raise RayJobsError(
            f"no Ray Jobs address: give --ray-address http://HEAD:{DEFAULT_JOBS_PORT} (the "
            f"head's dashboard) or set ${ENV_ADDRESS}"
        )
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RayJobsError(
            f"ray address {address!r}: Ray Jobs go through the head's dashboard, "
            f"http://HOST:{DEFAULT_JOBS_PORT} (not the GCS HOST:6379 or ray://HOST:10001)"
        )
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}:{parts.port or DEFAULT_JOBS_PORT}"


def _check(url: str, timeout_s: float = 3.0) -> None:
    """One TCP connection to the dashboard within ``timeout_s`` s (the job client itself
    retries for long); :class:`RayJobsError` naming the address when nothing answers."""
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or DEFAULT_JOBS_PORT
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        why = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise RayJobsError(
            f"ray address {url}: nothing answers at {host}:{port} ({why} within "
            f"{timeout_s:g} s); start the head with its dashboard (`ray start --head "
            "--include-dashboard true --dashboard-host ...`) or fix --ray-address"
        ) from None


_CLIENTS: dict[str, Any] = {}
_DOWN: dict[str, tuple[float, str]] = {}
"""Jobs URL -> (monotonic time, message) of its last failed check."""

RECHECK_S = 15.0
"""Seconds a head that did not answer is reported down without asking again, so a page that
lists many of its jobs waits for one check, not one per job."""


def _client(address: str) -> Any:
    """One ``JobSubmissionClient`` per Jobs URL for this process (the address is checked
    first; a failed check is remembered for :data:`RECHECK_S` s). Raises
    :class:`RayJobsError`."""
    url = jobs_address(address)
    if url in _CLIENTS:
        return _CLIENTS[url]
    down = _DOWN.get(url)
    if down is not None and time.monotonic() - down[0] < RECHECK_S:
        raise RayJobsError(down[1])
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError as exc:
        raise RayJobsError(
            f"Ray Jobs need Ray's job client, which cannot be imported here ({exc}); install "
            "the extra: pip install 'rlmdistill[ray]' (ray[default])"
        ) from exc
    try:
        _check(url)
        try:
            client = JobSubmissionClient(url)
        except (RuntimeError, OSError) as exc:
            raise RayJobsError(f"ray address {url}: not a Ray dashboard ({exc})") from None
    except RayJobsError as exc:
        _DOWN[url] = (time.monotonic(), str(exc))
        raise
    _DOWN.pop(url, None)
    _CLIENTS[url] = client
    return client


def entrypoint(cli_args: Sequence[str], *, python: str = "python", cwd: str | None = None) -> str:
    """The job's shell command: ``[cd CWD && ]PYTHON -m rlmdistill.cli ARGS...``, each word
    quoted (``shlex.join``). ``cwd`` is the workspace's path on the head (``files="shared"``);
    ``python`` the interpreter there that has rlmdistill's dependencies."""
    run = shlex.join([python, "-m", "rlmdistill.cli", *cli_args])
    return f"cd {shlex.quote(cwd)} && {run}" if cwd else run


def runtime_env(
    workspace: Path,
    *,
    files: FileMode = "shared",
    ship_code: bool = True,
    excludes: Sequence[str] = DEFAULT_EXCLUDES,
) -> dict[str, Any]:
    """The job's ``runtime_env``: ``env_vars`` (``PYTHONUNBUFFERED=1``), ``py_modules`` = this
    machine's ``rlmdistill`` package folder when ``ship_code``, and with ``files="upload"``
    ``working_dir`` = ``workspace`` less ``excludes`` (Ray's gitignore-style patterns)."""
    import rlmdistill

    env: dict[str, Any] = {"env_vars": {"PYTHONUNBUFFERED": "1"}}
    if ship_code:
        env["py_modules"] = [str(Path(rlmdistill.__file__).resolve().parent)]
    if files == "upload":
        env["working_dir"] = str(Path(workspace).resolve())
        env["excludes"] = list(excludes)
    return env


def submit(
    address: str,
    entry: str,
    env: dict[str, Any],
    *,
    submission_id: str,
    metadata: dict[str, str] | None = None,
) -> str:
    """Submit ``entry`` with ``env`` as ``submission_id``; returns the id the cluster knows the
    job by (the same). Uploads ``env``'s folders first (about 1 s for rlmdistill's 3 MB
    package on loopback; an unchanged package is not sent again). Raises :class:`RayJobsError`
    when the head does not answer or refuses (an id in use, a bad runtime_env)."""
    client = _client(address)
    try:
        return str(
            client.submit_job(
                entrypoint=entry,
                runtime_env=env,
                submission_id=submission_id,
                metadata=metadata or {},
            )
        )
    except (RuntimeError, ValueError, OSError) as exc:
        raise RayJobsError(f"ray address {jobs_address(address)}: submit refused: {exc}") from None


def job_info(address: str, job_id: str) -> JobInfo:
    """The cluster's view of job ``job_id`` (:class:`JobInfo`). Raises :class:`RayJobsError`
    when the head does not answer or does not know the job (a restarted cluster forgets)."""
    client = _client(address)
    try:
        d = client.get_job_info(job_id)
    except (RuntimeError, OSError) as exc:
        raise RayJobsError(f"ray job {job_id} at {jobs_address(address)}: {exc}") from None
    code = getattr(d, "driver_exit_code", None)
    return JobInfo(
        status=str(getattr(d.status, "value", d.status)),
        message=d.message,
        exit_code=None if code is None else int(code),
        start_time_ms=d.start_time,
        end_time_ms=d.end_time,
    )


def job_logs(address: str, job_id: str) -> str:
    """Everything the job's entrypoint printed so far (stdout and stderr, with Ray's own
    ``Runtime env is setting up`` / ``Running entrypoint`` lines first). Raises
    :class:`RayJobsError` as :func:`job_info` does."""
    client = _client(address)
    try:
        return str(client.get_job_logs(job_id))
    except (RuntimeError, OSError) as exc:
        raise RayJobsError(f"ray job {job_id} at {jobs_address(address)}: {exc}") from None


def stop(address: str, job_id: str) -> bool:
    """Ask the cluster to stop job ``job_id`` (SIGTERM to the entrypoint, then SIGKILL after
    Ray's grace period); True when it was running, False when it had already ended. Raises
    :class:`RayJobsError` as :func:`job_info` does."""
    client = _client(address)
    try:
        return bool(client.stop_job(job_id))
    except (RuntimeError, OSError) as exc:
        raise RayJobsError(f"ray job {job_id} at {jobs_address(address)}: {exc}") from None


def follow(
    address: str,
    job_id: str,
    on_change: Callable[[JobInfo, str], None],
    *,
    poll_s: float = 1.0,
    timeout_s: float | None = None,
) -> JobInfo:
    """Poll job ``job_id`` every ``poll_s`` s until it ends, handing ``on_change`` the info and
    the whole log after each poll that changed either (and after the first); returns the
    final :class:`JobInfo`. With ``timeout_s``, returns the last (maybe still running) info
    after that many seconds. Raises :class:`RayJobsError` as :func:`job_info` does."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    last: tuple[JobInfo, str] | None = None
    while True:
        info = job_info(address, job_id)  # before the logs: a final status has all of them
        text = job_logs(address, job_id)
        if (info, text) != last:
            last = (info, text)
            on_change(info, text)
        if info.status in FINAL_STATUSES:
            return info
        if deadline is not None and time.monotonic() >= deadline:
            return info
        time.sleep(poll_s)
