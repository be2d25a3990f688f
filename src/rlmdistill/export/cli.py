"""``rlmdistill export``: root turns of collected runs -> an SFT dataset (standalone).

The main entry is ``rlmdistill filter`` (which selects episodes and calls
:func:`rlmdistill.export.export_dataset`); this command exports every finished episode of the
given runs, or the kept episodes of a filter's ``decisions.jsonl`` (the stage is
:func:`rlmdistill.export.main.run`; this module maps its report to output and an exit code)::

    rlmdistill export runs/demo --out datasets/demo --tokenizer qwen2.5-coder-0.5b
    rlmdistill export --episodes datasets/demo/decisions.jsonl --out datasets/demo-turns \\
        --tokenizer qwen2.5-coder-0.5b --mode turn
"""

from __future__ import annotations

from pathlib import Path

import typer

from rlmdistill.cliconfig import config_command
from rlmdistill.export.main import ExportConfig, run

__all__ = ["DEFAULT_TOKENIZER", "register"]

DEFAULT_TOKENIZER = "qwen2.5-coder-0.5b"
"""The tokenizer ``rlmdistill export`` uses when neither ``--tokenizer`` nor the file sets it."""


def register(app: typer.Typer) -> None:
    """Add the ``export`` command to ``app``."""

    @config_command(
        app,
        "export",
        arguments=["runs"],
        flatten=["options"],
        exclude=["card_extra"],
        defaults={"out": Path("dataset"), "options.tokenizer": DEFAULT_TOKENIZER},
    )
    def export_cmd(config: ExportConfig) -> None:
        """Export root turns of collected runs as an SFT dataset (HF datasets on disk)."""
        out = config.out
        try:
            report = run(config)
        except (ValueError, FileNotFoundError, FileExistsError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        drops = ", ".join(f"{k} {v}" for k, v in report.dropped.items()) or "none"
        typer.echo(
            f"{report.n_examples} examples from {report.n_episodes_exported}/"
            f"{report.n_episodes} episodes -> {out}  (dropped: {drops}; "
            f"tokens mean {report.tokens.mean:.0f} max {report.tokens.max}; "
            f"{report.examples_per_s:.1f} examples/s)"
        )
        if report.n_reasoning_turns:
            typer.echo(
                f"reasoning policy {report.reasoning_policy}: {report.n_reasoning_turns} "
                f"reasoning turns, {report.n_reasoning_kept} supervised replies keep it"
            )
        if report.from_ids:
            typer.echo(
                f"from recorded ids: {report.n_ids_matched} equal a re-render; "
                f"mismatches {report.ids_mismatches or 'none'}"
            )
