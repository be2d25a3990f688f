"""``rlmdistill filter``: select episodes, write the filter report, export the SFT dataset.

    rlmdistill filter runs/A runs/B --out datasets/NAME --rules rules.yaml \\
        --min-pass-rate 0.5 --top-k-per-room 2 --where "n_sub_calls >= 2" \\
        --tokenizer qwen2.5-coder-0.5b --mode trajectory --style plain --max-length 8192

The command runs two stages in turn: :func:`rlmdistill.filter.main.run` (a
:class:`~rlmdistill.filter.main.FilterConfig` in, a
:class:`~rlmdistill.filter.main.FilterOutcome` out), then, unless ``--report-only``,
:func:`rlmdistill.export.main.run` on the decisions the filter wrote. :func:`register` adds
the typer command, which maps the outcomes to output and an exit code. Runs are only read:
everything is written under ``--out``, which must be empty or absent (``--force`` replaces a
folder this stage wrote before, never any other folder, and never a folder holding or inside
a run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlmdistill.export.main import ExportConfig
from rlmdistill.export.main import run as export_stage
from rlmdistill.export.options import ExportOptionsError, build_export_options
from rlmdistill.filter.expr import ExpressionError
from rlmdistill.filter.main import FilterConfig, NothingKeptError, OutputFolderError, run
from rlmdistill.filter.report import FilterReport
from rlmdistill.filter.rules import FilterRuleError, FilterRules
from rlmdistill.traces.runs import NotARunError
from rlmdistill.traces.store import TraceFileError

__all__ = ["register"]


def _summary_line(report: FilterReport) -> str:
    reasons = ", ".join(f"{r} {n}" for r, n in report.dropped_by_reason.items()) or "none"
    return f"kept {report.n_kept} of {report.n_total} episodes (dropped: {reasons})"


def register(app: typer.Typer) -> None:
    """Add the ``filter`` command to ``app``."""

    @app.command("filter")
    def filter_cmd(
        runs: Annotated[list[Path], typer.Argument(help="Run folders (rlmdistill collect).")],
        out: Annotated[Path, typer.Option(help="Dataset folder to write (datasets/NAME).")],
        rules: Annotated[
            Path | None, typer.Option(help="Filter rules file (YAML or JSON; see docs/filter.md).")
        ] = None,
        min_pass_rate: Annotated[
            float | None, typer.Option(help="Keep episodes with pass rate >= this (0..1).")
        ] = None,
        min_pass_rate_quantile: Annotated[
            float | None,
            typer.Option(help="Keep episodes at or above this quantile of their room (0..1)."),
        ] = None,
        min_coverage: Annotated[
            float | None, typer.Option(help="Keep episodes with coverage >= this (0..1).")
        ] = None,
        top_k_per_room: Annotated[
            int | None, typer.Option(help="Keep at most K best episodes per room.")
        ] = None,
        where: Annotated[
            list[str] | None,
            typer.Option(help="Safe expression over episode fields that must hold (repeatable)."),
        ] = None,
        grader: Annotated[
            str | None, typer.Option(help="Grader whose verdicts give the pass rate.")
        ] = None,
        tokenizer: Annotated[
            str | None,
            typer.Option(help="Export: tokenizer directory or embedded model name."),
        ] = None,
        mode: Annotated[
            str | None, typer.Option(help="Export: trajectory (default) or turn.")
        ] = None,
        style: Annotated[str | None, typer.Option(help="Export: plain (default) or tools.")] = None,
        system_prompt: Annotated[
            str | None, typer.Option(help="Export: collected (default), plain, or a text file.")
        ] = None,
        max_length: Annotated[
            int | None, typer.Option(help="Export: most tokens per example (default 8192).")
        ] = None,
        report_only: Annotated[
            bool, typer.Option(help="Write the filter report and decisions; do not export.")
        ] = False,
        force: Annotated[
            bool, typer.Option(help="Replace an existing dataset folder at --out.")
        ] = False,
    ) -> None:
        """Rejection sampling: keep the episodes that meet the rules, write the filter
        report, and export them as an SFT dataset."""
        try:
            base = FilterRules.load(rules) if rules is not None else FilterRules()
            merged = base.with_overrides(
                min_pass_rate=min_pass_rate,
                min_pass_rate_quantile=min_pass_rate_quantile,
                min_coverage=min_coverage,
                top_k_per_room=top_k_per_room,
                where=where or None,
                grader=grader,
            )
            options = None
            if not report_only:
                if tokenizer is None:
                    raise FilterRuleError("--tokenizer is needed to export (or pass --report-only)")
                options = build_export_options(
                    tokenizer=tokenizer,
                    mode=mode,
                    style=style,
                    system_prompt=system_prompt,
                    max_length=max_length,
                )
            outcome = run(FilterConfig(runs=runs, out=out, rules=merged, force=force))
            if options is not None:
                outcome.require_kept()
                export_stage(
                    ExportConfig(
                        out=out,
                        options=options,
                        episodes=outcome.decisions,
                        card_extra=outcome.card_section(),
                    ),
                    progress=False,
                )
        except NothingKeptError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from exc
        except (
            FilterRuleError,
            ExportOptionsError,
            ExpressionError,
            OutputFolderError,
            NotARunError,
            TraceFileError,
        ) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        except (ValueError, FileNotFoundError) as exc:  # export: tokenizer, template, no example
            typer.echo(f"error: export failed: {type(exc).__name__}: {exc}", err=True)
            raise typer.Exit(2) from exc
        typer.echo(_summary_line(outcome.report))
        typer.echo(f"wrote {out / 'filter_report.md'}, filter_report.json, decisions.jsonl")
        if options is not None:
            typer.echo(f"dataset: {out}")
