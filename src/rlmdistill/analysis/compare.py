"""Behaviour-shift report over runs: what changed between a baseline run and the others.

``rlmdistill report runs/A runs/B [...] --out reports/NAME`` (see :mod:`rlmdistill.analysis.cli`)
calls :func:`build_report`, which writes::

    reports/NAME/report.md            the report (every number comes from report.json)
    reports/NAME/report.json          :class:`Report`: every number shown + each figure's data
    reports/NAME/figures/*.png        matplotlib figures drawn from report.json's figure data
    reports/NAME/metrics/<arm>.jsonl  one EpisodeMetrics row per episode of each arm

The first run is the baseline (arm A); every other run is compared with it. Rooms pair up by
content hash (``room_hash``), so a room rebuilt elsewhere from the same documents still pairs.
Statistics are in :mod:`rlmdistill.analysis.stats`; metrics in :mod:`rlmdistill.analysis.metrics`;
both are defined in ``docs/analysis.md``.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import shutil
from collections import Counter
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from rlmdistill.analysis.figures import FigureData, Series, render_figure
from rlmdistill.analysis.markdown import render_markdown
from rlmdistill.analysis.metrics import (
    GIVE_UP_READ_SHARE,
    REACH_NGRAM,
    EpisodeMetrics,
    load_run_metrics,
)
from rlmdistill.analysis.stats import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    WILCOXON_METHOD,
    Correlation,
    Estimate,
    PairedComparison,
    bootstrap_mean,
    ema,
    paired_comparison,
    pearson,
    spearman,
)
from rlmdistill.analysis.summary import Stat
from rlmdistill.models.limits import DEFAULT_PRICES, PriceTable
from rlmdistill.models.spec import parse_spec
from rlmdistill.provenance import git_state, package_versions
from rlmdistill.traces import layout
from rlmdistill.traces.artefacts import read_train_log

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
    "build_report",
    "read_training_curve",
]

REPORT_VERSION = 1
"""Version of the ``report.json`` shape."""
EMA_BETA = 0.9
"""Smoothing of the EMA training-loss curve (bias-corrected, see :func:`stats.ema`)."""


# ----------------------------------------------------------------------------- records
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


# ----------------------------------------------------------------------------- metrics
class _Metric(NamedTuple):
    name: str
    description: str
    get: Callable[[EpisodeMetrics], float | None]


def _f(v: float | int | bool | None) -> float | None:
    return None if v is None else float(v)


BASE_METRICS: list[_Metric] = [
    _Metric("pass_rate", "passed / all criteria of the room", lambda r: r.pass_rate),
    _Metric("graded_pass_rate", "passed / (passed + failed)", lambda r: r.graded_pass_rate),
    _Metric("weighted_pass_rate", "weight of passed / all weight", lambda r: r.weighted_pass_rate),
    _Metric("coverage", "share of room characters that reached a model", lambda r: r.coverage),
    _Metric("docs_read_share", "share of documents with coverage > 0", lambda r: r.docs_read_share),
    _Metric("n_sub_calls", "sub-calls, every depth", lambda r: _f(r.n_sub_calls)),
    _Metric("n_sub_batches", "llm_query(_batched) calls", lambda r: _f(r.n_sub_batches)),
    _Metric("mean_batch_size", "mean size of the root's batches", lambda r: r.mean_batch_size),
    _Metric(
        "n_sub_calls_with_text",
        "root sub-calls whose prompt carried document text (REPL-tracked sources)",
        lambda r: _f(r.n_sub_calls_with_text),
    ),
    _Metric(
        "share_sub_calls_with_text",
        "share of the root's sub-calls carrying document text",
        lambda r: r.share_sub_calls_with_text,
    ),
    _Metric(
        "answer_reach",
        f"share of sub-call answers sharing {REACH_NGRAM} consecutive words with the memo",
        lambda r: r.answer_reach,
    ),
    _Metric("n_turns", "root turns", lambda r: _f(r.n_turns)),
    _Metric("memo_chars", "memo length in characters", lambda r: _f(r.memo_chars)),
    _Metric(
        "memo_first_turn_share",
        "(turn the memo is first written + 1) / turns",
        lambda r: r.memo_first_turn_share,
    ),
    _Metric("has_memo", "episodes with a memo (share)", lambda r: _f(r.has_memo)),
    _Metric(
        "early_give_up",
        f"no memo, or memo after reading < {GIVE_UP_READ_SHARE:.0%} of documents (share)",
        lambda r: _f(r.early_give_up),
    ),
    _Metric("read_no_memo", "read >= 1 document, no memo (share)", lambda r: _f(r.read_no_memo)),
    _Metric("sub_token_share", "sub tokens / all tokens", lambda r: r.sub_token_share),
    _Metric("sub_input_share", "sub prompt / all prompt tokens", lambda r: r.sub_input_share),
    _Metric(
        "sub_output_share", "sub completion / all completion tokens", lambda r: r.sub_output_share
    ),
    _Metric("cost_usd", "root + sub cost in USD (price table)", lambda r: r.cost_usd),
    _Metric("wall_time_s", "episode wall time in seconds", lambda r: r.wall_time_s),
]


def _type_getter(t: str) -> Callable[[EpisodeMetrics], float | None]:
    return lambda r: r.pass_rate_by_type.get(t)


def _folder_getter(f: str) -> Callable[[EpisodeMetrics], float | None]:
    return lambda r: r.coverage_per_folder.get(f)


def _dynamic_metrics(arms: Sequence[list[EpisodeMetrics]]) -> list[_Metric]:
    """``pass_rate[<type>]`` per criterion type and ``coverage[<folder>]`` per folder seen."""
    types = sorted({t for rows in arms for r in rows for t in r.pass_rate_by_type})
    folders = sorted({f for rows in arms for r in rows for f in r.coverage_per_folder})
    out = [
        _Metric(f"pass_rate[{t}]", f"pass rate over the {t} criteria", _type_getter(t))
        for t in types
    ]
    out += [
        _Metric(f"coverage[{f}]", f"coverage of folder {f}", _folder_getter(f)) for f in folders
    ]
    return out


METHODS = {
    "mean": (
        "mean of room means (each room weighs the same); 95% interval by percentile bootstrap "
        "resampling rooms with replacement (cluster bootstrap; Efron & Tibshirani 1993; "
        "Davison & Hinkley 1997 sec. 3.8), scipy.stats.bootstrap"
    ),
    "paired_difference": (
        "per room: mean(B) - mean(A) over rooms both arms ran (paired by room content hash); "
        "mean of the differences with the same percentile bootstrap over rooms"
    ),
    "wilcoxon": WILCOXON_METHOD,
    "pearson": "Pearson r, Fisher z interval (Fisher 1921), scipy.stats.pearsonr",
    "spearman": "Spearman rho, percentile bootstrap interval over points, scipy.stats.spearmanr",
    "undefined": (
        "fewer than 3 rooms/points, zero variance or all-zero differences give 'undefined' "
        "with the reason, never a number"
    ),
    "flipped_criteria": (
        "per (room, criterion): pass share = PASS verdicts / episodes scored (UNGRADABLE and "
        "missing count as not passed); majority PASS if > 0.5, FAIL if < 0.5, TIE if = 0.5; a "
        "criterion flipped when the majority differs between A and B (gained: B's share higher)"
    ),
    "training_ema": (
        f"bias-corrected EMA of the logged loss, beta={EMA_BETA} (m_t = beta m_(t-1) + "
        "(1-beta) x_t, shown m_t / (1 - beta^t); Kingma & Ba 2015)"
    ),
}


# ----------------------------------------------------------------------------- helpers
def _short(spec: str) -> str:
    try:
        s = parse_spec(spec)
    except ValueError:
        return spec
    name = s.name if s.kind == "openai" else Path(s.name).name or s.name
    if s.adapter:
        name += f"+{Path(s.adapter).name}"
    return name


def _labels(run_dirs: Sequence[Path], labels: Sequence[str] | None) -> list[str]:
    if labels:
        if len(labels) != len(run_dirs):
            raise ValueError(f"{len(labels)} labels given for {len(run_dirs)} runs")
        if len(set(labels)) != len(labels):
            raise ValueError(f"labels must be unique: {list(labels)}")
        return list(labels)
    out: list[str] = []
    for p in run_dirs:
        base = Path(p).resolve().name or str(p)
        label, k = base, 2
        while label in out:
            label, k = f"{base}#{k}", k + 1
        out.append(label)
    return out


def _room_labels(arms: Sequence[list[EpisodeMetrics]]) -> dict[str, RoomInfoRow]:
    """Room hash -> room row; label = room id, or ``id#hash6`` when ids collide."""
    first: dict[str, EpisodeMetrics] = {}
    for rows in arms:
        for r in rows:
            first.setdefault(r.room_hash, r)
    ids = Counter(r.room_id for r in first.values())
    return {
        h: RoomInfoRow(
            label=r.room_id if ids[r.room_id] == 1 else f"{r.room_id}#{h[:6]}",
            room_id=r.room_id,
            room_hash=h,
            n_documents=r.room_documents,
            n_chars=r.room_chars,
            n_tokens=r.room_tokens,
        )
        for h, r in first.items()
    }


def _room_means(
    rows: Sequence[EpisodeMetrics],
    get: Callable[[EpisodeMetrics], float | None],
    rooms: dict[str, RoomInfoRow],
) -> tuple[dict[str, float], list[float]]:
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    values: list[float] = []
    for r in rows:
        v = get(r)
        if v is None or not math.isfinite(v):
            continue
        label = rooms[r.room_hash].label
        sums[label] = sums.get(label, 0.0) + v
        counts[label] = counts.get(label, 0) + 1
        values.append(v)
    return {k: sums[k] / counts[k] for k in sums}, values


class _Ctx(NamedTuple):
    resamples: int
    seed: int
    confidence: float


def _mean(ctx: _Ctx, room_means: dict[str, float]) -> Estimate:
    return bootstrap_mean(
        list(room_means.values()),
        n_resamples=ctx.resamples,
        confidence=ctx.confidence,
        seed=ctx.seed,
    )


def _paired(ctx: _Ctx, a: dict[str, float], b: dict[str, float]) -> PairedComparison:
    return paired_comparison(
        a, b, n_resamples=ctx.resamples, confidence=ctx.confidence, seed=ctx.seed
    )


def _majority(share: float) -> Literal["PASS", "FAIL", "TIE"]:
    return "PASS" if share > 0.5 else "FAIL" if share < 0.5 else "TIE"


def _criterion_shares(
    rows: Sequence[EpisodeMetrics], rooms: dict[str, RoomInfoRow]
) -> dict[tuple[str, str], tuple[float, int, str | None]]:
    passed: dict[tuple[str, str], list[bool]] = {}
    types: dict[tuple[str, str], str | None] = {}
    for r in rows:
        if r.pass_rate is None:
            continue
        for cid, label in r.criteria.items():
            key = (rooms[r.room_hash].label, cid)
            passed.setdefault(key, []).append(label == "PASS")
            types[key] = r.criterion_types.get(cid)
    return {k: (sum(v) / len(v), len(v), types[k]) for k, v in passed.items()}


def _flips(
    a_rows: Sequence[EpisodeMetrics],
    b_rows: Sequence[EpisodeMetrics],
    rooms: dict[str, RoomInfoRow],
) -> FlipTable:
    a = _criterion_shares(a_rows, rooms)
    b = _criterion_shares(b_rows, rooms)
    common = [k for k in a if k in b]
    flips = []
    for key in common:
        (sa, na, ta), (sb, nb, _) = a[key], b[key]
        ma, mb = _majority(sa), _majority(sb)
        if ma != mb:
            flips.append(
                FlippedCriterion(
                    room=key[0],
                    criterion_id=key[1],
                    criterion_type=ta,
                    a_pass_share=sa,
                    b_pass_share=sb,
                    a_n=na,
                    b_n=nb,
                    a_majority=ma,
                    b_majority=mb,
                    direction="gained" if sb > sa else "lost",
                )
            )
    return FlipTable(
        rule=METHODS["flipped_criteria"],
        n_compared=len(common),
        n_gained=sum(f.direction == "gained" for f in flips),
        n_lost=sum(f.direction == "lost" for f in flips),
        rows=flips,
    )


def _known_sum(values: Sequence[int | None]) -> int | None:
    """Sum of ``values``; ``None`` (unknown) when any of them is unknown."""
    return None if any(v is None for v in values) else sum(v or 0 for v in values)


def _token_shares(label: str, rows: Sequence[EpisodeMetrics]) -> TokenShares:
    rp = sum(r.root_prompt_tokens for r in rows)
    rc = sum(r.root_completion_tokens for r in rows)
    sp = sum(r.sub_prompt_tokens for r in rows)
    sc = sum(r.sub_completion_tokens for r in rows)
    total = rp + rc + sp + sc
    parts = {"root_input": rp, "root_output": rc, "sub_input": sp, "sub_output": sc}
    return TokenShares(
        arm=label,
        root_prompt=rp,
        root_cached=_known_sum([r.root_cached_tokens for r in rows]),
        root_completion=rc,
        sub_prompt=sp,
        sub_cached=_known_sum([r.sub_cached_tokens for r in rows]),
        sub_completion=sc,
        total=total,
        shares={k: (v / total if total else None) for k, v in parts.items()},
    )


def _size_correlations(
    ctx: _Ctx, label: str, rows: Sequence[EpisodeMetrics], rooms: dict[str, RoomInfoRow]
) -> list[SizeCorrelation]:
    means, _ = _room_means(rows, lambda r: float(r.n_sub_calls), rooms)
    by_label = {row.label: row for row in rooms.values()}
    keys = list(means)
    out = []
    for x in ("room_chars", "room_documents"):
        xs = [
            float(by_label[k].n_chars if x == "room_chars" else by_label[k].n_documents)
            for k in keys
        ]
        ys = [means[k] for k in keys]
        out.append(
            SizeCorrelation(
                arm=label,
                x=x,  # type: ignore[arg-type]
                y="n_sub_calls (room mean)",
                rooms=keys,
                xs=xs,
                ys=ys,
                pearson=pearson(xs, ys, confidence=ctx.confidence),
                spearman=spearman(
                    xs, ys, n_resamples=ctx.resamples, confidence=ctx.confidence, seed=ctx.seed
                ),
            )
        )
    return out


def _depth_ablations(
    ctx: _Ctx,
    arms: list[ArmInfo],
    rows: dict[str, list[EpisodeMetrics]],
    rooms: dict[str, RoomInfoRow],
) -> list[DepthAblation]:
    d1 = [a for a in arms if a.depth == 1]
    d2 = [a for a in arms if a.depth == 2]
    if not d1 or not d2:
        return []
    pairs = [
        (a, b) for a in d1 for b in d2 if (a.root_name, a.sub_name) == (b.root_name, b.sub_name)
    ]
    note = None
    if not pairs:
        pairs = [(d1[0], d2[0])]
        note = (
            f"no depth-1/depth-2 arms share root and sub; {d1[0].label} and {d2[0].label} "
            "also differ in model"
        )
    out = []
    get = next(m.get for m in BASE_METRICS if m.name == "pass_rate")
    for a, b in pairs:
        ma, _ = _room_means(rows[a.label], get, rooms)
        mb, _ = _room_means(rows[b.label], get, rooms)
        out.append(
            DepthAblation(
                depth1_arm=a.label,
                depth2_arm=b.label,
                note=note,
                metric="pass_rate",
                depth1_room_means=ma,
                depth2_room_means=mb,
                paired=_paired(ctx, ma, mb),
                read_no_memo={
                    x.label: sum(1 for r in rows[x.label] if r.read_no_memo) for x in (a, b)
                },
                no_memo={x.label: sum(1 for r in rows[x.label] if not r.has_memo) for x in (a, b)},
                n_episodes={x.label: len(rows[x.label]) for x in (a, b)},
            )
        )
    return out


def _gap(role: Literal["root", "sub"], fixed: str, values: dict[str, float]) -> ModelGap:
    if len(values) < 2:
        return ModelGap(
            fixed_role=role,
            fixed=fixed,
            best=None,
            worst=None,
            best_value=None,
            worst_value=None,
            gap=None,
            reason=f"needs >= 2 {'roots' if role == 'sub' else 'subs'} with a defined mean "
            f"(got {len(values)})",
        )
    best = max(values, key=lambda k: values[k])
    worst = min(values, key=lambda k: values[k])
    return ModelGap(
        fixed_role=role,
        fixed=fixed,
        best=best,
        worst=worst,
        best_value=values[best],
        worst_value=values[worst],
        gap=values[best] - values[worst],
    )


def _grids(
    ctx: _Ctx,
    arms: list[ArmInfo],
    rows: dict[str, list[EpisodeMetrics]],
    rooms: dict[str, RoomInfoRow],
) -> list[Grid]:
    out = []
    for depth in sorted({a.depth for a in arms}):
        at = [a for a in arms if a.depth == depth]
        roots = sorted({a.root_name for a in at})
        subs = sorted({a.sub_name for a in at})
        if len(roots) < 2 and len(subs) < 2:
            continue
        cells: list[GridCell] = []
        value: dict[tuple[str, str], float] = {}
        for root in roots:
            for sub in subs:
                members = [a for a in at if (a.root_name, a.sub_name) == (root, sub)]
                if not members:
                    continue
                pooled = [r for a in members for r in rows[a.label]]
                means, vals = _room_means(pooled, lambda r: r.pass_rate, rooms)
                est = _mean(ctx, means)
                cells.append(
                    GridCell(
                        root=root,
                        sub=sub,
                        arms=[a.label for a in members],
                        mean=est,
                        n_episodes=len(vals),
                    )
                )
                if est.value is not None:
                    value[(root, sub)] = est.value
        root_gaps = [
            _gap("sub", sub, {r: v for (r, s), v in value.items() if s == sub}) for sub in subs
        ]
        sub_gaps = [
            _gap("root", root, {s: v for (r, s), v in value.items() if r == root}) for root in roots
        ]
        out.append(
            Grid(
                depth=depth,
                roots=roots,
                subs=subs,
                cells=cells,
                root_gaps=root_gaps,
                sub_gaps=sub_gaps,
            )
        )
    return out


def read_training_curve(adapter_dir: Path, beta: float = EMA_BETA) -> TrainingCurve:
    """Read ``adapter_dir/train_log.jsonl`` (SFT contract) into raw and EMA loss curves.

    Lines with a non-finite loss are left out and counted; a torn last line is ignored and
    flagged. Raises ``FileNotFoundError`` when the log is missing and ``ValueError`` naming
    the file and line when a line is not a valid log entry.
    """
    log = read_train_log(Path(adapter_dir))
    path = log.path
    entries = [e for e in log.records if math.isfinite(e.loss)]
    nonfinite = log.n_nonfinite
    losses = [e.loss for e in entries]
    smooth = ema(losses, beta) if losses else []
    return TrainingCurve(
        adapter=Path(adapter_dir).resolve().name,
        path=str(path),
        steps=[e.step for e in entries],
        loss=losses,
        ema_loss=smooth,
        ema_beta=beta,
        learning_rate=[e.learning_rate for e in entries],
        tokens_seen=[e.tokens_seen for e in entries],
        n_nonfinite=nonfinite,
        torn_tail=log.torn_tail,
        final_loss=losses[-1] if losses else None,
        final_ema_loss=smooth[-1] if smooth else None,
    )


# ----------------------------------------------------------------------------- figures
def _figures(
    arms: list[ArmInfo],
    rows: dict[str, list[EpisodeMetrics]],
    rooms: dict[str, RoomInfoRow],
    sizes: list[SizeCorrelation],
    shares: list[TokenShares],
    ablations: list[DepthAblation],
    grids: list[Grid],
    training: list[TrainingCurve],
    price_version: str,
) -> list[FigureData]:
    figs: list[FigureData] = []
    # pass rate vs coverage, one point per episode, log-scale coverage
    series, notes = [], []
    for a in arms:
        pts = [r for r in rows[a.label] if r.pass_rate is not None and r.coverage is not None]
        zero = [r for r in pts if r.coverage is not None and r.coverage <= 0]
        pts = [r for r in pts if r.coverage is not None and r.coverage > 0]
        unscored = sum(1 for r in rows[a.label] if r.pass_rate is None or r.coverage is None)
        series.append(
            Series(
                label=a.label,
                x=[float(r.coverage) for r in pts if r.coverage is not None],
                y=[r.pass_rate for r in pts],
                ids=[r.episode_id for r in pts],
            )
        )
        if zero:
            notes.append(f"{a.label}: {len(zero)} episodes with coverage 0 left off the log axis")
        if unscored:
            notes.append(f"{a.label}: {unscored} episodes without pass rate or coverage")
    figs.append(
        FigureData(
            name="pass_vs_coverage",
            file="figures/pass_vs_coverage.png",
            title="Pass rate vs coverage (one point per episode)",
            kind="scatter",
            x_label="coverage (share of room characters, log scale)",
            y_label="pass rate",
            x_scale="log",
            series=series,
            notes=notes,
        )
    )
    # pass rate vs cost per room
    series, notes = [], []
    for a in arms:
        cost, _ = _room_means(rows[a.label], lambda r: r.cost_usd, rooms)
        passed, _ = _room_means(rows[a.label], lambda r: r.pass_rate, rooms)
        keys = [k for k in passed if k in cost]
        series.append(
            Series(label=a.label, x=[cost[k] for k in keys], y=[passed[k] for k in keys], ids=keys)
        )
        unpriced = sum(1 for r in rows[a.label] if r.cost_usd is None)
        if unpriced:
            notes.append(f"{a.label}: {unpriced} episodes on models without a price")
        if keys and all(cost[k] == 0 for k in keys):
            notes.append(f"{a.label}: every cost is 0 under price table {price_version!r}")
    figs.append(
        FigureData(
            name="pass_vs_cost",
            file="figures/pass_vs_cost.png",
            title="Pass rate vs cost per room (room means)",
            kind="scatter",
            x_label="mean cost per episode (USD)",
            y_label="mean pass rate",
            series=series,
            notes=notes,
        )
    )
    # sub-calls vs room size
    figs.append(
        FigureData(
            name="sub_calls_vs_room_size",
            file="figures/sub_calls_vs_room_size.png",
            title="Sub-calls vs room size (room means)",
            kind="scatter",
            x_label="room size (characters)",
            y_label="mean sub-calls per episode",
            series=[
                Series(label=s.arm, x=list(s.xs), y=list(s.ys), ids=list(s.rooms))
                for s in sizes
                if s.x == "room_chars"
            ],
        )
    )
    # root vs sub token shares
    parts = ["root_input", "root_output", "sub_input", "sub_output"]
    figs.append(
        FigureData(
            name="token_shares",
            file="figures/token_shares.png",
            title="Root vs sub token shares (all episodes)",
            kind="bars",
            x_label="arm",
            y_label="share of all tokens",
            series=[
                Series(label=p, x=[s.arm for s in shares], y=[s.shares[p] for s in shares])
                for p in parts
            ],
        )
    )
    for i, ab in enumerate(ablations):
        keys = [k for k in ab.depth1_room_means if k in ab.depth2_room_means]
        p = ab.paired
        figs.append(
            FigureData(
                name=f"depth_ablation_{i}",
                file=f"figures/depth_ablation_{i}.png",
                title=f"Depth 1 ({ab.depth1_arm}) vs depth 2 ({ab.depth2_arm}): pass rate per room",
                kind="paired",
                x_label="depth",
                y_label="mean pass rate",
                series=[
                    Series(
                        label=k,
                        x=["depth 1", "depth 2"],
                        y=[ab.depth1_room_means[k], ab.depth2_room_means[k]],
                        ids=[k, k],
                    )
                    for k in keys
                ],
                notes=[
                    f"rooms improved {p.n_improved}, declined {p.n_declined}, tied {p.n_tied}",
                    *([ab.note] if ab.note else []),
                ],
            )
        )
    for g in grids:
        by = {(c.root, c.sub): c.mean.value for c in g.cells}
        figs.append(
            FigureData(
                name=f"grid_depth{g.depth}",
                file=f"figures/grid_depth{g.depth}.png",
                title=f"Mean pass rate per root x sub (depth {g.depth})",
                kind="heatmap",
                x_label="sub model",
                y_label="root model",
                series=[
                    Series(label=root, x=list(g.subs), y=[by.get((root, s)) for s in g.subs])
                    for root in g.roots
                ],
            )
        )
    if training:
        series = []
        for c in training:
            series.append(Series(label=f"{c.adapter} loss", x=list(c.steps), y=list(c.loss)))
            series.append(
                Series(
                    label=f"{c.adapter} EMA (beta={c.ema_beta})",
                    x=list(c.steps),
                    y=list(c.ema_loss),
                )
            )
        figs.append(
            FigureData(
                name="training_loss",
                file="figures/training_loss.png",
                title="SFT training loss (raw and EMA)",
                kind="lines",
                x_label="step",
                y_label="loss",
                series=series,
                notes=[f"{c.adapter}: {c.n_nonfinite} non-finite losses left out" for c in training]
                if any(c.n_nonfinite for c in training)
                else [],
            )
        )
    return figs


# ----------------------------------------------------------------------------- build
def build_report(
    run_dirs: Sequence[Path],
    out: Path,
    *,
    grader: str | None = None,
    sft_dirs: Sequence[Path] = (),
    prices: PriceTable = DEFAULT_PRICES,
    labels: Sequence[str] | None = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
    trajectories: bool = True,
    overwrite: bool = False,
    draw: bool = True,
) -> Report:
    """Compare runs and write ``report.md``, ``report.json``, figures and per-arm metrics.

    Args:
        run_dirs: run folders; the first is the baseline every other run is compared with.
        out: report folder (created).
        grader: verdict file to score with (``None``: each run's only grader).
        sft_dirs: adapter folders whose ``train_log.jsonl`` becomes training curves.
        prices: price table for cost.
        labels: arm labels (default: run folder names, made unique).
        n_resamples, seed, confidence: bootstrap settings (see :mod:`analysis.stats`).
        trajectories: compute the trajectory metrics (reads every trajectory file once).
        overwrite: replace a report already in ``out``.
        draw: render the PNG figures (``False`` writes only the data, e.g. for benchmarks).

    Raises:
        ValueError: no runs, bad labels, unknown grader, bad settings.
        FileExistsError: ``out`` already holds a report and ``overwrite`` is false.
        NotARunError / FileNotFoundError / TraceFileError: unreadable runs or logs (named).
    """
    if not run_dirs:
        raise ValueError("report needs at least one run directory")
    if n_resamples < 100:
        raise ValueError(f"n_resamples must be >= 100, got {n_resamples}")
    if not 0.5 <= confidence < 1:
        raise ValueError(f"confidence must be in [0.5, 1), got {confidence}")
    out = Path(out)
    if (out / layout.REPORT_JSON).exists() and not overwrite:
        raise FileExistsError(f"{out} already holds a report; use --overwrite to replace it")
    arm_labels = _labels(run_dirs, labels)
    ctx = _Ctx(n_resamples, seed, confidence)
    loaded = [
        load_run_metrics(Path(d), grader, prices=prices, trajectories=trajectories)
        for d in run_dirs
    ]
    rows = {label: lm.rows for label, lm in zip(arm_labels, loaded, strict=True)}
    rooms = _room_labels(list(rows.values()))
    arms = []
    for label, d, lm in zip(arm_labels, run_dirs, loaded, strict=True):
        cfg = lm.manifest.config
        arms.append(
            ArmInfo(
                label=label,
                run_dir=str(d),
                run_id=lm.manifest.run_id,
                root=str(cfg.get("root")),
                sub=str(cfg.get("sub")),
                root_name=_short(str(cfg.get("root"))),
                sub_name=_short(str(cfg.get("sub"))),
                depth=int(cfg.get("depth", 1)),
                grader=lm.grader,
                n_episodes=len(lm.rows),
                n_rooms=len({r.room_hash for r in lm.rows}),
                status_counts=dict(Counter(r.status for r in lm.rows)),
                n_unscored=sum(1 for r in lm.rows if r.pass_rate is None),
            )
        )
    metrics = BASE_METRICS + _dynamic_metrics(list(rows.values()))
    per_arm: dict[str, list[ArmMetric]] = {}
    room_means: dict[tuple[str, str], dict[str, float]] = {}
    counts: dict[tuple[str, str], int] = {}
    for a in arms:
        per_arm[a.label] = []
        for m in metrics:
            means, values = _room_means(rows[a.label], m.get, rooms)
            room_means[(a.label, m.name)] = means
            counts[(a.label, m.name)] = len(values)
            per_arm[a.label].append(
                ArmMetric(
                    metric=m.name,
                    mean=_mean(ctx, means),
                    episodes=Stat.of(values),
                    room_means=means,
                )
            )
    comparisons = []
    base = arms[0]
    est = {(a.label, am.metric): am.mean for a in arms for am in per_arm[a.label]}
    for b in arms[1:]:
        crows = [
            ComparisonRow(
                metric=m.name,
                a=est[(base.label, m.name)],
                b=est[(b.label, m.name)],
                paired=_paired(
                    ctx, room_means[(base.label, m.name)], room_means[(b.label, m.name)]
                ),
                n_episodes_a=counts[(base.label, m.name)],
                n_episodes_b=counts[(b.label, m.name)],
            )
            for m in metrics
        ]
        ra = {rooms[r.room_hash].label for r in rows[base.label]}
        rb = {rooms[r.room_hash].label for r in rows[b.label]}
        comparisons.append(
            Comparison(
                a=base.label,
                b=b.label,
                rows=crows,
                flipped=_flips(rows[base.label], rows[b.label], rooms),
                rooms_paired=sorted(ra & rb),
                rooms_only_in_a=sorted(ra - rb),
                rooms_only_in_b=sorted(rb - ra),
            )
        )
    sizes = [s for a in arms for s in _size_correlations(ctx, a.label, rows[a.label], rooms)]
    shares = [_token_shares(a.label, rows[a.label]) for a in arms]
    ablations = _depth_ablations(ctx, arms, rows, rooms)
    grids = _grids(ctx, arms, rows, rooms)
    training = [read_training_curve(Path(d)) for d in sft_dirs]
    figures = _figures(arms, rows, rooms, sizes, shares, ablations, grids, training, prices.version)
    notes = []
    graders = {a.grader for a in arms}
    if len(graders) > 1:
        notes.append(f"arms were scored by different graders: {sorted(map(str, graders))}")
    for a in arms:
        if a.n_unscored:
            notes.append(f"{a.label}: {a.n_unscored} of {a.n_episodes} episodes have no pass rate")
    versions = package_versions()
    for name in ("scipy", "numpy", "matplotlib"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    report = Report(
        created_at=dt.datetime.now(dt.UTC),
        settings={
            "n_resamples": n_resamples,
            "seed": seed,
            "confidence": confidence,
            "grader": grader,
            "price_table": prices.version,
            "give_up_read_share": GIVE_UP_READ_SHARE,
            "reach_ngram": REACH_NGRAM,
            "trajectories": trajectories,
            "baseline": base.label,
        },
        versions=versions,
        git_commit=git_state()[0],
        arms=arms,
        rooms=sorted(rooms.values(), key=lambda r: r.label),
        methods=METHODS,
        metric_descriptions={m.name: m.description for m in metrics},
        per_arm=per_arm,
        comparisons=comparisons,
        size_correlations=sizes,
        token_shares=shares,
        depth_ablations=ablations,
        grids=grids,
        training=training,
        figures=figures,
        notes=notes,
    )
    _write(report, rows, out, overwrite=overwrite, draw=draw)
    return report


def _write(
    report: Report, rows: dict[str, list[EpisodeMetrics]], out: Path, *, overwrite: bool, draw: bool
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if overwrite:
        for sub in ("figures", "metrics"):
            if (out / sub).is_dir():
                shutil.rmtree(out / sub)
    (out / "metrics").mkdir(exist_ok=True)
    for label, arm_rows in rows.items():
        safe = "".join(ch if ch.isalnum() or ch in "-_.#" else "_" for ch in label)
        with (out / "metrics" / f"{safe}.jsonl").open("w", encoding="utf-8") as f:
            for r in arm_rows:
                f.write(r.model_dump_json() + "\n")
    if draw:
        for fig in report.figures:
            render_figure(fig, out)
    text = report.model_dump_json(indent=1)
    json.loads(text)  # fails loudly rather than write an unreadable file
    (out / layout.REPORT_JSON).write_text(text + "\n", encoding="utf-8")
    (out / layout.REPORT_MD).write_text(render_markdown(report), encoding="utf-8")
