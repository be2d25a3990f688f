"""The ``filter`` stage as a function: :func:`run` takes a :class:`FilterConfig` and returns a
:class:`FilterOutcome` (``rlmdistill filter``, the loop and the dashboard call it).

Runs are only read: everything is written under ``out``, which must be empty or absent
(``force`` replaces a folder this stage wrote before, never any other folder, and never a
folder holding or inside a run).

The stage selects and writes its report and decisions; it never exports. Whoever wants a
dataset (the ``filter`` command, the loop, the dashboard) runs the export stage next, on the
decisions this stage wrote (``ExportConfig(episodes=outcome.decisions, out=out,
card_extra=outcome.card_section())``, after :meth:`FilterOutcome.require_kept`).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from rlmdistill.filter.report import FilterReport, render_card_section, write_report
from rlmdistill.filter.rules import FilterRuleError, FilterRules
from rlmdistill.filter.select import Selection, select_episodes
from rlmdistill.traces import layout

__all__ = [
    "FilterConfig",
    "FilterOutcome",
    "NothingKeptError",
    "OutputFolderError",
    "run",
]

_OUR_FILES = (
    layout.FILTER_REPORT_JSON,
    layout.FILTER_REPORT_MD,
    layout.FILTER_DECISIONS,
    layout.EXPORT_MANIFEST,
    "dataset_info.json",
)
"""Files that mark a folder as written by this stage or the export stage that runs after it
(``--force`` only ever deletes such a folder)."""


class OutputFolderError(FileExistsError):
    """``--out`` cannot be used: not empty (without ``--force``), not a dataset folder, or
    it holds or sits inside a run."""


class NothingKeptError(FilterRuleError):
    """Every episode was dropped: the reports are written, no dataset is exported."""


class FilterOutcome(NamedTuple):
    """What :func:`run` did: the selection, its report, and where the decisions are."""

    selection: Selection
    report: FilterReport
    decisions: Path
    """The ``decisions.jsonl`` written (one line per episode, kept or not, in selection
    order): what the export stage reads (``ExportConfig.episodes``) to export the kept ones
    with their filter-time pass rate and coverage."""

    def card_section(self) -> str:
        """The Markdown section the dataset card of an export of this selection carries
        (source runs, kept/dropped counts, the rules; see
        :func:`~rlmdistill.filter.report.render_card_section`)."""
        return render_card_section(self.report)

    def require_kept(self) -> None:
        """Raise :class:`NothingKeptError` (naming ``filter_report.md``) when no episode was
        kept: call it before exporting."""
        if self.selection.n_kept == 0:
            report_md = self.decisions.parent / layout.FILTER_REPORT_MD
            raise NothingKeptError(f"no episode kept out of {self.report.n_total}; see {report_md}")


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


class FilterConfig(BaseModel):
    """What :func:`run` selects from and where it writes (the selection flags of ``rlmdistill
    filter``; its export flags go to the export stage, run next). Each field's description
    is its flag's help."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    runs: list[Path] = Field(
        min_length=1, description="Run folders (rlmdistill collect; read only)."
    )
    out: Path = Field(
        description="Dataset folder to write (datasets/NAME); empty or absent unless --force."
    )
    rules: FilterRules = Field(default_factory=FilterRules, description="The selection rules.")
    force: bool = Field(
        False,
        description="Replace a dataset folder this stage or the export stage wrote before "
        "(never any other folder).",
    )


def run(config: FilterConfig) -> FilterOutcome:
    """The ``filter`` stage: select episodes of ``config.runs`` with ``config.rules`` and write
    ``filter_report.{md,json}`` and ``decisions.jsonl`` into ``config.out``. It exports
    nothing: the caller runs the export stage on :attr:`FilterOutcome.decisions`.

    Selection runs before anything is written, so bad rules leave ``out`` untouched. Raises
    :class:`FilterRuleError` / :class:`~rlmdistill.filter.expr.ExpressionError` for rules
    that cannot be applied, :class:`OutputFolderError` for an unusable ``out``, and
    :class:`~rlmdistill.traces.runs.NotARunError` for a folder without ``run.json``. Keeping
    no episode is no error here (:meth:`FilterOutcome.require_kept` makes it one).
    """
    runs, out = list(config.runs), Path(config.out)
    selection = select_episodes(runs, config.rules)
    _prepare_out(out, runs, config.force)
    report = write_report(selection, out)
    return FilterOutcome(selection, report, out / layout.FILTER_DECISIONS)
