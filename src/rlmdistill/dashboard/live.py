"""The analysis stage's numbers over the runs a page picked, computed live from run views.

The Runs, Compare and Ablations pages compute no metric and no mean of their own: every
per-episode value is an :class:`~rlmdistill.analysis.metrics.EpisodeMetrics` row
(:meth:`~rlmdistill.dashboard.runview.RunView.metrics`, the rows ``rlmdistill report`` uses)
or, for the Runs page's headline means, the run table's column of the same summary field or
pass rate (:meth:`~rlmdistill.dashboard.runview.RunView.table`, scored by the same
:func:`~rlmdistill.traces.scores.score_episodes`; :func:`column_mean_of_room_means`), every
mean is a mean of room means (each room weighs the same), and the comparison, depth
and grid tables are the report's own sections
(:func:`rlmdistill.analysis.sections.per_arm_metrics`, :func:`~rlmdistill.analysis.sections.comparisons`,
:func:`~rlmdistill.analysis.sections.depth_ablations`, :func:`~rlmdistill.analysis.sections.grids`),
called with the same inputs as :func:`rlmdistill.analysis.compare.build_report`: arms labelled
by run folder name (unique inside ``runs/``), rooms from
:func:`~rlmdistill.analysis.sections.room_labels`, the default price table and thresholds, and
the interval settings of :class:`LiveSettings` (``rlmdistill report``'s defaults). So for
the same runs and settings the pages show the numbers of the report, value by value
(``tests/test_dashboard_analysis.py``).

Results are ``st.cache_resource`` entries keyed on the runs' paths and stamps and the
settings (plain strings and numbers, as every dashboard cache key); they are read-only for
every page.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, cast

import numpy as np
import streamlit as st

from rlmdistill.analysis import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, sections
from rlmdistill.analysis.metrics import EpisodeMetrics
from rlmdistill.analysis.schema import (
    ArmInfo,
    ArmMetric,
    Comparison,
    DepthAblation,
    Grid,
    RoomInfoRow,
    SizeCorrelation,
    TokenShares,
)
from rlmdistill.dashboard.runview import RunView, view_at
from rlmdistill.traces.scores import GraderChoiceError

__all__ = [
    "Arms",
    "LiveAblations",
    "LiveComparison",
    "LiveSettings",
    "arm_grader",
    "column_mean_of_room_means",
    "live_ablations",
    "live_arms",
    "live_comparison",
    "mean_of_room_means",
]


class LiveSettings(NamedTuple):
    """How the live tables are computed; the defaults are ``rlmdistill report``'s.

    ``grader``: the verdict file to score with (``None``: each run's only one);
    ``trajectories``: also compute the trajectory metrics (reads every trajectory file once;
    ``rlmdistill report`` does by default, the pages only when asked); ``resamples``,
    ``seed``, ``confidence``: the intervals (:class:`rlmdistill.analysis.sections.SectionContext`).
    """

    grader: str | None = None
    trajectories: bool = False
    resamples: int = DEFAULT_RESAMPLES
    seed: int = 0
    confidence: float = DEFAULT_CONFIDENCE

    @property
    def context(self) -> sections.SectionContext:
        """The analysis stage's interval settings."""
        return sections.SectionContext(self.resamples, self.seed, self.confidence)


class Arms(NamedTuple):
    """The inputs every report section takes, for the picked runs (first = baseline)."""

    arms: list[ArmInfo]
    rows: dict[str, list[EpisodeMetrics]]
    """Arm label -> one row per finished episode."""
    rooms: dict[str, RoomInfoRow]
    """Room content hash -> its row (label, size), over every arm."""


class LiveComparison(NamedTuple):
    """What the Compare page shows: per-arm means and each arm against the first."""

    per_arm: dict[str, list[ArmMetric]]
    comparisons: list[Comparison]
    size_correlations: list[SizeCorrelation]
    """The report's room-mean sub-calls against room size, per arm and size measure."""


class LiveAblations(NamedTuple):
    """What the Ablations page shows: depth 1 vs depth 2 and the root x sub grids."""

    depth_ablations: list[DepthAblation]
    grids: list[Grid]
    per_arm: dict[str, list[ArmMetric]]
    """The report's per-arm means (the depth table's cost columns)."""
    token_shares: list[TokenShares]
    """The report's token totals per arm."""


def mean_of_room_means(
    rows: Sequence[EpisodeMetrics], get: Callable[[EpisodeMetrics], float | None]
) -> float | None:
    """Mean over rooms of each room's mean of ``get`` (episodes without a finite value left
    out; rooms without one left out): the point value the report gives a metric
    (:func:`rlmdistill.analysis.sections.mean_of_room_means`, the mean of the room means of
    :func:`~rlmdistill.analysis.sections.room_means`), without its interval.
    ``None`` when no room has a value."""
    means, _ = sections.room_means(rows, get, sections.room_labels([list(rows)]))
    return float(np.mean(list(means.values()))) if means else None


class _Value(NamedTuple):
    room_hash: str
    value: float | None


class _Room(NamedTuple):
    label: str


def column_mean_of_room_means(
    room_hashes: Sequence[str], values: Sequence[float | None]
) -> float | None:
    """:func:`mean_of_room_means` of one column of a run's episodes (``values[i]`` of the
    episode in room ``room_hashes[i]``, ``None`` or NaN for no value): the same
    :func:`~rlmdistill.analysis.sections.room_means` (rooms grouped by content hash, as
    :func:`~rlmdistill.analysis.sections.room_labels` labels them within one run) and the same
    mean over rooms, so it equals :func:`mean_of_room_means` of the metrics rows whose field
    holds these values, bit for bit. ``None`` when no room has a value."""
    rows = [_Value(h, v) for h, v in zip(room_hashes, values, strict=True)]
    rooms = {h: _Room(h) for h in dict.fromkeys(room_hashes)}
    means, _ = sections.room_means(
        cast("Sequence[EpisodeMetrics]", rows),
        lambda r: cast("_Value", r).value,
        cast("dict[str, RoomInfoRow]", rooms),
    )
    return float(np.mean(list(means.values()))) if means else None


def arm_grader(view: RunView, grader: str | None) -> str | None:
    """The grader to score ``view``'s run with when the page asked for ``grader``: that one
    when the run has its verdicts, ``None`` for a run nobody graded (its rows have no pass
    rate, and say why). Raises :class:`~rlmdistill.traces.scores.GraderChoiceError` naming the
    run when it was graded by others only (mixing graders would compare unlike numbers)."""
    graders = view.graders
    if grader is None or grader in graders:
        return grader
    if not graders:
        return None
    raise GraderChoiceError(
        f"{view.run_dir}: no verdicts of grader {grader!r} (verdicts/{grader}.jsonl); "
        f"it was graded by {', '.join(graders)}"
    )


@st.cache_resource(max_entries=8, show_spinner=False)
def _arms(
    run_dirs: tuple[str, ...], stamps: tuple[str, ...], grader: str | None, trajectories: bool
) -> Arms:
    views = [view_at(d, s) for d, s in zip(run_dirs, stamps, strict=True)]
    loaded = [v.metrics(arm_grader(v, grader), trajectories=trajectories) for v in views]
    rows = {v.name: lm.rows for v, lm in zip(views, loaded, strict=True)}
    rooms = sections.room_labels(list(rows.values()))
    arms = [sections.arm_info(v.name, v.run_dir, lm) for v, lm in zip(views, loaded, strict=True)]
    return Arms(arms=arms, rows=rows, rooms=rooms)


def _key(views: Sequence[RunView]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if not views:
        raise ValueError("pick at least one run")
    names = [v.name for v in views]
    if len(set(names)) != len(names):
        raise ValueError(f"runs must have distinct folder names: {names}")
    return tuple(str(v.run_dir) for v in views), tuple(v.stamp for v in views)


def live_arms(views: Sequence[RunView], settings: LiveSettings) -> Arms:
    """Arms, metrics rows and rooms of the picked runs (first = baseline), as
    :func:`~rlmdistill.analysis.compare.build_report` builds them (arm label = run folder
    name). Cached by the runs' paths and stamps, the grader and ``trajectories``.

    Raises ``ValueError`` for no runs or two runs with one folder name, what
    :meth:`~rlmdistill.dashboard.runview.RunView.metrics` raises (naming the file, grader or
    episode), and :class:`~rlmdistill.traces.scores.GraderChoiceError` from :func:`arm_grader`.
    """
    dirs, stamps = _key(views)
    return _arms(dirs, stamps, settings.grader, settings.trajectories)


@st.cache_resource(max_entries=16, show_spinner=False)
def _comparison(
    run_dirs: tuple[str, ...],
    stamps: tuple[str, ...],
    grader: str | None,
    trajectories: bool,
    resamples: int,
    seed: int,
    confidence: float,
) -> LiveComparison:
    a = _arms(run_dirs, stamps, grader, trajectories)
    ctx = sections.SectionContext(resamples, seed, confidence)
    per_arm = sections.per_arm_metrics(a.arms, a.rows, a.rooms, ctx)
    comps = sections.comparisons(a.arms, a.rows, a.rooms, ctx, per_arm)
    sizes = sections.size_correlations(a.arms, a.rows, a.rooms, ctx)
    return LiveComparison(per_arm=per_arm, comparisons=comps, size_correlations=sizes)


def live_comparison(views: Sequence[RunView], settings: LiveSettings) -> LiveComparison:
    """The report's per-arm means (every metric of the report), its comparisons of each
    later run with the first and its size correlations, over ``views`` (cached by paths,
    stamps and ``settings``: a warm rerun computes nothing).
    Raises as :func:`live_arms`."""
    dirs, stamps = _key(views)
    return _comparison(dirs, stamps, *settings)


_COST_METRICS = [
    m for m in sections.BASE_METRICS if m.name in ("pass_rate", "coverage", "wall_time_s")
]
"""The per-arm means the depth table's cost columns show."""


@st.cache_resource(max_entries=16, show_spinner=False)
def _ablations(
    run_dirs: tuple[str, ...],
    stamps: tuple[str, ...],
    grader: str | None,
    trajectories: bool,
    resamples: int,
    seed: int,
    confidence: float,
) -> LiveAblations:
    a = _arms(run_dirs, stamps, grader, trajectories)
    ctx = sections.SectionContext(resamples, seed, confidence)
    depth = sections.depth_ablations(a.arms, a.rows, a.rooms, ctx)
    in_depth = [x for x in a.arms if any(x.label in (d.depth1_arm, d.depth2_arm) for d in depth)]
    return LiveAblations(
        depth_ablations=depth,
        grids=sections.grids(a.arms, a.rows, a.rooms, ctx),
        per_arm=sections.per_arm_metrics(in_depth, a.rows, a.rooms, ctx, _COST_METRICS),
        token_shares=sections.token_shares(in_depth, a.rows),
    )


def live_ablations(views: Sequence[RunView], settings: LiveSettings) -> LiveAblations:
    """The report's depth ablations and root x sub grids over ``views`` (cached by paths,
    stamps and ``settings``). Raises as :func:`live_arms`."""
    dirs, stamps = _key(views)
    return _ablations(dirs, stamps, *settings)
