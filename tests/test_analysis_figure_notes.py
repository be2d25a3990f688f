"""A "no data" figure draws each note cut to ``NOTE_CHARS`` (a 5,000-character list of rooms
took ``tight_layout`` 0.8 s); the figure data keeps the whole note."""

from __future__ import annotations

from pathlib import Path

from rlmdistill.analysis.figures import NOTE_CHARS, FigureData, _shown_note, render_figure


def test_long_note_is_cut_in_the_plot_only(tmp_path: Path) -> None:
    note = "base: rooms of unknown size left out: " + ", ".join(f"room{i:04d}" for i in range(500))
    shown = _shown_note(note)
    head = "base: rooms of unknown size left out: room0000, room0001, room0002"[: NOTE_CHARS - 22]
    assert shown == f"{head.rstrip(', ')} ... (+{len(note) - len(head.rstrip(', '))} chars)"
    assert len(shown) <= NOTE_CHARS + 10
    assert _shown_note("short note") == "short note"
    fig = FigureData(
        name="t",
        file="figures/t.png",
        title="T",
        kind="scatter",
        x_label="x",
        y_label="y",
        notes=[note],
    )
    path = render_figure(fig, tmp_path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert fig.notes == [note]


def test_scatter_series_that_share_points_stay_visible() -> None:
    """Each series its own marker and a smaller area than the one before: 80 -> 18 points^2,
    evenly spaced (3 series: 80, 49, 18)."""
    import matplotlib.pyplot as plt
    import pytest

    from rlmdistill.analysis.figures import _scatter, scatter_styles

    assert scatter_styles(3) == [("o", 80.0), ("s", 49.0), ("^", 18.0)]
    assert scatter_styles(1) == [("o", 80.0)] and scatter_styles(0) == []
    assert [m for m, _ in scatter_styles(9)][8] == "o"  # markers cycle after 8
    with pytest.raises(ValueError, match="got -1"):
        scatter_styles(-1)
    same = {"x": [1.0, 4.0, 9.0], "y": [2.0, 5.0, 11.0]}
    fig = FigureData(
        name="t", file="t.png", title="T", kind="scatter", x_label="x", y_label="y",
        series=[{"label": "tuned-r2", **same}, {"label": "tuned-r2-d2", **same}],
    )  # fmt: skip
    figure, ax = plt.subplots()
    try:
        _scatter(ax, fig)
        drawn = ax.collections
        assert [c.get_label() for c in drawn] == ["tuned-r2", "tuned-r2-d2"]
        assert [float(c.get_sizes()[0]) for c in drawn] == [80.0, 18.0]
        circle, square = (c.get_paths()[0].vertices for c in drawn)
        assert len(circle) > len(square) == 5  # a circle's Bezier points vs a closed square
        assert [list(map(list, c.get_offsets())) for c in drawn] == [[[1, 2], [4, 5], [9, 11]]] * 2
    finally:
        plt.close(figure)
