"""Room sets: many synthetic rooms of a spread of sizes, split into train and holdout, and
CUAD room sets (:func:`build_cuad_set`, the loop's rooms, of one size or of sizes from a list
or a :class:`SizeSchedule`); one leak check for both (:func:`split_overlap`).

Command: ``rlmdistill rooms set --sizes 20,50,100 --per-size K --seed S --holdout-fraction F
--out DIR`` (or ``--spec spec.yaml`` holding the same fields; ``rooms/cli.py``; the engine
is :func:`build_roomset`). Later stages read the manifest with :func:`load_roomset` to study
behaviour against room size (collect on ``train`` rooms, evaluate on ``holdout`` rooms).

Layout::

    DIR/roomset.json                 the manifest (:class:`RoomSet`)
    DIR/rooms/<split>-n<size>-<k>/   one synthetic room each (see rlmdistill.rooms.synth)

Splits: for each size the ``K`` replicates are ordered and ``floor(K * F)`` of them go to
holdout; the remaining ``round(len(sizes) * K * F) - sum(floor)`` holdout places go to sizes
drawn with the set's seed, so every size is represented and the holdout share is as close to
``F`` as whole rooms allow. Room seeds are ``sha256("<seed>:<size>:<k>")`` truncated to 31 bits,
so every room has its own seed; a seed whose target company name repeats an earlier room's is
replaced by the next one (``:<attempt>`` appended).

Separation of train and holdout (recorded in ``roomset.json`` as :class:`SplitCheck`, and an
error when it fails): CUAD contracts come from disjoint halves of the source (even-indexed
files for train, odd for holdout); target companies differ; no document text is identical
across the splits (:func:`split_overlap`, the check the loop uses too); and no paragraph of 80+ characters (blank-line separated, whitespace
normalised) occurs in both splits. Template boilerplate shorter than a paragraph (section
headings, signature lines) may recur; every filler paragraph names its room's target.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rlmdistill.rooms.cuad import SAMPLE_SOURCE, CuadError, build_cuad_room, criteria_per_contract
from rlmdistill.rooms.meta import CuadRoomMeta, SynthRoomMeta, read_room_meta
from rlmdistill.rooms.synth import (
    GENERATOR,
    MAX_DOCS,
    MIN_DOCS,
    build_synth_room,
    target_for_seed,
)
from rlmdistill.rooms.task import load_task

__all__ = [
    "MAX_DRAWS",
    "ROOMSET_SCHEMA_VERSION",
    "CuadBuild",
    "CuadSetSpec",
    "RoomDraw",
    "RoomSet",
    "RoomSetEntry",
    "RoomSetError",
    "RoomSetSpec",
    "SizeSchedule",
    "Split",
    "SplitCheck",
    "SplitOverlap",
    "build_cuad_set",
    "build_roomset",
    "check_split",
    "default_cuad_source",
    "load_roomset",
    "log_spaced_sizes",
    "parse_sizes",
    "scheduled_sizes",
    "split_overlap",
]

ROOMSET_SCHEMA_VERSION = 1
"""Version of ``roomset.json``."""
MIN_PARAGRAPH_CHARS = 80
"""Paragraphs shorter than this are not compared across splits (headings, signature lines)."""

Split = Literal["train", "holdout"]
"""Which side of the experiment a room is on."""

_WS = re.compile(r"\s+")
_PARA = re.compile(r"\n[ \t]*\n")


class RoomSetError(ValueError):
    """A room set spec is invalid, the output folder is not empty, a manifest cannot be read,
    or the train/holdout separation check failed (the message names the file or field)."""


class RoomSetSpec(BaseModel):
    """What to build: sizes, replicates, seed, holdout share and generator options (each
    field's docstring is its description: the help of ``rooms set``'s flags)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    sizes: list[int] = Field(min_length=1)
    """Room sizes in documents, each in `[MIN_DOCS, MAX_DOCS]` (duplicates removed, sorted)."""
    per_size: int = Field(default=1, ge=1, le=1000)
    """Rooms per size (replicates with different seeds)."""
    seed: int = Field(default=0, ge=0)
    """Seed of the whole set (room seeds and holdout draws derive from it)."""
    holdout_fraction: float = Field(default=0.25, ge=0.0, le=1.0)
    """Share of rooms in the holdout split."""
    length_scale: float = Field(default=1.0, ge=0.05, le=20.0)
    """Multiplier on generated document lengths (rlmdistill.rooms.synth.build_synth_room)."""
    cuad_source: str | None = str(SAMPLE_SOURCE)
    """CUAD folder for copied contracts (None: none); train and holdout use disjoint halves."""

    @field_validator("sizes")
    @classmethod
    def _sizes(cls, value: list[int]) -> list[int]:
        bad = [s for s in value if not MIN_DOCS <= s <= MAX_DOCS]
        if bad:
            raise ValueError(f"sizes must be between {MIN_DOCS} and {MAX_DOCS}; got {bad}")
        return sorted(set(value))


class RoomSetEntry(BaseModel):
    """One room of a set."""

    name: str
    """Folder name, ``<split>-n<size>-<k>``."""
    path: str
    """Room folder relative to the set folder (POSIX)."""
    split: Split
    size: int
    """Documents."""
    replicate: int
    """``k`` among the rooms of this size (0-based)."""
    seed: int
    room_hash: str
    """:attr:`rlmdistill.rooms.room.DataRoom.room_hash` of the room."""
    task_id: str
    target: str
    """Target company's name."""
    n_chars: int
    approx_tokens: int
    n_folders: int
    n_criteria: int
    cuad_partition: tuple[int, int]
    """``(k, m)``: the room used every ``m``-th CUAD contract from the ``k``-th."""


class SplitCheck(BaseModel):
    """Result of the train/holdout separation check (see the module docstring)."""

    method: str = (
        f"documents: sha256 of bytes; paragraphs: blank-line separated, whitespace-normalised, "
        f">= {MIN_PARAGRAPH_CHARS} chars, sha256; CUAD: source file names; targets: names"
    )
    shared_documents: int
    """Documents whose text is identical in a train room and a holdout room."""
    shared_paragraphs: int
    """Distinct paragraphs found in both splits."""
    shared_cuad_files: list[str]
    shared_targets: list[str]
    n_train_paragraphs: int
    n_holdout_paragraphs: int
    examples: list[str] = Field(default_factory=list)
    """Up to 3 shared paragraphs (first 120 characters), for diagnosis."""
    passed: bool


class RoomSet(BaseModel):
    """``roomset.json``: the spec, the rooms and the separation check."""

    schema_version: int = ROOMSET_SCHEMA_VERSION
    kind: Literal["roomset"] = "roomset"
    generator: str = GENERATOR
    spec: RoomSetSpec
    rooms: list[RoomSetEntry]
    check: SplitCheck | None = None
    """``None`` when the set has no holdout (or no train) rooms."""

    def split(self, split: Split) -> list[RoomSetEntry]:
        """Rooms of one split, in manifest order (size, then replicate)."""
        return [r for r in self.rooms if r.split == split]

    def room_paths(self, base: str | Path, split: Split | None = None) -> list[Path]:
        """Absolute room folders (``base`` is the set folder), optionally of one split."""
        return [Path(base).resolve() / r.path for r in self.rooms if split in (None, r.split)]


def log_spaced_sizes(lo: int, hi: int, n: int) -> list[int]:
    """``n`` sizes from ``lo`` to ``hi`` spaced evenly in log scale, rounded to 2 significant
    digits and deduplicated (``log_spaced_sizes(20, 5000, 5)`` -> ``[20, 79, 320, 1300,
    5000]``). Raises :class:`RoomSetError` unless ``MIN_DOCS <= lo <= hi <= MAX_DOCS`` and
    ``n >= 1``."""
    if not (MIN_DOCS <= lo <= hi <= MAX_DOCS) or n < 1:
        raise RoomSetError(
            f"log sizes need {MIN_DOCS} <= lo <= hi <= {MAX_DOCS} and n >= 1; got {lo}, {hi}, {n}"
        )
    if n == 1:
        return [lo]
    out = []
    for i in range(n):
        x = math.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * i / (n - 1))
        out.append(min(hi, max(lo, int(float(f"{x:.2g}")))))
    out[0], out[-1] = lo, hi
    return sorted(set(out))


def parse_sizes(text: str) -> list[int]:
    """Sizes from ``"20,50,100"`` or ``"log:LO:HI:N"`` (see :func:`log_spaced_sizes`).
    Raises :class:`RoomSetError` naming the bad value."""
    text = text.strip()
    try:
        if text.startswith("log:"):
            lo, hi, n = (int(p) for p in text[4:].split(":"))
            return log_spaced_sizes(lo, hi, n)
        sizes = [int(p) for p in text.split(",") if p.strip()]
    except ValueError as exc:
        raise RoomSetError(f"--sizes: cannot parse {text!r} ({exc})") from exc
    if not sizes:
        raise RoomSetError("--sizes: no sizes given")
    return sizes


def _room_seed(seed: int, size: int, k: int, attempt: int) -> int:
    key = f"{seed}:{size}:{k}" + (f":{attempt}" if attempt else "")
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) & 0x7FFFFFFF


def _assign_splits(spec: RoomSetSpec) -> dict[tuple[int, int], Split]:
    rng = random.Random(f"roomset:{spec.seed}:splits")
    k = spec.per_size
    floors = {s: math.floor(k * spec.holdout_fraction) for s in spec.sizes}
    total = round(len(spec.sizes) * k * spec.holdout_fraction)
    extra = max(0, total - sum(floors.values()))
    room_for_more = [s for s in spec.sizes if floors[s] < k]
    for size in rng.sample(room_for_more, min(extra, len(room_for_more))):
        floors[size] += 1
    return {(s, i): ("holdout" if i < floors[s] else "train") for s in spec.sizes for i in range(k)}


def _documents(room: Path) -> Iterator[tuple[str, str, str]]:
    """``(document path under documents/, sha256 of its bytes, its text)`` of every file of a
    room, in path order (text decoded as UTF-8 with replacement, for paragraphs)."""
    docs = Path(room) / "documents"
    for file in sorted(docs.rglob("*")):
        if file.is_file():
            raw = file.read_bytes()
            yield (
                file.relative_to(docs).as_posix(),
                hashlib.sha256(raw).hexdigest(),
                raw.decode("utf-8", errors="replace"),
            )


def _paragraph_digests(text: str) -> Iterator[tuple[str, str]]:
    """``(sha256, normalised text)`` of every paragraph of ``text`` of
    :data:`MIN_PARAGRAPH_CHARS`+ characters (blank-line separated, whitespace collapsed)."""
    for para in _PARA.split(text):
        norm = _WS.sub(" ", para).strip()
        if len(norm) >= MIN_PARAGRAPH_CHARS:
            yield hashlib.sha256(norm.encode("utf-8", "surrogatepass")).hexdigest(), norm


class SplitOverlap(NamedTuple):
    """What a training and a held-out set of rooms share (:func:`split_overlap`)."""

    n_train_documents: int
    """Distinct document contents (sha256 of bytes) in the training rooms."""
    n_holdout_documents: int
    shared_documents: list[tuple[str, str]]
    """``(training room/document, held-out room/document)`` per content found in both, sorted."""
    n_train_paragraphs: int
    """Distinct paragraphs (80+ characters, normalised) in the training rooms."""
    n_holdout_paragraphs: int
    shared_paragraphs: int
    """Distinct paragraphs found in both."""
    examples: list[str]
    """Up to 3 shared paragraphs (first 120 characters), for diagnosis."""


def split_overlap(train: Sequence[Path], holdout: Sequence[Path]) -> SplitOverlap:
    """The one train/holdout leak check of room folders, whatever built them (synthetic room
    sets here, the loop's CUAD or given rooms in :mod:`rlmdistill.loop.rooms`): identical
    document bytes (sha256) and shared paragraphs. Reads every document once; memory is one
    digest per distinct document and paragraph. Callers decide what fails (a room set fails
    on any overlap; the loop on shared documents, since distinct contracts may share a
    boilerplate paragraph)."""
    train_docs: dict[str, str] = {}
    train_paras: set[str] = set()
    for room in train:
        for name, digest, text in _documents(room):
            train_docs.setdefault(digest, f"{Path(room).name}/{name}")
            train_paras.update(d for d, _ in _paragraph_digests(text))
    holdout_docs: dict[str, str] = {}
    holdout_paras: set[str] = set()
    shared_paras: set[str] = set()
    examples: list[str] = []
    for room in holdout:
        for name, digest, text in _documents(room):
            holdout_docs.setdefault(digest, f"{Path(room).name}/{name}")
            for d, norm in _paragraph_digests(text):
                holdout_paras.add(d)
                if d in train_paras and d not in shared_paras:
                    shared_paras.add(d)
                    if len(examples) < 3:
                        examples.append(norm[:120])
    shared = sorted((train_docs[h], holdout_docs[h]) for h in train_docs.keys() & holdout_docs)
    return SplitOverlap(
        n_train_documents=len(train_docs),
        n_holdout_documents=len(holdout_docs),
        shared_documents=shared,
        n_train_paragraphs=len(train_paras),
        n_holdout_paragraphs=len(holdout_paras),
        shared_paragraphs=len(shared_paras),
        examples=examples,
    )


def check_split(base: str | Path, rooms: list[RoomSetEntry]) -> SplitCheck:
    """Compare the train and holdout rooms of a set under ``base``: the documents and
    paragraphs of :func:`split_overlap`, plus CUAD source files and target names (see the
    module docstring); any overlap fails."""
    base = Path(base)
    overlap = split_overlap(
        [base / r.path for r in rooms if r.split == "train"],
        [base / r.path for r in rooms if r.split == "holdout"],
    )

    def cuad_files(split: Split) -> set[str]:
        names: set[str] = set()
        for entry in rooms:
            if entry.split == split:
                meta = read_room_meta(base / entry.path)
                if isinstance(meta, SynthRoomMeta):
                    names.update(meta.cuad_documents.values())
        return names

    shared_cuad = sorted(cuad_files("train") & cuad_files("holdout"))
    targets = {r.target for r in rooms if r.split == "train"}
    shared_targets = sorted({r.target for r in rooms if r.split == "holdout"} & targets)
    shared_docs = len(overlap.shared_documents)
    return SplitCheck(
        shared_documents=shared_docs,
        shared_paragraphs=overlap.shared_paragraphs,
        shared_cuad_files=shared_cuad,
        shared_targets=shared_targets,
        n_train_paragraphs=overlap.n_train_paragraphs,
        n_holdout_paragraphs=overlap.n_holdout_paragraphs,
        examples=overlap.examples,
        passed=not (shared_docs or overlap.shared_paragraphs or shared_cuad or shared_targets),
    )


def build_roomset(
    spec: RoomSetSpec, out: str | Path, *, overwrite: bool = False, progress: bool = False
) -> RoomSet:
    """Build every room of ``spec`` under ``out/rooms/``, check the split, write
    ``out/roomset.json`` and return the manifest.

    Raises :class:`RoomSetError` when ``out`` is a non-empty folder (``overwrite=True``
    replaces a previously built set) or the separation check fails (the manifest is still
    written, with ``check.passed = false``), and :class:`~rlmdistill.rooms.synth.SynthError`
    for an unusable CUAD source.
    """
    out = Path(out).resolve()
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise RoomSetError(f"{out}: output folder exists and is not empty (use --overwrite)")
        if not (out / "roomset.json").is_file():
            raise RoomSetError(f"{out}: refusing to overwrite a folder that is not a room set")
        shutil.rmtree(out / "rooms", ignore_errors=True)
        (out / "roomset.json").unlink()
    out.mkdir(parents=True, exist_ok=True)
    splits = _assign_splits(spec)
    jobs = [(size, k) for size in spec.sizes for k in range(spec.per_size)]
    if progress:
        from tqdm import tqdm

        jobs = list(tqdm(jobs, desc="rooms", unit="room"))  # materialised: progress per room
    entries: list[RoomSetEntry] = []
    targets: set[str] = set()
    for size, k in jobs:
        split = splits[(size, k)]
        attempt = 0
        seed = _room_seed(spec.seed, size, k, attempt)
        while target_for_seed(seed) in targets:
            attempt += 1
            seed = _room_seed(spec.seed, size, k, attempt)
        targets.add(target_for_seed(seed))
        partition = (0, 2) if split == "train" else (1, 2)
        name = f"{split}-n{size}-{k}"
        report = build_synth_room(
            out / "rooms" / name,
            size,
            seed,
            length_scale=spec.length_scale,
            cuad_source=spec.cuad_source,
            cuad_partition=partition,
        )
        entries.append(
            RoomSetEntry(
                name=name,
                path=f"rooms/{name}",
                split=split,
                size=size,
                replicate=k,
                seed=seed,
                room_hash=report.room_hash,
                task_id=report.task_id,
                target=report.target,
                n_chars=report.n_chars,
                approx_tokens=report.approx_tokens,
                n_folders=report.n_folders,
                n_criteria=report.n_criteria,
                cuad_partition=partition,
            )
        )
    has_both = {e.split for e in entries} == {"train", "holdout"}
    check = check_split(out, entries) if has_both else None
    roomset = RoomSet(spec=spec, rooms=entries, check=check)
    (out / "roomset.json").write_text(roomset.model_dump_json(indent=2) + "\n", encoding="utf-8")
    if check is not None and not check.passed:
        raise RoomSetError(
            f"{out / 'roomset.json'}: train and holdout rooms share text: "
            f"{check.shared_documents} documents, {check.shared_paragraphs} paragraphs, "
            f"CUAD files {check.shared_cuad_files}, targets {check.shared_targets}"
        )
    return roomset


def load_roomset(path: str | Path) -> RoomSet:
    """Read ``roomset.json`` (``path`` is the file or the set folder) and check that every
    room folder exists. Raises :class:`RoomSetError` naming the file (and the room) when it is
    missing, not JSON, invalid, or names a room folder that is not there."""
    path = Path(path)
    if path.is_dir():
        path = path / "roomset.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise RoomSetError(f"{path}: room set manifest not found") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RoomSetError(f"{path}: cannot read room set JSON: {exc}") from exc
    try:
        roomset = RoomSet.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            ".".join(str(p) for p in err["loc"]) + f": {err['msg']}" for err in exc.errors()
        )
        raise RoomSetError(f"{path}: invalid room set: {problems}") from exc
    if roomset.schema_version > ROOMSET_SCHEMA_VERSION:
        raise RoomSetError(
            f"{path}: schema_version {roomset.schema_version} is newer than this rlmdistill "
            f"understands ({ROOMSET_SCHEMA_VERSION})"
        )
    for entry in roomset.rooms:
        if not (path.parent / entry.path / "task.json").is_file():
            raise RoomSetError(f"{path}: room {entry.name!r} not found at {entry.path}")
    return roomset


# ----------------------------------------------------------------------- CUAD room sets
def scheduled_sizes(
    lo: int, hi: int, n: int, spacing: Literal["log", "linear"] = "log"
) -> list[int]:
    """``n`` room sizes (contracts per room) from ``lo`` to ``hi``, ascending.

    ``log``: ``lo * (hi / lo) ** (i / (n - 1))`` for ``i = 0..n-1`` (numpy's ``geomspace``);
    ``linear``: ``lo + (hi - lo) * i / (n - 1)``; each rounded half up (``floor(x + 0.5)``,
    so 2.5 -> 3, unlike Python's ``round``), ``n == 1`` gives ``[lo]``. Duplicates are kept:
    rooms of one size are replicates with their own draws (``scheduled_sizes(1, 12, 12)`` ->
    ``[1, 1, 2, 2, 2, 3, 4, 5, 6, 8, 10, 12]``). Unlike :func:`log_spaced_sizes` (synthetic
    room sets: one room per distinct size) every room keeps its place. Raises
    :class:`RoomSetError` unless ``1 <= lo <= hi`` and ``n >= 1``.
    """
    if not 1 <= lo <= hi or n < 1:
        raise RoomSetError(f"size schedule needs 1 <= min <= max and n >= 1; got {lo}, {hi}, {n}")
    if n == 1:
        return [lo]
    out = []
    for i in range(n):
        t = i / (n - 1)
        x = lo * (hi / lo) ** t if spacing == "log" else lo + (hi - lo) * t
        out.append(min(hi, max(lo, math.floor(x + 0.5))))
    return out


class SizeSchedule(BaseModel):
    """Room sizes from ``min`` to ``max`` contracts, one per room (:func:`scheduled_sizes`)."""

    model_config = ConfigDict(extra="forbid")

    min: int = Field(ge=1, description="Contracts in the smallest room.")
    max: int = Field(ge=1, description="Contracts in the largest room.")
    spacing: Literal["log", "linear"] = Field(
        "log", description="log: geometric spacing (numpy geomspace); linear: even steps."
    )

    def sizes(self, n: int) -> list[int]:
        """Sizes of ``n`` rooms (:func:`scheduled_sizes`; raises :class:`RoomSetError`)."""
        return scheduled_sizes(self.min, self.max, n, self.spacing)


class CuadSetSpec(Protocol):
    """What :func:`build_cuad_set` reads of its spec (the loop's ``rooms:`` section,
    :class:`rlmdistill.loop.config.CuadRooms`)."""

    @property
    def source(self) -> str | None:
        """CUAD-format folder (``None``: :func:`default_cuad_source`)."""
        ...

    @property
    def contracts_per_room(self) -> int:
        """Contracts (documents) per room."""
        ...

    @property
    def train_rooms(self) -> int:
        """Training rooms."""
        ...

    @property
    def holdout_rooms(self) -> int:
        """Held-out rooms."""
        ...

    @property
    def seed(self) -> int:
        """Seed of the contract sampling (room ``k`` uses ``seed + k``)."""
        ...

    def room_sizes(self) -> list[int]:
        """Contracts of every room, training rooms first (``train_rooms + holdout_rooms``
        entries; ``[contracts_per_room] * n`` when no size schedule is given)."""
        ...


MAX_DRAWS = 50
"""Draws tried per CUAD room before giving up on finding one with a rubric criterion."""


class RoomDraw(NamedTuple):
    """How one CUAD room of the loop was drawn (one entry of ``split.json``'s ``cuad.rooms``)."""

    name: str
    """Room folder name (``train-0``, ``holdout-1``, ...)."""
    seed: int
    """Seed of the kept draw: ``spec.seed + k + attempt * n_rooms`` for room index ``k``."""
    attempt: int
    """0 when the first draw had a criterion; else the number of draws rejected before it."""
    contracts: list[str]
    """Source text file names of the room's contracts."""
    n_criteria: int
    """Rubric criteria of the room's task (>= 1)."""
    rejected: list[dict[str, Any]] | None
    """Draws with no criterion (``{"seed", "contracts"}``), in order; ``None`` when the rooms
    were reused from an earlier call and no record of their draws was found."""


class CuadBuild(NamedTuple):
    """What :func:`build_cuad_set` returns."""

    train: list[Path]
    holdout: list[Path]
    draws: list[RoomDraw]
    """One per room, training rooms first."""
    reused: bool
    """True when every room was already built (nothing drawn this call)."""


def default_cuad_source() -> Path:
    """``../shared/data/cuad`` beside the checkout when present, else the packaged sample."""
    shared = Path(__file__).resolve().parents[4] / "shared" / "data" / "cuad"  # beside src/
    return shared if (shared / "master_clauses.csv").exists() else SAMPLE_SOURCE


def _fix_hint(spec: CuadSetSpec) -> str:
    n = spec.train_rooms + spec.holdout_rooms
    sizes = spec.room_sizes()
    if len(set(sizes)) <= 1 and sizes and sizes[0] == spec.contracts_per_room:
        per_room = f"rooms.contracts_per_room = {spec.contracts_per_room}"
    else:
        per_room = (
            f"rooms.train_sizes / holdout_sizes or their size schedules: {sum(sizes)} "
            "contracts in all"
        )
    return (
        f"ask for fewer rooms (rooms.train_rooms + rooms.holdout_rooms = {n}) or fewer "
        f"contracts per room ({per_room}), or give "
        "a larger CUAD source (rooms.source, e.g. ../shared/data/cuad or the full CUAD v1 "
        "release)"
    )


def _reused_draws(spec: CuadSetSpec, paths: list[Path], previous: Path | None) -> list[RoomDraw]:
    """Draws of rooms built earlier: from their room.json and task.json, with the rejected
    draws carried over from the previous ``split.json`` when it describes the same rooms."""
    n = len(paths)
    old: dict[str, Any] = {}
    if previous is not None and previous.is_file():
        try:
            rooms = json.loads(previous.read_text(encoding="utf-8"))["cuad"]["rooms"]
            old = {r["name"]: r for r in rooms}
        except (ValueError, KeyError, TypeError):
            old = {}
    draws = []
    for k, path in enumerate(paths):
        meta = read_room_meta(path)
        contracts = sorted(
            c.source_file for c in (meta.contracts if isinstance(meta, CuadRoomMeta) else [])
        )
        seed = meta.seed
        prior = old.get(path.name) or {}
        same = prior.get("contracts") == contracts and prior.get("seed") == seed
        draws.append(
            RoomDraw(
                name=path.name,
                seed=seed,
                attempt=(seed - spec.seed - k) // n,
                contracts=contracts,
                n_criteria=len(load_task(path / "task.json").criteria),
                rejected=prior.get("rejected") if same else None,
            )
        )
    return draws


def build_cuad_set(
    spec: CuadSetSpec, out: Path, *, previous_record: Path | None = None
) -> CuadBuild:
    """Build ``spec.train_rooms`` + ``spec.holdout_rooms`` disjoint CUAD rooms under ``out``,
    each with at least one rubric criterion.

    Room ``k`` (training rooms first, then held-out) draws ``spec.room_sizes()[k]``
    contracts (``spec.contracts_per_room`` unless a size schedule is given) not used by rooms
    ``0..k-1`` with seed ``spec.seed + k``; when the draw has no
    criterion (no contract in it carries a positive M&A label) it is drawn again with seed
    ``spec.seed + k + a * n_rooms`` for attempt ``a = 1, 2, ...`` (so no two draws share a
    seed), up to :data:`MAX_DRAWS` draws. Deterministic for a given source and spec; rooms
    whose first draw has a criterion are the same as before this rule existed, and a spec
    without a size schedule draws exactly the rooms it drew before schedules existed.

    Rooms already built (``task.json`` present, all of them) are reused when each holds the
    number of contracts the spec asks for; otherwise every room is rebuilt, so the exclusion
    chain stays whole. ``previous_record``: the record of an
    earlier call (the loop's ``rooms/split.json``), whose rejected draws are carried over
    for reused rooms.

    The CUAD counterpart of :func:`build_roomset` (the loop's rooms); check its split with
    :func:`split_overlap`.

    Raises:
        RoomSetError: naming the room and how to change the config, when the source has
            too few contracts left for a room, when no contract left carries an M&A label, or
            when :data:`MAX_DRAWS` draws all had no criterion; also when a reused room has no
            criterion (built before this rule: remove the workspace's ``rooms/`` and ``runs/``),
            and when a reused room holds another number of contracts than the spec asks for
            (the rooms were built with other settings: runs made on them would be mixed with
            the new ones; use a new workspace).
    """
    names = [f"train-{k}" for k in range(spec.train_rooms)]
    names += [f"holdout-{k}" for k in range(spec.holdout_rooms)]
    paths = [out / n for n in names]
    n_rooms = len(paths)
    sizes = spec.room_sizes()
    if len(sizes) != n_rooms:
        raise RoomSetError(
            f"rooms: {len(sizes)} room sizes for {n_rooms} rooms (rooms.train_rooms + "
            "rooms.holdout_rooms); give one size per room"
        )
    reused = all((p / "task.json").exists() for p in paths)
    if reused:
        draws = _reused_draws(spec, paths, previous_record)
        other = [
            f"{d.name} ({len(d.contracts)}, asked {size})"
            for d, size in zip(draws, sizes, strict=True)
            if d.contracts and len(d.contracts) != size
        ]
        if other:
            raise RoomSetError(
                f"rooms: {out} holds rooms built with other settings: contracts per room "
                f"differ for {', '.join(other)}; runs made on them would be mixed with runs on "
                "the rooms asked for. Use a new workspace (or remove "
                f"{out} and the runs made on it, {out.parent / 'runs'})"
            )
        empty = [d.name for d in draws if d.n_criteria == 0]
        if empty:
            raise RoomSetError(
                f"rooms: {', '.join(empty)} under {out} have no rubric criterion (built before "
                "rooms were required to have one); their episodes would have no pass rate. "
                f"Remove {out} and the runs made on it ({out.parent / 'runs'}), or use a new "
                "workspace, to rebuild them"
            )
        return CuadBuild(paths[: spec.train_rooms], paths[spec.train_rooms :], draws, True)

    source = Path(spec.source) if spec.source else default_cuad_source()
    per_contract = criteria_per_contract(source)
    n_labelled = sum(1 for v in per_contract.values() if v)
    used: list[str] = []
    draws = []
    for k, path in enumerate(paths):
        left = [c for c in per_contract if c not in used]
        labelled_left = sum(1 for c in left if per_contract[c])
        size = sizes[k]
        where = f"rooms: room {path.name} (room {k + 1} of {n_rooms}, source {source})"
        if len(left) < size:
            raise RoomSetError(
                f"{where}: needs {size} contracts but only {len(left)} of "
                f"the source's {len(per_contract)} are left after the rooms before it; "
                + _fix_hint(spec)
            )
        if labelled_left == 0:
            raise RoomSetError(
                f"{where}: none of the {len(left)} contracts left carries an M&A label, so the "
                f"room would have no rubric criterion ({n_labelled} of the source's "
                f"{len(per_contract)} contracts carry one, all used by earlier rooms); "
                + _fix_hint(spec)
            )
        rejected: list[dict[str, Any]] = []
        for attempt in range(MAX_DRAWS):
            seed = spec.seed + k + attempt * n_rooms
            try:
                report = build_cuad_room(source, path, size, seed, overwrite=True, exclude=used)
            except CuadError as exc:
                raise RoomSetError(f"{where}: {exc}; " + _fix_hint(spec)) from exc
            if report.n_criteria:
                break
            rejected.append({"seed": seed, "contracts": report.contracts})
        else:
            raise RoomSetError(
                f"{where}: {MAX_DRAWS} draws of {size} from the "
                f"{len(left)} contracts left all had no rubric criterion (only {labelled_left} "
                "of them carry an M&A label); " + _fix_hint(spec)
            )
        used += report.contracts
        draws.append(
            RoomDraw(path.name, seed, attempt, report.contracts, report.n_criteria, rejected)
        )
    return CuadBuild(paths[: spec.train_rooms], paths[spec.train_rooms :], draws, False)
