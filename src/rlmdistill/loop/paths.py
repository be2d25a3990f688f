"""Paths in the loop's records: relative to the workspace, so a workspace can move.

Every record the loop writes (``rooms/split.json``, ``lineage.jsonl``, ``experiment.json``,
the adapter path inside a tuned root's model spec) names a path inside the workspace by its
POSIX path relative to the workspace (``rooms/train-0``); a path outside it (a given room
folder, the base model) stays absolute. Records written before this rule hold absolute paths;
:func:`from_record` still reads them, and :func:`legacy_match` tells whether such an absolute
path names the same artefact as a workspace-relative one (its last components are the same),
so a moved workspace written by an older version is recognised too.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

__all__ = ["from_record", "legacy_match", "to_record"]


def to_record(path: Path | str, workspace: Path) -> str:
    """``path`` as written in a loop record: POSIX and relative to ``workspace`` when inside it
    (``"rooms/train-0"``), else absolute. Both are resolved first (symlinks, ``..``)."""
    resolved = Path(path).resolve()
    try:
        return resolved.relative_to(Path(workspace).resolve()).as_posix()
    except ValueError:
        return str(resolved)


def from_record(text: str, workspace: Path) -> Path:
    """The path a loop record names: a relative one is joined to ``workspace``; an absolute one
    (older records, or outside the workspace) is returned unchanged."""
    path = Path(text)
    return path if path.is_absolute() else Path(workspace) / path


def legacy_match(recorded: str, relative: str) -> bool:
    """True when ``recorded``, an absolute path from an older record, ends with the components
    of the workspace-relative path ``relative`` (``/old/ws/adapters/r1`` vs ``adapters/r1``).

    This is how a record of a workspace that moved since it was written is recognised; it is
    used only where the artefact is already known by its place in the workspace layout."""
    rec = PurePosixPath(Path(recorded).as_posix())
    rel = PurePosixPath(relative)
    if not rec.is_absolute() or rel.is_absolute() or not rel.parts:
        return False
    return rec.parts[-len(rel.parts) :] == rel.parts
