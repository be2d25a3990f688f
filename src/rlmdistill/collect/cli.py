"""``rlmdistill collect`` and ``rlmdistill quickstart``: the typer commands of the collect stage.

    rlmdistill collect --room rooms/cuad10 --root local:qwen2.5-coder-0.5b \\
        --sub local:qwen2.5-coder-0.5b --episodes 4 --out runs/demo
    rlmdistill collect --config collect.yaml --out runs/demo --episodes 8
    rlmdistill quickstart                  # pull -> CUAD room -> collect -> judge -> show

The stage is :func:`rlmdistill.collect.main.run` (a
:class:`~rlmdistill.collect.config.CollectConfig` in, a
:class:`~rlmdistill.collect.runner.CollectResult` out). The ``collect`` command's flags are
the config's fields (:mod:`rlmdistill.cliconfig`: help from each field's description,
``--config FILE`` for any field, flags typed override the file; the run folder is the
``out`` field, ``--out`` or ``out:`` in the file); ``--progress`` and ``--strict`` are
operational and stay outside the config. :func:`register` adds the
commands; errors reach :func:`rlmdistill.cli.main`, which maps them to exit codes 2 and 3.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from rlmdistill.cliconfig import config_command
from rlmdistill.collect.config import DEFAULT_MODEL, CollectConfig, QuickstartConfig
from rlmdistill.collect.main import build_config
from rlmdistill.traces import layout

__all__ = ["DEFAULT_MODEL", "register", "run_collect", "run_judge"]

err = Console(stderr=True)

COLLECT_FLAG_NAMES = {"rooms": ["--room"], "limits.max_turns": ["--max-turns"]}
"""Flags whose name is not the field's path (kept from before the flags came from fields)."""


def _unescape(prefill: Any) -> Any:
    """A prefill typed on the command line with ``\\n`` escapes, as text; "" stays ""."""
    return prefill.encode().decode("unicode_escape") if prefill else prefill


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
        config.model_copy(update={"out": str(out)}),
        progress=progress,
        strict=strict,
        log=lambda line: err.print(line, markup=False, highlight=False, soft_wrap=True),
    )
    err.print(
        f"collected {len(result.summaries)} episodes into {out} ({result.skipped} already done)"
    )
    check_finished(result)
    return len(result.summaries)


def run_judge(run_dir: Path, grader: str = "reference") -> None:
    """Grade a run with the reference grader or an LLM judge and print what was done."""
    from rlmdistill.judge.main import JudgeConfig, run

    rep = run(JudgeConfig(run_dir=run_dir, judge=grader))
    res = rep.result
    err.print(f"graded {res.graded} episodes ({res.skipped} already graded) -> {res.verdicts_path}")


def register(app: typer.Typer) -> None:
    """Add the ``collect`` and ``quickstart`` commands to ``app``."""

    @config_command(
        app,
        "collect",
        exclude=["fingerprint_version"],
        names=COLLECT_FLAG_NAMES,
        # not typed: the root model's recommendation (collect.main.root_defaults)
        defaults={"few_shot": None, "prefill": None},
        convert={"prefill": _unescape},
        prepare=lambda data: build_config(None, data),
    )
    def collect_cmd(
        config: CollectConfig,
        progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
        strict: Annotated[
            bool,
            typer.Option(
                help="Stop on a document whose text cannot be extracted (default: skip it)."
            ),
        ] = False,
    ) -> None:
        """Run RLM episodes over data rooms into runs/NAME (resumable: re-run to finish).

        Exits 2 before writing anything when a server is down or lacks a model id, and 3 when
        a server failed mid-run (the same command then retries the episodes it cut short)."""
        from rlmdistill.collect.main import run_folder

        run_collect(config, run_folder(config), progress, strict)

    @config_command(app, "quickstart", config_flag="--config")
    def quickstart_cmd(config: QuickstartConfig) -> None:
        """A first run on the embedded default: pull -> build CUAD room -> collect -> judge ->
        show (~10 min; the main job, the whole loop, is
        `rlmdistill loop examples/quickstart.yaml`)."""
        from rlmdistill.analysis.render import render_summary
        from rlmdistill.analysis.summary import summarize_run
        from rlmdistill.models.pull import pull_main
        from rlmdistill.rooms.cuad import SAMPLE_SOURCE, build_cuad_main

        model, sub_model, seed, contracts = (
            config.model,
            config.sub_model,
            config.seed,
            config.contracts,
        )
        t0 = time.monotonic()
        for name in dict.fromkeys([model, sub_model or model]):
            if pull_main(name) != 0:
                raise typer.Exit(1)
        t_pulled = time.monotonic()
        room = config.room_dir or Path("rooms") / f"cuad{contracts}-s{seed}"
        if not (room / layout.TASK).exists():
            code = build_cuad_main(config.cuad or SAMPLE_SOURCE, contracts, seed, room)
            if code != 0:
                raise typer.Exit(code)
        cfg = build_config(
            None,
            {
                "rooms": [str(room)],
                "root": f"local:{model}",
                "sub": f"local:{sub_model or model}",
                "episodes": config.episodes,
                "concurrency": config.concurrency,
                "seed": seed,
                # the worked example asks sub-calls to copy one sentence: 128 tokens is
                # plenty, and on a CPU the longest answer of a batch sets the batch's time
                "sub_sampling": {"temperature": 0.2, "top_p": 0.95, "max_tokens": 128},
            },
        )
        cfg.limits.max_turns = config.max_turns
        run_collect(cfg, config.out)
        run_judge(config.out)
        render_summary(summarize_run(config.out), Console(), per_episode=True)
        err.print(
            f"quickstart wall time: {time.monotonic() - t0:.0f}s "
            f"({time.monotonic() - t_pulled:.0f}s after the model pull)"
        )
