"""The ``report.json`` schema: the pydantic records of a behaviour-shift report.

Every number :mod:`rlmdistill.analysis.markdown` writes into ``report.md`` is a field of
:class:`Report`, so ``render_markdown(Report.model_validate_json(report.json))`` gives
``report.md`` again. The sections are computed by :mod:`rlmdistill.analysis.sections`, the
figure data by :mod:`rlmdistill.analysis.figure_data`, and :func:`~rlmdistill.analysis.compare.
build_report` puts them together. The fields are described in ``docs/analysis.md``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlmdistill.analysis.figures import FigureData
from rlmdistill.analysis.stats import Correlation, Estimate, PairedComparison
from rlmdistill.analysis.summary import Stat

__all__ = [
    "EMA_BETA",
    "REPORT_VERSION",
    "ArmInfo",
    "ArmMetric",
    "Comparison",
    "ComparisonRow",
    "DepthAblation",
    "FlipTable",
    "FlippedCriterion",
    "Grid",
    "GridCell",
    "ModelGap",
    "Report",
    "RoomInfoRow",
    "SizeCorrelation",
    "TokenShares",
    "TrainingCurve",
]

REPORT_VERSION = 1
"""Version of the ``report.json`` shape."""
EMA_BETA = 0.9
"""Smoothing of the EMA training-loss curve (bias-corrected, see :func:`stats.ema`)."""


class ArmInfo(BaseModel):
    """One run of the report (an arm of the comparison)."""

    model_config = ConfigDict(extra="forbid")

    label: str
    run_dir: str
    run_id: str
    root: str
    sub: str
    root_name: str
    """Short model name (served name or embedded model, plus the adapter folder name)."""
    sub_name: str
    depth: int
    grader: str | None
    n_episodes: int
    n_rooms: int
    status_counts: dict[str, int]
    n_unscored: int
    """Episodes without a pass rate (``score_note`` in ``metrics/<arm>.jsonl`` says why)."""


class RoomInfoRow(BaseModel):
    """A room seen in any arm; ``label`` is how the report names it."""

    model_config = ConfigDict(extra="forbid")

    label: str
    room_id: str
    room_hash: str
    n_documents: int
    n_chars: int
    n_tokens: int | None


class ArmMetric(BaseModel):
    """One metric of one arm: the mean of room means with a cluster-bootstrap interval."""

    model_config = ConfigDict(extra="forbid")

    metric: str
    mean: Estimate
    episodes: Stat
    """Episode-level mean, sd, min, max, n (descriptive; rooms not weighted)."""
    room_means: dict[str, float]
    """Room label -> mean over the room's episodes with a value."""


class ComparisonRow(BaseModel):
    """One metric, arm B against baseline arm A (paired over rooms, ``B - A``)."""

    model_config = ConfigDict(extra="forbid")

    metric: str
    a: Estimate
    b: Estimate
    paired: PairedComparison
    n_episodes_a: int
    n_episodes_b: int


class FlippedCriterion(BaseModel):
    """A (room, criterion) whose majority verdict differs between the two arms."""

    model_config = ConfigDict(extra="forbid")

    room: str
    criterion_id: str
    criterion_type: str | None
    a_pass_share: float
    b_pass_share: float
    a_n: int
    b_n: int
    a_majority: Literal["PASS", "FAIL", "TIE"]
    b_majority: Literal["PASS", "FAIL", "TIE"]
    direction: Literal["gained", "lost"]


class FlipTable(BaseModel):
    """Criteria that flipped between arm A and arm B."""

    model_config = ConfigDict(extra="forbid")

    rule: str
    n_compared: int
    """(room, criterion) pairs scored in both arms."""
    n_gained: int
    n_lost: int
    rows: list[FlippedCriterion] = Field(default_factory=list)


class Comparison(BaseModel):
    """Arm B against the baseline arm A."""

    model_config = ConfigDict(extra="forbid")

    a: str
    b: str
    rows: list[ComparisonRow]
    flipped: FlipTable
    rooms_paired: list[str]
    rooms_only_in_a: list[str]
    rooms_only_in_b: list[str]


class SizeCorrelation(BaseModel):
    """Correlation between room size and the arm's mean sub-calls per room (one point per room)."""

    model_config = ConfigDict(extra="forbid")

    arm: str
    x: Literal["room_chars", "room_documents"]
    y: str
    rooms: list[str]
    xs: list[float]
    ys: list[float]
    pearson: Correlation
    spearman: Correlation


class TokenShares(BaseModel):
    """Token totals of one arm by who spent them, and their shares of all tokens."""

    model_config = ConfigDict(extra="forbid")

    arm: str
    root_prompt: int
    root_cached: int | None
    """``None`` when any episode's server did not report cached tokens (unknown, not 0)."""
    root_completion: int
    sub_prompt: int
    sub_cached: int | None
    sub_completion: int
    total: int
    shares: dict[str, float | None]
    """``root_input``, ``root_output``, ``sub_input``, ``sub_output`` over ``total``."""


class DepthAblation(BaseModel):
    """Depth 1 against depth 2: pass rate per room, paired."""

    model_config = ConfigDict(extra="forbid")

    depth1_arm: str
    depth2_arm: str
    note: str | None
    """Set when the two arms differ in more than depth (root or sub model)."""
    metric: str
    depth1_room_means: dict[str, float]
    depth2_room_means: dict[str, float]
    paired: PairedComparison
    read_no_memo: dict[str, int]
    """Arm label -> episodes that read at least one document and wrote no memo."""
    no_memo: dict[str, int]
    n_episodes: dict[str, int]


class GridCell(BaseModel):
    """Mean pass rate of one (root, sub) pair over the arms that ran it."""

    model_config = ConfigDict(extra="forbid")

    root: str
    sub: str
    arms: list[str]
    mean: Estimate
    n_episodes: int


class ModelGap(BaseModel):
    """Best minus worst mean pass rate when one model is fixed and the other varies."""

    model_config = ConfigDict(extra="forbid")

    fixed_role: Literal["root", "sub"]
    fixed: str
    best: str | None
    worst: str | None
    best_value: float | None
    worst_value: float | None
    gap: float | None
    reason: str | None = None


class Grid(BaseModel):
    """Root x subagent grid at one depth."""

    model_config = ConfigDict(extra="forbid")

    depth: int
    roots: list[str]
    subs: list[str]
    cells: list[GridCell]
    root_gaps: list[ModelGap]
    """For each sub: gap between the best and the worst root."""
    sub_gaps: list[ModelGap]
    """For each root: gap between the best and the worst sub."""


class TrainingCurve(BaseModel):
    """Training loss of one adapter: raw and EMA (bias-corrected, ``ema_beta``)."""

    model_config = ConfigDict(extra="forbid")

    adapter: str
    path: str
    steps: list[int]
    loss: list[float]
    ema_loss: list[float]
    ema_beta: float
    learning_rate: list[float | None]
    tokens_seen: list[int | None]
    n_nonfinite: int
    """Logged steps whose loss was NaN or infinite (left out of the curve)."""
    torn_tail: bool
    final_loss: float | None
    final_ema_loss: float | None


class Report(BaseModel):
    """``report.json``: every number the report shows, and each figure's data."""

    model_config = ConfigDict(extra="forbid")

    report_version: int = REPORT_VERSION
    created_at: dt.datetime
    settings: dict[str, Any]
    """Resamples, seed, confidence, grader, price table, thresholds."""
    versions: dict[str, str]
    git_commit: str | None
    arms: list[ArmInfo]
    rooms: list[RoomInfoRow]
    methods: dict[str, str]
    metric_descriptions: dict[str, str]
    per_arm: dict[str, list[ArmMetric]]
    comparisons: list[Comparison]
    size_correlations: list[SizeCorrelation]
    token_shares: list[TokenShares]
    depth_ablations: list[DepthAblation]
    grids: list[Grid]
    training: list[TrainingCurve]
    figures: list[FigureData]
    notes: list[str] = Field(default_factory=list)

