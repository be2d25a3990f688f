"""``rlmdistill export-grpo``: judged runs -> GRPO rollout groups (thin adapter over
:func:`rlmdistill.export.grpo.export_grpo`; its flags are
:class:`~rlmdistill.export.grpo.GrpoOptions`' fields, :mod:`rlmdistill.cliconfig`)::

    rlmdistill export-grpo runs/r1-train --out datasets/r1-grpo [--unit episode|turn]
        [--reward pass_rate|weighted_pass_rate] [--scale std|none] [--std-floor 0.01]
        [--drop-zero-variance] [--grader reference]
"""

from __future__ import annotations

from pathlib import Path

import typer
from pydantic import Field

from rlmdistill.cliconfig import config_command
from rlmdistill.export.grpo import GrpoOptions, export_grpo

__all__ = ["ExportGrpoConfig", "register"]


class ExportGrpoConfig(GrpoOptions):
    """``rlmdistill export-grpo``: which judged runs, into which dataset folder, and the
    :class:`~rlmdistill.export.grpo.GrpoOptions` (a ``--config`` file may hold any of these
    fields; one holding only GrpoOptions' fields, as before, still reads)."""

    runs: list[Path] = Field(description="Judged run directories.")
    out: Path = Field(description="Dataset folder to write.")
    overwrite: bool = Field(False, description="Replace an existing dataset.")

    def options(self) -> GrpoOptions:
        """The export options alone (what ``grpo.json`` records)."""
        return GrpoOptions.model_validate(self.model_dump(exclude={"runs", "out", "overwrite"}))


def register(app: typer.Typer) -> None:
    """Add the ``export-grpo`` command to ``app``."""

    @config_command(app, "export-grpo", arguments=["runs"])
    def export_grpo_cmd(config: ExportGrpoConfig) -> None:
        """Export judged episodes as GRPO rollout groups (ids, loss masks, rewards, advantages)."""
        try:
            m = export_grpo(config.runs, config.out, config.options(), overwrite=config.overwrite)
        except (ValueError, FileNotFoundError, FileExistsError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        drops = ", ".join(f"{k} {v}" for k, v in m.dropped_episodes.items()) or "none"
        typer.echo(
            f"{m.n_rows} rows from {m.n_episodes} episodes in {m.n_groups_exported}/{m.n_groups} "
            f"groups -> {config.out}  (zero-variance groups {m.n_zero_variance_groups}, floored "
            f"{m.n_floored_groups}; episodes dropped: {drops})"
        )
