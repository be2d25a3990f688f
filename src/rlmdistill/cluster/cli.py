"""``rlmdistill submit``: run an rlmdistill command on a Ray cluster through Ray Jobs.

    rlmdistill submit --ray-address http://HEAD:8265 -- sft --dataset datasets/d \\
        --base smollm2-135m --out adapters/a      # submit, record, follow the log
    rlmdistill submit --stop NAME                 # stop a submitted job (name or Ray id)
    rlmdistill submit --attach NAME [--no-follow] # follow it again / refresh its record once

The command after ``--`` goes to the head's Jobs API (:mod:`rlmdistill.cluster.jobs`) and is
recorded among the workspace's jobs (:mod:`rlmdistill.dashboard.jobs`, the same records the
dashboard's SFT jobs page lists and starts), with ``where`` = the cluster's Jobs URL; while
followed, its status and log are copied into the record's files. Exit status: the job's
(0 when it succeeded; its entrypoint's exit status, or 1, when it failed or was stopped),
0 with ``--no-follow`` once submitted, 2 for bad input or a cluster that does not answer,
130 when following is interrupted (the job keeps running).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from pathlib import Path

import typer
from pydantic import BaseModel, ConfigDict

from rlmdistill.cliconfig import config_command
from rlmdistill.cluster import jobs as ray_jobs
from rlmdistill.dashboard import jobs

__all__ = ["SubmitOptions", "out_dir_of", "register", "submit_main"]


class SubmitOptions(BaseModel):
    """``rlmdistill submit``: which command, to which cluster, recorded in which workspace."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    command: list[str] = []
    """The rlmdistill command to run on the cluster, after `--` (e.g. `-- sft --dataset
    datasets/d --base B --out adapters/a`); its paths are read on the cluster, relative to
    the workspace."""
    ray_address: str | None = None
    """Ray Jobs address: the head's dashboard, http://HOST:8265 (default:
    $RAY_API_SERVER_ADDRESS; not the GCS HOST:6379)."""
    workspace: Path = Path(".")
    """Workspace folder: the job's records go to DIR/.dashboard/jobs/, and the job runs there."""
    name: str | None = None
    """Job name in the workspace's records (default: the command and the UTC time,
    sft-20261205-071500)."""
    files: ray_jobs.FileMode = "shared"
    """How the job reaches the workspace: 'shared' runs it in the workspace's path on the head
    (a shared filesystem, or the head on this machine; outputs land here); 'upload' sends the
    workspace as the job's working_dir (outputs stay on the cluster)."""
    python: str = "python"
    """Python interpreter on the cluster that has rlmdistill's dependencies."""
    ship_code: bool = True
    """Send this machine's rlmdistill package with the job (runtime_env py_modules), so the
    cluster runs the submitter's code."""
    follow: bool = True
    """Print the job's log as it runs and wait for it to end (its status and log are copied
    into the record); --no-follow returns once submitted."""
    stop: str | None = None
    """Stop the workspace's job of this name (or Ray submission id) instead of submitting."""
    attach: str | None = None
    """Follow the workspace's job of this name (or Ray submission id) instead of submitting;
    with --no-follow, refresh its record once and print its state."""


def out_dir_of(args: Sequence[str]) -> str | None:
    """The value of ``--out`` in a command's arguments (``--out X`` or ``--out=X``; the last
    one), else ``None``: the folder an ``sft``/``rl`` job writes."""
    out = None
    for i, a in enumerate(args):
        if a == "--out" and i + 1 < len(args):
            out = args[i + 1]
        elif a.startswith("--out="):
            out = a.split("=", 1)[1]
    return out


_EXIT: dict[str, int] = {"succeeded": 0, "failed": 1, "stopped": 1, "lost": 1}


def _printer(echo: Callable[[str], None]) -> Callable[[str], None]:
    """An ``on_logs`` that prints what a log gained since the last call (all of it when the
    cluster sent a log that does not continue the printed one)."""
    printed = [""]

    def show(text: str) -> None:
        new = text[len(printed[0]) :] if text.startswith(printed[0]) else text
        if new:
            echo(new)
        printed[0] = text

    return show


def _follow(job: jobs.JobRecord, echo: Callable[[str], None]) -> int:
    try:
        state = jobs.follow_remote(job, _printer(echo))
    except KeyboardInterrupt:
        typer.echo(
            f"\nstopped following; job {job.name} keeps running on the cluster "
            f"(rlmdistill submit --stop {job.name} --workspace {Path(job.cwd)})",
            err=True,
        )
        return 130
    _, rc = jobs.job_state(job)
    typer.echo(f"job {job.name}: {state}" + (f" (exit status {rc})" if rc is not None else ""))
    if state == "failed" and rc is not None and 0 < rc < 256:
        return rc
    return _EXIT.get(state, 1)


def submit_main(options: SubmitOptions, echo: Callable[[str], None] | None = None) -> int:
    """Run ``rlmdistill submit`` (see the module docstring); returns the exit status.
    ``echo`` receives the job's log text as it grows (default: stdout, unbuffered)."""
    show = echo or (lambda text: typer.echo(text, nl=False))
    ws = Path(options.workspace)
    modes = [m for m in ("command", "stop", "attach") if getattr(options, m)]
    try:
        if len(modes) != 1:
            raise jobs.JobError(
                "give one of: a command after `--` (rlmdistill submit --ray-address URL -- sft "
                "...), --stop NAME or --attach NAME"
                + (f"; got {', '.join(modes)}" if modes else "")
            )
        if not ws.is_dir():
            raise jobs.JobError(f"workspace {ws} is not a folder")
        if options.stop:
            job = jobs.find_job(ws, options.stop)
            was_running = jobs.stop_job(job)
            state = jobs.job_state(job)[0]
            typer.echo(
                f"job {job.name} (Ray job {job.ray_job_id}): "
                + ("stop requested" if was_running else "had already ended")
                + f"; state {state}"
            )
            return 0
        if options.attach:
            job = jobs.find_job(ws, options.attach)
            if options.follow:
                return _follow(job, show)
            state = jobs.refresh(job)
            typer.echo(f"job {job.name} ({job.where}): {state}")
            return 0
        command = list(options.command)
        if command[0].startswith("-") or command[0] == "submit":
            raise jobs.JobError(
                f"the job's command must be an rlmdistill command (sft, rl, loop, ...), not "
                f"{command[0]!r}"
            )
        name = options.name or f"{command[0]}-{dt.datetime.now(dt.UTC):%Y%m%d-%H%M%S}"
        job = jobs.submit_remote(
            ws,
            name,
            ray_jobs.jobs_address(options.ray_address),
            command,
            files=options.files,
            python=options.python,
            ship_code=options.ship_code,
            out_dir=out_dir_of(command),
        )
        typer.echo(
            f"submitted {job.name} as Ray job {job.ray_job_id} at {job.where} "
            f"(record: {jobs.jobs_dir(ws) / (job.name + '.json')})",
            err=True,
        )
        if not options.follow:
            return 0
        return _follow(job, show)
    except (jobs.JobError, ray_jobs.RayJobsError) as exc:
        typer.echo(f"error: {exc}", err=True)
        return 2


def register(app: typer.Typer) -> None:
    """Add the ``submit`` command to ``app``."""

    @config_command(app, "submit", arguments=["command"], config_flag=None)
    def submit(options: SubmitOptions) -> None:
        """Run an rlmdistill command on a Ray cluster (Ray Jobs), recorded in the workspace."""
        raise typer.Exit(submit_main(options))
