"""Report sections that compare many arms on the same held-out rooms.

- :func:`arm_table`: base, r1, r2, ... (and depth arms) side by side on the rooms every arm
  ran: per metric of :data:`~rlmdistill.analysis.sections.OUTCOME_METRICS` each arm's mean of
  room means with its t interval over rooms, and each arm's difference from the baseline
  (the first arm) paired over rooms (:func:`~rlmdistill.stats.paired_comparison`).
- :func:`size_correlation_changes`: per compared arm pair (:func:`correlation_change_pairs`:
  baseline -> each arm, round on round, depth 1 -> depth 2) and per room size, the change of
  the correlation of room-mean sub-calls with room size, paired bootstrap over rooms
  (:func:`~rlmdistill.stats.correlation_change`).
- :func:`timeout_flags`: compared arm pairs whose shares of episodes that ended ``timeout``
  (the episode wall-time limit, which depends on machine load) differ.

The functions take the inputs of :mod:`rlmdistill.analysis.sections` (``arms``, ``rows``,
``rooms``, ``ctx``), are pure, and return the ``report.json`` records of
:mod:`rlmdistill.analysis.schema`. Methods: :data:`ARM_METHODS` and ``docs/analysis.md``.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlmdistill.analysis.metrics import EpisodeMetrics
from rlmdistill.analysis.schema import (
    ArmInfo,
    ArmTable,
    ArmTableCell,
    ArmTableRow,
    DepthAblation,
    RoomInfoRow,
    SizeCorrelationChange,
    TimeoutFlag,
)
from rlmdistill.analysis.sections import (
    OUTCOME_METRICS,
    ROOM_SIZE_WORDS,
    ROOM_SIZES,
    Metric,
    SectionContext,
    mean_of_room_means,
    paired_rooms,
    room_means,
    room_size,
    timeout_count,
)
from rlmdistill.stats import (
    CORRELATION_CHANGE_P_METHOD,
    MIN_UNITS,
    STEIGER_METHOD,
    ZOU_METHOD,
    CorrelationChange,
    correlation_change,
)

__all__ = [
    "ARM_METHODS",
    "arm_table",
    "common_rooms",
    "correlation_change_pairs",
    "size_correlation_changes",
    "timeout_flags",
    "timeouts",
]

ARM_METHODS = {
    "arm_table": (
        "every arm on the rooms all arms ran (paired by room content hash): per metric the "
        "mean of room means with its interval over rooms (rates and shares: Korn-Graubard, a "
        "one-sided bound when every room is at 0; counts: Student t clipped to >= 0), and "
        "each arm's difference from the baseline per room (arm - baseline), its "
        "mean with the same t interval and the two-sided Wilcoxon signed-rank p"
    ),
    "correlation_change": (
        "change r_b - r_a of the correlation (Pearson on values, Spearman on ranks) of "
        "room-mean sub-calls with room size over the rooms both arms ran, for the pairs: the "
        "baseline a against every other arm b; each arm b against the nearest earlier arm a "
        "of the same depth and sub (round on round, e.g. tuned-r1 -> tuned-r2); each depth-1 "
        "arm a against each depth-2 arm b of the same root and sub; paired percentile "
        "bootstrap over rooms (the same resampled rooms for both arms; all n^n resamples when "
        "n^n <= B), resamples with a constant size or sub-calls left out and counted; "
        + CORRELATION_CHANGE_P_METHOD
        + "; beside it, "
        + ZOU_METHOD
        + "; and "
        + STEIGER_METHOD
        + " (the bootstrap interval covered the true change in 82-91% of samples of 6-20 "
        "rooms (Pearson) where Zou's covered 93-98%: benchmarks/"
        "bench_correlation_change_interval.py)"
    ),
    "timeouts": (
        "episodes that ended `timeout` (episode wall-time limit) per arm; a comparison is "
        "flagged when its two arms' shares of such episodes differ, since the wall clock "
        "depends on machine load"
    ),
}
"""Method name -> how it is computed (merged into ``report.json``'s ``methods``)."""


def common_rooms(arms: list[ArmInfo], rows: dict[str, list[EpisodeMetrics]]) -> set[str]:
    """Content hashes of the rooms every arm in ``arms`` ran (at least one episode each)."""
    sets = [{r.room_hash for r in rows[a.label]} for a in arms]
    return set.intersection(*sets) if sets else set()


def arm_table(
    arms: list[ArmInfo],
    rows: dict[str, list[EpisodeMetrics]],
    rooms: dict[str, RoomInfoRow],
    ctx: SectionContext,
    metrics: Sequence[Metric] = OUTCOME_METRICS,
) -> ArmTable | None:
    """Every arm on the rooms all arms ran; ``None`` with fewer than two arms.

    Only episodes of the common rooms count (rooms some arm did not run are listed per arm
    in ``rooms_left_out``). Per metric (default :data:`OUTCOME_METRICS`: pass rate, coverage,
    memo rate, read-no-memo, sub-calls, timeout share) and arm: the mean of room means with
    a t interval over rooms (:func:`mean_of_room_means`), the episodes with a value,
    and for every arm but the baseline ``arms[0]`` the per-room difference ``arm - baseline``
    (:func:`paired_rooms`: mean with interval, Wilcoxon p, rooms up/down/tied).
    """
    if len(arms) < 2:
        return None
    common = common_rooms(arms, rows)
    kept = {a.label: [r for r in rows[a.label] if r.room_hash in common] for a in arms}
    base = arms[0].label
    table_rows = []
    for m in metrics:
        means = {a.label: room_means(kept[a.label], m.get, rooms) for a in arms}
        cells = [
            ArmTableCell(
                arm=a.label,
                mean=mean_of_room_means(ctx, means[a.label][0], m.bounds),
                n_episodes=len(means[a.label][1]),
                difference=None
                if a.label == base
                else paired_rooms(ctx, means[base][0], means[a.label][0], m.bounds),
            )
            for a in arms
        ]
        table_rows.append(ArmTableRow(metric=m.name, cells=cells))
    left_out = {
        a.label: sorted(
            {rooms[r.room_hash].label for r in rows[a.label]} - {rooms[h].label for h in common}
        )
        for a in arms
    }
    return ArmTable(
        baseline=base,
        arms=[a.label for a in arms],
        rooms=sorted(rooms[h].label for h in common),
        rooms_left_out={k: v for k, v in left_out.items() if v},
        rows=table_rows,
        timeouts={a.label: timeout_count(kept[a.label]) for a in arms},
        n_episodes={a.label: len(kept[a.label]) for a in arms},
    )


def _unknown_size_reason(
    c: CorrelationChange, what: str, n_known: int, n_unknown: int
) -> CorrelationChange:
    """``c`` with the reason naming the unknown sizes when they leave too few rooms."""
    if c.value is not None or not n_unknown or n_known >= MIN_UNITS:
        return c
    why = (
        f"{what} unknown for {n_unknown} of {n_known + n_unknown} paired rooms (counted only "
        f"when the root model has a tokenizer at collection); {n_known} rooms left: a "
        f"correlation needs at least {MIN_UNITS}"
    )
    return c.model_copy(update={"reason": why})


def correlation_change_pairs(arms: list[ArmInfo]) -> list[tuple[ArmInfo, ArmInfo]]:
    """The arm pairs ``(a, b)`` whose sub-calls/room-size correlations are compared, in this
    order and each once:

    1. the baseline ``arms[0]`` against every other arm (before/after);
    2. each arm against the nearest earlier arm of the same depth and sub short name
       (round on round: ``tuned-r1 -> tuned-r2``, and ``base-d2 -> tuned-r2-d2``);
    3. each depth-1 arm against each depth-2 arm of the same root and sub short names
       (``tuned-r2 -> tuned-r2-d2``), the pairs of the depth table.

    With the baseline making no sub-calls (the usual base root) every pair of (1) is
    undefined; (2) and (3) are the changes the tuned arms can still show."""
    if not arms:
        return []
    pairs: list[tuple[ArmInfo, ArmInfo]] = [(arms[0], b) for b in arms[1:]]
    for i, b in enumerate(arms):
        earlier = [a for a in arms[:i] if (a.depth, a.sub_name) == (b.depth, b.sub_name)]
        if earlier:
            pairs.append((earlier[-1], b))
    pairs += [
        (a, b)
        for a in arms
        for b in arms
        if a.depth == 1 and b.depth == 2 and (a.root_name, a.sub_name) == (b.root_name, b.sub_name)
    ]
    seen: set[tuple[str, str]] = set()
    out = []
    for a, b in pairs:
        if (a.label, b.label) not in seen:
            seen.add((a.label, b.label))
            out.append((a, b))
    return out


def size_correlation_changes(
    arms: list[ArmInfo],
    rows: dict[str, list[EpisodeMetrics]],
    rooms: dict[str, RoomInfoRow],
    ctx: SectionContext,
) -> list[SizeCorrelationChange]:
    """For each pair ``(a, b)`` of :func:`correlation_change_pairs` and each room size of
    :data:`ROOM_SIZES`: the change of the correlation of room-mean sub-calls with room size
    from arm ``a`` to arm ``b``, Pearson and Spearman, paired bootstrap over the rooms both
    arms ran (rooms of unknown size left out). Undefined with the reason (e.g. "arm base
    made no sub-calls in any of the 4 rooms: its correlation with room size in tokens is
    undefined")."""
    by_label = {row.label: row for row in rooms.values()}
    sub_calls = next(m.get for m in OUTCOME_METRICS if m.name == "n_sub_calls")
    means = {a.label: room_means(rows[a.label], sub_calls, rooms)[0] for a in arms}
    out = []
    for arm_a, arm_b in correlation_change_pairs(arms):
        ma, mb = means[arm_a.label], means[arm_b.label]
        paired = [k for k in ma if k in mb]
        for x in ROOM_SIZES:
            sizes = {k: room_size(by_label[k], x) for k in paired}
            keys = [k for k in paired if sizes[k] is not None]
            xs = [v for v in (sizes[k] for k in keys) if v is not None]
            ya = [ma[k] for k in keys]
            yb = [mb[k] for k in keys]
            what = ROOM_SIZE_WORDS[x]
            changes = {
                kind: _unknown_size_reason(
                    correlation_change(
                        xs,
                        ya,
                        yb,
                        kind=kind,
                        a=arm_a.label,
                        b=arm_b.label,
                        x_name=what,
                        y_name="sub-calls",
                        unit="rooms",
                        n_resamples=ctx.resamples,
                        confidence=ctx.confidence,
                        seed=ctx.seed,
                    ),
                    what,
                    len(keys),
                    len(paired) - len(keys),
                )
                for kind in ("pearson", "spearman")
            }
            out.append(
                SizeCorrelationChange(
                    a=arm_a.label,
                    b=arm_b.label,
                    x=x,
                    y="n_sub_calls (room mean)",
                    rooms=keys,
                    xs=xs,
                    ys_a=ya,
                    ys_b=yb,
                    pearson=changes["pearson"],
                    spearman=changes["spearman"],
                )
            )
    return out


def timeouts(arms: list[ArmInfo], rows: dict[str, list[EpisodeMetrics]]) -> dict[str, int]:
    """Arm label -> episodes that ended ``timeout`` (episode wall-time limit), in arm order."""
    return {a.label: timeout_count(rows[a.label]) for a in arms}


def timeout_flags(
    arms: list[ArmInfo],
    rows: dict[str, list[EpisodeMetrics]],
    ablations: Sequence[DepthAblation] = (),
) -> list[TimeoutFlag]:
    """The compared arm pairs whose shares of ``timeout`` episodes differ, over all episodes
    of each arm: the baseline against each other arm (the before/after comparison, the arm
    table and the correlation change), the other pairs of :func:`correlation_change_pairs`
    and each depth ablation's pair. Equal shares (0 and 0
    included) are not flagged; shares are compared exactly (``t_a n_b != t_b n_a``)."""
    if not arms:
        return []
    pairs: dict[tuple[str, str], list[str]] = {}
    base = arms[0].label
    for other in arms[1:]:
        pairs[(base, other.label)] = ["comparison", "arm_table", "size_correlation_change"]
    for arm_a, arm_b in correlation_change_pairs(arms):
        pairs.setdefault((arm_a.label, arm_b.label), ["size_correlation_change"])
    for ab in ablations:
        pairs.setdefault((ab.depth1_arm, ab.depth2_arm), []).append("depth_ablation")
    counts = timeouts(arms, rows)
    out = []
    for (a, b), where in pairs.items():
        ta, tb = counts[a], counts[b]
        na, nb = len(rows[a]), len(rows[b])
        if ta * nb == tb * na:
            continue
        out.append(
            TimeoutFlag(
                a=a,
                b=b,
                sections=where,
                timeouts_a=ta,
                timeouts_b=tb,
                n_episodes_a=na,
                n_episodes_b=nb,
                note=(
                    f"{a} and {b} differ in episodes ended by the wall-clock limit (timeout): "
                    f"{ta} of {na} vs {tb} of {nb}; their comparison ({', '.join(where)}) may "
                    "reflect machine load, not only the root"
                ),
            )
        )
    return out
