"""``rlmdistill filter``: select episodes, write the filter report, export the SFT dataset.

    rlmdistill filter runs/A runs/B --out datasets/NAME --rules rules.yaml \\
        --min-pass-rate 0.5 --top-k-per-room 2 --where "n_sub_calls >= 2" \\
        --tokenizer qwen2.5-coder-0.5b --mode trajectory --style plain --max-length 8192

:func:`filter_main` is the command as a plain function (tests call it); :func:`register` adds
the typer command to an app. Runs are only read: everything is written under ``--out``, which
must be empty or absent (``--force`` replaces a folder this stage wrote before, never any
other folder, and never a folder holding or inside a run).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import typer
from pydantic import ValidationError

from rlmdistill.filter.expr import ExpressionError
from rlmdistill.filter.report import FilterReport, render_card_section, write_report
from rlmdistill.filter.rules import FilterRuleError, FilterRules
from rlmdistill.filter.select import Selection, select_episodes
from rlmdistill.traces import layout
from rlmdistill.traces.runs import NotARunError
from rlmdistill.traces.store import TraceFileError

__all__ = [
    "FilterOutcome",
    "NothingKeptError",
    "OutputFolderError",
    "build_export_options",
    "filter_main",
    "register",
]

_OUR_FILES = (
    layout.FILTER_REPORT_JSON,
    layout.FILTER_REPORT_MD,
    layout.FILTER_DECISIONS,
    layout.EXPORT_MANIFEST,
    "dataset_info.json",
)
"""Files that mark a folder as written by this stage or the export stage (``--force`` only
ever deletes such a folder)."""


class OutputFolderError(FileExistsError):
    """``--out`` cannot be used: not empty (without ``--force``), not a dataset folder, or
    it holds or sits inside a run."""


class NothingKeptError(FilterRuleError):
    """Every episode was dropped: the reports are written, no dataset is exported."""


class FilterOutcome(NamedTuple):
    """What :func:`filter_main` did."""

    selection: Selection
    report: FilterReport
    exported: Any | None
    """The export stage's return value (``None`` when no export was asked for)."""


def _prepare_out(out: Path, runs: Sequence[Path], force: bool) -> None:
    out_r = out.resolve()
    for run in runs:
        run_r = Path(run).resolve()
        if out_r == run_r or run_r in out_r.parents or out_r in run_r.parents:
            raise OutputFolderError(
                f"--out {out} overlaps run {run}: runs are read-only to the filter stage"
            )
    if not out.exists():
        return
    if not out.is_dir():
        raise OutputFolderError(f"--out {out} exists and is not a folder")
    if not any(out.iterdir()):
        return
    if not force:
        raise OutputFolderError(f"--out {out} is not empty; pass --force to replace it")
    if (out / layout.RUN_MANIFEST).exists() or not any(
        (out / name).exists() for name in _OUR_FILES
    ):
        raise OutputFolderError(
            f"--out {out} is not a dataset folder written by rlmdistill filter/export "
            f"(none of {', '.join(_OUR_FILES)}); not deleting it even with --force"
        )
    shutil.rmtree(out)


def build_export_options(**values: Any) -> Any:
    """An ``rlmdistill.export.ExportOptions`` from the given fields (``None`` values left at
    their defaults). Raises :class:`FilterRuleError` when the export stage is not installed
    or the options are invalid (message names the fields)."""
    try:
        from rlmdistill.export import ExportOptions
    except ImportError as exc:
        raise FilterRuleError(
            f"the export stage (rlmdistill.export) is not available ({exc}); "
            "use --report-only to write the filter report alone"
        ) from exc
    data = {k: v for k, v in values.items() if v is not None}
    try:
        return ExportOptions.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(options)'}: {e['msg']}" for e in exc.errors()
        )
        raise FilterRuleError(f"invalid export options: {problems}") from exc


def filter_main(
    runs: Sequence[Path],
    out: Path,
    rules: FilterRules,
    export_options: Any | None = None,
    *,
    force: bool = False,
    progress: bool = False,
) -> FilterOutcome:
    """Select episodes of ``runs`` with ``rules``, write ``filter_report.{md,json}`` and
    ``decisions.jsonl`` into ``out``, then (when ``export_options`` is given) export the kept
    episodes there with ``rlmdistill.export.export_dataset`` (given each kept episode's
    pass rate and coverage at filter time, and the filter summary for the dataset card).

    Selection runs before anything is written, so bad rules leave ``out`` untouched. Raises
    :class:`FilterRuleError` / :class:`~rlmdistill.filter.expr.ExpressionError` for rules
    that cannot be applied, :class:`OutputFolderError` for an unusable ``out``,
    :class:`NothingKeptError` (after writing the reports) when no episode is kept and an
    export was asked for, and :class:`~rlmdistill.traces.runs.NotARunError` for a folder
    without ``run.json``.
    """
    runs = [Path(r) for r in runs]
    out = Path(out)
    selection = select_episodes(runs, rules)
    _prepare_out(out, runs, force)
    report = write_report(selection, out)
    if export_options is None:
        return FilterOutcome(selection, report, None)
    if selection.n_kept == 0:
        raise NothingKeptError(
            f"no episode kept out of {report.n_total}; see {out / 'filter_report.md'}"
        )
    from rlmdistill.export import FilterTimeScores, export_dataset

    scores = {
        d.episode_id: FilterTimeScores(pass_rate=d.pass_rate, coverage=d.coverage)
        for d in selection.decisions
        if d.kept
    }
    exported = export_dataset(
        selection.kept,
        out,
        export_options,
        card_extra=render_card_section(report),
        scores=scores,
        progress=progress,
    )
    return FilterOutcome(selection, report, exported)


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
            outcome = filter_main(runs, out, merged, options, force=force, progress=True)
        except NothingKeptError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from exc
        except (
            FilterRuleError,
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
        if outcome.exported is not None:
            typer.echo(f"dataset: {out}")
