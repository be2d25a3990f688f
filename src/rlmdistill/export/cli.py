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
from typing import Annotated

import typer

from rlmdistill.export.main import ExportConfig, run
from rlmdistill.export.options import ExportOptions

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add the ``export`` command to ``app``."""

    @app.command("export")
    def export_cmd(
        runs: Annotated[
            list[Path] | None, typer.Argument(help="Run directories (all finished episodes).")
        ] = None,
        out: Annotated[Path, typer.Option(help="Dataset folder to write.")] = Path("dataset"),
        tokenizer: Annotated[
            str, typer.Option(help="Tokenizer directory or pulled embedded model name.")
        ] = "qwen2.5-coder-0.5b",
        episodes: Annotated[
            Path | None, typer.Option(help="A filter's decisions.jsonl: export its kept episodes.")
        ] = None,
        mode: Annotated[str, typer.Option(help="trajectory | turn")] = "trajectory",
        style: Annotated[str, typer.Option(help="plain | tools")] = "plain",
        system_prompt: Annotated[
            str, typer.Option(help="collected | plain | FILE (context distillation).")
        ] = "collected",
        chat_template: Annotated[
            Path | None, typer.Option(help=".jinja file replacing the tokenizer's template.")
        ] = None,
        max_length: Annotated[int, typer.Option(help="Most tokens per example.")] = 8192,
        truncation: Annotated[str, typer.Option(help="drop | keep_start")] = "drop",
        supervise_prefill: Annotated[
            bool, typer.Option(help="Train on the reply prefill too.")
        ] = True,
        min_supervised_tokens: Annotated[int, typer.Option(help="Drop examples below.")] = 1,
        reasoning: Annotated[
            str, typer.Option(help="Reasoning policy: last | all | drop (docs/export.md).")
        ] = "last",
        from_ids: Annotated[
            bool, typer.Option(help="Turn mode: build examples from recorded token ids.")
        ] = False,
        truncated_turns: Annotated[
            str,
            typer.Option(help="Root turns cut by max_tokens: keep | mask | drop (docs/export.md)."),
        ] = "keep",
        overwrite: Annotated[bool, typer.Option(help="Replace an existing dataset.")] = False,
    ) -> None:
        """Export root turns of collected runs as an SFT dataset (HF datasets on disk)."""
        try:
            options = ExportOptions.model_validate(
                {
                    "tokenizer": tokenizer,
                    "chat_template": str(chat_template) if chat_template else None,
                    "mode": mode,
                    "style": style,
                    "system_prompt": system_prompt,
                    "max_length": max_length,
                    "truncation": truncation,
                    "supervise_prefill": supervise_prefill,
                    "min_supervised_tokens": min_supervised_tokens,
                    "reasoning": reasoning,
                    "from_ids": from_ids,
                    "truncated_turns": truncated_turns,
                }
            )
            report = run(
                ExportConfig(
                    runs=list(runs or []),
                    out=out,
                    options=options,
                    episodes=episodes,
                    overwrite=overwrite,
                )
            )
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
