"""``rlmdistill labels export|import|show runs/NAME``: people's labels
(:mod:`rlmdistill.traces.labels`) in and out of CSV, and on screen.

    rlmdistill labels show runs/NAME                  # latest label per reviewer and target
    rlmdistill labels show runs/NAME --all            # every line, superseded ones too
    rlmdistill labels export runs/NAME labels.csv     # every line, for a spreadsheet
    rlmdistill labels import runs/NAME labels.csv     # checks every row; on an error names
                                                      # FILE:LINE and writes nothing

Each command returns its exit code through :func:`show_main`, :func:`export_main` and
:func:`import_main` (0 ok, 2 bad input with one message on stderr), which tests call directly.
"""

from __future__ import annotations

from pathlib import Path

import typer
from pydantic import BaseModel, ConfigDict
from rich.console import Console
from rich.table import Table

from rlmdistill.cliconfig import config_command
from rlmdistill.traces import labels as lb
from rlmdistill.traces.runs import NotARunError

__all__ = [
    "LabelsExportOptions",
    "LabelsImportOptions",
    "LabelsShowOptions",
    "export_main",
    "import_main",
    "register",
    "show_main",
]

_err = Console(stderr=True)


class LabelsShowOptions(BaseModel):
    """``rlmdistill labels show``."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    run_dir: Path
    """Run directory (runs/NAME)."""
    every: bool = False
    """Every line, superseded labels included."""


class LabelsExportOptions(BaseModel):
    """``rlmdistill labels export``."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    run_dir: Path
    """Run directory (runs/NAME)."""
    out: Path
    """CSV file to write."""


class LabelsImportOptions(BaseModel):
    """``rlmdistill labels import``."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    run_dir: Path
    """Run directory (runs/NAME)."""
    csv_path: Path
    """CSV file to read."""


def _fail(exc: Exception) -> int:
    _err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
    return 2


def show_main(run_dir: Path, *, every: bool = False, console: Console | None = None) -> int:
    """Print the run's labels: the latest per (reviewer, episode, target, criterion), or every
    line with ``every``; a label of an older memo is marked ``STALE``. Returns the exit code."""
    console = console or Console(width=160)
    try:
        rubrics = lb.run_rubrics(run_dir)
        labels = lb.read_labels(run_dir)
    except (ValueError, FileNotFoundError, NotARunError) as exc:
        return _fail(exc)
    shown = labels if every else list(lb.latest_labels(labels).values())
    table = Table(title=f"labels of {run_dir}: {len(shown)} shown of {len(labels)} lines")
    for col in ("reviewer", "episode", "target", "verdict", "tags", "note", "time", "memo"):
        table.add_column(col)
    n_stale = 0
    for x in shown:
        rubric = rubrics.get(x.episode_id)
        stale = rubric is None or lb.is_stale(x, rubric.memo_hash)
        n_stale += stale
        table.add_row(
            x.reviewer,
            x.episode_id,
            x.target if x.criterion_id is None else f"criterion {x.criterion_id}",
            x.verdict,
            "; ".join(x.tags),
            x.note,
            x.time.isoformat(timespec="seconds"),
            "STALE (older memo)" if stale else "current",
        )
    console.print(table)
    console.print(
        f"{n_stale} stale: given for an older memo of the episode (kept, left out of the "
        "statistics of the current memo)",
        markup=False,
        highlight=False,
    )
    return 0


def export_main(run_dir: Path, out: Path) -> int:
    """Write every label line of the run to the CSV ``out`` (:data:`~rlmdistill.traces.labels.
    CSV_COLUMNS`). Returns the exit code."""
    try:
        n = lb.labels_to_csv(lb.read_labels(run_dir), out)
    except (ValueError, FileNotFoundError) as exc:
        return _fail(exc)
    _err.print(f"wrote {n} labels -> {out}", markup=False, highlight=False)
    return 0


def import_main(run_dir: Path, csv_path: Path) -> int:
    """Check every row of ``csv_path`` against the run and append them all to its
    ``labels.jsonl``, or, on any bad row, name each (``FILE:LINE``) and write nothing."""
    try:
        labels = lb.labels_from_csv(csv_path, run_dir)
        lb.append_labels(run_dir, labels)
    except (ValueError, FileNotFoundError, NotARunError) as exc:
        return _fail(exc)
    _err.print(
        f"imported {len(labels)} labels -> {run_dir}/labels.jsonl", markup=False, highlight=False
    )
    return 0


def register(app: typer.Typer) -> None:
    """Add the ``labels`` command group (``show``, ``export``, ``import``) to ``app``."""
    labels_app = typer.Typer(no_args_is_help=True, help="People's labels of a run's episodes.")
    app.add_typer(labels_app, name="labels")

    @config_command(
        labels_app, "show", arguments=["run_dir"], names={"every": ["--all"]}, config_flag=None
    )
    def show_cmd(options: LabelsShowOptions) -> None:
        """The run's labels, the latest per reviewer and target; stale ones marked."""
        raise typer.Exit(show_main(options.run_dir, every=options.every))

    @config_command(labels_app, "export", arguments=["run_dir", "out"], config_flag=None)
    def export_cmd(options: LabelsExportOptions) -> None:
        """Write every label of the run to a CSV file."""
        raise typer.Exit(export_main(options.run_dir, options.out))

    @config_command(labels_app, "import", arguments=["run_dir", "csv_path"], config_flag=None)
    def import_cmd(options: LabelsImportOptions) -> None:
        """Append the labels of a CSV file; any bad row: named by line, nothing written."""
        raise typer.Exit(import_main(options.run_dir, options.csv_path))
