"""Rooms of an experiment: CUAD training and held-out rooms with no document in common.

Rooms are built once into ``<workspace>/rooms/{train,holdout}-<k>`` (contracts sampled
without replacement across all rooms, via ``build_cuad_room(exclude=...)``), and the split is
checked on content: no document's bytes (sha256) may appear in both a training and a held-out
room, whatever the rooms' origin. The check is written to ``<workspace>/rooms/split.json``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import NamedTuple

from rlmdistill.loop.config import CuadRooms, ExperimentConfig, ExperimentError

__all__ = ["SplitCheck", "build_cuad_rooms", "check_split", "default_cuad_source", "prepare_rooms"]


class SplitCheck(NamedTuple):
    """Result of :func:`check_split`."""

    n_train_documents: int
    n_holdout_documents: int
    shared: list[tuple[str, str]]
    """(training document, held-out document) pairs with identical bytes."""


def default_cuad_source() -> Path:
    """``../shared/data/cuad`` beside the checkout when present, else the packaged sample."""
    from rlmdistill.rooms.cuad import SAMPLE_SOURCE

    shared = Path(__file__).resolve().parents[4] / "shared" / "data" / "cuad"
    return shared if (shared / "master_clauses.csv").exists() else SAMPLE_SOURCE


def build_cuad_rooms(spec: CuadRooms, out: Path) -> tuple[list[Path], list[Path]]:
    """Build ``spec.train_rooms`` + ``spec.holdout_rooms`` disjoint CUAD rooms under ``out``.

    Rooms already built (``task.json`` present, all of them) are reused; otherwise every room
    is rebuilt, so the exclusion chain stays whole. Raises ``CuadError`` when the source has
    too few contracts (e.g. the packaged 16-contract sample holds 8 rooms of 2).
    """
    from rlmdistill.rooms.cuad import build_cuad_room

    names = [f"train-{k}" for k in range(spec.train_rooms)]
    names += [f"holdout-{k}" for k in range(spec.holdout_rooms)]
    paths = [out / n for n in names]
    if not all((p / "task.json").exists() for p in paths):
        source = Path(spec.source) if spec.source else default_cuad_source()
        used: list[str] = []
        for k, path in enumerate(paths):
            report = build_cuad_room(
                source, path, spec.contracts_per_room, spec.seed + k, overwrite=True, exclude=used
            )
            used += report.contracts
    return paths[: spec.train_rooms], paths[spec.train_rooms :]


def _doc_hashes(room: Path) -> dict[str, str]:
    docs = Path(room) / "documents"
    return {
        hashlib.sha256(p.read_bytes()).hexdigest(): str(p.relative_to(docs))
        for p in sorted(docs.rglob("*"))
        if p.is_file()
    }


def check_split(train: list[Path], holdout: list[Path]) -> SplitCheck:
    """Compare every document's bytes (sha256) across the training and held-out rooms."""
    tr: dict[str, str] = {}
    for room in train:
        tr.update({h: f"{room.name}/{d}" for h, d in _doc_hashes(room).items()})
    ho: dict[str, str] = {}
    for room in holdout:
        ho.update({h: f"{room.name}/{d}" for h, d in _doc_hashes(room).items()})
    shared = sorted((tr[h], ho[h]) for h in tr.keys() & ho.keys())
    return SplitCheck(len(tr), len(ho), shared)


def prepare_rooms(cfg: ExperimentConfig) -> tuple[list[Path], list[Path], SplitCheck]:
    """The experiment's training and held-out room folders, built if needed, split checked.

    Writes ``<workspace>/rooms/split.json``. Raises :class:`ExperimentError` naming the shared
    documents when a training and a held-out room share one.
    """
    rooms_dir = cfg.workspace / "rooms"
    if cfg.rooms is not None:
        train, holdout = build_cuad_rooms(cfg.rooms, rooms_dir)
    else:
        train, holdout = list(cfg.train_rooms), list(cfg.holdout_rooms)
    check = check_split(train, holdout)
    rooms_dir.mkdir(parents=True, exist_ok=True)
    (rooms_dir / "split.json").write_text(
        json.dumps(
            {
                "method": "sha256 of each document's bytes",
                "train": [str(p) for p in train],
                "holdout": [str(p) for p in holdout],
                "n_train_documents": check.n_train_documents,
                "n_holdout_documents": check.n_holdout_documents,
                "shared": check.shared,
                "passed": not check.shared,
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    if check.shared:
        pairs = "; ".join(f"{a} == {b}" for a, b in check.shared[:5])
        raise ExperimentError(
            f"training and held-out rooms share {len(check.shared)} document(s): {pairs}"
        )
    return train, holdout, check
