"""The filter report: what rejection sampling kept and dropped, as JSON and Markdown.

:func:`build_report` turns a :class:`~rlmdistill.filter.select.Selection` into a
:class:`FilterReport` (counts by primary reason and by any reason, per room, per room-size
bucket, pass-rate and coverage distributions before and after, the rules and the runs);
:func:`render_markdown` renders it; :func:`write_report` writes ``filter_report.json``,
``filter_report.md`` and ``decisions.jsonl`` (one
:class:`~rlmdistill.filter.select.FilterDecision` per episode) into a folder.

Size buckets are log-spaced on the room's document count, base 2: ``1``, ``2-3``, ``4-7``,
``8-15``, ... (bucket ``b`` holds ``2**b <= n < 2**(b+1)``; rooms without documents fall in
``0``). Distributions use numpy: mean, sample standard deviation (n-1), min, max and the
10/25/50/75/90 % quantiles with numpy's default ``linear`` method.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from rlmdistill import __version__
from rlmdistill.filter.rules import REASON_ORDER, DropReason, FilterRules
from rlmdistill.filter.select import FilterDecision, RoomThresholds, RunInfo, Selection
from rlmdistill.mdtable import Cell, markdown_table
from rlmdistill.stats import Estimate, wilson_interval
from rlmdistill.traces import layout
from rlmdistill.traces.schema import SCHEMA_VERSION, utcnow
from rlmdistill.traces.store import append_records

__all__ = [
    "QUANTILES",
    "BucketCounts",
    "Distribution",
    "FilterReport",
    "HumanReview",
    "RoomCounts",
    "build_report",
    "render_card_section",
    "render_markdown",
    "size_bucket",
    "write_report",
]

QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
"""Quantiles reported for every distribution."""


def size_bucket(n_documents: int) -> str:
    """Log-spaced (base 2) bucket label of a room size: 1 -> ``"1"``, 5 -> ``"4-7"``,
    300 -> ``"256-511"``; 0 or fewer -> ``"0"``."""
    if n_documents <= 0:
        return "0"
    low = 1 << (n_documents.bit_length() - 1)  # largest power of 2 <= n, exact
    high = 2 * low - 1
    return str(low) if low == high else f"{low}-{high}"


def _bucket_low(label: str) -> int:
    return int(label.split("-")[0])


class Distribution(BaseModel):
    """Summary of one score over some episodes (episodes without the score left out).

    Fields are ``None`` when ``n`` is 0 (``sd`` also when ``n`` is 1)."""

    model_config = ConfigDict(extra="forbid")

    n: int
    n_missing: int
    """Episodes without this score (not graded / no coverage)."""
    mean: float | None = None
    sd: float | None = None
    min: float | None = None
    max: float | None = None
    quantiles: dict[str, float] = Field(default_factory=dict)
    """``{"0.1": value, ...}`` for :data:`QUANTILES` (empty when n is 0)."""

    @classmethod
    def of(cls, values: Iterable[float | None]) -> Distribution:
        """Summarise ``values`` (``None`` entries counted in ``n_missing``)."""
        all_values = list(values)
        present = np.asarray([v for v in all_values if v is not None], dtype=float)
        n = int(present.size)
        if n == 0:
            return cls(n=0, n_missing=len(all_values))
        qs = np.quantile(present, QUANTILES)
        return cls(
            n=n,
            n_missing=len(all_values) - n,
            mean=float(present.mean()),
            sd=float(present.std(ddof=1)) if n > 1 else None,
            min=float(present.min()),
            max=float(present.max()),
            quantiles={str(q): float(v) for q, v in zip(QUANTILES, qs, strict=True)},
        )


class BeforeAfter(BaseModel):
    """One score's distribution over all episodes (before) and over the kept ones (after)."""

    model_config = ConfigDict(extra="forbid")

    before: Distribution
    after: Distribution


class RoomCounts(BaseModel):
    """Counts of one room (room content hash + task)."""

    model_config = ConfigDict(extra="forbid")

    room_key: str
    room_id: str
    task_id: str
    room_docs: int
    size_bucket: str
    n_total: int
    n_kept: int
    dropped: dict[str, int]
    """Primary reason -> episodes."""
    thresholds: RoomThresholds
    pass_rate: BeforeAfter
    coverage: BeforeAfter


class BucketCounts(BaseModel):
    """Counts of one room-size bucket (see :func:`size_bucket`)."""

    model_config = ConfigDict(extra="forbid")

    size_bucket: str
    n_rooms: int
    n_total: int
    n_kept: int
    dropped: dict[str, int]


class HumanReview(BaseModel):
    """What people's labels (``labels.jsonl`` of the runs) did to a selection."""

    model_config = ConfigDict(extra="forbid")

    n_kept: int
    n_kept_reviewed: int
    """Kept episodes a person labelled (keep: a rejected one is never kept)."""
    n_dropped_by_person: int
    """Episodes the other rules kept and a person's reject dropped (primary reason
    ``human_reject``)."""
    n_rule_kept: int
    """Episodes the rules other than ``human_reject`` keep."""
    n_rule_kept_reviewed: int
    """... of which a person labelled keep or reject."""
    n_rule_kept_rejected: int
    """... of which a person labelled reject."""
    reject_share: Estimate
    """``n_rule_kept_rejected / n_rule_kept_reviewed`` with its 95% Wilson interval: the
    estimated share of the episodes the rules keep that a reviewer would reject (so of the
    kept, unreviewed ones), assuming the reviewed ones are a random sample of them."""
    labels: dict[str, str]
    """Run id -> sha256 of the ``labels.jsonl`` read."""


class FilterReport(BaseModel):
    """``filter_report.json``: everything the filter decided, in counts."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    record_type: Literal["filter_report"] = "filter_report"
    created_at: dt.datetime = Field(default_factory=utcnow)
    rlmdistill_version: str = __version__
    rules: FilterRules
    grader: str | None
    runs: list[RunInfo]
    n_total: int
    n_kept: int
    n_dropped: int
    dropped_by_reason: dict[str, int]
    """Primary reason -> episodes, in rule order (reasons with 0 episodes left out)."""
    failed_by_rule: dict[str, int]
    """Any reason -> episodes failing that rule (an episode counts under each rule it failed;
    ``duplicate``/``top_k`` are only judged among survivors of the earlier rules)."""
    pass_rate_field: str
    """Which pass rate the distributions show (the rules' ``pass_rate_field``)."""
    pass_rate: BeforeAfter
    coverage: BeforeAfter
    rooms: list[RoomCounts]
    size_buckets: list[BucketCounts]
    human: HumanReview | None = None
    """People's labels in this selection; ``None`` when no run has a ``labels.jsonl``."""


def _human(selection: Selection) -> HumanReview | None:
    labelled = {r.run_id: r.labels.sha256 for r in selection.runs if r.labels is not None}
    if not labelled:
        return None
    ds = selection.decisions
    rule_kept = [d for d in ds if set(d.reasons) <= {"human_reject"}]
    reviewed = [d for d in rule_kept if d.human_verdict is not None]
    rejected = sum(d.human_verdict == "reject" for d in reviewed)
    return HumanReview(
        n_kept=sum(d.kept for d in ds),
        n_kept_reviewed=sum(d.kept and d.human_verdict is not None for d in ds),
        n_dropped_by_person=sum(d.primary_reason == "human_reject" for d in ds),
        n_rule_kept=len(rule_kept),
        n_rule_kept_reviewed=len(reviewed),
        n_rule_kept_rejected=rejected,
        reject_share=wilson_interval(rejected, len(reviewed)),
        labels=labelled,
    )


def _human_lines(h: HumanReview) -> list[str]:
    share = h.reject_share
    est = (
        "no kept episode was reviewed, so no estimate"
        if share.value is None
        else f"a reviewer would reject an estimated {share.value:.1%} of them "
        f"(95% Wilson interval {share.low:.1%} to {share.high:.1%}; "
        f"{h.n_rule_kept_rejected} of {h.n_rule_kept_reviewed} reviewed)"
    )
    return [
        f"{h.n_kept_reviewed} of {h.n_kept} kept episodes were reviewed by a person; "
        f"{h.n_dropped_by_person} episodes the rules kept were dropped by a person's reject.",
        "",
        f"Of the {h.n_rule_kept} episodes the rules keep (before people's rejects), {est}.",
    ]


def _ordered(counter: Counter[str]) -> dict[str, int]:
    order: dict[str, int] = {r: i for i, r in enumerate(REASON_ORDER)}
    return {r: counter[r] for r in sorted(counter, key=lambda r: order.get(r, 99)) if counter[r]}


def _score(d: FilterDecision, name: str) -> float | None:
    value: float | None = getattr(d, name)
    return value


def _before_after(decisions: list[FilterDecision], name: str) -> BeforeAfter:
    return BeforeAfter(
        before=Distribution.of(_score(d, name) for d in decisions),
        after=Distribution.of(_score(d, name) for d in decisions if d.kept),
    )


def build_report(selection: Selection) -> FilterReport:
    """Counts and distributions of ``selection`` (pure)."""
    decisions = selection.decisions
    name = selection.rules.pass_rate_field
    primary: Counter[str] = Counter(d.primary_reason for d in decisions if d.primary_reason)
    any_reason: Counter[str] = Counter(r for d in decisions for r in d.reasons)
    by_room: dict[str, list[FilterDecision]] = {}
    for d in decisions:
        by_room.setdefault(f"{d.room_hash}/{d.task_id}", []).append(d)
    thresholds = {t.room_key: t for t in selection.rooms}
    rooms = []
    for key, members in by_room.items():
        first = members[0]
        rooms.append(
            RoomCounts(
                room_key=key,
                room_id=first.room_id,
                task_id=first.task_id,
                room_docs=first.room_docs,
                size_bucket=size_bucket(first.room_docs),
                n_total=len(members),
                n_kept=sum(d.kept for d in members),
                dropped=_ordered(Counter(d.primary_reason for d in members if d.primary_reason)),
                thresholds=thresholds[key],
                pass_rate=_before_after(members, name),
                coverage=_before_after(members, "coverage"),
            )
        )
    rooms.sort(key=lambda r: (r.room_docs, r.room_id, r.task_id))
    buckets: dict[str, list[RoomCounts]] = {}
    for room in rooms:
        buckets.setdefault(room.size_bucket, []).append(room)
    size_buckets = []
    for label in sorted(buckets, key=_bucket_low):
        members_b = buckets[label]
        dropped: Counter[str] = Counter()
        for room in members_b:
            dropped.update(room.dropped)
        size_buckets.append(
            BucketCounts(
                size_bucket=label,
                n_rooms=len(members_b),
                n_total=sum(r.n_total for r in members_b),
                n_kept=sum(r.n_kept for r in members_b),
                dropped=_ordered(dropped),
            )
        )
    n_kept = sum(d.kept for d in decisions)
    return FilterReport(
        rules=selection.rules,
        grader=selection.grader,
        runs=selection.runs,
        n_total=len(decisions),
        n_kept=n_kept,
        n_dropped=len(decisions) - n_kept,
        dropped_by_reason=_ordered(primary),
        failed_by_rule=_ordered(any_reason),
        pass_rate_field=name,
        pass_rate=_before_after(decisions, name),
        coverage=_before_after(decisions, "coverage"),
        rooms=rooms,
        size_buckets=size_buckets,
        human=_human(selection),
    )


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _dist_row(label: str, d: Distribution) -> list[Cell]:
    q = d.quantiles
    return [
        label,
        d.n,
        d.n_missing,
        _fmt(d.mean),
        _fmt(d.sd),
        _fmt(d.min),
        *(_fmt(q.get(str(x))) for x in QUANTILES),
        _fmt(d.max),
    ]


def _reasons(dropped: dict[str, int]) -> str:
    return ", ".join(f"{r} {n}" for r, n in dropped.items()) or "-"


def render_markdown(report: FilterReport) -> str:
    """The report as Markdown (headings, tables; one line per room and per size bucket)."""
    lines = [
        "# Filter report",
        "",
        f"Created {report.created_at.isoformat()} by rlmdistill {report.rlmdistill_version}.",
        f"Grader: {report.grader or 'none'}; pass rate shown: `{report.pass_rate_field}`.",
        "",
        f"**{report.n_kept} of {report.n_total} episodes kept** ({report.n_dropped} dropped).",
        "",
        "## Runs",
        "",
        *markdown_table(
            ["run id", "path", "episodes", "graders"],
            [
                [run.run_id, f"`{run.run_dir}`", run.n_episodes, ", ".join(run.graders) or "-"]
                for run in report.runs
            ],
        ),
    ]
    by_reason: list[list[Cell]] = [
        [reason, report.dropped_by_reason.get(reason, 0), report.failed_by_rule.get(reason, 0)]
        for reason in REASON_ORDER
    ]
    warnings = [f"- {run.run_id}: {w}" for run in report.runs for w in run.warnings]
    if warnings:
        lines += ["", "Warnings:", "", *warnings]
    lines += [
        "",
        "## Dropped, by reason",
        "",
        "Primary reason = the first rule an episode failed (rule order below); "
        "'failed' counts every rule an episode failed.",
        "",
        *markdown_table(["reason", "primary", "failed"], [r for r in by_reason if r[1] or r[2]]),
    ]
    if report.human is not None:
        lines += ["", "## People's labels", "", *_human_lines(report.human)]
        lines += [
            "",
            *markdown_table(
                ["run id", "labels", "reviewers", "labels.jsonl sha256"],
                [
                    [r.run_id, r.labels.count, ", ".join(r.labels.reviewers), r.labels.sha256]
                    for r in report.runs
                    if r.labels is not None
                ],
            ),
        ]
    lines += ["", "## Score distributions", ""]
    lines += markdown_table(
        ["", "n", "missing", "mean", "sd", "min", *(f"q{int(q * 100)}" for q in QUANTILES), "max"],
        [
            _dist_row(f"{report.pass_rate_field} before", report.pass_rate.before),
            _dist_row(f"{report.pass_rate_field} after", report.pass_rate.after),
            _dist_row("coverage before", report.coverage.before),
            _dist_row("coverage after", report.coverage.after),
        ],
    )
    lines += ["", "## Per room", ""]
    lines += markdown_table(
        [
            "room",
            "task",
            "documents",
            "episodes",
            "kept",
            "dropped",
            "pass-rate threshold",
            "coverage threshold",
            "mean pass rate before/after",
            "mean coverage before/after",
        ],
        [
            [
                room.room_id,
                room.task_id,
                room.room_docs,
                room.n_total,
                room.n_kept,
                _reasons(room.dropped),
                _fmt(room.thresholds.pass_rate_threshold),
                _fmt(room.thresholds.coverage_threshold),
                f"{_fmt(room.pass_rate.before.mean)} / {_fmt(room.pass_rate.after.mean)}",
                f"{_fmt(room.coverage.before.mean)} / {_fmt(room.coverage.after.mean)}",
            ]
            for room in report.rooms
        ],
    )
    lines += ["", "## Per room size (documents, log-spaced buckets)", ""]
    lines += markdown_table(
        ["documents", "rooms", "episodes", "kept", "dropped"],
        [
            [b.size_bucket, b.n_rooms, b.n_total, b.n_kept, _reasons(b.dropped)]
            for b in report.size_buckets
        ],
    )
    rules_json = report.rules.model_dump_json(indent=2)
    lines += [
        "",
        "## Rules",
        "",
        "Rule order: " + ", ".join(REASON_ORDER) + ".",
        "",
        "```json",
        rules_json,
        "```",
        "",
    ]
    return "\n".join(lines)


def render_card_section(report: FilterReport) -> str:
    """A short Markdown section for the dataset card: source runs, kept/dropped counts by
    primary reason, the rules (non-default fields) and where the full report is."""
    changed = report.rules.model_dump(exclude_defaults=True)
    lines = [
        "## Filter (rejection sampling)",
        "",
        f"{report.n_kept} of {report.n_total} episodes kept (grader: {report.grader or 'none'}).",
        "",
        *markdown_table(
            ["dropped because", "episodes"],
            [[reason, n] for reason, n in report.dropped_by_reason.items()],
        ),
        "",
        "Runs: " + ", ".join(f"{r.run_id} (`{r.run_dir}`)" for r in report.runs) + ".",
        "",
        *(
            [
                "People's labels used: "
                + "; ".join(
                    f"{r.run_id}: {r.labels.count} labels by {', '.join(r.labels.reviewers)} "
                    f"(`labels.jsonl` sha256 {r.labels.sha256})"
                    for r in report.runs
                    if r.labels is not None
                )
                + ".",
                "",
                *_human_lines(report.human),
                "",
            ]
            if report.human is not None
            else []
        ),
        "Rules (non-default): `"
        + (json.dumps(changed, sort_keys=True) if changed else "defaults")
        + "`; defaults keep completed episodes with a memo and drop duplicate memos.",
        "",
        "Full report: `filter_report.md` / `filter_report.json`; per-episode decisions: "
        "`decisions.jsonl`.",
        "",
    ]
    return "\n".join(lines)


def write_report(selection: Selection, out_dir: Path) -> FilterReport:
    """Write ``filter_report.json``, ``filter_report.md`` and ``decisions.jsonl`` into
    ``out_dir`` (created if needed). Refuses (``FileExistsError``) to replace any of the
    three files: the caller decides about overwriting a folder."""
    out_dir = Path(out_dir)
    names = (layout.FILTER_REPORT_JSON, layout.FILTER_REPORT_MD, layout.FILTER_DECISIONS)
    existing = [n for n in names if (out_dir / n).exists()]
    if existing:
        raise FileExistsError(f"{out_dir}: {', '.join(existing)} already exist")
    out_dir.mkdir(parents=True, exist_ok=True)
    report = build_report(selection)
    append_records(out_dir / layout.FILTER_DECISIONS, selection.decisions)
    (out_dir / layout.FILTER_REPORT_JSON).write_text(
        report.model_dump_json(indent=2), encoding="utf-8"
    )
    (out_dir / layout.FILTER_REPORT_MD).write_text(render_markdown(report), encoding="utf-8")
    return report


def primary_reason_counts(decisions: Iterable[FilterDecision]) -> dict[DropReason, int]:
    """Primary reason -> episodes, in rule order (for callers such as the dashboard)."""
    counter: Counter[str] = Counter(d.primary_reason for d in decisions if d.primary_reason)
    return {r: counter[r] for r in REASON_ORDER if counter[r]}
