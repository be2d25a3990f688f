"""rlmdistill: self-distil the root model of RLM agents (collect, judge, filter, SFT, report).

Stages talk only through files (rooms, runs, verdicts, datasets, adapters, reports), so each
command can run alone:

    rlmdistill models pull qwen2.5-coder-0.5b
    rlmdistill rooms build-cuad ../shared/data/cuad --contracts 10 --seed 0 --out rooms/cuad10
    rlmdistill collect --room rooms/cuad10 --root local:qwen2.5-coder-0.5b \\
        --sub local:qwen2.5-coder-0.5b --episodes 4 --out runs/demo
    rlmdistill judge runs/demo
    rlmdistill filter runs/demo --out datasets/demo --tokenizer qwen2.5-coder-0.5b
    rlmdistill sft --dataset datasets/demo --base qwen2.5-coder-0.5b --out adapters/demo
    rlmdistill report runs/demo runs/tuned --out reports/demo
    rlmdistill loop examples/quickstart.yaml     # the whole loop, resumable
    rlmdistill quickstart                        # collect -> judge -> show on the default
"""

from __future__ import annotations

import typer
from rich.console import Console

from rlmdistill.collect.cli import DEFAULT_MODEL, run_collect, run_judge
from rlmdistill.collect.main import build_config

__all__ = ["DEFAULT_MODEL", "app", "build_config", "main", "run_collect", "run_judge"]

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    help=__doc__.split("\n\n")[0],
)
rooms_app = typer.Typer(no_args_is_help=True, help="Build and inspect data rooms.")
models_app = typer.Typer(no_args_is_help=True, help="Pull and list the embedded local models.")
app.add_typer(rooms_app, name="rooms")
app.add_typer(models_app, name="models")
err = Console(stderr=True)


def _register_stages() -> None:
    """Add every package's commands (one ``register`` each; this module holds none)."""
    from rlmdistill.analysis.cli import register as register_report
    from rlmdistill.cluster.cli import register as register_submit
    from rlmdistill.collect.cli import register as register_collect
    from rlmdistill.dashboard.cli import register as register_dashboard
    from rlmdistill.export.cli import register as register_export
    from rlmdistill.export.grpo_cli import register as register_export_grpo
    from rlmdistill.export.interop_cli import register as register_export_interop
    from rlmdistill.filter.cli import register as register_filter
    from rlmdistill.importers.cli import register as register_import
    from rlmdistill.judge.cli import register as register_judge
    from rlmdistill.loop.cli import register as register_loop
    from rlmdistill.models.cli import register as register_models
    from rlmdistill.rl.cli import register as register_rl
    from rlmdistill.rooms.cli import register as register_rooms
    from rlmdistill.sft.cli import register as register_sft
    from rlmdistill.traces.labels_cli import register as register_labels

    register_rooms(rooms_app)
    register_models(models_app)
    register_collect(app)
    register_judge(app)
    register_filter(app)
    register_export(app)
    register_export_grpo(app)
    register_export_interop(app)
    register_sft(app)
    register_report(app)
    register_loop(app)
    register_rl(app)
    register_dashboard(app)
    register_labels(app)
    register_import(app)
    register_submit(app)


_register_stages()


def main() -> None:
    """Console-script entry point.

    Errors in the user's input (a missing room or file, an invalid task or config, a run
    folder made with another config, a bad model spec) print one clear line and exit with
    status 2 instead of a traceback (an unreachable server or unknown model id found by the
    preflight too); episodes left unfinished by a server failing mid-run exit with status 3
    (run the same command again); anything else is a bug and keeps its traceback.
    """
    from pydantic import ValidationError
    from rich.markup import escape  # messages may hold brackets: "rlmdistill[ray]", lists

    from rlmdistill.collect.attempts import EXIT_INFRASTRUCTURE, UnfinishedEpisodes
    from rlmdistill.collect.runner import RunConfigMismatch
    from rlmdistill.rooms.room import RoomError
    from rlmdistill.rooms.task import TaskError
    from rlmdistill.traces.store import TraceFileError

    try:
        app(standalone_mode=True)
    except UnfinishedEpisodes as exc:  # a server failed mid-run: re-run the same command
        err.print(f"[red]unfinished:[/red] {escape(str(exc))}")
        raise SystemExit(EXIT_INFRASTRUCTURE) from None
    except (RoomError, TaskError, RunConfigMismatch, TraceFileError, FileNotFoundError) as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise SystemExit(2) from None
    except ValidationError as exc:
        err.print(f"[red]invalid configuration:[/red] {escape(str(exc))}")
        raise SystemExit(2) from None
    except ValueError as exc:  # bad model spec, room without task, ...
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
