"""``rlmdistill collect``: run many episodes over rooms, resumable, into a run directory.

Layout written (see :mod:`rlmdistill.traces.schema`): ``run.json``, ``episodes.jsonl``
(appended once per finished episode), ``trajectories/<episode_id>.jsonl``. Re-running the
same command skips episodes already in ``episodes.jsonl`` and restarts unfinished ones, so
every episode ends up there exactly once. A run directory refuses a different config.
"""

from __future__ import annotations

import contextlib
import gc
import shutil
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from tqdm import tqdm

from rlmdistill import heap
from rlmdistill.collect.admission import Gate, capacity
from rlmdistill.collect.attempts import prior_attempts
from rlmdistill.collect.config import CollectConfig, episode_id, episode_seed, for_run
from rlmdistill.collect.dispatch import shared_dispatch
from rlmdistill.collect.episode import Episode, EpisodeSpec, RoomHandle
from rlmdistill.collect.executor import CollectResult, commit_episode
from rlmdistill.collect.prepare import check_sandbox, room_handle
from rlmdistill.collect.sandbox import profile as sandbox_profile
from rlmdistill.collect.sandbox import scratch_parent
from rlmdistill.hardware import machine_info
from rlmdistill.models.base import ModelClient
from rlmdistill.provenance import current_provenance, prefetch
from rlmdistill.rooms import DataRoom
from rlmdistill.traces import layout
from rlmdistill.traces.schema import AttemptRecord, EpisodeSummary, RoomInfo, RunManifest
from rlmdistill.traces.store import parse_records


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
        config=config.model_dump(mode="json"),
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


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep the objects alive when the episodes start out of the cyclic GC while they run
    (``gc.freeze()``, then ``gc.unfreeze()``; CPython's documented way to spare a long-lived
    heap from full collections).

    Why: a full collection walks every tracked object of the process with the GIL held, so
    it stalls every episode thread and the sub-call event loop at once. With the concurrency
    benchmark's modules imported that is ~51,000 objects and ~37 ms of CPU per full
    collection on the 2-core machine; ~190,000 objects are alive during a run of
    ``benchmarks/bench_concurrency.py`` (~140 ms by proportion), more with ``torch`` loaded;
    one full collection landed in a 16 x 64 run (README, "Measured"). The run's own objects are
    still collected as usual, and everything frozen goes back to the collector's oldest
    generation when the run ends (nested or concurrent runs: the first to end unfreezes)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


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
) -> CollectResult:
    """Run every episode of ``config`` not yet in ``run_dir/episodes.jsonl``.

    ``root``/``sub`` are open clients for ``config.root``/``config.sub`` (the same object when
    the specs are equal). Episodes run ``config.concurrency`` at a time; each finished one is
    appended to ``episodes.jsonl`` at once. An episode whose root turn a server failure ended
    (:class:`~rlmdistill.models.base.InfrastructureError`) is appended to ``attempts.jsonl``
    instead (both files on its ``max_attempts``-th attempt), and no further episode starts:
    :attr:`CollectResult.unfinished` / ``not_started`` say what is left. Raises
    :class:`RunConfigMismatch` when ``run_dir`` holds a different run, ``ValueError`` for a
    room without a task and :class:`~rlmdistill.collect.sandbox.SandboxUnavailable` (a
    ``ValueError``) when ``config.sandbox`` is ``bwrap`` and bubblewrap cannot start. ``rooms``
    may pass the
    rooms of ``config.rooms`` already loaded (same order). ``open_specs`` (spec as recorded ->
    spec to open, as in :func:`rlmdistill.collect.main.run_collect`) reaches the nodes of
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
    if config.executor == "ray":  # executor seam: the episodes run on a Ray cluster's nodes
        from rlmdistill.collect.ray_executor import collect_on_ray

        manifest.result()  # run.json before any episode line
        return collect_on_ray(config, run_dir, run_id, rooms, plan, skipped, attempts_before, progress=progress, open_specs=open_specs)  # fmt: skip
    check_sandbox(config.sandbox, config.repl)
    infrastructure_down = threading.Event()  # after a server failure, start no new episode
    dispatch = shared_dispatch()
    gate = Gate()

    def run_one(item: tuple[RoomHandle, int, str]) -> EpisodeSummary | AttemptRecord | None:
        handle, k, eid = item
        if infrastructure_down.is_set():
            return None
        with gate.admit():  # waits while memory for its REPL is short (never fails)
            if infrastructure_down.is_set():
                return None
            scratch = Path(tempfile.mkdtemp(prefix=f"{eid}-", dir=scratch_parent()))
            try:
                ep = Episode(
                    config,
                    EpisodeSpec(
                        run_id=run_id,
                        episode_id=eid,
                        sample_index=k,
                        seed=episode_seed(config, handle.info.room_hash, handle.task_id, k),
                        trajectory_path=layout.trajectory_path(run_dir, eid),
                        scratch_dir=scratch,
                    ),
                    handle,
                    root,
                    sub,
                    config.root,
                    config.sub,
                    dispatch,
                )
                summary = ep.run()
            except BaseException:
                shutil.rmtree(scratch, ignore_errors=True)
                raise
        try:
            return _commit_episode(ep, summary, eid)
        finally:  # after the summary line: the scratch folder is not part of the episode
            shutil.rmtree(scratch, ignore_errors=True)

    def _commit_episode(
        ep: Episode, summary: EpisodeSummary, eid: str
    ) -> EpisodeSummary | AttemptRecord:
        if ep.infrastructure_failure is not None:
            infrastructure_down.set()
        manifest.result()  # raises what writing run.json raised
        attempt = commit_episode(
            run_dir, summary, ep.infrastructure_failure, attempts_before.get(eid, 0),
            config.max_attempts,
        )  # fmt: skip
        if attempt is not None and not attempt.final:
            return attempt
        if attempt is not None:
            failed.append(attempt)
        return summary

    failed: list[AttemptRecord] = []  # final failed attempts (their episode is finished)
    unfinished: list[AttemptRecord] = []
    not_started = 0
    # admission: no more episode threads than descriptors, tasks and memory allow; the rest
    # of the plan waits in the executor's queue (collect/admission.py)
    room_for = capacity(
        fds_per_episode=config.sub_concurrency,
        extra_repls=dispatch.agent_threads if config.depth == 2 else 0,
    )
    n_parallel = min(config.concurrency, len(plan), room_for.episodes)
    if n_parallel < min(config.concurrency, len(plan)):
        warnings.warn(
            f"collect {run_dir.name}: running {n_parallel} episodes at once, not "
            f"{config.concurrency}: {room_for.bound} allow no more on this node ({room_for}); "
            "the others wait their turn",
            stacklevel=2,
        )
    bar = tqdm(total=len(plan), desc=f"collect {run_dir.name}", unit="ep", disable=not progress)
    heap.limit_arenas()  # episode threads' freed memory stays in few arenas (heap.py)
    with frozen_heap(), ThreadPoolExecutor(n_parallel, thread_name_prefix="episode") as ex:
        futures = [ex.submit(run_one, item) for item in plan]
        for fut in as_completed(futures):
            s = fut.result()
            if s is None:
                not_started += 1
                continue
            if isinstance(s, AttemptRecord):
                unfinished.append(s)
                bar.set_postfix_str(f"server failed: {s.cause}; starting no more episodes")
            else:
                summaries.append(s)
                bar.set_postfix_str(f"last: {s.status}")
            bar.update(1)
    bar.close()
    manifest.result()  # a run that only skipped episodes still has its run.json
    return CollectResult(
        run_dir, summaries, skipped, unfinished, not_started, [*unfinished, *failed]
    )
