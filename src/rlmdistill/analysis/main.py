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

__all__ = ["ReportConfig", "ShowConfig", "run"]


class ShowConfig(BaseModel):
    """``rlmdistill show``: one run's summary (episodes by status, sub-calls, tokens by
    root and sub, pass rate, wall time; :func:`rlmdistill.analysis.summary.summarize_run`)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    run_dir: Path
    """Run directory."""
    as_json: bool = False
    """Print the summary as JSON (without the per-episode rows)."""
    per_episode: bool = True
    """Also list every episode."""


class ReportConfig(BaseModel):
    """What :func:`run` compares and how (the fields of ``rlmdistill report``; each field's
    description is its flag's help). The interval settings are those of
    :mod:`rlmdistill.stats` (B and seed also drive the correlation changes' bootstrap)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    runs: list[Path] = Field(
        min_length=1,
        description="Run folders; the first is the baseline every other run is compared with.",
    )
    out: Path = Field(description="Report folder to write (reports/NAME).")
    grader: str | None = Field(
        None, description="Grader whose verdicts score the runs (default: each run's only one)."
    )
    sft: list[Path] = Field(
        default_factory=list,
        description="Adapter folder whose train_log.jsonl becomes training curves (repeatable).",
    )
    rl: list[Path] = Field(
        default_factory=list,
        description="RL adapter folder whose rl_log.jsonl becomes the per-step RL section: "
        "reward mean and spread, zero-variance groups, KL and loss, staleness, rollout wall "
        "time, sub-calls per rollout (repeatable).",
    )
    prices: PriceTable = Field(
        DEFAULT_PRICES, description="Price table for cost (default: the packaged example table)."
    )
    labels: list[str] | None = Field(
        None,
        description="Arm label per run, in order (repeatable; default: run folder names, "
        "made unique).",
    )
    resamples: int = Field(
        DEFAULT_RESAMPLES, ge=1, description="Bootstrap resamples (B) of the intervals."
    )
    seed: int = Field(0, description="Bootstrap seed.")
    confidence: float = Field(
        DEFAULT_CONFIDENCE, gt=0, lt=1, description="Confidence level of intervals."
    )
    trajectories: bool = Field(
        True,
        description="Read trajectories for batch/answer-reach/memo-timing metrics (reads every "
        "trajectory file once).",
    )
    overwrite: bool = Field(False, description="Replace a report already in --out.")
    draw: bool = Field(True, description="Render the PNG figures (off: only their data).")
    adapter_checks: list[AdapterCheck] = Field(
        default_factory=list,
        description="Sections computed by the caller (the loop's greedy check of the adapter, "
        "AdapterCheck), stored in report.json and rendered into report.md from there.",
    )


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
        rl_dirs=list(c.rl),
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
