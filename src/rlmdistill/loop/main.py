"""The ``loop`` as a function: :func:`run` takes an
:class:`~rlmdistill.loop.config.ExperimentConfig` and returns the
:class:`~rlmdistill.loop.run.LoopResult` (``rlmdistill loop`` calls it; the typer command in
:mod:`rlmdistill.loop.cli` maps the result to output and an exit code). Each stage of a round
is run through its package's stage function (``<stage>.main.run``, docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlmdistill.loop.config import ExperimentConfig
    from rlmdistill.loop.run import LoopResult

__all__ = ["run"]


def run(
    config: ExperimentConfig,
    *,
    rounds: int | None = None,
    log: Callable[[str], None] = lambda s: None,
    progress: bool = True,
    strict: bool = False,
) -> LoopResult:
    """Run (or resume) every stage of every round of ``config``; see
    :func:`rlmdistill.loop.run.run_loop` for ``rounds``, ``log``, ``strict`` and the errors."""
    from rlmdistill.loop.run import run_loop

    return run_loop(config, rounds=rounds, log=log, progress=progress, strict=strict)
