"""``room.json``: the typed schema of a built room's provenance, its one writer and reader.

Two builders write it (``rlmdistill rooms build-cuad``: :class:`CuadRoomMeta`; ``rlmdistill
rooms synth``: :class:`SynthRoomMeta`, told apart by ``kind``), and every reader (the room-set
check, the loop's CUAD draws, ``judge-eval``) reads it with :func:`read_room_meta`, so none
parses it its own way. The schema lives here, beside ``task.json``'s (:mod:`rlmdistill.rooms.task`),
because the room builders stand below ``traces`` in the layering.

Version: :data:`ROOM_META_VERSION`. While it is 1 the file carries no ``schema_version`` key,
so a synthetic room stays byte-identical to what its seed always gave (the synthetic-room
golden pins the bytes); a later version writes the key, and a file without it is version 1.
Nested parts (per-contract gold spans, planted issues, sizes) are kept as written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

__all__ = [
    "ROOM_META",
    "ROOM_META_VERSION",
    "CuadContract",
    "CuadRoomMeta",
    "RoomMeta",
    "SynthRoomMeta",
    "read_room_meta",
    "write_room_meta",
]

ROOM_META_VERSION = 1
"""Version of the ``room.json`` shape (absent key = 1)."""

ROOM_META = "room.json"
"""File name of a room's provenance (also ``rlmdistill.traces.layout.ROOM_META``)."""


class _Meta(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = Field(ROOM_META_VERSION, exclude_if=lambda v: v == 1)
    """Version of the shape; not written while it is 1 (see the module docstring)."""


class CuadContract(BaseModel):
    """One contract of a CUAD room (``contracts[]``)."""

    model_config = ConfigDict(extra="forbid")

    index: int
    """1-based position in the room."""
    doc_id: str
    """Document id in the room (``<Folder>/<name>.txt``)."""
    folder: str
    contract_type: str
    contract_type_source: str
    csv_filename: str
    """The label row's file name in ``master_clauses.csv``."""
    source_file: str
    """The CUAD text file the document was copied from."""
    match: str
    """How the label row was matched to the text file (``exact``, ``fuzzy ...``)."""
    n_chars: int
    criteria: list[str]
    """Ids of the rubric criteria about this contract."""
    gold_spans: list[dict[str, Any]]
    """The lawyer-labelled spans with their verbatim check, as written."""


class CuadRoomMeta(_Meta):
    """``room.json`` of a CUAD room (``rlmdistill rooms build-cuad``)."""

    kind: Literal["cuad"] = "cuad"
    built_by: str
    """``rlmdistill <version>`` that built the room."""
    source: str
    """The CUAD folder the contracts came from."""
    layout: str
    seed: int
    n_contracts: int
    n_label_rows: int
    n_candidates: int
    task_id: str
    categories: list[str]
    attribution: str
    license: str
    unmatched_rows: dict[str, Any]
    """``{"count": n, "examples": [...]}``: label rows matched to no text file."""
    gold_spans: dict[str, Any]
    """``{"n", "n_verbatim", "share_verbatim", "note"}``."""
    contracts: list[CuadContract]


class SynthRoomMeta(_Meta):
    """``room.json`` of a synthetic room (``rlmdistill rooms synth``)."""

    kind: Literal["synthetic"] = "synthetic"
    generator: str
    """Generator version (same seed and version = same bytes)."""
    built_by: str
    seed: int
    n_docs: int
    length_scale: float | int
    cuad_source: str | None
    """The CUAD folder contracts were copied from (``rlmdistill:cuad_sample`` for the packaged
    sample); ``None`` without one."""
    cuad_partition: list[Any]
    task_id: str
    room_hash: str
    target: str
    buyer: str
    deal_structure: str
    letter_of_intent: str
    """Document id of the letter of intent."""
    sizes: dict[str, Any]
    """Documents, characters, bytes, approximate tokens, categories, folders, criteria."""
    criteria_by_type: dict[str, int]
    issues_by_class: dict[str, int]
    folders: dict[str, int]
    """Leaf folder -> documents."""
    cuad_documents: dict[str, str]
    """Document id -> CUAD source file name, for the copied contracts."""
    issues: list[dict[str, Any]]
    """Every planted issue (documents, criteria, absent documents), as written."""
    attribution: str | None


RoomMeta = Annotated[CuadRoomMeta | SynthRoomMeta, Field(discriminator="kind")]
"""A ``room.json`` of either builder."""

_ADAPTER: TypeAdapter[CuadRoomMeta | SynthRoomMeta] = TypeAdapter(RoomMeta)


def write_room_meta(room_dir: Path, meta: CuadRoomMeta | SynthRoomMeta) -> Path:
    """Write ``<room_dir>/room.json`` (indent 2, UTF-8 unescaped, final newline); its path."""
    path = Path(room_dir) / ROOM_META
    data = meta.model_dump(mode="json")
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def read_room_meta(room_dir: Path) -> CuadRoomMeta | SynthRoomMeta:
    """``<room_dir>/room.json`` as a :class:`CuadRoomMeta` or :class:`SynthRoomMeta`.

    Raises ``FileNotFoundError`` naming the file when the room has none (a folder not built
    by ``rooms build-cuad`` / ``rooms synth``) and ``ValueError`` naming it when it is not JSON
    or not a room record (the message names the field), or was written by a newer version."""
    path = Path(room_dir) / ROOM_META
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"{path}: no room.json (not a built room)") from exc
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from exc
    version = data.get("schema_version", 1) if isinstance(data, dict) else None
    if isinstance(version, int) and version > ROOM_META_VERSION:
        raise ValueError(
            f"{path}: schema_version {version} is newer than this rlmdistill knows "
            f"({ROOM_META_VERSION}); upgrade rlmdistill"
        )
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise ValueError(f"{path}: not a valid room.json: {exc}") from exc
