"""Preparing the output folder of a room builder (CUAD, synthetic) without clobbering data."""

from __future__ import annotations

import shutil
from pathlib import Path

__all__ = ["prepare_room_folder"]

_BUILT_DIRS = ("documents", ".rlmdistill")
_BUILT_FILES = ("task.json", "room.json", "ATTRIBUTION.md")


def prepare_room_folder(out: Path, overwrite: bool, error: type[Exception] = ValueError) -> None:
    """Create ``out`` for a new room, or clear a room built there before when ``overwrite``.

    Only what a builder writes is removed (``documents/``, ``.rlmdistill/``, ``task.json``,
    ``room.json``, ``ATTRIBUTION.md``), and only in a folder holding a ``room.json``. Raises
    ``error`` naming the folder when ``out`` is a file, is non-empty without ``overwrite``, or
    is non-empty and not a built room.
    """
    if out.exists() and not out.is_dir():
        raise error(f"{out}: exists and is not a folder")
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise error(f"{out}: output folder exists and is not empty (use --overwrite)")
        if not (out / "room.json").is_file():
            raise error(f"{out}: refusing to overwrite a folder that is not a built room")
        for name in _BUILT_DIRS:
            if (out / name).is_dir():
                shutil.rmtree(out / name)
        for name in _BUILT_FILES:
            (out / name).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
