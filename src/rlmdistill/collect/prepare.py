"""What a process does before its episodes run, whichever executor runs them: the room's
handle (info record, checked REPL snapshot, coverage index) and the one-off sandbox check.

:mod:`rlmdistill.collect.runner` (this process's threads) and
:mod:`rlmdistill.collect.ray_node` (a Ray node) both call these, so a node prepares a room
exactly as a local run does.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

from rlmdistill.coverage.index import CoverageIndex
from rlmdistill.harness.episode import RoomHandle
from rlmdistill.harness.repl import ReplDied, ReplLimits, ReplProcess
from rlmdistill.harness.sandbox import SandboxMode, SandboxUnavailable, explain_failure, find_bwrap
from rlmdistill.models.base import ModelClient
from rlmdistill.paths import room_cache
from rlmdistill.rooms import DataRoom
from rlmdistill.rooms.room import SNAPSHOT_FORMAT
from rlmdistill.traces.schema import RoomInfo

__all__ = ["check_sandbox", "ensure_snapshot", "room_handle"]


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
    snap = ensure_snapshot(room, room_cache() / f"{room.snapshot_key}.snapshot.json")
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


def _snapshot_format(index: Path) -> int | None:
    """The ``format`` of the snapshot index at ``index`` (1 when it has none: written before
    formats were numbered), or None when it cannot be read as a JSON object."""
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
        return int(data.get("format", 1)) if isinstance(data, dict) else None
    except (OSError, ValueError, TypeError):
        return None


def ensure_snapshot(room: DataRoom, snap: Path) -> Path:
    """The REPL snapshot of ``room`` at ``snap`` (index) + ``snap.with_suffix('.bin')``,
    checked against the room at every run start; a missing or tampered one is (re)built.

    The check writes a fresh snapshot into a private folder beside the cache and compares
    sha256 digests of both files (a snapshot is a pure function of the room's documents). On a
    match the cached files stay (REPLs of other runs keep sharing their pages); otherwise the
    fresh files replace them atomically, with a warning for a tampered cache. Cost: one write
    of the room's text (~10 ms per MB). A cached snapshot of an earlier index format
    (:data:`SNAPSHOT_FORMAT`) is rebuilt without a warning: it is a cache, not a fault.
    """
    snap.parent.mkdir(parents=True, exist_ok=True)
    fresh_dir = Path(tempfile.mkdtemp(prefix=".snapshot-check-", dir=snap.parent))
    try:
        fresh = room.snapshot(fresh_dir / snap.name)
        pairs = [(fresh, snap), (fresh.with_suffix(".bin"), snap.with_suffix(".bin"))]
        cached = [_digest(old) for _, old in pairs]
        if cached != [_digest(new) for new, _ in pairs]:
            if any(d is not None for d in cached) and _snapshot_format(snap) == SNAPSHOT_FORMAT:
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
