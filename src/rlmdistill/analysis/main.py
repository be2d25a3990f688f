"""The analysis (``report``) stage as a function: :func:`run` takes a :class:`ReportConfig`
and returns the :class:`~rlmdistill.analysis.schema.Report` it wrote (``rlmdistill report``,
the loop and the dashboard call it; the typer command in :mod:`rlmdistill.analysis.cli` maps
the report to output and an exit code).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from rlmdistill.analysis import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES
from rlmdistill.analysis.checks import AdapterCheck
from rlmdistill.models.limits import DEFAULT_PRICES, PriceTable

if TYPE_CHECKING:
    from rlmdistill.analysis.schema import Report

__all__ = ["ReportConfig", "run"]


class ReportConfig(BaseModel):
    """What :func:`run` compares and how (the fields of ``rlmdistill report``).

    Fields:
        runs: run folders; the first is the baseline every other run is compared with.
        out: report folder to write (``reports/NAME``).
        grader: verdict file to score with (``None``: each run's only grader).
        sft: adapter folders whose ``train_log.jsonl`` becomes training curves.
        prices: price table for cost (default: the packaged example table).
        labels: arm labels (default: run folder names, made unique).
        resamples, seed, confidence: interval settings (see :mod:`rlmdistill.stats`;
            B and seed are those of the correlation changes' bootstrap).
        trajectories: compute the trajectory metrics (reads every trajectory file once).
        overwrite: replace a report already in ``out``.
        draw: render the PNG figures (``False`` writes only their data).
        adapter_checks: sections computed by the caller (the loop's greedy check of the
            adapter, :class:`~rlmdistill.analysis.checks.AdapterCheck`), stored in
            ``report.json`` and rendered into ``report.md`` from there.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    runs: list[Path] = Field(min_length=1)
    out: Path
    grader: str | None = None
    sft: list[Path] = Field(default_factory=list)
    prices: PriceTable = DEFAULT_PRICES
    labels: list[str] | None = None
    resamples: int = DEFAULT_RESAMPLES
    seed: int = 0
    confidence: float = DEFAULT_CONFIDENCE
    trajectories: bool = True
    overwrite: bool = False
    draw: bool = True
    adapter_checks: list[AdapterCheck] = Field(default_factory=list)


def run(config: ReportConfig) -> Report:
    """The analysis stage: build the report of ``config.runs`` into ``config.out``
    (``report.md``, ``report.json``, figures, per-arm metrics) with
    :func:`rlmdistill.analysis.compare.build_report`, which documents the errors raised
    (``ValueError``, ``FileExistsError``, ``NotARunError``, ``TraceFileError``)."""
    from rlmdistill.analysis.compare import build_report  # scipy/matplotlib: import on use

    c = config
    return build_report(
        list(c.runs),
        c.out,
        grader=c.grader,
        sft_dirs=list(c.sft),
        prices=c.prices,
        labels=list(c.labels) if c.labels else None,
        n_resamples=c.resamples,
        seed=c.seed,
        confidence=c.confidence,
        trajectories=c.trajectories,
        overwrite=c.overwrite,
        draw=c.draw,
        adapter_checks=list(c.adapter_checks),
    )
