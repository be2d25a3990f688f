"""``rlmdistill rooms build-cuad|show|synth|set``: the typer commands of the rooms package,
and their bodies (:func:`synth_main`, :func:`roomset_main`).

The ground-floor modules :mod:`rlmdistill.rooms.synth` and :mod:`rlmdistill.rooms.roomset`
build rooms and room sets and know nothing of the command line; this module maps their
results to printed tables and exit codes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlmdistill.cliconfig import (
    ConfigFileError,
    check_keys,
    config_command,
    field_help,
    read_config_file,
)
from rlmdistill.rooms.config import (
    CuadRoomConfig,
    RoomShowConfig,
    SynthRoomConfig,
    run_build_cuad,
    run_synth,
)
from rlmdistill.rooms.cuad import CUAD_ATTRIBUTION, SAMPLE_SOURCE
from rlmdistill.rooms.roomset import RoomSetError, RoomSetSpec, build_roomset, parse_sizes
from rlmdistill.rooms.synth import CHARS_PER_TOKEN, SynthError, SynthReport, build_synth_room

__all__ = ["RoomSetOptions", "print_synth_report", "register", "roomset_main", "synth_main"]


def synth_main(
    n_docs: int,
    seed: int,
    out: str | Path,
    *,
    length_scale: float = 1.0,
    cuad_source: str | Path | None = SAMPLE_SOURCE,
    overwrite: bool = False,
    console: Any = None,
) -> int:
    """CLI body of ``rlmdistill rooms synth``: build the room, print its size (documents,
    characters, approximate tokens), folder and criterion counts and build time; return the
    exit code (0 built, 1 bad arguments or output folder)."""
    import time

    from rich.console import Console

    console = console or Console()
    start = time.perf_counter()
    try:
        report = build_synth_room(
            out,
            n_docs,
            seed,
            length_scale=length_scale,
            cuad_source=cuad_source,
            overwrite=overwrite,
        )
    except (SynthError, OSError) as exc:
        console.print(f"[red]rooms synth failed:[/red] {exc}")
        return 1
    print_synth_report(report, time.perf_counter() - start, console)
    return 0


def print_synth_report(report: SynthReport, elapsed: float, console: Any) -> None:
    """Print ``report`` as ``rooms synth`` does (a rich ``Console``): folder, target, task id
    and room hash, documents, characters, approximate tokens, folders, criteria per type,
    planted issues per class, ``elapsed`` (seconds) and the CUAD attribution when any."""
    from rich.table import Table

    table = Table(title=f"Synthetic room {report.out.name}", show_header=False)
    table.add_row("folder", str(report.out))
    table.add_row("target", report.target)
    table.add_row("task id / room hash", f"{report.task_id} / {report.room_hash}")
    table.add_row("documents", f"{report.n_docs:,} ({report.n_cuad_docs} CUAD contracts)")
    table.add_row("characters", f"{report.n_chars:,}")
    table.add_row("tokens (approx.)", f"{report.approx_tokens:,} (chars / {CHARS_PER_TOKEN:g})")
    table.add_row("folders", f"{report.n_folders} leaf folders in {report.n_categories} categories")
    table.add_row(
        "criteria",
        f"{report.n_criteria} ("
        + ", ".join(f"{k}: {v}" for k, v in report.criteria_by_type.items())
        + ")",
    )
    table.add_row(
        "planted issues", ", ".join(f"{k}: {v}" for k, v in report.issues_by_class.items())
    )
    table.add_row("build time", f"{elapsed:.1f} s")
    console.print(table)
    if report.n_cuad_docs:
        console.print("CUAD documents: " + CUAD_ATTRIBUTION)


def roomset_main(
    spec: RoomSetSpec, out: str | Path, *, overwrite: bool = False, console: Any = None
) -> int:
    """CLI body of ``rlmdistill rooms set``: build, print a per-size table and the check;
    return the exit code (0 built and separated, 1 otherwise)."""
    import time

    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    start = time.perf_counter()
    try:
        roomset = build_roomset(spec, out, overwrite=overwrite)
    except (RoomSetError, SynthError, OSError) as exc:
        console.print(f"[red]rooms set failed:[/red] {exc}")
        return 1
    table = Table(title=f"Room set {Path(out).name} ({len(roomset.rooms)} rooms)")
    for col in ("size", "train", "holdout", "chars (mean)", "criteria (mean)"):
        table.add_column(col, justify="right")
    for size in roomset.spec.sizes:
        rooms = [r for r in roomset.rooms if r.size == size]
        table.add_row(
            str(size),
            str(sum(r.split == "train" for r in rooms)),
            str(sum(r.split == "holdout" for r in rooms)),
            f"{sum(r.n_chars for r in rooms) // len(rooms):,}",
            f"{sum(r.n_criteria for r in rooms) / len(rooms):.0f}",
        )
    console.print(table)
    if roomset.check is None:
        console.print("split check: skipped (one split is empty)")
    else:
        c = roomset.check
        console.print(
            f"split check: passed ({c.n_holdout_paragraphs:,} holdout paragraphs, "
            f"{c.shared_paragraphs} shared; {c.shared_documents} shared documents)"
        )
    console.print(f"built in {time.perf_counter() - start:.1f} s -> {Path(out) / 'roomset.json'}")
    return 0


def register(rooms_app: typer.Typer) -> None:
    """Add the ``build-cuad``, ``show``, ``synth`` and ``set`` commands to the ``rooms``
    typer sub-app ``rooms_app``."""

    @config_command(rooms_app, "build-cuad", arguments=["source"], config_flag="--config")
    def rooms_build_cuad(config: CuadRoomConfig) -> None:
        """Build a data room + LAB-format task from a CUAD-format folder."""
        from rich.console import Console

        from rlmdistill.rooms.cuad import CuadError, print_build_report

        console = Console()
        try:
            report = run_build_cuad(config)
        except (CuadError, OSError) as exc:
            console.print(f"[red]build-cuad failed:[/red] {exc}")
            raise typer.Exit(1) from None
        print_build_report(report, console)

    @config_command(rooms_app, "show", arguments=["room"], config_flag=None)
    def rooms_show(config: RoomShowConfig) -> None:
        """Print a room's documents per folder, size and task; then the documents not decoded
        as UTF-8, decoded with replacement characters, or skipped (with the reason)."""
        from rich.console import Console

        from rlmdistill.rooms import DataRoom, RoomError

        console = Console()
        try:
            r = DataRoom.load(config.room, strict=config.strict)
        except RoomError as exc:
            Console(stderr=True).print(f"[red]error:[/red] {exc}")
            raise typer.Exit(1) from None
        console.print(
            f"[bold]{r.room_id}[/bold] hash {r.room_hash}: {len(r.documents)} documents, "
            f"{r.n_chars:,} chars"
        )
        for folder, n in sorted(r.folders.items()):
            console.print(f"  {folder or '(top level)'}: {n}")
        if r.task is not None:
            console.print(f"task {r.task.id}: {r.task.title} ({len(r.task.criteria)} criteria)")
        for line in r.notes():
            console.print(f"  {line}", markup=False, highlight=False)

    @config_command(
        rooms_app, "synth", names={"copy_cuad": ["--copy-cuad/--no-cuad"]}, config_flag="--config"
    )
    def rooms_synth(config: SynthRoomConfig) -> None:
        """Generate a seeded synthetic data room with planted issues and its rubric."""
        import time

        from rich.console import Console

        console = Console()
        start = time.perf_counter()
        try:
            report = run_synth(config)
        except (SynthError, OSError) as exc:
            console.print(f"[red]rooms synth failed:[/red] {exc}")
            raise typer.Exit(1) from None
        print_synth_report(report, time.perf_counter() - start, console)

    _register_set(rooms_app)


def _spec_help(name: str) -> str:
    return field_help(RoomSetSpec, name)


class RoomSetOptions(BaseModel):
    """``rlmdistill rooms set``: the flags of a room set (the fields of
    :class:`~rlmdistill.rooms.roomset.RoomSetSpec`, sizes as text), or a spec file."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    out: Path
    """Room set folder to write."""
    sizes: str | None = None
    """Sizes: "20,50,100" or "log:LO:HI:N" (documents per room)."""
    per_size: int = Field(default=1, description=_spec_help("per_size"))
    seed: int = Field(default=0, description=_spec_help("seed"))
    holdout_fraction: float = Field(default=0.25, description=_spec_help("holdout_fraction"))
    length_scale: float = Field(default=1.0, description=_spec_help("length_scale"))
    cuad: Path | None = None
    """CUAD folder (default: packaged sample)."""
    copy_cuad: bool = True
    """Copy CUAD contracts into the rooms (off: none, and cuad is ignored)."""
    spec: Path | None = None
    """YAML/JSON/TOML spec with RoomSetSpec's fields (then the flags above are not read)."""
    overwrite: bool = False
    """Replace an existing set."""


def _register_set(rooms_app: typer.Typer) -> None:
    """Add the ``set`` command to the ``rooms`` typer sub-app."""

    @config_command(
        rooms_app,
        "set",
        names={"copy_cuad": ["--copy-cuad/--no-cuad"]},
        config_flag=None,
    )
    def rooms_set(options: RoomSetOptions) -> None:
        """Build a manifest of synthetic rooms (sizes x replicates, train/holdout split)."""
        spec, sizes, cuad = options.spec, options.sizes, options.cuad
        try:
            if spec is not None:
                data = read_config_file(spec)
                check_keys(RoomSetSpec, data, str(spec))
                if isinstance(data.get("sizes"), str):
                    data["sizes"] = parse_sizes(data["sizes"])
                parsed = RoomSetSpec.model_validate(data)
            else:
                if sizes is None:
                    raise RoomSetError("give --sizes or --spec")
                source = str(cuad or SAMPLE_SOURCE) if options.copy_cuad else None
                parsed = RoomSetSpec(
                    sizes=parse_sizes(sizes),
                    per_size=options.per_size,
                    seed=options.seed,
                    holdout_fraction=options.holdout_fraction,
                    length_scale=options.length_scale,
                    cuad_source=source,
                )
        except (RoomSetError, ConfigFileError, ValidationError, OSError) as exc:
            typer.echo(f"rooms set: invalid arguments: {exc}", err=True)
            raise typer.Exit(2) from None
        raise typer.Exit(roomset_main(parsed, options.out, overwrite=options.overwrite))
