"""``rlmdistill export-grpo``: judged runs -> GRPO rollout groups (thin adapter over
:func:`rlmdistill.export.grpo.export_grpo`; its flags are
:class:`~rlmdistill.export.grpo.GrpoOptions`' fields, :mod:`rlmdistill.cliconfig`)::

    rlmdistill export-grpo runs/r1-train --out datasets/r1-grpo [--unit episode|turn]
        [--reward pass_rate|weighted_pass_rate] [--scale std|none] [--std-floor 0.01]
        [--drop-zero-variance] [--grader reference]
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlmdistill.cliconfig import config_command
from rlmdistill.export.grpo import GrpoOptions, export_grpo

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add the ``export-grpo`` command to ``app``."""

    @config_command(app, "export-grpo")
    def export_grpo_cmd(
        options: GrpoOptions,
        runs: Annotated[list[Path], typer.Argument(help="Judged run directories.")],
        out: Annotated[Path, typer.Option(help="Dataset folder to write.")],
        overwrite: Annotated[bool, typer.Option(help="Replace an existing dataset.")] = False,
    ) -> None:
        """Export judged episodes as GRPO rollout groups (ids, loss masks, rewards, advantages)."""
        try:
            m = export_grpo(runs, out, options, overwrite=overwrite)
        except (ValueError, FileNotFoundError, FileExistsError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        drops = ", ".join(f"{k} {v}" for k, v in m.dropped_episodes.items()) or "none"
        typer.echo(
            f"{m.n_rows} rows from {m.n_episodes} episodes in {m.n_groups_exported}/{m.n_groups} "
            f"groups -> {out}  (zero-variance groups {m.n_zero_variance_groups}, floored "
            f"{m.n_floored_groups}; episodes dropped: {drops})"
        )
