"""The one Markdown-table writer (``rlmdistill.mdtable``, issue 19 item 4): the exact bytes the
stages wrote by hand before, empty cells, escaped pipes and refused rows."""

from __future__ import annotations

import pytest

from rlmdistill.mdtable import markdown_row, markdown_table


def test_table_bytes_as_written_by_hand_before() -> None:
    # the filter report's runs table, as filter/report.py built it with f-strings
    got = markdown_table(["run id", "path", "episodes", "graders"], [["r1", "`runs/a`", 12, "-"]])
    assert got == [
        "| run id | path | episodes | graders |",
        "|---|---|---|---|",
        "| r1 | `runs/a` | 12 | - |",
    ]


def test_empty_cells_and_header_without_rows() -> None:
    # an empty first header cell, as the score-distribution and token-length tables have
    assert markdown_table(["", "n", "max"], []) == ["| | n | max |", "|---|---|---|"]
    assert markdown_row(["tokens", 0, "", ""]) == "| tokens | 0 | | |"


def test_pipe_in_a_cell_is_escaped() -> None:
    assert markdown_row(["a|b", "c"]) == "| a\\|b | c |"
    assert markdown_table(["x|y"], [["1"]])[0] == "| x\\|y |"


def test_bad_rows_are_refused_with_the_row_named() -> None:
    with pytest.raises(ValueError, match="row 1 has 1 cells, the header has 2"):
        markdown_table(["a", "b"], [["1", "2"], ["3"]])
    with pytest.raises(ValueError, match="cell 0 holds a line break"):
        markdown_row(["two\nlines"])
    with pytest.raises(ValueError, match="at least one cell"):
        markdown_row([])
