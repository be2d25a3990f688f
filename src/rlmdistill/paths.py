"""Where rlmdistill keeps caches: ``$RLMDISTILL_HOME`` or ``~/.cache/rlmdistill``."""

from __future__ import annotations

import os
from pathlib import Path


def cache_home() -> Path:
    """Root of rlmdistill's caches (models, room snapshots). Created on first use."""
    env = os.environ.get("RLMDISTILL_HOME")
    root = Path(env).expanduser() if env else Path.home() / ".cache" / "rlmdistill"
    root.mkdir(parents=True, exist_ok=True)
    return root


def room_cache() -> Path:
    """Where REPL snapshots of rooms are cached: ``$RLMDISTILL_ROOM_CACHE`` or ``<home>/rooms``."""
    override = os.environ.get("RLMDISTILL_ROOM_CACHE")
    root = Path(override) if override else cache_home() / "rooms"
    root.mkdir(parents=True, exist_ok=True)
    return root
