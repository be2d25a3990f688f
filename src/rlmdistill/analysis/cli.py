"""The ``rlmdistill report`` and ``rlmdistill show`` commands: compare runs and write a
behaviour-shift report; summarise one run.

    rlmdistill report runs/base runs/tuned --out reports/tuned-vs-base
    rlmdistill report runs/d1 runs/d2 --out reports/depth --sft adapters/tuned --prices prices.yaml

The stage is :func:`rlmdistill.analysis.main.run` (a :class:`~rlmdistill.analysis.main.
ReportConfig` in, the report out); :func:`register` adds the typer command to an app
(``rlmdistill.cli`` wires it), which maps the report to output and an exit code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from rlmdistill.analysis.main import ReportConfig, ShowConfig, run
from rlmdistill.cliconfig import config_command
from rlmdistill.models.limits import load_prices

__all__ = ["load_prices", "register"]


def register(app: typer.Typer) -> None:
    """Add the ``report`` and ``show`` commands to ``app``."""

    @config_command(
        app, "show", arguments=["run_dir"], names={"as_json": ["--json"]}, config_flag=None
    )
    def show_cmd(config: ShowConfig) -> None:
        """Summarise a run: episodes by status, sub-calls, tokens by root/sub, pass rate, wall
        time."""
        from rich.console import Console

        from rlmdistill.analysis.render import render_summary
        from rlmdistill.analysis.summary import summarize_run

        console = Console()
        summary = summarize_run(config.run_dir)
        if config.as_json:
            console.print_json(json.dumps(summary.model_dump(mode="json", exclude={"episodes"})))
        else:
            render_summary(summary, console, per_episode=config.per_episode)

    @config_command(
        app,
        "report",
        arguments=["runs"],
        names={"labels": ["--label"]},
        exclude=["prices"],
    )
    def report_cmd(
        config: ReportConfig,
        prices: Annotated[
            Path | None, typer.Option(help="Price table (YAML/JSON); default: packaged examples.")
        ] = None,
    ) -> None:
        """Compare runs: before/after table with intervals over rooms, flipped criteria,
        correlations, ablations, grids and training curves (report.md + report.json + PNGs)."""
        out = config.out
        try:
            if prices is not None:
                config = config.model_copy(update={"prices": load_prices(prices)})
            report = run(config)
        except (ValueError, FileNotFoundError, FileExistsError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        n = sum(a.n_episodes for a in report.arms)
        typer.echo(
            f"report over {len(report.arms)} runs ({n} episodes) written to {out}: "
            f"report.md, report.json, {len(report.figures)} figures"
        )
