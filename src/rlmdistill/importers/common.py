"""What every importer shares: the room the episodes worked on, episode ids, the checks on
sub-call prompts, and writing the run folder (``run.json``, ``episodes.jsonl``,
``trajectories/<episode_id>.jsonl``) in the shape ``collect`` writes, so every later stage
reads an imported run as any other.

An importer parses its source into :class:`ImportedEpisode` objects (records without the
room's coverage, citations or summary), then :func:`write_run` finishes and writes them. The
whole source is parsed before anything is written, and the run is written into a temporary
folder beside ``out`` and renamed into place, so a bad input leaves nothing behind.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import multiprocessing
import os
import re
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from rlmdistill.coverage.index import CoverageIndex, CoverageProbe, WindowCache
from rlmdistill.models.base import Usage
from rlmdistill.paths import room_cache
from rlmdistill.provenance import current_provenance
from rlmdistill.rooms import DataRoom
from rlmdistill.rooms.text import ascii_fold, citation_regex
from rlmdistill.traces import layout
from rlmdistill.traces.columns import gc_paused
from rlmdistill.traces.memo_errors import count_sub_call_error_texts
from rlmdistill.traces.schema import (
    Coverage,
    EpisodeEnd,
    EpisodeStart,
    EpisodeSummary,
    ImportedSource,
    RoomInfo,
    RunConfig,
    RunManifest,
    SourceFile,
    SubagentTurnRecord,
    SubCallRecord,
    TokenUsage,
    TurnRecord,
)
from rlmdistill.traces.scores import memo_sha256
from rlmdistill.traces.store import dumps_record

__all__ = [
    "ImportFormatError",
    "ImportResult",
    "ImportedEpisode",
    "RoomBinding",
    "bind_room",
    "file_sha256",
    "import_files",
    "imported_episode_id",
    "write_run",
]


class ImportFormatError(ValueError):
    """The source is not a trace this importer reads (unknown format version, a record of
    another shape); the message names the file, the line and what was found."""


def file_sha256(path: Path) -> str:
    """sha256 (hex) of a file's bytes."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def imported_episode_id(source_format: str, file_hash: str, index: int) -> str:
    """The id of the ``index``-th (0-based) episode of a source file: the first 20 hex chars of
    sha256 over ``"<format>:<file sha256>:<index>"``. Deterministic: importing the same file
    again gives the same ids, whatever the room, the output folder or the machine."""
    key = f"{source_format}:{file_hash}:{index}"
    return hashlib.sha256(key.encode()).hexdigest()[:20]


@dataclass
class RoomBinding:
    """The room given by ``--room``: its record, rubric task id, document ids, and coverage
    index (built once, cached like ``collect``'s)."""

    room: DataRoom
    info: RoomInfo
    task_id: str
    doc_ids: list[str]
    index: CoverageIndex
    citations: list[tuple[str, re.Pattern[str]]] = field(default_factory=list)
    """Each document's citation regex (:func:`rlmdistill.rooms.text.citation_regex`),
    compiled once per import."""

    def cited(self, memo: str | None) -> list[str]:
        """:func:`rlmdistill.rooms.text.cited_documents` of ``memo`` in this room."""
        if not memo:
            return []
        folded = ascii_fold(memo).lower()
        return [d for d, rx in self.citations if rx.search(folded)]


def bind_room(path: Path) -> RoomBinding:
    """Load the room folder ``path`` (as ``rooms`` builds them: documents plus ``task.json``).

    Raises ``ValueError`` naming the folder when it has no ``task.json`` (judge needs the
    rubric), :class:`~rlmdistill.rooms.room.RoomError` when it is not a room folder.
    """
    room = DataRoom.load(path)
    if room.task is None:
        raise ValueError(f"room {path} has no task.json; judge needs the room's rubric")
    info = RoomInfo(
        room_id=room.room_id,
        room_hash=room.room_hash,
        path=str(Path(room.path).resolve()),
        n_documents=len(room.documents),
        n_chars=room.n_chars,
        folders=room.folders,
    )
    index = CoverageIndex.load_or_build(room, room_cache())
    ids = [d.id for d in room.documents]
    return RoomBinding(room, info, room.task.id, ids, index, [(d, citation_regex(d)) for d in ids])


@dataclass
class ImportedEpisode:
    """One episode parsed from a source, before :func:`write_run` finishes it.

    ``start``'s room and task fields are filled by ``write_run`` from the room given with
    ``--room`` (the source log does not name one); ``turns`` are the root's, ``subagent_turns`` depth-2 subagents', ``calls`` every
    sub-call (depth from the nesting). ``inputs`` are every text a model was sent (root
    messages and sub-call prompts) for the coverage probe.
    """

    start: EpisodeStart
    turns: list[TurnRecord]
    calls: list[SubCallRecord]
    end: EpisodeEnd
    subagent_turns: list[SubagentTurnRecord] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    wall_time_s: float = 0.0
    root_usage: Usage = field(default_factory=Usage)
    extra: dict[str, object] | None = None


@dataclass
class ImportResult:
    """What an import wrote: the run folder, episode count and the warnings it gave."""

    run_dir: Path
    n_episodes: int
    n_turns: int
    n_sub_calls: int
    warnings: list[str]


def _line(record: BaseModel) -> str:
    """One JSON line of a record, as :func:`rlmdistill.traces.store.dumps_record` writes it
    (the same JSON values), through pydantic's serializer; a record holding a lone surrogate
    (which JSON escapes allow in a source file) goes through ``dumps_record``, which replaces
    it."""
    try:
        return record.model_dump_json()
    except ValueError:
        return dumps_record(record)


def _foreign(index: CoverageIndex, prompts: Iterable[str], cache: dict[str, bool]) -> int:
    """How many of ``prompts`` share no text with the room (``cache``: prompt -> shares)."""
    n = 0
    for prompt in prompts:
        hit = cache.get(prompt)
        if hit is None:
            hit = cache[prompt] = index.shares_text(prompt)
        n += not hit
    return n


def _coverage(
    index: CoverageIndex, inputs: list[str], windows: WindowCache | None = None
) -> Coverage:
    probe = CoverageProbe(index, windows)
    for text in inputs:
        probe.observe(text)
    return probe.result()


_Item = tuple[list[str], list[str]]
"""One episode's work for :class:`_Coverages`: (every text its models were sent, its
sub-call prompts)."""

_WORKER_INDEX: CoverageIndex | None = None
_WORKER_SEEN: dict[str, bool] = {}
_WORKER_WINDOWS = WindowCache()
"""A worker's texts that recur across episodes (the system prompt of every rlms episode):
hashed once per worker."""


def _worker_start(room: str) -> None:
    global _WORKER_INDEX
    _WORKER_INDEX = CoverageIndex.load_or_build(DataRoom.load(room), room_cache())


def _worker_use(index: CoverageIndex) -> None:
    global _WORKER_INDEX
    _WORKER_INDEX = index


def _worker_chunk(chunk: list[_Item], coverage: bool) -> list[tuple[Coverage | None, int]]:
    assert _WORKER_INDEX is not None, "coverage worker not started"
    return [
        (
            _coverage(_WORKER_INDEX, inputs, _WORKER_WINDOWS) if coverage else None,
            _foreign(_WORKER_INDEX, prompts, _WORKER_SEEN),
        )
        for inputs, prompts in chunk
    ]


class _Coverages:
    """Each episode's coverage (``None`` with ``coverage=False``) and count of sub-call
    prompts foreign to the room, in the order the episodes were :meth:`add`-ed.

    Fed while the source is parsed: with worker processes (``jobs >= 2``, or ``jobs == 0``
    and :data:`AUTO_JOBS_FROM` episodes parsed), chunks of :attr:`CHUNK` episodes go to the
    workers as soon as they are parsed, so the probe runs beside the parse and the writing
    instead of after them; otherwise each result is computed in this process when asked for.
    Workers are forked where the platform can (they share this process's imports and its room
    index, memory-mapped: a spawned worker spent ~0.8 s of CPU importing and loading the room
    before its first result, on the 2-core AMD EPYC), else spawned (each loads the room's
    cached index). They are made before this module starts any thread of its own (the parse
    runs on the calling thread)."""

    CHUNK = 64

    def __init__(self, binding: RoomBinding, jobs: int, coverage: bool = True) -> None:
        if jobs < 0:
            raise ValueError(f"--jobs must be 0 (auto) or more, not {jobs}")
        self.binding = binding
        self.jobs = jobs
        self.coverage = coverage
        self.items: list[_Item] = []
        self.sent = 0
        self.pool: ProcessPoolExecutor | None = None
        self.futures: list[Future[list[tuple[Coverage | None, int]]]] = []
        self._seen: dict[str, bool] = {}
        self._windows = WindowCache()

    def add(self, ep: ImportedEpisode) -> None:
        """Queue one parsed episode (in source order)."""
        self.items.append((ep.inputs if self.coverage else [], [c.prompt for c in ep.calls]))
        if self.pool is None and self.coverage:
            workers = resolve_jobs(self.jobs, len(self.items))
            if workers > 1:
                self._start(workers)
        self._send(final=False)

    def _start(self, workers: int) -> None:
        fork = "fork" in multiprocessing.get_all_start_methods()
        ctx = multiprocessing.get_context("fork" if fork else "spawn")
        init: Callable[..., None] = _worker_use if fork else _worker_start
        args: tuple[object, ...] = (self.binding.index,) if fork else (self.binding.info.path,)
        self.pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=init, initargs=args)

    def _send(self, final: bool) -> None:
        if self.pool is None:
            return
        while len(self.items) - self.sent >= self.CHUNK or (final and self.sent < len(self.items)):
            chunk = self.items[self.sent : self.sent + self.CHUNK]
            self.futures.append(self.pool.submit(_worker_chunk, chunk, self.coverage))
            self.sent += len(chunk)

    def finish(self) -> None:
        """Send what is still queued (call once every episode is added)."""
        self._send(final=True)

    def get(self, i: int) -> tuple[Coverage | None, int]:
        """Episode ``i``'s (coverage, foreign sub-call prompts); waits for its worker."""
        if self.pool is None:
            inputs, prompts = self.items[i]
            index = self.binding.index
            cov = _coverage(index, inputs, self._windows) if self.coverage else None
            return cov, _foreign(index, prompts, self._seen)
        return self.futures[i // self.CHUNK].result()[i % self.CHUNK]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)


def _summary(
    ep: ImportedEpisode, binding: RoomBinding, coverage: Coverage | None
) -> EpisodeSummary:
    start, end = ep.start, ep.end
    sub = Usage(cached_tokens=None)
    for c in ep.calls:
        sub = sub + c.usage
    memo = end.memo
    return EpisodeSummary(
        episode_id=start.episode_id,
        run_id=start.run_id,
        sample_index=start.sample_index,
        room=binding.info,
        task_id=binding.task_id,
        root_model=start.root.model_id,
        sub_model=start.sub.model_id,
        depth=start.depth,
        seed=start.seed,
        status=end.status,
        status_detail=end.status_detail,
        n_turns=len(ep.turns),
        n_sub_calls=len(ep.calls),
        n_sub_call_errors=sum(1 for c in ep.calls if c.error),
        n_sub_batches=len({(c.parent_call_id, c.batch_id) for c in ep.calls}),
        memo_sub_call_errors=count_sub_call_error_texts(memo),
        tokens=TokenUsage(root=ep.root_usage, sub=sub),
        wall_time_s=ep.wall_time_s,
        memo=memo,
        memo_chars=len(memo or ""),
        memo_sha256=memo_sha256(memo) if memo is not None else None,
        cited_documents=binding.cited(memo),
        coverage=coverage,
        started_at=start.started_at,
        ended_at=end.ended_at,
        extra=ep.extra,
    )


AUTO_JOBS_FROM = 500
"""``jobs=0`` (auto) measures coverage in worker processes from this many episodes on (fewer
do not pay back the workers' start, about a second)."""


def resolve_jobs(jobs: int, n_episodes: int) -> int:
    """Worker processes for the coverage of ``n_episodes``: ``jobs`` when given (>= 1), else
    (``0``) one per core up to 4 from :data:`AUTO_JOBS_FROM` episodes on, one below it."""
    if jobs >= 1:
        return jobs
    if jobs < 0:
        raise ValueError(f"--jobs must be 0 (auto) or more, not {jobs}")
    return min(4, os.cpu_count() or 1) if n_episodes >= AUTO_JOBS_FROM else 1


ParseFile = Callable[
    [Path, str, int, Callable[["ImportedEpisode"], None]],
    tuple[list["ImportedEpisode"], set[str], list[str]],
]
"""An importer's per-file parser: ``(file, its sha256, episodes before it, on_episode)`` ->
``(episodes, format versions found, warnings)``; it calls ``on_episode`` with each episode
as soon as it is parsed (the coverage probe starts on it while the rest is parsed)."""


def _check_out(out: Path) -> None:
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} already exists and is not empty; choose a new --out")


def import_files(
    files: Sequence[Path],
    parse: ParseFile,
    room: Path,
    out: Path,
    *,
    source_format: str,
    coverage: bool = True,
    jobs: int = 1,
    command: list[str] | None = None,
) -> ImportResult:
    """Bind ``room``, parse every file with ``parse`` (in the given order, before anything is
    written; each episode's coverage probe starts as soon as it is parsed) and write the run
    folder ``out`` (:func:`write_run`) with each file's hash and episode count and every
    version found; ``jobs`` as :func:`resolve_jobs` takes it.

    Raises ``FileExistsError`` when ``out`` holds files (before anything is read), and what
    :func:`bind_room`, ``parse`` and :func:`write_run` raise."""
    out = Path(out)
    _check_out(out)
    binding = bind_room(room)
    coverages = _Coverages(binding, jobs, coverage)
    # the cycle collector walked every object the parse keeps alive: 35-40% of the parse's
    # time (1.1-1.3 s vs 0.6-0.8 s for 2,000 two-turn episodes, 2-core AMD EPYC)
    with gc_paused():
        return _import(files, parse, binding, coverages, out, source_format, coverage, command)


def _import(
    files: Sequence[Path],
    parse: ParseFile,
    binding: RoomBinding,
    coverages: _Coverages,
    out: Path,
    source_format: str,
    coverage: bool,
    command: list[str] | None,
) -> ImportResult:
    try:
        parsed: list[ImportedEpisode] = []
        sources: list[SourceFile] = []
        notes: list[str] = []
        versions: set[str] = set()
        for f in files:
            digest = file_sha256(f)
            episodes, found, warned = parse(f, digest, len(parsed), coverages.add)
            parsed.extend(episodes)
            versions |= found
            notes.extend(warned)
            sources.append(
                SourceFile(path=str(f.resolve()), sha256=digest, n_episodes=len(episodes))
            )
        if len(parsed) != len(coverages.items):
            raise AssertionError(
                f"parser gave {len(parsed)} episodes but passed {len(coverages.items)} on"
            )
        return write_run(
            out,
            binding,
            parsed,
            source_format=source_format,
            source_version=",".join(sorted(versions)),
            files=sources,
            warnings_=notes,
            coverage=coverage,
            _coverages=coverages,
            command=command,
        )
    finally:
        coverages.close()


WRITE_CHUNK = 32
"""Trajectory files handed to the writer thread at a time."""


def _write_files(files: list[tuple[Path, bytes]]) -> None:
    for path, data in files:
        with open(path, "xb") as fh:
            fh.write(data)


def write_run(
    out: Path,
    binding: RoomBinding,
    episodes: Sequence[ImportedEpisode],
    *,
    source_format: str,
    source_version: str,
    files: Iterable[SourceFile],
    warnings_: list[str],
    coverage: bool = True,
    jobs: int = 1,
    command: list[str] | None = None,
    _coverages: _Coverages | None = None,
) -> ImportResult:
    """Write ``episodes`` as the run folder ``out`` (which must not exist or be empty).

    Every episode gets the room of ``binding`` and its task id; the summary's coverage comes
    from the coverage probe over every text the models were sent (``coverage=False`` leaves it
    unset; ``jobs`` as :func:`resolve_jobs` takes it: worker processes for the probe),
    citations from the memo. Sub-call prompts that share no text with the room
    (:meth:`~rlmdistill.coverage.index.CoverageIndex.shares_text`: the probe's rule, a span
    of 79 normalised characters or more is always found) are counted and reported as one
    warning (``warnings.warn`` and the result's ``warnings``). ``_coverages``: the probe
    already fed while parsing (:func:`import_files`); it is not closed here.

    Raises ``FileExistsError`` when ``out`` holds files. Nothing is left at ``out`` when
    writing fails (the run is written beside it and renamed into place).
    """
    out = Path(out)
    _check_out(out)
    own = _coverages is None
    coverages = _coverages if _coverages is not None else _Coverages(binding, jobs, coverage)
    try:
        if own:
            for ep in episodes:
                coverages.add(ep)
        coverages.finish()
        return _write(
            out,
            binding,
            episodes,
            coverages,
            source_format,
            source_version,
            files,
            warnings_,
            command,
        )
    finally:
        if own:
            coverages.close()


def _write(
    out: Path,
    binding: RoomBinding,
    episodes: Sequence[ImportedEpisode],
    coverages: _Coverages,
    source_format: str,
    source_version: str,
    files: Iterable[SourceFile],
    warnings_: list[str],
    command: list[str] | None,
) -> ImportResult:
    run_id = out.name
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{run_id}.importing-", dir=out.parent))
    try:
        traj_dir = tmp / layout.TRAJECTORIES
        traj_dir.mkdir()
        n_turns = n_calls = 0
        # One thread creates the trajectory files while this one builds the next records:
        # creating a file waits on the file system (0.3-1.4 ms a file on the 2-core AMD EPYC
        # VM's ext4), and more threads only contended for the folder (measured: 4 threads no
        # faster there, 3x slower on tmpfs).
        with ThreadPoolExecutor(1, "import-write") as pool:
            pending = []
            batch: list[tuple[Path, bytes]] = []
            for ep in episodes:
                start = ep.start
                start.run_id = run_id
                start.room = binding.info
                start.task_id = binding.task_id
                records = [start, *ep.turns, *ep.subagent_turns, *ep.calls, ep.end]
                text = "".join(_line(r) + "\n" for r in records)
                batch.append((traj_dir / f"{start.episode_id}.jsonl", text.encode("utf-8")))
                if len(batch) >= WRITE_CHUNK:
                    pending.append(pool.submit(_write_files, batch))
                    batch = []
                n_turns += len(ep.turns)
                n_calls += len(ep.calls)
            if batch:
                pending.append(pool.submit(_write_files, batch))
            summaries: list[str] = []
            n_foreign = 0
            for i, ep in enumerate(episodes):
                cov, foreign = coverages.get(i)
                n_foreign += foreign
                summaries.append(_line(_summary(ep, binding, cov)) + "\n")
            for f in pending:
                f.result()  # raises the first failed write
        notes = list(warnings_)
        if n_foreign:
            notes.append(
                f"{n_foreign} of {n_calls} sub-call prompts share no text with room "
                f"{binding.info.path} (the coverage probe finds no span in common): were these "
                "episodes run on this room?"
            )
        for note in notes:
            warnings.warn(note, stacklevel=3)
        (tmp / layout.EPISODES).write_text("".join(summaries), encoding="utf-8")
        depth = max((ep.start.depth for ep in episodes), default=1)
        first = episodes[0].start if episodes else None
        manifest = RunManifest(
            **current_provenance().model_dump(),
            run_id=run_id,
            config=RunConfig(
                rooms=[binding.info.path],
                root=first.root.spec if first else None,
                sub=first.sub.spec if first else None,
                episodes=len(episodes),
                depth=depth,
            ),
            config_hash=hashlib.sha256(
                json.dumps([source_format, [f.sha256 for f in files]]).encode()
            ).hexdigest()[:16],
            rooms=[binding.info],
            command=command if command is not None else list(sys.argv),
            source=ImportedSource(
                format=source_format, version=source_version, files=list(files), warnings=notes
            ),
        )
        (tmp / layout.RUN_MANIFEST).write_text(manifest.model_dump_json(indent=2), "utf-8")
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ImportResult(out, len(episodes), n_turns, n_calls, notes)


def utc_from_local(stamp: str | None) -> dt.datetime | None:
    """A naive ISO timestamp in the importing machine's local time (as ``datetime.now()``
    writes it), or an aware one, as aware UTC; ``None`` for a missing or unreadable one."""
    if not stamp:
        return None
    try:
        value = dt.datetime.fromisoformat(stamp)
    except (TypeError, ValueError):
        return None
    return value.astimezone(dt.UTC)
