"""Provenance saved beside every artefact: package versions and the git commit of the code.

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
