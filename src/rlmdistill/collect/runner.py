"""``rlmdistill collect``: run many episodes over rooms, resumable, into a run directory.

Layout written (see :mod:`rlmdistill.traces.schema`): ``run.json``, ``episodes.jsonl``
(appended once per finished episode), ``trajectories/<episode_id>.jsonl``. Re-running the
same command skips episodes already in ``episodes.jsonl`` and restarts unfinished ones, so
every episode ends up there exactly once. A run directory refuses a different config.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import shutil
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from tqdm import tqdm

from rlmdistill.collect.attempts import prior_attempts
from rlmdistill.collect.config import CollectConfig, episode_id, episode_seed
from rlmdistill.collect.coverage import CoverageIndex
from rlmdistill.collect.episode import Episode, EpisodeSpec, RoomHandle
from rlmdistill.collect.executor import commit_episode
from rlmdistill.collect.repl import ReplDied, ReplLimits, ReplProcess
from rlmdistill.collect.sandbox import SandboxMode, SandboxUnavailable, explain_failure
from rlmdistill.hardware import machine_info
from rlmdistill.models.base import ModelClient
from rlmdistill.paths import room_cache
from rlmdistill.provenance import git_state, package_versions
from rlmdistill.rooms import DataRoom
from rlmdistill.traces.schema import AttemptRecord, EpisodeSummary, RoomInfo, RunManifest
from rlmdistill.traces.store import parse_records


class RunConfigMismatch(ValueError):
    """The run directory already holds a run made with a different config."""


class CollectResult(NamedTuple):
    """What :func:`collect` did."""

    run_dir: Path
    summaries: list[EpisodeSummary]
    """Episodes finished by this call (not those skipped as already done)."""
    skipped: int
    """Episodes already in ``episodes.jsonl`` before this call."""
    unfinished: Sequence[AttemptRecord] = ()
    """Failed attempts of this call that left their episode unfinished (not ``final``)."""
    not_started: int = 0
    """Episodes not started because the serving infrastructure had failed (see
    :mod:`rlmdistill.collect.attempts`)."""
    failed_attempts: Sequence[AttemptRecord] = ()
    """Every failed attempt of this call, final ones included."""


def room_handle(room: DataRoom, root: ModelClient | None = None) -> RoomHandle:
    """Prepare ``room`` for episodes: info record and a cached REPL snapshot file.

    Raises ``ValueError`` when the room has no ``task.json`` (episodes need a task).
    """
    if room.task is None:
        raise ValueError(f"room {room.path} has no task.json; build one or add it")
    n_tokens = None
    tok = getattr(root, "tokenizer", None)
    if tok is not None:
        n_tokens = room.token_count(tok)
    info = RoomInfo(
        room_id=room.room_id,
        room_hash=room.room_hash,
        path=str(room.path),
        n_documents=len(room.documents),
        n_chars=room.n_chars,
        n_tokens=n_tokens,
        folders=room.folders,
    )
    snap = ensure_snapshot(room, room_cache() / f"{room.room_hash}.snapshot.json")
    return RoomHandle(
        info=info,
        snapshot=snap,
        coverage_index=CoverageIndex.load_or_build(room, room_cache()),
        documents=[(d.id, d.folder, d.n_chars) for d in room.documents],
        task_id=room.task.id,
        task_title=room.task.title,
        task_instructions=room.task.instructions,
    )


def _digest(path: Path) -> str | None:
    try:
        with open(path, "rb") as fh:
            return hashlib.file_digest(fh, "sha256").hexdigest()
    except FileNotFoundError:
        return None


def ensure_snapshot(room: DataRoom, snap: Path) -> Path:
    """The REPL snapshot of ``room`` at ``snap`` (index) + ``snap.with_suffix('.bin')``,
    checked against the room at every run start; a missing or tampered one is (re)built.

    The check writes a fresh snapshot into a private folder beside the cache and compares
    sha256 digests of both files (a snapshot is a pure function of the room's documents). On a
    match the cached files stay (REPLs of other runs keep sharing their pages); otherwise the
    fresh files replace them atomically, with a warning for a tampered cache. Cost: one write
    of the room's text (~10 ms per MB).
    """
    snap.parent.mkdir(parents=True, exist_ok=True)
    fresh_dir = Path(tempfile.mkdtemp(prefix=".snapshot-check-", dir=snap.parent))
    try:
        fresh = room.snapshot(fresh_dir / snap.name)
        pairs = [(fresh, snap), (fresh.with_suffix(".bin"), snap.with_suffix(".bin"))]
        cached = [_digest(old) for _, old in pairs]
        if cached != [_digest(new) for new, _ in pairs]:
            if any(d is not None for d in cached):
                warnings.warn(
                    f"room snapshot {snap} does not match room {room.path} (tampered or "
                    "stale); rebuilt it",
                    stacklevel=2,
                )
            for new, old in reversed(pairs):  # blob first: an index never names a missing blob
                os.replace(new, old)
    finally:
        shutil.rmtree(fresh_dir, ignore_errors=True)
    return snap


def check_sandbox(mode: SandboxMode, limits: ReplLimits) -> None:
    """Start one REPL in ``mode`` over a one-document snapshot, run a block, close it.

    Raises :class:`SandboxUnavailable` naming the cause (and ``--sandbox audit``) when the bwrap
    sandbox cannot start here, so that ``collect`` stops before any episode instead of ending
    each one ``repl_crashed``. ``audit``/``none`` need no check.
    """
    if mode != "bwrap":
        return
    with tempfile.TemporaryDirectory(prefix="rlmdistill-sandbox-check-") as tmp:
        snap = Path(tmp) / "check.snapshot.json"
        doc = {"id": "check.txt", "folder": "", "text": "sandbox check"}
        snap.write_text(json.dumps({"room_id": "check", "documents": [doc]}), encoding="utf-8")
        try:
            with ReplProcess(snap, Path(tmp) / "scratch", limits, sandbox=mode) as repl:
                out = repl.execute("print(len(room))", lambda p, s: [], timeout_s=60)
        except ReplDied as exc:
            raise SandboxUnavailable(explain_failure(str(exc))) from exc
        if out.stdout != "1\n":
            raise SandboxUnavailable(explain_failure(f"check block printed {out.stdout!r}"))


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


def _manifest(
    run_dir: Path,
    config: CollectConfig,
    rooms: list[RoomInfo],
    dtypes: dict[str, str] | None = None,
) -> RunManifest:
    path = run_dir / "run.json"
    config_hash = config.fingerprint() + ":" + ",".join(sorted(r.room_hash for r in rooms))
    if path.exists():
        old = RunManifest.model_validate_json(path.read_text(encoding="utf-8"))
        if old.config_hash != config_hash:
            raise RunConfigMismatch(
                f"{path}: this run was collected with another config or other rooms "
                f"({old.config_hash} != {config_hash}); use a new --out directory"
            )
        return old
    commit, dirty = git_state()
    manifest = RunManifest(
        run_id=run_dir.name,
        config=config.model_dump(mode="json"),
        config_hash=config_hash,
        versions=package_versions(),
        git_commit=commit,
        git_dirty=dirty,
        rooms=rooms,
        command=sys.argv,
        machine=machine_info(),
        compute_dtypes=dtypes or {},
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
    tmp.replace(path)
    return manifest


def _started_pool(workers: int, prefix: str) -> ThreadPoolExecutor:
    """A thread pool whose ``workers`` threads are already running.

    ``ThreadPoolExecutor`` starts a thread per ``submit`` until it has ``max_workers``; for a
    64-call batch that is 64 thread starts on the batch's critical path (~0.1 ms each under the
    GIL). Parking one task per worker on an event forces every thread to start now, at run
    set-up, where it is paid once per run instead of once per episode.
    """
    pool = ThreadPoolExecutor(workers, thread_name_prefix=prefix)
    release = threading.Event()
    parked = [pool.submit(release.wait) for _ in range(workers)]
    release.set()
    for fut in parked:
        fut.result()
    return pool


@contextmanager
def sub_call_pools(n_pools: int, workers: int) -> Iterator[queue.SimpleQueue[ThreadPoolExecutor]]:
    """``n_pools`` started pools of ``workers`` threads each, shut down on exit.

    One pool per concurrently running episode: an episode takes one for its sub-call batches
    and gives it back when it ends, so ``sub_concurrency`` stays a per-episode limit while the
    threads live for the whole run.
    """
    pools = [_started_pool(workers, f"sub{i}") for i in range(n_pools)]
    free: queue.SimpleQueue[ThreadPoolExecutor] = queue.SimpleQueue()
    for pool in pools:
        free.put(pool)
    try:
        yield free
    finally:
        for pool in pools:
            pool.shutdown(wait=True)


def finished_ids(run_dir: Path) -> set[str]:
    """Ids of episodes already in ``episodes.jsonl`` (torn last line tolerated)."""
    return {s.episode_id for s in parse_records(run_dir / "episodes.jsonl", EpisodeSummary)}


def collect(
    config: CollectConfig,
    run_dir: Path,
    root: ModelClient,
    sub: ModelClient,
    *,
    progress: bool = True,
    rooms: list[DataRoom] | None = None,
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
    rooms of ``config.rooms`` already loaded (same order).
    """
    if rooms is None:
        rooms = [DataRoom.load(p) for p in config.rooms]
    handles = [room_handle(r, root) for r in rooms]
    manifest = _manifest(run_dir, config, [h.info for h in handles], compute_dtypes(root, sub))
    done = finished_ids(run_dir)
    plan: list[tuple[RoomHandle, int, str]] = []
    for h in handles:
        for k in range(config.episodes):
            eid = episode_id(config, h.info.room_hash, h.task_id, k)
            if eid not in done:
                plan.append((h, k, eid))
    skipped = len(handles) * config.episodes - len(plan)
    summaries: list[EpisodeSummary] = []
    if not plan:
        return CollectResult(run_dir, summaries, skipped)
    attempts_before = prior_attempts(run_dir)
    if config.executor == "ray":  # executor seam: the episodes run on a Ray cluster's nodes
        from rlmdistill.collect.ray_executor import collect_on_ray

        return collect_on_ray(config, run_dir, manifest.run_id, rooms, plan, skipped, attempts_before, progress=progress)  # fmt: skip
    check_sandbox(config.sandbox, config.repl)
    infrastructure_down = threading.Event()  # after a server failure, start no new episode

    def run_one(item: tuple[RoomHandle, int, str]) -> EpisodeSummary | AttemptRecord | None:
        handle, k, eid = item
        if infrastructure_down.is_set():
            return None
        scratch = Path(tempfile.mkdtemp(prefix=f"rlmdistill-{eid}-"))
        pool = free_pools.get()
        try:
            ep = Episode(
                config,
                EpisodeSpec(
                    run_id=manifest.run_id,
                    episode_id=eid,
                    sample_index=k,
                    seed=episode_seed(config, handle.info.room_hash, handle.task_id, k),
                    trajectory_path=run_dir / "trajectories" / f"{eid}.jsonl",
                    scratch_dir=scratch,
                ),
                handle,
                root,
                sub,
                config.root,
                config.sub,
                pool,
            )
            summary = ep.run()
        finally:
            free_pools.put(pool)
            shutil.rmtree(scratch, ignore_errors=True)
        if ep.infrastructure_failure is not None:
            infrastructure_down.set()
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
    n_parallel = min(config.concurrency, len(plan))
    bar = tqdm(total=len(plan), desc=f"collect {run_dir.name}", unit="ep", disable=not progress)
    with (
        sub_call_pools(n_parallel, config.sub_concurrency) as free_pools,
        ThreadPoolExecutor(n_parallel, thread_name_prefix="episode") as ex,
    ):
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
    return CollectResult(
        run_dir, summaries, skipped, unfinished, not_started, [*unfinished, *failed]
    )
