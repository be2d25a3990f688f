"""The data of a report's figures (:class:`~rlmdistill.analysis.figures.FigureData`), built from
the report's sections and the episode rows behind them.

The figures are drawn from this data only (:func:`~rlmdistill.analysis.figures.render_figure`),
and the data is stored in ``report.json``'s ``figures``, so a test checks a figure by its data.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlmdistill.analysis.figures import FigureData, Series
from rlmdistill.analysis.metrics import EpisodeMetrics
from rlmdistill.analysis.schema import (
    ArmInfo,
    DepthAblation,
    Grid,
    RLCurve,
    RoomInfoRow,
    SizeCorrelation,
    TokenShares,
    TrainingCurve,
)
from rlmdistill.analysis.sections import room_means

__all__ = ["report_figures"]


def report_figures(
    arms: list[ArmInfo],
    rows: dict[str, list[EpisodeMetrics]],
    rooms: dict[str, RoomInfoRow],
    sizes: list[SizeCorrelation],
    shares: list[TokenShares],
    ablations: list[DepthAblation],
    grids: list[Grid],
    training: list[TrainingCurve],
    price_version: str,
    rl_training: Sequence[RLCurve] = (),
) -> list[FigureData]:
    """Every figure of a report, in this order: pass rate vs coverage (one point per episode,
    log-scale coverage), pass rate vs cost (room means), sub-calls vs room size (characters,
    then documents and tokens when ``sizes`` has them), root vs sub token shares, one paired
    plot per depth ablation, one heatmap per grid, and the training loss (when ``training``
    is not empty), then the RL reward per step (when ``rl_training`` is not empty). ``arms``,
    ``rows`` and ``rooms`` are the inputs of
    :mod:`rlmdistill.analysis.sections`; ``sizes`` .. ``training`` its sections; each figure's
    ``notes`` say what was left out and why (``price_version`` names the price table)."""
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
        cost, _ = room_means(rows[a.label], lambda r: r.cost_usd, rooms)
        passed, _ = room_means(rows[a.label], lambda r: r.pass_rate, rooms)
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
    # sub-calls vs room size in documents and in tokens; rooms of unknown size
    # (tokens) are off the axis and counted in the notes
    for x, unit in (("room_documents", "documents"), ("room_tokens", "tokens")):
        chosen = [s for s in sizes if s.x == x]
        if not chosen:
            continue
        figs.append(
            FigureData(
                name=f"sub_calls_vs_{x}",
                file=f"figures/sub_calls_vs_{x}.png",
                title=f"Sub-calls vs room size in {unit} (room means)",
                kind="scatter",
                x_label=f"room size ({unit})",
                y_label="mean sub-calls per episode",
                series=[
                    Series(label=s.arm, x=list(s.xs), y=list(s.ys), ids=list(s.rooms))
                    for s in chosen
                ],
                notes=[
                    f"{s.arm}: rooms of unknown size left out: {', '.join(s.rooms_without_size)}"
                    for s in chosen
                    if s.rooms_without_size
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
    if rl_training:
        figs.append(
            FigureData(
                name="rl_reward",
                file="figures/rl_reward.png",
                title="RL: mean reward of each step's rollouts",
                kind="lines",
                x_label="step",
                y_label="mean reward",
                series=[
                    Series(label=c.adapter, x=list(c.steps), y=list(c.reward_mean))
                    for c in rl_training
                ],
                notes=[
                    f"{c.adapter}: {c.zero_variance_share:.0%} of rollout groups had one reward "
                    "for every rollout (advantage 0)"
                    for c in rl_training
                    if c.zero_variance_share is not None
                ],
            )
        )
    return figs
