"""Markdown (GitHub-flavoured pipe) tables, the one writer every stage's Markdown uses
(``report.md``, ``filter_report.md``, the dataset card).

A table is a header row, a ``|---|`` separator per column and one line per body row::

    | arm | episodes |
    |---|---|
    | base | 40 |

Cells are written as given between ``| `` and `` |`` (no padding to a column width, so a
table's bytes do not depend on its widest cell); an empty cell is ``| |``, and a ``|`` inside
a cell is escaped as ``\\|`` (GFM: an escaped pipe does not end the cell, also inside a code
span). Numbers are formatted by the caller: each stage rounds in its own way. Not
``tabulate``'s ``pipe`` format, which pads cells to the column width: the files these stages
wrote before keep their exact bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["Cell", "markdown_row", "markdown_table"]

Cell = str | int
"""A table cell: text, or an integer written with ``str``."""


def _cell(value: Cell) -> str:
    text = str(value).replace("|", "\\|")
    return f" {text} " if text else " "


def markdown_row(cells: Sequence[Cell]) -> str:
    """One table line: ``| a | b |`` (``| |`` for an empty cell, ``|`` in a cell escaped).

    Raises:
        ValueError: ``cells`` is empty, or a cell holds a line break (it would end the row).
    """
    if not cells:
        raise ValueError("a Markdown table row needs at least one cell")
    for i, c in enumerate(cells):
        if "\n" in str(c) or "\r" in str(c):
            raise ValueError(f"Markdown table cell {i} holds a line break: {str(c)[:60]!r}")
    return "|" + "|".join(_cell(c) for c in cells) + "|"


def markdown_table(header: Sequence[Cell], rows: Sequence[Sequence[Cell]]) -> list[str]:
    """The lines of a table: the header row, the separator (``|---|`` per column), one line
    per row (none when ``rows`` is empty). Join them with ``"\\n"``.

    Raises:
        ValueError: a row has another number of cells than the header (naming the row and
            both counts), or :func:`markdown_row` refuses a row.
    """
    n = len(header)
    for k, row in enumerate(rows):
        if len(row) != n:
            raise ValueError(
                f"Markdown table row {k} has {len(row)} cells, the header has {n}: "
                f"{[str(c) for c in row][:4]!r}"
            )
    return [markdown_row(header), "|" + "---|" * n, *(markdown_row(r) for r in rows)]
