"""The sections of a behaviour-shift report, each computed by one pure function.

Every section function takes the same inputs, in this order:

- ``arms``: the :class:`~rlmdistill.analysis.schema.ArmInfo` of each run (the first is the
  baseline; :func:`arm_info` builds one from :func:`~rlmdistill.analysis.metrics.load_run_metrics`);
- ``rows``: arm label -> the arm's :class:`~rlmdistill.analysis.metrics.EpisodeMetrics`
  (one per episode);
- ``rooms``: room content hash -> :class:`~rlmdistill.analysis.schema.RoomInfoRow`, from
  :func:`room_labels` over every arm's rows (a room is named by its label everywhere);
- ``ctx``: the :class:`SectionContext` (bootstrap resamples and seed of the correlation
  changes, confidence),

and returns the records stored in ``report.json``. :func:`~rlmdistill.analysis.compare.
build_report` calls them, and the dashboard calls the same functions, so its tables equal the
report's for the same runs. None of them reads or writes a file except
:func:`read_training_curve` and :func:`read_calibrations`. The methods are described in ``docs/analysis.md`` and in
:data:`METHODS` (stored in every report).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, NamedTuple

from rlmdistill.analysis import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES
from rlmdistill.analysis.metrics import (
    GIVE_UP_READ_SHARE,
    REACH_NGRAM,
    EpisodeMetrics,
    RunMetrics,
)
from rlmdistill.analysis.schema import (
    EMA_BETA,
    ArmInfo,
    ArmMetric,
    Comparison,
    ComparisonRow,
    CorrectedRateRow,
    DepthAblation,
    DepthMetricRow,
    FlippedCriterion,
    FlipTable,
    Grid,
    GridCell,
    ModelGap,
    RLCurve,
    RoomInfoRow,
    RoomSize,
    SizeCorrelation,
    TokenShares,
    TrainingCurve,
)
from rlmdistill.analysis.summary import Stat
from rlmdistill.models.spec import parse_spec
from rlmdistill.stats import (
    COUNT,
    MIN_UNITS,
    SHARE,
    UNBOUNDED,
    WILCOXON_METHOD,
    Bounds,
    Correlation,
    Estimate,
    PairedComparison,
    corrected_pass_rate,
    ema,
    mean_interval,
    paired_comparison,
    pearson,
    rate_interval,
    spearman,
)
from rlmdistill.traces.artefacts import read_rl_log, read_train_log
from rlmdistill.traces.calibration import Calibration, run_calibration
from rlmdistill.traces.layout import labels_path
from rlmdistill.traces.sub_credit import GRAM_WORDS, USED_SHARE
from rlmdistill.traces.sub_credit import METHOD as SUB_CREDIT_METHOD

__all__ = [
    "BASE_METRICS",
    "COUNT",
    "METHODS",
    "OUTCOME_METRICS",
    "ROOM_SIZES",
    "ROOM_SIZE_WORDS",
    "SHARE",
    "SUB_CALL_METRICS",
    "TIMEOUT_METRIC",
    "Metric",
    "SectionContext",
    "arm_info",
    "arm_size_correlations",
    "arm_token_shares",
    "comparisons",
    "corrected_rates",
    "criterion_shares",
    "depth_ablations",
    "depth_table",
    "difference_bounds",
    "dynamic_metrics",
    "flipped_criteria",
    "grids",
    "mean_of_room_means",
    "model_gap",
    "paired_rooms",
    "per_arm_metrics",
    "read_calibrations",
    "read_training_curve",
    "report_metrics",
    "report_notes",
    "room_labels",
    "room_means",
    "room_size",
    "short_name",
    "size_correlations",
    "timeout_count",
    "token_shares",
]


# ----------------------------------------------------------------------------- settings
class SectionContext(NamedTuple):
    """Interval settings of a report (see :mod:`rlmdistill.stats`).

    Fields: ``resamples`` (B, >= 100, of the paired bootstrap of a correlation change),
    ``seed`` (of that resampling; the same seed gives the same intervals), ``confidence``
    (two-sided level of every interval, in [0.5, 1)).
    """

    resamples: int = DEFAULT_RESAMPLES
    seed: int = 0
    confidence: float = DEFAULT_CONFIDENCE


# ----------------------------------------------------------------------------- metrics
class Metric(NamedTuple):
    """One metric of the report: its name, a one-line description (stored in
    ``report.json``'s ``metric_descriptions``), how to read it from an episode's row
    (``None``: not measured or undefined for that episode) and the range its values lie in
    (:data:`SHARE`, :data:`COUNT`; intervals are clipped to it)."""

    name: str
    description: str
    get: Callable[[EpisodeMetrics], float | None]
    bounds: Bounds = UNBOUNDED


def difference_bounds(bounds: Bounds) -> Bounds:
    """Range of a difference ``b - a`` of two values in ``bounds``: ``(lo - hi, hi - lo)``
    (``(-1, 1)`` for a share); unbounded where either side is."""
    lo, hi = bounds
    if lo is None or hi is None:
        return UNBOUNDED
    return (lo - hi, hi - lo)


def _f(v: float | int | bool | None) -> float | None:
    return None if v is None else float(v)


SUB_CALL_ERROR_METRIC = Metric(
    "sub_call_error_share",
    "sub-calls that came back as an error / sub-calls of every depth (at depth 2 also a "
    "subagent that gave no answer within its turns); undefined for an episode without sub-calls",
    lambda r: r.n_sub_call_errors / r.n_sub_calls if r.n_sub_calls else None,
    SHARE,
)
"""Why a depth-2 arm's memos can cite every document and still pass nothing: the sub-calls
came back as errors (``Episode.n_sub_call_errors``), not findings."""

_NO_SUB_CALLS = "an episode without sub-calls has no value (left out of the means, not 0)"
SUB_CALL_METRICS: list[Metric] = [
    SUB_CALL_ERROR_METRIC,
    Metric(
        "sub_answer_chars",
        "mean length of the sub-call answers in characters (Unicode code points of the "
        "response as recorded; an answer: a sub-call of any depth without error whose response "
        "has a word); an episode without answers has no value (left out, not 0)",
        lambda r: r.sub_answer_chars,
        COUNT,
    ),
    Metric(
        "sub_answer_quote_share",
        "share of the sub-call answers that quote a document of the room: a span of >= 79 "
        "normalised characters in common with a document (the coverage probe's rule, "
        "CoverageIndex.shares_text; 64-78 only when it holds an aligned window); an episode "
        "without answers, or whose room folder is not found, has no value (left out, not 0)",
        lambda r: r.sub_answer_quote_share,
        SHARE,
    ),
    Metric(
        "sub_used_share",
        f"share of the sub-calls (every depth; a failed call is not used) whose answer reached "
        f"the memo: >= {USED_SHARE:.0%} of its distinct {GRAM_WORDS}-word runs in the memo "
        f"({SUB_CREDIT_METHOD}, traces/sub_credit.py); {_NO_SUB_CALLS}",
        lambda r: r.sub_used_share,
        SHARE,
    ),
    Metric(
        "sub_supports_pass_share",
        f"share of the sub-calls (every depth) whose answer is used and reached a memo finding "
        f"citing a document of a criterion the grader passed ({SUB_CREDIT_METHOD}); "
        f"{_NO_SUB_CALLS}, nor one whose current memo is not graded",
        lambda r: r.sub_supports_pass_share,
        SHARE,
    ),
]
"""Per-episode sub-call metrics (:mod:`rlmdistill.analysis.metrics`): the error
share (from the summary), answer length, quotes of the room, and the sub-call credit's
``used_in_memo`` and ``supports_pass`` shares."""

BASE_METRICS: list[Metric] = [
    Metric("pass_rate", "passed / all criteria of the room", lambda r: r.pass_rate, SHARE),
    Metric("graded_pass_rate", "passed / (passed + failed)", lambda r: r.graded_pass_rate, SHARE),
    Metric(
        "weighted_pass_rate", "weight of passed / all weight", lambda r: r.weighted_pass_rate, SHARE
    ),
    Metric(
        "coverage", "share of room characters that reached a model", lambda r: r.coverage, SHARE
    ),
    Metric(
        "docs_read_share",
        "share of documents with coverage > 0",
        lambda r: r.docs_read_share,
        SHARE,
    ),
    Metric("n_sub_calls", "sub-calls, every depth", lambda r: _f(r.n_sub_calls), COUNT),
    Metric("n_sub_batches", "llm_query(_batched) calls", lambda r: _f(r.n_sub_batches), COUNT),
    Metric(
        "mean_batch_size", "mean size of the root's batches", lambda r: r.mean_batch_size, COUNT
    ),
    Metric(
        "n_sub_calls_with_text",
        "root sub-calls whose prompt carried document text (REPL-tracked sources)",
        lambda r: _f(r.n_sub_calls_with_text),
        COUNT,
    ),
    Metric(
        "share_sub_calls_with_text",
        "share of the root's sub-calls carrying document text",
        lambda r: r.share_sub_calls_with_text,
        SHARE,
    ),
    Metric(
        "answer_reach",
        f"share of sub-call answers sharing {REACH_NGRAM} consecutive words with the memo",
        lambda r: r.answer_reach,
        SHARE,
    ),
    *SUB_CALL_METRICS,
    Metric("n_turns", "root turns", lambda r: _f(r.n_turns), COUNT),
    Metric("memo_chars", "memo length in characters", lambda r: _f(r.memo_chars), COUNT),
    Metric(
        "memo_first_turn_share",
        "(turn the memo is first written + 1) / turns",
        lambda r: r.memo_first_turn_share,
        SHARE,
    ),
    Metric("has_memo", "episodes with a memo (share)", lambda r: _f(r.has_memo), SHARE),
    Metric(
        "early_give_up",
        f"no memo, or memo after reading < {GIVE_UP_READ_SHARE:.0%} of documents (share)",
        lambda r: _f(r.early_give_up),
        SHARE,
    ),
    Metric(
        "read_no_memo", "read >= 1 document, no memo (share)", lambda r: _f(r.read_no_memo), SHARE
    ),
    Metric("sub_token_share", "sub tokens / all tokens", lambda r: r.sub_token_share, SHARE),
    Metric("sub_input_share", "sub prompt / all prompt tokens", lambda r: r.sub_input_share, SHARE),
    Metric(
        "sub_output_share",
        "sub completion / all completion tokens",
        lambda r: r.sub_output_share,
        SHARE,
    ),
    Metric("cost_usd", "root + sub cost in USD (price table)", lambda r: r.cost_usd, COUNT),
    Metric("wall_time_s", "episode wall time in seconds", lambda r: r.wall_time_s, COUNT),
]
"""The metrics every report shows, in this order (defined in ``docs/analysis.md``)."""

TIMEOUT_METRIC = Metric(
    "timeout",
    "episodes that ended `timeout`, the episode wall-time limit (share)",
    lambda r: float(r.status == "timeout"),
    SHARE,
)
"""Wall-clock timeouts: a safety net whose count depends on machine load."""

_OUTCOME_NAMES = ("pass_rate", "coverage", "has_memo", "read_no_memo", "n_sub_calls")
OUTCOME_METRICS: list[Metric] = [
    *(next(m for m in BASE_METRICS if m.name == name) for name in _OUTCOME_NAMES),
    SUB_CALL_ERROR_METRIC,
    TIMEOUT_METRIC,
]
"""The metrics of the multi-arm table and the depth table: pass rate, coverage, memo rate
(``has_memo``), "read but wrote no memo", sub-calls, the share of sub-calls that came back as
errors, and timeouts."""


def _type_getter(t: str) -> Callable[[EpisodeMetrics], float | None]:
    return lambda r: r.pass_rate_by_type.get(t)


def _folder_getter(f: str) -> Callable[[EpisodeMetrics], float | None]:
    return lambda r: r.coverage_per_folder.get(f)


def dynamic_metrics(arms: Sequence[list[EpisodeMetrics]]) -> list[Metric]:
    """``pass_rate[<type>]`` per criterion type and ``coverage[<folder>]`` per folder seen in
    any of ``arms`` (each a list of episode rows), each sorted by name."""
    types = sorted({t for rows in arms for r in rows for t in r.pass_rate_by_type})
    folders = sorted({f for rows in arms for r in rows for f in r.coverage_per_folder})
    out = [
        Metric(f"pass_rate[{t}]", f"pass rate over the {t} criteria", _type_getter(t), SHARE)
        for t in types
    ]
    out += [
        Metric(f"coverage[{f}]", f"coverage of folder {f}", _folder_getter(f), SHARE)
        for f in folders
    ]
    return out


def report_metrics(rows: dict[str, list[EpisodeMetrics]]) -> list[Metric]:
    """The metrics of a report over ``rows``: :data:`BASE_METRICS`, then
    :func:`dynamic_metrics` of every arm."""
    return BASE_METRICS + dynamic_metrics(list(rows.values()))


METHODS = {
    "mean": (
        "mean of room means (each room weighs the same; rooms, not episodes, are the "
        "independent units: Cameron & Miller 2015 sec. VI); interval over the room means: for "
        "rates and shares ([0, 1]) Korn & Graubard's (1998): Clopper-Pearson limits at the "
        "effective count n* = p(1 - p) / (s^2 / n) (z / t(n-1))^2, x* = p n* (the t interval "
        "covered 88-90% at 4-12 rooms on zero-heavy pass rates, this one 96-97%), and when "
        "every room is at 0 the one-sided upper bound 1 - a^(1/n) over the n rooms (exact "
        "Clopper-Pearson; at 1: the lower bound a^(1/n)); for counts and amounts Student's t, "
        "mean +- t(n-1, 1-a/2) s / sqrt(n) (Student 1908), clipped to >= 0; these replaced a "
        "percentile bootstrap over rooms, which covered 77-92% at 4-12 rooms for a 95% "
        "interval (benchmarks/bench_mean_interval.py)"
    ),
    "paired_difference": (
        "per room: mean(B) - mean(A) over rooms both arms ran (paired by room content hash); "
        "mean of the differences with the same Student t interval over rooms, clipped to the "
        "range of a difference ([-1, 1] for shares)"
    ),
    "wilcoxon": WILCOXON_METHOD,
    "pearson": "Pearson r, Fisher z interval (Fisher 1921), scipy.stats.pearsonr",
    "spearman": (
        "Spearman rho, Fisher z interval with the Bonett-Wright standard error "
        "(Bonett & Wright 2000), scipy.stats.spearmanr"
    ),
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
"""Method name -> how it is computed and its source (``report.json``'s ``methods``)."""


# ----------------------------------------------------------------------------- arms, rooms
def short_name(spec: str) -> str:
    """Short name of a model spec: the served model name (``openai``), or the embedded
    model's folder name, plus ``+<adapter folder>`` when the spec has an adapter. A spec
    :func:`~rlmdistill.models.spec.parse_spec` cannot read is returned as it is."""
    try:
        s = parse_spec(spec)
    except ValueError:
        return spec
    name = s.name if s.kind == "openai" else Path(s.name).name or s.name
    if s.adapter:
        name += f"+{Path(s.adapter).name}"
    return name


def arm_info(label: str, run_dir: Path | str, loaded: RunMetrics) -> ArmInfo:
    """The :class:`ArmInfo` of one run, from what
    :func:`~rlmdistill.analysis.metrics.load_run_metrics` read of it (manifest, grader, rows)."""
    cfg = loaded.manifest.config
    return ArmInfo(
        label=label,
        run_dir=str(run_dir),
        run_id=loaded.manifest.run_id,
        root=str(cfg.root),
        sub=str(cfg.sub),
        root_name=short_name(str(cfg.root)),
        sub_name=short_name(str(cfg.sub)),
        depth=cfg.depth,
        grader=loaded.grader,
        n_episodes=len(loaded.rows),
        n_rooms=len({r.room_hash for r in loaded.rows}),
        status_counts=dict(Counter(r.status for r in loaded.rows)),
        n_unscored=sum(1 for r in loaded.rows if r.pass_rate is None),
    )


def room_labels(arms: Sequence[list[EpisodeMetrics]]) -> dict[str, RoomInfoRow]:
    """Room hash -> room row over every arm's rows (``arms``: one list of rows per arm); the
    label is the room id, or ``id#hash6`` (first 6 hex digits of the content hash) when two
    rooms share an id. Size fields come from the first row seen of the room."""
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


def room_means(
    rows: Sequence[EpisodeMetrics],
    get: Callable[[EpisodeMetrics], float | None],
    rooms: dict[str, RoomInfoRow],
) -> tuple[dict[str, float], list[float]]:
    """Per-room means of ``get`` over ``rows`` and the episode values behind them.

    Returns ``(room label -> mean over the room's episodes with a finite value, every finite
    value in row order)``; episodes whose value is ``None`` or not finite are left out, and a
    room with no value has no entry.
    """
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


def _labeled_means(
    rows: Sequence[EpisodeMetrics],
    labels: Sequence[str],
    get: Callable[[EpisodeMetrics], float | None],
) -> tuple[dict[str, float], list[float]]:
    """:func:`room_means` with each row's room label given (``labels[i]`` of ``rows[i]``)."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    values: list[float] = []
    isfinite = math.isfinite
    for r, label in zip(rows, labels, strict=True):
        v = get(r)
        if v is None or not isfinite(v):
            continue
        if label in sums:
            sums[label] += v
            counts[label] += 1
        else:
            sums[label] = 0.0 + v  # as room_means sums, to the last bit
            counts[label] = 1
        values.append(v)
    return {k: sums[k] / counts[k] for k in sums}, values


def mean_of_room_means(
    ctx: SectionContext, means: dict[str, float], bounds: Bounds = UNBOUNDED
) -> Estimate:
    """Mean of room means with its interval over rooms: for a rate or share (``bounds`` is
    :data:`SHARE`) the Korn-Graubard interval (:func:`~rlmdistill.stats.rate_interval`:
    skewed away from 0 for zero-heavy pass rates, a one-sided bound when every room is at 0),
    else the Student t interval clipped to ``bounds`` (the metric's range;
    :func:`~rlmdistill.stats.mean_interval`)."""
    if bounds == SHARE:
        return rate_interval(list(means.values()), confidence=ctx.confidence)
    return mean_interval(list(means.values()), confidence=ctx.confidence, bounds=bounds)


def paired_rooms(
    ctx: SectionContext, a: dict[str, float], b: dict[str, float], bounds: Bounds = UNBOUNDED
) -> PairedComparison:
    """``b - a`` paired over the rooms both have (room label -> mean), with the t interval of
    the mean difference clipped to :func:`difference_bounds` of ``bounds`` (the metric's
    range) and the Wilcoxon test (:func:`~rlmdistill.stats.paired_comparison`)."""
    return paired_comparison(a, b, confidence=ctx.confidence, bounds=difference_bounds(bounds))


# ----------------------------------------------------------------------------- per arm
def per_arm_metrics(
    arms: list[ArmInfo],
    rows: dict[str, list[EpisodeMetrics]],
    rooms: dict[str, RoomInfoRow],
    ctx: SectionContext,
    metrics: Sequence[Metric] | None = None,
) -> dict[str, list[ArmMetric]]:
    """Arm label -> one :class:`ArmMetric` per metric (default :func:`report_metrics` of
    ``rows``): mean of room means with its interval, episode-level descriptives, room means."""
    metrics = report_metrics(rows) if metrics is None else metrics
    out: dict[str, list[ArmMetric]] = {}
    for a in arms:
        out[a.label] = []
        labels = [rooms[r.room_hash].label for r in rows[a.label]]  # once for every metric
        for m in metrics:
            means, values = _labeled_means(rows[a.label], labels, m.get)
            out[a.label].append(
                ArmMetric(
                    metric=m.name,
                    mean=mean_of_room_means(ctx, means, m.bounds),
                    episodes=Stat.of(values),
                    room_means=means,
                )
            )
    return out


# ----------------------------------------------------------------------------- comparisons
def _majority(share: float) -> Literal["PASS", "FAIL", "TIE"]:
    return "PASS" if share > 0.5 else "FAIL" if share < 0.5 else "TIE"


def criterion_shares(
    rows: Sequence[EpisodeMetrics], rooms: dict[str, RoomInfoRow]
) -> dict[tuple[str, str], tuple[float, int, str | None]]:
    """``(room label, criterion id) -> (pass share, episodes scored, criterion type)`` over the
    scored episodes of ``rows``: PASS verdicts / scored episodes (UNGRADABLE and missing count
    as not passed)."""
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


def flipped_criteria(
    a_rows: Sequence[EpisodeMetrics],
    b_rows: Sequence[EpisodeMetrics],
    rooms: dict[str, RoomInfoRow],
) -> FlipTable:
    """Criteria whose majority verdict differs between arm A and arm B, compared where both
    arms scored the (room, criterion) (rule: :data:`METHODS` ``flipped_criteria``)."""
    a = criterion_shares(a_rows, rooms)
    b = criterion_shares(b_rows, rooms)
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


def comparisons(
    arms: list[ArmInfo],
    rows: dict[str, list[EpisodeMetrics]],
    rooms: dict[str, RoomInfoRow],
    ctx: SectionContext,
    per_arm: dict[str, list[ArmMetric]] | None = None,
) -> list[Comparison]:
    """Each arm after the first (B) against the baseline ``arms[0]`` (A): one
    :class:`ComparisonRow` per metric of ``per_arm`` (A's and B's means, the difference paired
    over rooms, episodes with a value), the criteria that flipped and which rooms pair.

    ``per_arm`` is :func:`per_arm_metrics` of the same inputs (computed when not given; the
    means are deterministic, so passing it only saves computing them again)."""
    per_arm = per_arm_metrics(arms, rows, rooms, ctx) if per_arm is None else per_arm
    bounds = {m.name: m.bounds for m in report_metrics(rows)}
    base = arms[0]
    by = {(a.label, am.metric): am for a in arms for am in per_arm[a.label]}
    names = [am.metric for am in per_arm[base.label]]
    out = []
    for b in arms[1:]:
        crows = []
        for name in names:
            ma, mb = by[(base.label, name)], by[(b.label, name)]
            crows.append(
                ComparisonRow(
                    metric=name,
                    a=ma.mean,
                    b=mb.mean,
                    paired=paired_rooms(
                        ctx, ma.room_means, mb.room_means, bounds.get(name, UNBOUNDED)
                    ),
                    n_episodes_a=ma.episodes.n,
                    n_episodes_b=mb.episodes.n,
                )
            )
        ra = {rooms[r.room_hash].label for r in rows[base.label]}
        rb = {rooms[r.room_hash].label for r in rows[b.label]}
        out.append(
            Comparison(
                a=base.label,
                b=b.label,
                rows=crows,
                flipped=flipped_criteria(rows[base.label], rows[b.label], rooms),
                rooms_paired=sorted(ra & rb),
                rooms_only_in_a=sorted(ra - rb),
                rooms_only_in_b=sorted(rb - ra),
            )
        )
    return out


# ----------------------------------------------------------------------------- tokens, size
def _known_sum(values: Sequence[int | None]) -> int | None:
    """Sum of ``values``; ``None`` (unknown) when any of them is unknown."""
    return None if any(v is None for v in values) else sum(v or 0 for v in values)


def arm_token_shares(label: str, rows: Sequence[EpisodeMetrics]) -> TokenShares:
    """Token totals of one arm (root/sub x prompt/cached/completion) and each part's share of
    all tokens (``None`` when the arm spent no tokens; cached totals ``None`` when any
    episode's server did not report them)."""
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


def token_shares(arms: list[ArmInfo], rows: dict[str, list[EpisodeMetrics]]) -> list[TokenShares]:
    """:func:`arm_token_shares` of every arm, in arm order."""
    return [arm_token_shares(a.label, rows[a.label]) for a in arms]


ROOM_SIZES: tuple[RoomSize, ...] = ("room_chars", "room_documents", "room_tokens")
"""Room sizes the sub-calls are correlated with, in report order."""
ROOM_SIZE_WORDS: dict[str, str] = {
    "room_chars": "room size in characters",
    "room_documents": "room size in documents",
    "room_tokens": "room size in tokens",
}
"""How the report names each of :data:`ROOM_SIZES` in prose (reasons, headings)."""


def room_size(room: RoomInfoRow, x: RoomSize) -> float | None:
    """Size of ``room`` measured as ``x``; ``None`` when unknown (tokens: the root model had
    no tokenizer when the room was prepared for collection)."""
    if x == "room_chars":
        return float(room.n_chars)
    if x == "room_documents":
        return float(room.n_documents)
    return None if room.n_tokens is None else float(room.n_tokens)


def _size_reason(
    c: Correlation,
    label: str,
    x: RoomSize,
    xs: Sequence[float],
    ys: Sequence[float],
    unknown: int,
) -> Correlation:
    """``c`` with its reason in the report's words when it is undefined because sizes are
    unknown, every room has the same size, or the arm's sub-calls do not vary (the
    statistics module speaks of x and y)."""
    if c.value is not None:
        return c
    n = len(ys)
    what = ROOM_SIZE_WORDS[x]
    if n < MIN_UNITS:
        if not unknown:
            return c
        why = (
            f"{what} unknown for {unknown} of {n + unknown} rooms (counted only when the root "
            f"model has a tokenizer at collection); {n} rooms left: a correlation needs at "
            f"least {MIN_UNITS}"
        )
    elif all(v == xs[0] for v in xs):
        why = f"all {n} rooms have the same {what} ({xs[0]:g}): no spread, so no correlation"
    elif all(v == 0 for v in ys):
        why = (
            f"arm {label} made no sub-calls in any of the {n} rooms: its correlation with "
            f"{what} is undefined"
        )
    elif all(v == ys[0] for v in ys):
        why = (
            f"arm {label} made the same mean number of sub-calls ({ys[0]:g}) in all {n} rooms: "
            f"its correlation with {what} is undefined"
        )
    else:
        return c
    return c.model_copy(update={"reason": why})


def arm_size_correlations(
    label: str,
    rows: Sequence[EpisodeMetrics],
    rooms: dict[str, RoomInfoRow],
    ctx: SectionContext,
) -> list[SizeCorrelation]:
    """Room mean of ``n_sub_calls`` against room characters, room documents and room tokens
    (:data:`ROOM_SIZES`; one point per room of the arm): Pearson (Fisher z interval) and
    Spearman (Fisher z interval, Bonett-Wright standard error). Rooms of unknown size (tokens)
    are left out and listed; an undefined correlation says why in the report's words (e.g. "arm base made
    no sub-calls in any of the 4 rooms: its correlation with room size in tokens is
    undefined")."""
    means, _ = room_means(rows, lambda r: float(r.n_sub_calls), rooms)
    by_label = {row.label: row for row in rooms.values()}
    out = []
    for x in ROOM_SIZES:
        sizes = {k: room_size(by_label[k], x) for k in means}
        keys = [k for k, v in sizes.items() if v is not None]
        unknown = [k for k, v in sizes.items() if v is None]
        xs = [v for v in (sizes[k] for k in keys) if v is not None]
        ys = [means[k] for k in keys]
        r = pearson(xs, ys, confidence=ctx.confidence)
        rho = spearman(xs, ys, confidence=ctx.confidence)
        out.append(
            SizeCorrelation(
                arm=label,
                x=x,
                y="n_sub_calls (room mean)",
                rooms=keys,
                xs=xs,
                ys=ys,
                pearson=_size_reason(r, label, x, xs, ys, len(unknown)),
                spearman=_size_reason(rho, label, x, xs, ys, len(unknown)),
                rooms_without_size=unknown,
            )
        )
    return out


def size_correlations(
    arms: list[ArmInfo],
    rows: dict[str, list[EpisodeMetrics]],
    rooms: dict[str, RoomInfoRow],
    ctx: SectionContext,
) -> list[SizeCorrelation]:
    """:func:`arm_size_correlations` of every arm, in arm order (one record per arm and
    :data:`ROOM_SIZES` entry)."""
    return [s for a in arms for s in arm_size_correlations(a.label, rows[a.label], rooms, ctx)]


# ----------------------------------------------------------------------------- depth, grid
def timeout_count(rows: Sequence[EpisodeMetrics]) -> int:
    """Episodes of ``rows`` that ended ``timeout`` (the episode wall-time limit)."""
    return sum(1 for r in rows if r.status == "timeout")


def depth_table(
    depth1_rows: Sequence[EpisodeMetrics],
    depth2_rows: Sequence[EpisodeMetrics],
    rooms: dict[str, RoomInfoRow],
    ctx: SectionContext,
    metrics: Sequence[Metric] = OUTCOME_METRICS,
) -> list[DepthMetricRow]:
    """Depth 1 against depth 2, one row per metric (default :data:`OUTCOME_METRICS`: pass
    rate, coverage, memo rate, read-no-memo, sub-calls, timeouts): each arm's mean of room
    means over all its rooms with a t interval over rooms, and ``depth 2 - depth 1``
    paired over the rooms both ran (mean with interval, Wilcoxon test)."""
    out = []
    for m in metrics:
        m1, v1 = room_means(depth1_rows, m.get, rooms)
        m2, v2 = room_means(depth2_rows, m.get, rooms)
        out.append(
            DepthMetricRow(
                metric=m.name,
                depth1=mean_of_room_means(ctx, m1, m.bounds),
                depth2=mean_of_room_means(ctx, m2, m.bounds),
                paired=paired_rooms(ctx, m1, m2, m.bounds),
                n_episodes_depth1=len(v1),
                n_episodes_depth2=len(v2),
            )
        )
    return out


def depth_ablations(
    arms: list[ArmInfo],
    rows: dict[str, list[EpisodeMetrics]],
    rooms: dict[str, RoomInfoRow],
    ctx: SectionContext,
) -> list[DepthAblation]:
    """Depth 1 against depth 2 (empty unless both depths are among ``arms``): each depth-1 arm
    paired with each depth-2 arm of the same (root, sub) short names, or, when none match, the
    first of each with a note. Pass rate per room, paired (``depth 2 - depth 1``), per arm
    the episodes with no memo, those that read but wrote no memo and those that ended
    ``timeout``, and the depth table (:func:`depth_table`)."""
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
    pass_rate = next(m for m in BASE_METRICS if m.name == "pass_rate")
    get = pass_rate.get
    for a, b in pairs:
        ma, _ = room_means(rows[a.label], get, rooms)
        mb, _ = room_means(rows[b.label], get, rooms)
        out.append(
            DepthAblation(
                depth1_arm=a.label,
                depth2_arm=b.label,
                note=note,
                metric="pass_rate",
                depth1_room_means=ma,
                depth2_room_means=mb,
                paired=paired_rooms(ctx, ma, mb, pass_rate.bounds),
                read_no_memo={
                    x.label: sum(1 for r in rows[x.label] if r.read_no_memo) for x in (a, b)
                },
                no_memo={x.label: sum(1 for r in rows[x.label] if not r.has_memo) for x in (a, b)},
                n_episodes={x.label: len(rows[x.label]) for x in (a, b)},
                metrics=depth_table(rows[a.label], rows[b.label], rooms, ctx),
                timeouts={x.label: timeout_count(rows[x.label]) for x in (a, b)},
            )
        )
    return out


def model_gap(role: Literal["root", "sub"], fixed: str, values: dict[str, float]) -> ModelGap:
    """Best minus worst of ``values`` (the other model's short name -> mean pass rate) with
    the ``role`` model ``fixed``; undefined with the reason when fewer than two are given."""
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


def grids(
    arms: list[ArmInfo],
    rows: dict[str, list[EpisodeMetrics]],
    rooms: dict[str, RoomInfoRow],
    ctx: SectionContext,
) -> list[Grid]:
    """Root x sub grid per depth where the arms at that depth differ in root or sub model:
    per (root, sub) cell the mean of room means of the pass rate, pooled over the arms that ran
    the pair, and the best-minus-worst gaps (:func:`model_gap`) per sub and per root."""
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
                means, vals = room_means(pooled, lambda r: r.pass_rate, rooms)
                est = mean_of_room_means(ctx, means, SHARE)  # pass rate
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
            model_gap("sub", sub, {r: v for (r, s), v in value.items() if s == sub}) for sub in subs
        ]
        sub_gaps = [
            model_gap("root", root, {s: v for (r, s), v in value.items() if r == root})
            for root in roots
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


# ----------------------------------------------------------------------------- training, notes
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


def read_rl_curve(adapter_dir: Path) -> RLCurve:
    """Read ``adapter_dir/rl_log.jsonl`` (``rlmdistill rl``) into per-step series and the
    share of zero-variance rollout groups over the run. A torn last line is ignored and
    flagged. Raises ``FileNotFoundError`` when the log is missing and ``ValueError`` naming
    the file and line when a line is not an RL log entry."""
    log = read_rl_log(Path(adapter_dir))
    recs = sorted(log.records, key=lambda r: r.step)
    pairs = [
        (r.groups, r.zero_variance_groups)
        for r in recs
        if r.groups is not None and r.zero_variance_groups is not None
    ]
    n_groups = sum(g for g, _ in pairs)
    return RLCurve(
        adapter=Path(adapter_dir).resolve().name,
        path=str(log.path),
        steps=[r.step for r in recs],
        reward_mean=[r.reward_mean for r in recs],
        reward_std=[r.reward_std for r in recs],
        groups=[r.groups for r in recs],
        zero_variance_groups=[r.zero_variance_groups for r in recs],
        kl=[r.kl for r in recs],
        loss=[r.loss for r in recs],
        staleness=[r.staleness for r in recs],
        stale_token_share=[r.stale_token_share for r in recs],
        rollout_wall_s=[r.rollout_wall_s for r in recs],
        sub_calls_per_rollout=[r.sub_calls_per_rollout for r in recs],
        zero_variance_share=sum(z for _, z in pairs) / n_groups if n_groups else None,
        torn_tail=log.torn_tail,
    )


def report_notes(arms: list[ArmInfo]) -> list[str]:
    """The report's notes on its arms: arms scored by different graders, and per arm the
    episodes without a pass rate."""
    notes = []
    graders = {a.grader for a in arms}
    if len(graders) > 1:
        notes.append(f"arms were scored by different graders: {sorted(map(str, graders))}")
    for a in arms:
        if a.n_unscored:
            notes.append(f"{a.label}: {a.n_unscored} of {a.n_episodes} episodes have no pass rate")
    return notes


def read_calibrations(arms: Sequence[ArmInfo]) -> dict[str, Calibration]:
    """Arm label -> its grader's :class:`~rlmdistill.traces.calibration.Calibration` against
    people's labels of the arm's run, for every arm with a grader and a ``labels.jsonl``
    (reads the run's labels, episodes and that grader's verdicts)."""
    return {
        a.label: run_calibration(Path(a.run_dir), a.grader)
        for a in arms
        if a.grader is not None and labels_path(Path(a.run_dir)).is_file()
    }


def corrected_rates(
    arms: Sequence[ArmInfo], calibrations: dict[str, Calibration], ctx: SectionContext
) -> list[CorrectedRateRow]:
    """Each arm with a calibration (:func:`read_calibrations`): its grader's raw pass rate
    (criteria pooled) and the Rogan-Gladen value with its interval at ``ctx.confidence``
    (:func:`rlmdistill.stats.corrected_pass_rate`), in arm order."""
    out: list[CorrectedRateRow] = []
    for a in arms:
        c = calibrations.get(a.label)
        if c is None:
            continue
        rate = corrected_pass_rate(
            c.n_pass,
            c.n,
            true_pass=c.true_pass,
            m1=c.m1,
            true_fail=c.true_fail,
            m0=c.m0,
            confidence=ctx.confidence,
        )
        out.append(CorrectedRateRow(arm=a.label, grader=c.grader, calibration=c, rate=rate))
    return out
