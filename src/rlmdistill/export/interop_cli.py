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
from typing import Annotated

import typer

from rlmdistill.export.inspect_log import InspectNotInstalledError, export_inspect
from rlmdistill.export.openai_jsonl import write_openai_jsonl

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add the ``export-inspect`` and ``export-openai`` commands to ``app``."""

    @app.command("export-inspect")
    def export_inspect_cmd(
        run: Annotated[Path, typer.Argument(help="Run directory (judged or not).")],
        out: Annotated[Path, typer.Option(help="Folder of the Inspect log (a log dir).")],
        style: Annotated[
            str,
            typer.Option(help="REPL output as user messages (plain) or repl tool calls (tools)."),
        ] = "plain",
        format: Annotated[
            str, typer.Option("--format", help="Inspect log format: eval (zipped) or json.")
        ] = "eval",
        overwrite: Annotated[bool, typer.Option(help="Replace an existing log file.")] = False,
    ) -> None:
        """Write a run as an Inspect eval log (inspect view, Docent): episodes as samples."""
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

    @app.command("export-openai")
    def export_openai_cmd(
        dataset: Annotated[
            Path, typer.Argument(help="Dataset folder written by filter or export.")
        ],
        out: Annotated[
            Path | None, typer.Option(help="JSONL file (default: DATASET/openai.jsonl).")
        ] = None,
        overwrite: Annotated[bool, typer.Option(help="Replace an existing file.")] = False,
    ) -> None:
        """Write an exported dataset as OpenAI fine-tuning JSONL (per-message weight = mask)."""
        try:
            r = write_openai_jsonl(dataset, out, overwrite=overwrite)
        except (ValueError, FileNotFoundError, FileExistsError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        typer.echo(
            f"{r.n_rows} rows -> {r.path}  (assistant messages: {r.n_weighted} weight 1, "
            f"{r.n_unweighted} weight 0; reasoning left out of {r.n_reasoning_dropped})"
        )
