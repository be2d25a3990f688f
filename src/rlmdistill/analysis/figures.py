"""Report figures: the data behind each figure (:class:`FigureData`, stored in ``report.json``)
and its rendering to PNG with matplotlib (Agg back end, no display needed).

A figure is drawn only from its :class:`FigureData`, so a test can check a figure by its data
and the PNG shows exactly those numbers. Kinds:

- ``scatter``: one point per (x, y) of each series (``x_scale="log"`` for log axes); each
  series has its own marker and a smaller one than the series before, so points that arms
  share stay visible (:func:`scatter_styles`);
- ``paired``: each series is one unit (room) drawn as a line across the x categories;
- ``bars``: stacked bars, x = categories (arms), one series per stacked component;
- ``heatmap``: one series per row (y label = series label), x = column categories, ``None``
  cells left blank; values are written in the cells;
- ``lines``: one line per series (e.g. raw and EMA training loss).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["FigureData", "FigureKind", "Series", "render_figure", "scatter_styles"]

FigureKind = Literal["scatter", "paired", "bars", "heatmap", "lines"]


class Series(BaseModel):
    """One data series of a figure. ``x`` and ``y`` have the same length; ``ids`` (when given)
    names the unit behind each point (episode id, room)."""

    model_config = ConfigDict(extra="forbid")

    label: str
    x: list[float | str]
    y: list[float | None]
    ids: list[str] = Field(default_factory=list)


class FigureData(BaseModel):
    """Everything a figure shows; ``file`` is the PNG path relative to the report folder."""

    model_config = ConfigDict(extra="forbid")

    name: str
    file: str
    title: str
    kind: FigureKind
    x_label: str
    y_label: str
    x_scale: Literal["linear", "log"] = "linear"
    series: list[Series] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    """What was left out and why (e.g. episodes with zero coverage on a log axis)."""


SCATTER_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
SCATTER_SIZES = (80.0, 18.0)
"""Marker area (points^2) of the first and of the last series of a scatter."""


def scatter_styles(n: int) -> list[tuple[str, float]]:
    """(marker, area in points^2) of each of ``n`` scatter series, in drawing order.

    Arms often share points (two arms with the same sub-call counts on the same rooms): series
    drawn later on top of earlier ones would hide them. So each series has its own marker and
    a smaller area than the one before (80 down to 18 points^2), and a point several series
    share shows as nested shapes, each series' outline visible. Raises ``ValueError`` for a
    negative ``n``."""
    if n < 0:
        raise ValueError(f"number of series must be >= 0, got {n}")
    big, small = SCATTER_SIZES
    sizes = [big] if n == 1 else list(np.linspace(big, small, n)) if n else []
    return [(SCATTER_MARKERS[i % len(SCATTER_MARKERS)], float(sizes[i])) for i in range(n)]


def _scatter(ax: plt.Axes, fig: FigureData) -> None:
    for s, (marker, size) in zip(fig.series, scatter_styles(len(fig.series)), strict=True):
        pts = [(x, y) for x, y in zip(s.x, s.y, strict=True) if y is not None]
        if pts:
            ax.scatter(
                [p[0] for p in pts], [p[1] for p in pts], label=s.label, alpha=0.6, s=size,
                marker=marker, edgecolors="black", linewidths=0.5,
            )  # fmt: skip


def _paired(ax: plt.Axes, fig: FigureData) -> None:
    cats: list[str] = []
    for s in fig.series:
        for x in s.x:
            if str(x) not in cats:
                cats.append(str(x))
    for s in fig.series:
        xs = [cats.index(str(x)) for x, y in zip(s.x, s.y, strict=True) if y is not None]
        ys = [y for y in s.y if y is not None]
        ax.plot(xs, ys, marker="o", alpha=0.6, label=s.label if len(fig.series) <= 12 else None)
    ax.set_xticks(range(len(cats)), cats)
    ax.set_xlim(-0.3, len(cats) - 0.7)


def _bars(ax: plt.Axes, fig: FigureData) -> None:
    cats = [str(x) for x in fig.series[0].x] if fig.series else []
    bottom = np.zeros(len(cats))
    for s in fig.series:
        vals = np.array([0.0 if y is None else y for y in s.y])
        ax.bar(cats, vals, bottom=bottom, label=s.label)
        bottom += vals


def _heatmap(ax: plt.Axes, fig: FigureData) -> None:
    cols = [str(x) for x in fig.series[0].x] if fig.series else []
    data = np.array([[np.nan if y is None else y for y in s.y] for s in fig.series], dtype=float)
    if data.size:
        im = ax.imshow(np.ma.masked_invalid(data), cmap="viridis", vmin=0.0, vmax=1.0)
        ax.figure.colorbar(im, ax=ax)
        for i, s in enumerate(fig.series):
            for j, y in enumerate(s.y):
                text = "n/a" if y is None else f"{y:.2f}"
                ax.text(j, i, text, ha="center", va="center", color="white", fontsize=9)
    ax.set_xticks(range(len(cols)), cols, rotation=30, ha="right")
    ax.set_yticks(range(len(fig.series)), [s.label for s in fig.series])


def _lines(ax: plt.Axes, fig: FigureData) -> None:
    for s in fig.series:
        pts = [(x, y) for x, y in zip(s.x, s.y, strict=True) if y is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=s.label)


_DRAW = {
    "scatter": _scatter,
    "paired": _paired,
    "bars": _bars,
    "heatmap": _heatmap,
    "lines": _lines,
}


NOTE_CHARS = 80
"""Characters of a note drawn in a "no data" figure: the rest is cut (the whole note stays in
``report.json`` and ``report.md``). A note listing 500 rooms (5,000 characters) took
``tight_layout`` 0.8 s to measure, for a line wider than the figure."""


def _shown_note(note: str) -> str:
    if len(note) <= NOTE_CHARS:
        return note
    head = note[: NOTE_CHARS - 22].rstrip(", ")
    return f"{head} ... (+{len(note) - len(head)} chars)"


def render_figure(fig: FigureData, report_dir: Path) -> Path:
    """Draw ``fig`` to ``report_dir / fig.file`` (PNG, 100 dpi, 7 x 4.5 in); returns the path.

    A figure without data is still written, with "no data" and its notes in the plot (each
    note cut to :data:`NOTE_CHARS` characters there).
    """
    path = Path(report_dir) / fig.file
    path.parent.mkdir(parents=True, exist_ok=True)
    figure, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    try:
        has_data = any(any(y is not None for y in s.y) for s in fig.series)
        if has_data:
            _DRAW[fig.kind](ax, fig)
            if fig.x_scale == "log" and fig.kind in ("scatter", "lines"):
                ax.set_xscale("log")
            if fig.kind != "heatmap" and fig.series and ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
        else:
            shown = "\n".join(_shown_note(n) for n in fig.notes)
            ax.text(0.5, 0.5, "no data\n" + shown, ha="center", va="center")
            ax.set_axis_off()
        ax.set_title(fig.title, fontsize=10)
        ax.set_xlabel(fig.x_label)
        ax.set_ylabel(fig.y_label)
        if fig.kind == "heatmap" or not has_data:  # rotated labels, colorbar: measured layout
            figure.tight_layout()
        else:  # fixed margins: tight_layout measured every tick label (40% of a figure's time)
            figure.subplots_adjust(left=0.12, right=0.97, bottom=0.12, top=0.93)
        figure.savefig(path, format="png")
    finally:
        plt.close(figure)
    return path
