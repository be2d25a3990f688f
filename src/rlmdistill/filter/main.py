"""The ``filter`` stage as a function: :func:`run` takes a :class:`FilterConfig` and returns a
:class:`FilterOutcome` (``rlmdistill filter``, the loop and the dashboard call it).

Runs are only read: everything is written under ``out``, which must be empty or absent
(``force`` replaces a folder this stage wrote before, never any other folder, and never a
folder holding or inside a run).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlmdistill.export.options import ExportOptions
from rlmdistill.filter.report import FilterReport, render_card_section, write_report
from rlmdistill.filter.rules import FilterRuleError, FilterRules
from rlmdistill.filter.select import Selection, select_episodes
from rlmdistill.traces import layout

__all__ = [
    "FilterConfig",
    "FilterOutcome",
    "NothingKeptError",
    "OutputFolderError",
    "build_export_options",
    "run",
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
    """What :func:`run` did."""

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


def build_export_options(**values: Any) -> ExportOptions:
    """An :class:`~rlmdistill.export.options.ExportOptions` from the given fields (``None``
    values left at their defaults). Raises :class:`FilterRuleError` when the options are
    invalid (the message names the fields)."""
    data = {k: v for k, v in values.items() if v is not None}
    try:
        return ExportOptions.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(options)'}: {e['msg']}" for e in exc.errors()
        )
        raise FilterRuleError(f"invalid export options: {problems}") from exc


class FilterConfig(BaseModel):
    """What :func:`run` selects from and where it writes (the fields of ``rlmdistill filter``).

    Fields:
        runs: run folders (read only).
        out: dataset folder to write (``datasets/NAME``); empty or absent unless ``force``.
        rules: the selection rules.
        export: export options; ``None`` writes the filter report and decisions only.
        force: replace a dataset folder this stage or the export stage wrote before.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    runs: list[Path] = Field(min_length=1)
    out: Path
    rules: FilterRules = Field(default_factory=FilterRules)
    export: ExportOptions | None = None
    force: bool = False


def run(config: FilterConfig, *, progress: bool = False) -> FilterOutcome:
    """The ``filter`` stage: select episodes of ``config.runs`` with ``config.rules``, write
    ``filter_report.{md,json}`` and ``decisions.jsonl`` into ``config.out``, then (when
    ``config.export`` is given) export the kept episodes there with
    ``rlmdistill.export.export_dataset`` (given each kept episode's pass rate and coverage at
    filter time, and the filter summary for the dataset card). ``progress``: progress bars.

    Selection runs before anything is written, so bad rules leave ``out`` untouched. Raises
    :class:`FilterRuleError` / :class:`~rlmdistill.filter.expr.ExpressionError` for rules
    that cannot be applied, :class:`OutputFolderError` for an unusable ``out``,
    :class:`NothingKeptError` (after writing the reports) when no episode is kept and an
    export was asked for, and :class:`~rlmdistill.traces.runs.NotARunError` for a folder
    without ``run.json``.
    """
    runs, out, export_options = list(config.runs), Path(config.out), config.export
    selection = select_episodes(runs, config.rules)
    _prepare_out(out, runs, config.force)
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
