"""Traces out to the tools people use: ``rlmdistill export-inspect`` (a run as an Inspect
eval log, :mod:`rlmdistill.export.inspect_log`) and ``rlmdistill export-openai`` (an exported
dataset as OpenAI fine-tuning JSONL with per-message weights,
:mod:`rlmdistill.export.openai_jsonl`)::

    rlmdistill export-inspect runs/demo --out logs/ [--style plain|tools] [--format eval|json]
    inspect view --log-dir logs/
    rlmdistill export-openai datasets/demo [--out datasets/demo/openai.jsonl]
"""

from __future__ import annotations

from pathlib import Path

import typer
from pydantic import BaseModel, ConfigDict

from rlmdistill.cliconfig import config_command
from rlmdistill.export.inspect_log import InspectNotInstalledError, export_inspect
from rlmdistill.export.openai_jsonl import write_openai_jsonl

__all__ = ["InspectExportOptions", "OpenAIExportOptions", "register"]


class InspectExportOptions(BaseModel):
    """``rlmdistill export-inspect``: a run as an Inspect eval log."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    run: Path
    """Run directory (judged or not)."""
    out: Path
    """Folder of the Inspect log (a log dir)."""
    style: str = "plain"
    """REPL output as user messages (plain) or repl tool calls (tools)."""
    format: str = "eval"
    """Inspect log format: eval (zipped) or json."""
    overwrite: bool = False
    """Replace an existing log file."""


class OpenAIExportOptions(BaseModel):
    """``rlmdistill export-openai``: an exported dataset as OpenAI fine-tuning JSONL."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    dataset: Path
    """Dataset folder written by filter or export."""
    out: Path | None = None
    """JSONL file (default: DATASET/openai.jsonl)."""
    overwrite: bool = False
    """Replace an existing file."""


def register(app: typer.Typer) -> None:
    """Add the ``export-inspect`` and ``export-openai`` commands to ``app``."""

    @config_command(app, "export-inspect", arguments=["run"], config_flag=None)
    def export_inspect_cmd(options: InspectExportOptions) -> None:
        """Write a run as an Inspect eval log (inspect view, Docent): episodes as samples."""
        run, out, style, format = options.run, options.out, options.style, options.format
        overwrite = options.overwrite
        if style not in ("plain", "tools") or format not in ("eval", "json"):
            typer.echo("error: --style is plain or tools, --format eval or json", err=True)
            raise typer.Exit(2)
        try:
            r = export_inspect(run, out, style=style, fmt=format, overwrite=overwrite)  # type: ignore[arg-type]
        except InspectNotInstalledError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        except (ValueError, FileNotFoundError, FileExistsError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        scores = ", ".join(r.graders) or "none (run `rlmdistill judge` first)"
        typer.echo(f"{r.n_samples} samples -> {r.path}  (scores: {scores})")
        if r.n_without_messages:
            typer.echo(
                f"{r.n_without_messages} samples without messages (trajectory missing, torn "
                "or edited: see each sample's metadata messages_error)"
            )

    @config_command(app, "export-openai", arguments=["dataset"], config_flag=None)
    def export_openai_cmd(options: OpenAIExportOptions) -> None:
        """Write an exported dataset as OpenAI fine-tuning JSONL (per-message weight = mask)."""
        try:
            r = write_openai_jsonl(options.dataset, options.out, overwrite=options.overwrite)
        except (ValueError, FileNotFoundError, FileExistsError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        typer.echo(
            f"{r.n_rows} rows -> {r.path}  (assistant messages: {r.n_weighted} weight 1, "
            f"{r.n_unweighted} weight 0; reasoning left out of {r.n_reasoning_dropped})"
        )
