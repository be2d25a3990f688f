"""Provenance saved beside every artefact: package versions and the git commit of the code."""

from __future__ import annotations

import platform
import subprocess
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


def package_versions() -> dict[str, str]:
    """``{name: version}`` for Python and the packages that shape results (absent ones skipped)."""
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def git_state(path: Path | None = None) -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the git checkout holding ``path`` (default: this package).

    ``(None, None)`` when the code is not in a git checkout (e.g. installed from a wheel).
    """
    where = path or Path(__file__).resolve().parent
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
