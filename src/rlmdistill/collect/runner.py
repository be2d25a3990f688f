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
import shutil
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, NamedTuple

from tqdm import tqdm

from rlmdistill.collect.admission import Gate, capacity
from rlmdistill.collect.attempts import ATTEMPTS_FILE, attempt_record, prior_attempts
from rlmdistill.collect.config import CollectConfig, episode_id, episode_seed
from rlmdistill.collect.coverage import CoverageIndex
from rlmdistill.collect.dispatch import shared_dispatch
from rlmdistill.collect.episode import Episode, EpisodeSpec, RoomHandle
from rlmdistill.collect.repl import ReplDied, ReplLimits, ReplProcess
from rlmdistill.collect.sandbox import SandboxMode, SandboxUnavailable, explain_failure, find_bwrap
from rlmdistill.hardware import machine_info
from rlmdistill.models.base import ModelClient
from rlmdistill.paths import room_cache
from rlmdistill.provenance import git_state, package_versions, prefetch
from rlmdistill.rooms import DataRoom
from rlmdistill.traces.schema import AttemptRecord, EpisodeSummary, RoomInfo, RunManifest
from rlmdistill.traces.store import append_records, parse_records


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
    key = (find_bwrap(), os.geteuid(), limits.model_dump_json())
    if key in _sandbox_ok:  # passed in this process already: a REPL start costs ~50 ms
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
    _sandbox_ok.add(key)


_sandbox_ok: set[tuple[str, int, str]] = set()
"""(bwrap binary, uid, REPL limits) that passed :func:`check_sandbox` in this process."""


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
    path = run_dir / "run.json"
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
    path = run_dir / "run.json"
    commit, dirty = git_state()
    manifest = RunManifest(
        run_id=run_dir.name,
        config=config.model_dump(mode="json"),
        config_hash=_config_hash(config, rooms),
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
    check_sandbox(config.sandbox, config.repl)
    attempts_before = prior_attempts(run_dir)
    infrastructure_down = threading.Event()  # after a server failure, start no new episode
    dispatch = shared_dispatch()
    gate = Gate()

    def commit(path: Path, record: EpisodeSummary | AttemptRecord) -> None:
        manifest.result()  # raises what writing run.json raised
        append_records(path, [record])

    def run_one(item: tuple[RoomHandle, int, str]) -> EpisodeSummary | AttemptRecord | None:
        handle, k, eid = item
        if infrastructure_down.is_set():
            return None
        with gate.admit():  # waits while memory for its REPL is short (never fails)
            if infrastructure_down.is_set():
                return None
            scratch = Path(tempfile.mkdtemp(prefix=f"rlmdistill-{eid}-"))
            try:
                ep = Episode(
                    config,
                    EpisodeSpec(
                        run_id=run_id,
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
            n = attempts_before.get(eid, 0) + 1
            attempt = attempt_record(summary, ep.infrastructure_failure, n, config.max_attempts)
            commit(run_dir / ATTEMPTS_FILE, attempt)
            if not attempt.final:
                return attempt
            failed.append(attempt)
        commit(run_dir / "episodes.jsonl", summary)
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
    with ThreadPoolExecutor(n_parallel, thread_name_prefix="episode") as ex:
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
