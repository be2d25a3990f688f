"""``rlmdistill export-grpo``: judged runs -> GRPO rollout groups (thin adapter over
:func:`rlmdistill.export.grpo.export_grpo`)::

    rlmdistill export-grpo runs/r1-train --out datasets/r1-grpo [--unit episode|turn]
        [--reward pass_rate|weighted_pass_rate] [--scale std|none] [--std-floor 0.01]
        [--drop-zero-variance] [--grader reference]
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlmdistill.export.advantages import DEFAULT_STD_FLOOR
from rlmdistill.export.grpo import GrpoOptions, export_grpo

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add the ``export-grpo`` command to ``app``."""

    @app.command("export-grpo")
    def export_grpo_cmd(
        runs: Annotated[list[Path], typer.Argument(help="Judged run directories.")],
        out: Annotated[Path, typer.Option(help="Dataset folder to write.")],
        grader: Annotated[
            str | None, typer.Option(help="Grader of the reward (default: the only one).")
        ] = None,
        reward: Annotated[str, typer.Option(help="pass_rate | weighted_pass_rate")] = "pass_rate",
        unit: Annotated[str, typer.Option(help="episode | turn (rows)")] = "episode",
        scale: Annotated[str, typer.Option(help="std (GRPO) | none (Dr. GRPO)")] = "std",
        std_floor: Annotated[float, typer.Option(help="Smallest group std divided by.")] = (
            DEFAULT_STD_FLOOR
        ),
        drop_zero_variance: Annotated[
            bool, typer.Option(help="Leave out groups whose rewards are all equal.")
        ] = False,
        min_group_size: Annotated[int, typer.Option(help="Drop smaller groups.")] = 2,
        overwrite: Annotated[bool, typer.Option(help="Replace an existing dataset.")] = False,
    ) -> None:
        """Export judged episodes as GRPO rollout groups (ids, loss masks, rewards, advantages)."""
        try:
            options = GrpoOptions.model_validate(
                {
                    "grader": grader,
                    "reward": reward,
                    "unit": unit,
                    "scale": scale,
                    "std_floor": std_floor,
                    "drop_zero_variance": drop_zero_variance,
                    "min_group_size": min_group_size,
                }
            )
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
