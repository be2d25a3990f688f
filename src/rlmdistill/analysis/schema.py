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

from rlmdistill.analysis.checks import AdapterCheck
from rlmdistill.analysis.figures import FigureData
from rlmdistill.analysis.summary import Stat
from rlmdistill.provenance import Provenance
from rlmdistill.stats import (
    CorrectedRate,
    Correlation,
    CorrelationChange,
    Estimate,
    PairedComparison,
)
from rlmdistill.traces.calibration import Calibration

__all__ = [
    "EMA_BETA",
    "REPORT_VERSION",
    "AdapterCheck",
    "ArmInfo",
    "ArmMetric",
    "ArmTable",
    "ArmTableCell",
    "ArmTableRow",
    "Comparison",
    "ComparisonRow",
    "CorrectedRateRow",
    "DepthAblation",
    "DepthMetricRow",
    "FlipTable",
    "FlippedCriterion",
    "Grid",
    "GridCell",
    "ModelGap",
    "Report",
    "RoomInfoRow",
    "RoomSize",
    "SizeCorrelation",
    "SizeCorrelationChange",
    "TimeoutFlag",
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


RoomSize = Literal["room_chars", "room_documents", "room_tokens"]
"""How a room's size is measured: characters, documents, or tokens of the root model's
tokenizer (``RoomInfo.n_tokens``; known only when the root had a tokenizer at collection).
Reports written before room tokens were recorded hold only ``room_chars`` and ``room_documents``."""


class SizeCorrelation(BaseModel):
    """Correlation between room size and the arm's mean sub-calls per room (one point per room)."""

    model_config = ConfigDict(extra="forbid")

    arm: str
    x: RoomSize
    y: str
    rooms: list[str]
    xs: list[float]
    ys: list[float]
    pearson: Correlation
    spearman: Correlation
    rooms_without_size: list[str] = Field(default_factory=list)
    """Rooms of the arm left out because their size in ``x`` is unknown (token counts only)."""


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


class DepthMetricRow(BaseModel):
    """One metric of the depth table: depth 1 against depth 2 over the rooms both ran."""

    model_config = ConfigDict(extra="forbid")

    metric: str
    depth1: Estimate
    """Mean of room means of the depth-1 arm (cluster-bootstrap interval over rooms)."""
    depth2: Estimate
    paired: PairedComparison
    """``depth 2 - depth 1`` per room, paired (mean with interval, Wilcoxon test)."""
    n_episodes_depth1: int
    """Episodes of the depth-1 arm with a value of the metric."""
    n_episodes_depth2: int


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
    metrics: list[DepthMetricRow] = Field(default_factory=list)
    """The depth table: pass rate, coverage, memo rate, read-no-memo, sub-calls and
    timeouts, depth 1 against depth 2 paired over rooms (empty in reports written before the depth table existed)."""
    timeouts: dict[str, int] = Field(default_factory=dict)
    """Arm label -> episodes that ended ``timeout`` (episode wall-time limit)."""


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


class RLCurve(BaseModel):
    """One RL adapter's per-step log (``rl_log.jsonl`` of ``rlmdistill rl``): what each
    optimiser step's rollouts earned and what the update did. Lists are aligned with
    ``steps``; a value a log did not record is ``None``."""

    model_config = ConfigDict(extra="forbid")

    adapter: str
    path: str
    steps: list[int]
    reward_mean: list[float | None]
    reward_std: list[float | None]
    """Sample standard deviation of the step's rewards."""
    groups: list[int | None]
    zero_variance_groups: list[int | None]
    """Rollout groups whose rewards were all equal (advantage 0: no learning signal)."""
    kl: list[float | None]
    loss: list[float | None]
    staleness: list[float | None]
    """Mean policy versions between a rollout's weights and the updated weights."""
    stale_token_share: list[float | None]
    rollout_wall_s: list[float | None]
    sub_calls_per_rollout: list[float | None]
    zero_variance_share: float | None
    """Zero-variance groups / groups over every logged step (``None``: no group logged)."""
    torn_tail: bool


class SizeCorrelationChange(BaseModel):
    """Change of the sub-calls-vs-room-size correlation from the baseline arm ``a`` to arm
    ``b``, paired over the rooms both ran (:func:`~rlmdistill.stats.correlation_change`)."""

    model_config = ConfigDict(extra="forbid")

    a: str
    b: str
    x: RoomSize
    y: str
    rooms: list[str]
    """Rooms both arms ran with a known size, in the order of ``xs``."""
    xs: list[float]
    ys_a: list[float]
    ys_b: list[float]
    pearson: CorrelationChange
    spearman: CorrelationChange


class ArmTableCell(BaseModel):
    """One arm's value of one metric in the multi-arm table."""

    model_config = ConfigDict(extra="forbid")

    arm: str
    mean: Estimate
    """Mean of room means over the table's rooms (cluster-bootstrap interval over rooms)."""
    n_episodes: int
    """Episodes of the arm in the table's rooms with a value of the metric."""
    difference: PairedComparison | None = None
    """``arm - baseline`` per room, paired over the table's rooms; ``None`` for the baseline."""


class ArmTableRow(BaseModel):
    """One metric of the multi-arm table: a cell per arm, in arm order."""

    model_config = ConfigDict(extra="forbid")

    metric: str
    cells: list[ArmTableCell]


class ArmTable(BaseModel):
    """Every arm on the same rooms: per metric each arm's mean and its difference from the
    baseline (the first arm), paired over rooms."""

    model_config = ConfigDict(extra="forbid")

    baseline: str
    arms: list[str]
    rooms: list[str]
    """Rooms every arm ran (by content hash, shown by label): the only rooms in the table."""
    rooms_left_out: dict[str, list[str]] = Field(default_factory=dict)
    """Arm label -> its rooms that not every arm ran (left out of the table)."""
    rows: list[ArmTableRow]
    timeouts: dict[str, int]
    """Arm label -> episodes in the table's rooms that ended ``timeout``."""
    n_episodes: dict[str, int]
    """Arm label -> episodes in the table's rooms."""


class CorrectedRateRow(BaseModel):
    """One arm's grader pass rate beside its correction for the grader's errors, measured
    against people's labels of the arm's own run (:func:`rlmdistill.analysis.sections.
    corrected_rates`)."""

    model_config = ConfigDict(extra="forbid")

    arm: str
    grader: str
    calibration: Calibration
    """The counts: criteria graded and passed, person-PASS/FAIL pairs, stale labels."""
    rate: CorrectedRate
    """Raw rate ``p`` (criteria pooled), sensitivity, specificity and the Rogan-Gladen value
    with its interval; ``rate.corrected.value is None`` with the reason when undefined."""


class TimeoutFlag(BaseModel):
    """Two compared arms whose shares of episodes ended by the wall-clock limit differ.

    A wall-clock ``timeout`` depends on machine load, not only on the root: a comparison whose
    arms differ in timeouts may measure the machine."""

    model_config = ConfigDict(extra="forbid")

    a: str
    b: str
    sections: list[str]
    """Where the pair is compared: ``comparison``, ``arm_table``, ``size_correlation_change``,
    ``depth_ablation``."""
    timeouts_a: int
    timeouts_b: int
    n_episodes_a: int
    n_episodes_b: int
    note: str


class Report(Provenance):
    """``report.json``: every number the report shows, and each figure's data (with the
    :class:`~rlmdistill.provenance.Provenance` fields of the code that made it)."""

    model_config = ConfigDict(extra="forbid")

    report_version: int = REPORT_VERSION
    created_at: dt.datetime
    settings: dict[str, Any]
    """Resamples, seed, confidence, grader, price table, thresholds."""
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
    adapter_checks: list[AdapterCheck] = Field(default_factory=list)
    """Checks the caller handed in (the loop: does the adapter change the greedy output?).
    Left out of ``report.json`` when empty, so a report without one reads as before."""
    # fields with defaults, so reports written before these sections existed load unchanged
    arm_table: ArmTable | None = None
    """Every arm on the rooms all arms ran (``None``: one arm, or a report written before the many-arm sections)."""
    size_correlation_changes: list[SizeCorrelationChange] = Field(default_factory=list)
    """Each arm after the baseline: change of each size correlation from the baseline."""
    timeouts: dict[str, int] = Field(default_factory=dict)
    """Arm label -> episodes that ended ``timeout`` (episode wall-time limit)."""
    timeout_flags: list[TimeoutFlag] = Field(default_factory=list)
    """Compared arm pairs whose shares of ``timeout`` episodes differ (also in ``notes``)."""
    rl_training: list[RLCurve] = Field(default_factory=list)
    """Per-step logs of the RL adapters the caller named (``ReportConfig.rl``). Left out of
    ``report.json`` when empty, so a report without one reads as before."""
    corrected_rates: list[CorrectedRateRow] = Field(default_factory=list)
    """Arms whose run has people's labels: raw and corrected pass rates. Left out of
    ``report.json`` when empty, so a report without labels reads as before."""
