"""CLI of the loop stage: ``rlmdistill loop EXPERIMENT.yaml`` and ``rlmdistill lineage WS``."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from rlmdistill.cliconfig import config_command
from rlmdistill.loop.config import LineageOptions, LoopRunOptions

__all__ = ["loop_main", "register"]

err = Console(stderr=True)


def loop_main(
    experiment: Path,
    rounds: int | None = None,
    progress: bool = True,
    strict: bool = False,
    seed: int = 0,
) -> int:
    """Run or resume the experiment; print each stage and the wall time. Returns 0.
    ``strict``: a room document whose text cannot be extracted is an error (default: skipped
    and noted). ``seed``: offset of every training and evaluation seed, in the workspace
    ``<workspace>-seed<seed>`` (:meth:`~rlmdistill.loop.config.ExperimentConfig.with_seed`;
    the rooms are the same)."""
    from rlmdistill.loop.config import load_experiment
    from rlmdistill.loop.main import run

    cfg = load_experiment(experiment).with_seed(seed)
    res = run(
        cfg,
        rounds=rounds,
        log=lambda s: err.print(s, highlight=False, markup=False),
        progress=progress,
        strict=strict,
    )
    for r in res.rounds:
        arms = f" ({', '.join(a.label for a in r.arms)})" if r.arms else ""
        err.print(f"round {r.round}: report {r.report / 'report.md'}{arms}")
    stages = ", ".join(f"{name} {sec:.0f}s" for name, sec in res.stage_s.items())
    err.print(f"loop wall time: {res.wall_s:.0f}s ({stages})")
    return 0


def register(app: typer.Typer) -> None:
    """Add ``loop`` and ``lineage`` to ``app``."""

    @config_command(app, "loop", arguments=["experiment"], config_flag=None)
    def loop_cmd(options: LoopRunOptions) -> None:
        """Self-distillation: collect -> judge -> filter -> SFT -> evaluate base vs tuned -> report
        (each stage skipped when its output is up to date)."""
        raise typer.Exit(
            loop_main(
                options.experiment, options.rounds, options.progress, options.strict, options.seed
            )
        )

    @config_command(app, "lineage", arguments=["workspace"], config_flag=None)
    def lineage_cmd(options: LineageOptions) -> None:
        """Which runs made which dataset made which adapter made which run and report."""
        from rlmdistill.traces.lineage import render_tree

        typer.echo(render_tree(options.workspace))
