"""Rooms of an experiment: CUAD training and held-out rooms with no document in common.

Rooms are built once into ``<workspace>/rooms/{train,holdout}-<k>`` by the room-set builder
(:func:`rlmdistill.rooms.roomset.build_cuad_set`: contracts sampled without replacement across
all rooms, via ``build_cuad_room(exclude=...)``), and the split is
checked on content with the room-set check (:func:`rlmdistill.rooms.roomset.split_overlap`): no
document's bytes (sha256) may appear in both a training and a held-out room, whatever the
rooms' origin; paragraphs shared across the splits are counted in ``split.json``. Every room must have at least one rubric criterion (a room
without one gives episodes with no pass rate): a CUAD draw with none is drawn again with the
next seed of its own sequence, and given room folders are checked. What happened (seeds,
contracts, criteria, rejected draws) and the split check are written to
``<workspace>/rooms/split.json``.

Room sizes (contracts per room) are ``rooms.contracts_per_room`` each, or vary by a size list
or schedule per side (:class:`~rlmdistill.loop.config.CuadRooms`); synthetic rooms of many
sizes (``rlmdistill rooms set``) are given as folders (``train_rooms`` / ``holdout_rooms``:
the set's ``rooms/train-n<size>-<k>`` and ``rooms/holdout-n<size>-<k>``), checked the same
way. Both arms of the experiment run on the same held-out rooms with the same seeds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

from rlmdistill.loop.config import CuadRooms, ExperimentConfig, ExperimentError
from rlmdistill.loop.paths import from_record, to_record
from rlmdistill.rooms.meta import CuadRoomMeta, read_room_meta
from rlmdistill.rooms.roomset import (
    MAX_DRAWS,
    CuadBuild,
    RoomDraw,
    RoomSetError,
    SplitOverlap,
    build_cuad_set,
    default_cuad_source,
    split_overlap,
)
from rlmdistill.traces import layout
from rlmdistill.traces.artefacts import RoomsSplit, read_rooms_split

__all__ = [
    "MAX_DRAWS",
    "CuadBuild",
    "PreparedRooms",
    "RoomDraw",
    "build_cuad_rooms",
    "check_criteria",
    "count_documents",
    "default_cuad_source",
    "prepare_rooms",
    "read_split",
]


class PreparedRooms(NamedTuple):
    """What :func:`prepare_rooms` returns."""

    train: list[Path]
    holdout: list[Path]
    check: SplitOverlap
    """The leak check (:func:`~rlmdistill.rooms.roomset.split_overlap`); the loop fails on
    ``shared_documents`` only (distinct contracts may share a boilerplate paragraph)."""
    n_criteria: dict[str, int]
    """Rubric criteria per room folder (all >= 1)."""
    draws: list[RoomDraw]
    """How each CUAD room was drawn (empty for given room folders)."""
    cuad_source: str | None = None
    """The CUAD folder the rooms were drawn from, as recorded in their ``room.json`` (``None``
    for given room folders)."""


def build_cuad_rooms(spec: CuadRooms, out: Path) -> CuadBuild:
    """The loop's CUAD rooms: :func:`rlmdistill.rooms.roomset.build_cuad_set` of the
    ``rooms:`` section, its :class:`~rlmdistill.rooms.roomset.RoomSetError` raised as
    :class:`ExperimentError` (same message, naming the room and the fields to change)."""
    try:
        return build_cuad_set(spec, out, previous_record=out / layout.SPLIT)
    except RoomSetError as exc:
        raise ExperimentError(str(exc)) from exc


def check_criteria(rooms: list[Path]) -> dict[str, int]:
    """Rubric criteria per room folder (``task.json``), keyed by the folder path.

    Raises:
        ExperimentError: naming every room without a ``task.json`` or with no criterion
            (episodes there would have no pass rate, useless for training and evaluation).
    """
    from rlmdistill.rooms.task import TaskError, load_task

    counts: dict[str, int] = {}
    problems: list[str] = []
    for room in rooms:
        try:
            counts[str(room)] = n = len(load_task(Path(room) / layout.TASK).criteria)
        except TaskError as exc:
            problems.append(str(exc))
            continue
        if n == 0:
            problems.append(f"{room}: task.json has no rubric criterion")
    if problems:
        raise ExperimentError(
            "rooms: every room needs a task with at least one rubric criterion (episodes "
            "without one have no pass rate): " + "; ".join(problems)
        )
    return counts


def count_documents(room: Path) -> int:
    """Files under the room's ``documents/`` (its size: contracts of a CUAD room, documents
    of a synthetic one), as recorded in ``split.json``'s ``n_documents``."""
    return sum(1 for f in (Path(room) / "documents").rglob("*") if f.is_file())


def prepare_rooms(cfg: ExperimentConfig) -> PreparedRooms:
    """The experiment's training and held-out room folders, built if needed, checked.

    Writes ``<workspace>/rooms/split.json``: the rooms, their criteria and document counts
    (``n_criteria``, ``n_documents``: room sizes, which a size schedule varies), for CUAD rooms
    how each was drawn (:class:`RoomDraw` under ``cuad``), and the split check; room folders
    inside the workspace are written relative to it (:func:`~rlmdistill.loop.paths.to_record`,
    read back by :func:`read_split`). Raises
    :class:`ExperimentError` naming the shared documents when a training and a held-out room
    share one, and the errors of :func:`build_cuad_rooms` / :func:`check_criteria` naming a
    room with no rubric criterion.
    """
    rooms_dir = cfg.workspace / layout.ROOMS
    cuad: dict[str, Any] | None = None
    cuad_source: str | None = None
    draws: list[RoomDraw] = []
    if cfg.rooms is not None:
        built = build_cuad_rooms(cfg.rooms, rooms_dir)
        train, holdout, draws = built.train, built.holdout, built.draws
        first = (built.train or built.holdout)[0]
        meta = read_room_meta(first)
        cuad_source = meta.source if isinstance(meta, CuadRoomMeta) else meta.cuad_source
        cuad = {
            "source": cuad_source,
            "spec": cfg.rooms.record(),
            "rule": "room k draws with seed + k, then seed + k + a * n_rooms (attempt a) "
            "until the room has a rubric criterion",
            "rooms": [d._asdict() for d in built.draws],
        }
    else:
        train, holdout = list(cfg.train_rooms), list(cfg.holdout_rooms)
    criteria = check_criteria([*train, *holdout])
    check = split_overlap(train, holdout)
    rooms_dir.mkdir(parents=True, exist_ok=True)
    split = RoomsSplit(
        train=[to_record(p, cfg.workspace) for p in train],
        holdout=[to_record(p, cfg.workspace) for p in holdout],
        n_criteria={to_record(k, cfg.workspace): n for k, n in criteria.items()},
        n_documents={to_record(p, cfg.workspace): count_documents(p) for p in [*train, *holdout]},
        cuad=cuad,
        n_train_documents=check.n_train_documents,
        n_holdout_documents=check.n_holdout_documents,
        shared=check.shared_documents,
        shared_paragraphs=check.shared_paragraphs,
        passed=not check.shared_documents,
    )
    (rooms_dir / layout.SPLIT).write_text(
        # version 1 is written without its key: byte-identical to the splits of earlier
        # versions, whose hash is the rooms check's fingerprint in lineage.jsonl
        json.dumps(
            split.model_dump(mode="json", exclude_none=True, exclude={"schema_version"}), indent=2
        )
        + "\n",
        encoding="utf-8",
    )
    if check.shared_documents:
        pairs = "; ".join(f"{a} == {b}" for a, b in check.shared_documents[:5])
        raise ExperimentError(
            f"training and held-out rooms share {len(check.shared_documents)} document(s): {pairs}"
        )
    return PreparedRooms(train, holdout, check, criteria, draws, cuad_source)


def read_split(workspace: Path) -> tuple[list[Path], list[Path], dict[Path, int]]:
    """The training rooms, held-out rooms and criteria per room of ``<workspace>/rooms/
    split.json`` as paths: relative entries are joined to ``workspace``; absolute ones (files
    written before paths were stored relative, or rooms outside the workspace) are kept.

    Raises ``FileNotFoundError`` when the workspace has no split file and ``ValueError``
    (naming the file) when it is not a split record.
    """
    path = Path(workspace) / layout.ROOMS / layout.SPLIT
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no rooms split record")
    split = read_rooms_split(workspace)  # ArtefactError (a ValueError) naming the file
    train = [from_record(p, workspace) for p in split.train]
    holdout = [from_record(p, workspace) for p in split.holdout]
    n_criteria = {from_record(k, workspace): int(n) for k, n in split.n_criteria.items()}
    return train, holdout, n_criteria
