"""``rlmdistill import rlm LOGS... --room ROOM --out runs/NAME`` and ``rlmdistill import
verifiers LOGS... --room ROOM --out runs/NAME``: traces of other RLM harnesses as a run
(:mod:`rlmdistill.importers`)::

    rlmdistill import rlm logs/ --room rooms/cuad10 --out runs/from-rlms
    rlmdistill import verifiers outputs/evals/rlm/ --room rooms/cuad10 --out runs/from-vf
    rlmdistill judge runs/from-rlms

Exit codes: 0 written, 2 bad input (unknown format version, a record of another shape, a
missing file or room, ``--out`` not empty), with one message on stderr and nothing written.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from pydantic import BaseModel, ConfigDict

from rlmdistill.cliconfig import config_command
from rlmdistill.importers.common import ImportFormatError
from rlmdistill.traces.store import TraceFileError

__all__ = [
    "ImportRlmOptions",
    "ImportVerifiersOptions",
    "import_rlm_main",
    "import_verifiers_main",
    "register",
]


def _import_main(importer: Callable[..., Any], calls: str, **kwargs: Any) -> int:
    """Run one importer (``import_rlm`` / ``import_verifiers``) with ``kwargs`` and this
    command line, print its warnings and outcome (``calls`` names what its sub-calls are);
    returns the exit code (0, or 2 with one ``error:`` line on bad input)."""
    from rlmdistill.rooms.room import RoomError

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            r = importer(**kwargs, command=list(sys.argv))
        except (
            ImportFormatError,
            TraceFileError,
            RoomError,
            FileNotFoundError,
            FileExistsError,
            ValueError,
        ) as exc:
            typer.echo(f"error: {exc}", err=True)
            return 2
    for w in caught:
        typer.echo(f"warning: {w.message}", err=True)
    typer.echo(
        f"{r.n_episodes} episodes ({r.n_turns} root turns, {r.n_sub_calls} {calls}) -> {r.run_dir}"
    )
    return 0


def import_rlm_main(
    logs: list[Path], room: Path, out: Path, *, coverage: bool = True, jobs: int = 0
) -> int:
    """Run ``import rlm`` and print its outcome; returns the exit code (0 or 2)."""
    from rlmdistill.importers.rlm import import_rlm

    return _import_main(
        import_rlm, "sub-calls", logs=logs, room=room, out=out, coverage=coverage, jobs=jobs
    )


def import_verifiers_main(
    logs: list[Path], room: Path, out: Path, *, coverage: bool = True, jobs: int = 0
) -> int:
    """Run ``import verifiers`` and print its outcome; returns the exit code (0 or 2)."""
    from rlmdistill.importers.verifiers import import_verifiers

    return _import_main(
        import_verifiers, "sub-agents", logs=logs, room=room, out=out, coverage=coverage, jobs=jobs
    )


class ImportRlmOptions(BaseModel):
    """``rlmdistill import rlm``: the rlms package's JSONL logs in as a run."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    logs: list[Path]
    """rlms log files (.jsonl) or folders of them (RLMLogger log_dir)."""
    room: Path
    """The room folder the episodes worked on (with task.json)."""
    out: Path
    """The run folder to write (runs/NAME); new."""
    coverage: bool = True
    """Measure each episode's coverage of the room."""
    jobs: int = 0
    """Worker processes for the coverage probe (0: one per core up to 4, from 500 episodes
    on)."""


class ImportVerifiersOptions(BaseModel):
    """``rlmdistill import verifiers``: verifiers rollouts (traces.jsonl) in as a run."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    logs: list[Path]
    """verifiers rollout files (traces.jsonl) or vf-eval output folders."""
    room: Path
    """The room folder the episodes worked on (with task.json)."""
    out: Path
    """The run folder to write (runs/NAME); new."""
    coverage: bool = True
    """Measure each episode's coverage of the room."""
    jobs: int = 0
    """Worker processes for the coverage probe (0: one per core up to 4, from 500 episodes
    on)."""


def register(app: typer.Typer) -> None:
    """Add the ``import`` command group (``import rlm``, ``import verifiers``) to ``app``."""
    import_app = typer.Typer(
        no_args_is_help=True, help="Traces of other RLM harnesses in as a run."
    )
    app.add_typer(import_app, name="import")

    @config_command(import_app, "rlm", arguments=["logs"], config_flag=None)
    def import_rlm_cmd(options: ImportRlmOptions) -> None:
        """Import the JSONL logs of the rlms package (alexzhang13/rlm, 0.1.3) as a run."""
        code = import_rlm_main(
            options.logs, options.room, options.out, coverage=options.coverage, jobs=options.jobs
        )
        if code:
            raise typer.Exit(code)

    @config_command(import_app, "verifiers", arguments=["logs"], config_flag=None)
    def import_verifiers_cmd(options: ImportVerifiersOptions) -> None:
        """Import the rollouts of verifiers' RLM harness (verifiers 0.4.0, traces.jsonl) as a
        run."""
        code = import_verifiers_main(
            options.logs, options.room, options.out, coverage=options.coverage, jobs=options.jobs
        )
        if code:
            raise typer.Exit(code)
