"""``rlmdistill collect``: run many episodes over rooms, resumable, into a run directory.

Layout written (see :mod:`rlmdistill.traces.schema`): ``run.json``, ``episodes.jsonl``
(appended once per finished episode), ``trajectories/<episode_id>.jsonl``. Re-running the
same command skips episodes already in ``episodes.jsonl`` and restarts unfinished ones, so
every episode ends up there exactly once. A run directory refuses a different config.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from rlmdistill.collect.attempts import prior_attempts
from rlmdistill.collect.config import CollectConfig, episode_id, for_run
from rlmdistill.collect.executor import CollectResult, EpisodePlan, Executor
from rlmdistill.collect.prepare import room_handle
from rlmdistill.collect.ray_executor import RayExecutor
from rlmdistill.collect.thread_executor import ThreadExecutor
from rlmdistill.hardware import machine_info
from rlmdistill.harness.episode import RoomHandle
from rlmdistill.harness.sandbox import profile as sandbox_profile
from rlmdistill.models.base import ModelClient
from rlmdistill.provenance import current_provenance, prefetch
from rlmdistill.rooms import DataRoom
from rlmdistill.traces import layout
from rlmdistill.traces.schema import EpisodeSummary, RoomInfo, RunManifest
from rlmdistill.traces.store import parse_records

EXECUTORS: Mapping[str, Callable[[], Executor]] = {
    ThreadExecutor.name: ThreadExecutor,
    RayExecutor.name: RayExecutor,
}
"""Every :class:`~rlmdistill.collect.executor.Executor` by its ``CollectConfig.executor``
name."""


def executor_for(config: CollectConfig) -> Executor:
    """The executor ``config.executor`` names (:data:`EXECUTORS`). Raises ``ValueError`` for
    a name without one (the config's ``Literal`` already refuses others)."""
    try:
        return EXECUTORS[config.executor]()
    except KeyError:
        names = ", ".join(sorted(EXECUTORS))
        raise ValueError(f"executor must be one of {names}, got {config.executor!r}") from None


class RunConfigMismatch(ValueError):
    """The run directory already holds a run made with a different config."""


def compute_dtypes(root: ModelClient, sub: ModelClient) -> dict[str, str]:
    """``{"root"|"sub": "dtype (reason)"}`` of in-process clients (unwrapping run limits)."""
    out: dict[str, str] = {}
    for role, client in (("root", root), ("sub", sub)):
        inner: Any = client
        while hasattr(inner, "inner"):
            inner = inner.inner
        dtype = getattr(inner, "dtype", None)
        if isinstance(dtype, str):
            out[role] = f"{dtype} ({getattr(inner, 'dtype_reason', 'given')})"
    return out


def _config_hash(config: CollectConfig, rooms: list[RoomInfo]) -> str:
    return config.fingerprint() + ":" + ",".join(sorted(r.room_hash for r in rooms))


def _existing_manifest(
    run_dir: Path, config: CollectConfig, rooms: list[RoomInfo]
) -> RunManifest | None:
    """The run's ``run.json`` when there is one (checked against ``config``), else ``None``.

    Raises :class:`RunConfigMismatch` when it was written for another config or other rooms."""
    path = run_dir / layout.RUN_MANIFEST
    if not path.exists():
        return None
    config_hash = _config_hash(config, rooms)
    old = RunManifest.model_validate_json(path.read_text(encoding="utf-8"))
    if old.config_hash != config_hash:
        raise RunConfigMismatch(
            f"{path}: this run was collected with another config or other rooms "
            f"({old.config_hash} != {config_hash}); use a new --out directory"
        )
    return old


def _manifest(
    run_dir: Path,
    config: CollectConfig,
    rooms: list[RoomInfo],
    dtypes: dict[str, str] | None = None,
) -> RunManifest:
    """The run's manifest: the existing ``run.json`` (checked, see :func:`_existing_manifest`)
    or a new one with provenance (package versions, git commit, machine), written atomically."""
    old = _existing_manifest(run_dir, config, rooms)
    if old is not None:
        return old
    path = run_dir / layout.RUN_MANIFEST
    manifest = RunManifest(
        run_id=run_dir.name,
        config=config.model_dump(mode="json", exclude={"out"}),  # the folder is the run
        config_hash=_config_hash(config, rooms),
        rooms=rooms,
        command=sys.argv,
        compute_dtypes=dtypes or {},
        **current_provenance(
            {
                **machine_info(),
                "sandbox": sandbox_profile(
                    config.sandbox,
                    memory_limit_mb=config.repl.memory_limit_mb,
                    scratch_mb=config.repl.scratch_mb,
                    max_processes=config.repl.max_processes,
                ),
            }
        ).model_dump(),
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
    tmp.replace(path)
    return manifest


def _in_background(fn: Callable[[], RunManifest]) -> Future[RunManifest]:
    """``fn()`` on a short-lived daemon thread; its future."""
    fut: Future[RunManifest] = Future()

    def run() -> None:
        try:
            fut.set_result(fn())
        except BaseException as exc:
            fut.set_exception(exc)

    threading.Thread(target=run, name="run-manifest", daemon=True).start()
    return fut


def finished_ids(run_dir: Path) -> set[str]:
    """Ids of episodes already in ``episodes.jsonl`` (torn last line tolerated)."""
    return {s.episode_id for s in parse_records(run_dir / layout.EPISODES, EpisodeSummary)}


def collect(
    config: CollectConfig,
    run_dir: Path,
    root: ModelClient,
    sub: ModelClient,
    *,
    progress: bool = True,
    rooms: list[DataRoom] | None = None,
    open_specs: Mapping[str, str] | None = None,
    executor: Executor | None = None,
) -> CollectResult:
    """Run every episode of ``config`` not yet in ``run_dir/episodes.jsonl`` on ``executor``
    (default: :func:`executor_for` ``config``).

    ``root``/``sub`` are open clients for ``config.root``/``config.sub`` (the same object when
    the specs are equal). Episodes run ``config.concurrency`` at a time; each finished one is
    appended to ``episodes.jsonl`` at once. An episode whose root turn a server failure ended
    (:class:`~rlmdistill.models.base.InfrastructureError`) is appended to ``attempts.jsonl``
    instead (both files on its ``max_attempts``-th attempt), and no further episode starts:
    :attr:`CollectResult.unfinished` / ``not_started`` say what is left. Raises
    :class:`RunConfigMismatch` when ``run_dir`` holds a different run, ``ValueError`` for a
    room without a task and :class:`~rlmdistill.harness.sandbox.SandboxUnavailable` (a
    ``ValueError``) when ``config.sandbox`` is ``bwrap`` and bubblewrap cannot start. ``rooms``
    may pass the
    rooms of ``config.rooms`` already loaded (same order). ``open_specs`` (spec as recorded ->
    spec to open, as in :func:`rlmdistill.collect.main.run`) reaches the nodes of
    ``executor: ray``, which open their own clients; this process's are ``root``/``sub``.
    A run resumes with the fingerprint version its ``run.json`` records
    (:func:`~rlmdistill.collect.config.for_run`), so its episode ids never change.
    """
    config = for_run(config, run_dir)
    prefetch()  # versions, git, machine: found while the rooms are prepared (cached after)
    if rooms is None:
        rooms = [DataRoom.load(p) for p in config.rooms]
    handles = [room_handle(r, root) for r in rooms]
    infos = [h.info for h in handles]
    existing = _existing_manifest(run_dir, config, infos)  # a mismatch stops the run now
    done = finished_ids(run_dir)
    plan: list[tuple[RoomHandle, int, str]] = []
    for h in handles:
        for k in range(config.episodes):
            eid = episode_id(config, h.info.room_hash, h.task_id, k)
            if eid not in done:
                plan.append((h, k, eid))
    skipped = len(handles) * config.episodes - len(plan)
    summaries: list[EpisodeSummary] = []
    dtypes = compute_dtypes(root, sub)
    if not plan:
        _manifest(run_dir, config, infos, dtypes)
        return CollectResult(run_dir, summaries, skipped)
    # run.json (git, package versions, machine: 0.1-0.25 s) is written while the first root
    # requests are out; every episode or attempt line waits for it, so no line precedes it
    manifest: Future[RunManifest]
    if existing is None:
        manifest = _in_background(lambda: _manifest(run_dir, config, infos, dtypes))
    else:
        manifest = Future()
        manifest.set_result(existing)
    run_id = existing.run_id if existing is not None else run_dir.name
    attempts_before = prior_attempts(run_dir)
    job = EpisodePlan(
        config=config,
        run_dir=run_dir,
        run_id=run_id,
        rooms=rooms,
        episodes=plan,
        skipped=skipped,
        attempts_before=attempts_before,
        manifest=manifest,
        root=root,
        sub=sub,
        open_specs=dict(open_specs or {}),
    )
    return (executor or executor_for(config)).run(job, progress=progress)
