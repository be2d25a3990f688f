"""Provenance saved beside every artefact: package versions, the git commit of the code, and
the machine.

:class:`Provenance` is the one record of these fields: every manifest we write (``run.json``,
``export.json``, ``sft.json``, ``report.json``, ``grpo.json``, ``rl.json``, ``merge.json``)
inherits it, so the fields are spelled once and sit at the top level of each file, as they
always have (files written before this record load unchanged: every field has a default).
:func:`current_provenance` fills it for this process.

Both are computed once per process and cached: the code a process runs is the code it
loaded at its start, and finding them costs 0.05-0.25 s (``importlib.metadata`` scans, two
``git`` runs). :func:`prefetch` computes them, and the machine description of
:func:`rlmdistill.hardware.machine_info` (which imports torch: seconds), on a background
thread, so a stage can start that work at its beginning and find it done when it writes its
manifest (``collect`` does: run start is no longer on an episode's critical path).
"""

from __future__ import annotations

import contextlib
import platform
import subprocess
import threading
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

_PACKAGES = (
    "rlmdistill",
    "torch",
    "transformers",
    "peft",
    "trl",
    "urllib3",
    "pydantic",
    "datasets",
)


class Provenance(BaseModel):
    """What made an artefact: package versions, code commit and machine.

    Inherited by every manifest; its fields are top-level keys of the file. Every field has a
    default, so a file written before a field was recorded loads (empty/``None``)."""

    versions: dict[str, str] = Field(default_factory=dict)
    """``{name: version}`` of Python and the packages that shape results
    (:func:`package_versions`); empty when not recorded."""
    git_commit: str | None = None
    """Commit (40 hex) of the rlmdistill checkout that wrote the file; ``None`` when the code
    is not in a git checkout or the writer did not record it."""
    git_dirty: bool | None = None
    """Whether that checkout had uncommitted changes to tracked files; ``None``: unknown."""
    machine: dict[str, Any] = Field(default_factory=dict)
    """Where it ran (:func:`rlmdistill.hardware.machine_info`: CPU model, vector extensions,
    torch threads, what ``dtype: auto`` picks and why; ``run.json`` adds ``sandbox``); empty
    when the writer does not record the machine, and in older files."""


def current_provenance(machine: dict[str, Any] | None = None) -> Provenance:
    """This process's :class:`Provenance`: :func:`package_versions`, :func:`git_state` of this
    package, and ``machine`` (default: not recorded, ``{}``; pass
    :func:`rlmdistill.hardware.machine_info` where the machine matters: it imports torch).
    Spread it into a manifest with ``**current_provenance().model_dump()``."""
    commit, dirty = git_state()
    return Provenance(
        versions=package_versions(),
        git_commit=commit,
        git_dirty=dirty,
        machine=dict(machine or {}),
    )


_lock = threading.Lock()
_versions: dict[str, str] | None = None
_git: dict[Path, tuple[str | None, bool | None]] = {}
_prefetch: threading.Thread | None = None


def package_versions() -> dict[str, str]:
    """``{name: version}`` for Python and the packages that shape results (absent ones
    skipped); computed once per process (a copy is returned)."""
    global _versions
    with _lock:
        if _versions is None:
            out = {"python": platform.python_version()}
            for name in _PACKAGES:
                try:
                    out[name] = metadata.version(name)
                except metadata.PackageNotFoundError:
                    continue
            _versions = out
        return dict(_versions)


def git_state(path: Path | None = None) -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the git checkout holding ``path`` (default: this package), as
    at its first call in this process.

    ``(None, None)`` when the code is not in a git checkout (e.g. installed from a wheel).
    """
    where = path or Path(__file__).resolve().parent
    with _lock:
        if where not in _git:
            _git[where] = _git_state(where)
        return _git[where]


def _git_state(where: Path) -> tuple[str | None, bool | None]:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit or None, bool(dirty)


def prefetch() -> None:
    """Compute package versions, the git state and the machine description on a daemon
    thread (once per process; later calls return at once). Errors are left to the later
    calls that need the values."""
    global _prefetch

    def work() -> None:
        from rlmdistill.hardware import machine_info

        for fn in (package_versions, git_state, machine_info):
            with contextlib.suppress(Exception):  # the caller that needs it will raise it
                fn()

    with _lock:
        if _prefetch is None:
            _prefetch = threading.Thread(target=work, name="provenance", daemon=True)
            _prefetch.start()
