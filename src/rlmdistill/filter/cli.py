"""``rlmdistill filter``: select episodes, write the filter report, export the SFT dataset.

    rlmdistill filter runs/A runs/B --out datasets/NAME --rules rules.yaml \\
        --min-pass-rate 0.5 --top-k-per-room 2 --where "n_sub_calls >= 2" \\
        --tokenizer qwen2.5-coder-0.5b --mode trajectory --style plain --max-length 8192

The command runs two stages in turn: :func:`rlmdistill.filter.main.run` (a
:class:`~rlmdistill.filter.main.FilterConfig` in, a
:class:`~rlmdistill.filter.main.FilterOutcome` out), then, unless ``--report-only``,
:func:`rlmdistill.export.main.run` on the decisions the filter wrote. :func:`register` adds
the typer command, which maps the outcomes to output and an exit code. The flags feed two
configs (:class:`~rlmdistill.filter.main.FilterConfig` with its rules, and
:class:`~rlmdistill.export.options.ExportOptions`), so they are written here, their help
taken from the fields (:func:`rlmdistill.cliconfig.field_help`); ``--where`` adds to the
rules file's expressions instead of replacing them. ``--target sub`` selects sub-calls
(``where`` judges each one) and runs the sub export (:func:`rlmdistill.export.sub.run`) on
the ``sub_decisions.jsonl`` the filter wrote. Runs are only read:
everything is written under ``--out``, which must be empty or absent (``--force`` replaces a
folder this stage wrote before, never any other folder, and never a folder holding or inside
a run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlmdistill.cliconfig import field_help as _help
from rlmdistill.export.main import ExportConfig
from rlmdistill.export.main import run as export_stage
from rlmdistill.export.options import ExportOptions, ExportOptionsError, build_export_options
from rlmdistill.export.sub import SubExportConfig
from rlmdistill.export.sub import run as export_sub_stage
from rlmdistill.filter.expr import ExpressionError
from rlmdistill.filter.main import FilterConfig, NothingKeptError, OutputFolderError, run
from rlmdistill.filter.report import FilterReport
from rlmdistill.filter.rules import FilterRuleError, FilterRules, FilterTarget
from rlmdistill.traces.runs import NotARunError
from rlmdistill.traces.store import TraceFileError

__all__ = ["register"]

EXPORT = "Export: "
"""Help prefix of the flags that go to the export stage (run after the filter)."""


def _summary_line(report: FilterReport) -> str:
    reasons = ", ".join(f"{r} {n}" for r, n in report.dropped_by_reason.items()) or "none"
    return f"kept {report.n_kept} of {report.n_total} episodes (dropped: {reasons})"


def register(app: typer.Typer) -> None:
    """Add the ``filter`` command to ``app``."""

    @app.command("filter")
    def filter_cmd(
        runs: Annotated[list[Path], typer.Argument(help=_help(FilterConfig, "runs"))],
        out: Annotated[Path, typer.Option(help=_help(FilterConfig, "out"))],
        rules: Annotated[
            Path | None, typer.Option(help="Filter rules file (YAML or JSON; see docs/filter.md).")
        ] = None,
        min_pass_rate: Annotated[
            float | None, typer.Option(help=_help(FilterRules, "min_pass_rate"))
        ] = None,
        min_pass_rate_quantile: Annotated[
            float | None, typer.Option(help=_help(FilterRules, "min_pass_rate_quantile"))
        ] = None,
        min_coverage: Annotated[
            float | None, typer.Option(help=_help(FilterRules, "min_coverage"))
        ] = None,
        top_k_per_room: Annotated[
            int | None, typer.Option(help=_help(FilterRules, "top_k_per_room"))
        ] = None,
        where: Annotated[
            list[str] | None,
            typer.Option(
                help=_help(FilterRules, "where") + " Repeatable; added to the rules file's."
            ),
        ] = None,
        grader: Annotated[str | None, typer.Option(help=_help(FilterRules, "grader"))] = None,
        tokenizer: Annotated[
            str | None, typer.Option(help=_help(ExportOptions, "tokenizer", EXPORT))
        ] = None,
        mode: Annotated[str | None, typer.Option(help=_help(ExportOptions, "mode", EXPORT))] = None,
        style: Annotated[
            str | None, typer.Option(help=_help(ExportOptions, "style", EXPORT))
        ] = None,
        system_prompt: Annotated[
            str | None, typer.Option(help=_help(ExportOptions, "system_prompt", EXPORT))
        ] = None,
        max_length: Annotated[
            int | None, typer.Option(help=_help(ExportOptions, "max_length", EXPORT))
        ] = None,
        report_only: Annotated[
            bool, typer.Option(help="Write the filter report and decisions; do not export.")
        ] = False,
        force: Annotated[bool, typer.Option(help=_help(FilterConfig, "force"))] = False,
        target: Annotated[str, typer.Option(help=_help(FilterConfig, "target"))] = "root",
    ) -> None:
        """Rejection sampling: keep the episodes that meet the rules, write the filter
        report, and export them as an SFT dataset."""
        try:
            if target not in ("root", "sub"):
                raise FilterRuleError(f"--target must be root or sub, not {target!r}")
            chosen: FilterTarget = "sub" if target == "sub" else "root"
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
            outcome = run(
                FilterConfig(runs=runs, out=out, rules=merged, force=force, target=chosen)
            )
            if options is not None and outcome.sub_decisions is not None:
                outcome.require_kept()
                export_sub_stage(
                    SubExportConfig(
                        decisions=outcome.sub_decisions,
                        out=out,
                        options=options,
                        card_extra=outcome.card_section(),
                    )
                )
            elif options is not None:
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
        if outcome.sub is not None:
            typer.echo(
                f"kept {outcome.sub.n_kept} of {len(outcome.sub.decisions)} sub-calls of the "
                "kept episodes"
            )
        typer.echo(f"wrote {out / 'filter_report.md'}, filter_report.json, decisions.jsonl")
        if options is not None:
            typer.echo(f"dataset: {out}")
