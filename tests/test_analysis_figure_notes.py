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
