"""The ``filter`` stage as a function: :func:`run` takes a :class:`FilterConfig` and returns a
:class:`FilterOutcome` (``rlmdistill filter``, the loop and the dashboard call it).

Runs are only read: everything is written under ``out``, which must be empty or absent
(``force`` replaces a folder this stage wrote before, never any other folder, and never a
folder holding or inside a run).

The stage selects and writes its report and decisions; it never exports. Whoever wants a
dataset (the ``filter`` command, the loop, the dashboard) runs the export stage next, on the
decisions this stage wrote (``ExportConfig(episodes=outcome.decisions, out=out,
card_extra=outcome.card_section())``, after :meth:`FilterOutcome.require_kept`).

``target="sub"`` selects sub-calls for the sub model instead
(:func:`rlmdistill.filter.sub_select.select_sub_calls`): the same files, plus
``sub_decisions.jsonl`` (:attr:`FilterOutcome.sub_decisions`), which the sub export reads
(``rlmdistill.export.sub``), and a sub-call section in ``filter_report.md``.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from rlmdistill.filter.report import FilterReport, render_card_section, write_report
from rlmdistill.filter.rules import FilterRuleError, FilterRules, FilterTarget
from rlmdistill.filter.select import Selection, select_episodes
from rlmdistill.filter.sub_select import (
    SubSelection,
    render_sub_section,
    select_sub_calls,
    write_sub_decisions,
)
from rlmdistill.traces import layout
from rlmdistill.traces.sub_credit import SUB_DECISIONS

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
    SUB_DECISIONS,
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
    sub: SubSelection | None = None
    """``target="sub"``: the sub-call selection; ``None`` for the root."""
    sub_decisions: Path | None = None
    """``target="sub"``: the ``sub_decisions.jsonl`` written, which the sub export reads."""

    def card_section(self) -> str:
        """The Markdown section the dataset card of an export of this selection carries
        (source runs, kept/dropped counts, the rules; see
        :func:`~rlmdistill.filter.report.render_card_section`; for ``target="sub"`` the
        sub-call counts after it)."""
        card = render_card_section(self.report)
        if self.sub is None:
            return card
        return card.rstrip("\n") + "\n\n" + render_sub_section(self.sub)

    def require_kept(self) -> None:
        """Raise :class:`NothingKeptError` (naming ``filter_report.md``) when no episode
        (``target="sub"``: no sub-call) was kept: call it before exporting."""
        report_md = self.decisions.parent / layout.FILTER_REPORT_MD
        if self.selection.n_kept == 0:
            raise NothingKeptError(f"no episode kept out of {self.report.n_total}; see {report_md}")
        if self.sub is not None and self.sub.n_kept == 0:
            raise NothingKeptError(
                f"no sub-call kept out of {len(self.sub.decisions)} of the "
                f"{self.selection.n_kept} kept episodes; see {report_md}"
            )


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
    target: FilterTarget = Field(
        "root",
        description="What the dataset trains: root (the root's turns, per episode) or sub "
        "(the sub model: depth-1 sub-calls as prompt -> answer, depth-2 subagents as their "
        "whole trajectory; where expressions judge each sub-call, see docs/filter.md).",
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
    if config.target == "sub":
        sub = select_sub_calls(runs, config.rules)
        _prepare_out(out, runs, config.force)
        report = write_report(sub.episodes, out)
        sub_path = write_sub_decisions(sub, out)
        report_md = out / layout.FILTER_REPORT_MD
        text = report_md.read_text(encoding="utf-8").rstrip("\n")
        report_md.write_text(text + "\n\n" + render_sub_section(sub), encoding="utf-8")
        return FilterOutcome(sub.episodes, report, out / layout.FILTER_DECISIONS, sub, sub_path)
    selection = select_episodes(runs, config.rules)
    _prepare_out(out, runs, config.force)
    report = write_report(selection, out)
    return FilterOutcome(selection, report, out / layout.FILTER_DECISIONS)
