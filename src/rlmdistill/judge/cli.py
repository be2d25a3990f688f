"""Commands of the judge stage: ``rlmdistill judge`` and ``rlmdistill judge-agreement``.

Commands::

    rlmdistill judge runs/NAME                                  # reference grader
    rlmdistill judge runs/NAME --judge openai:Qwen/Qwen2.5-7B-Instruct@http://127.0.0.1:8000/v1
    rlmdistill judge runs/NAME --judge local:qwen2.5-coder-1.5b --criteria-per-request 10
    rlmdistill judge-agreement runs/NAME                         # reference vs the other grader
    rlmdistill judge-agreement runs/NAME --a reference --b llm-qwen2.5-coder-1.5b --json

``judge-agreement`` on a run with fewer than two graders says so, names the ``judge`` command
that adds the missing one, and exits 1 (nothing to compare; like ``filter`` with nothing kept).

The ``judge`` stage is :func:`rlmdistill.judge.main.run` (a :class:`~rlmdistill.judge.main.
JudgeConfig` in, a :class:`~rlmdistill.judge.main.JudgeReport` out); :func:`rlmdistill.judge.agreement.run_agreement`
computes the agreement table. :func:`register` adds the typer commands, which map results to
output and exit codes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rlmdistill.cliconfig import config_command
from rlmdistill.cluster.options import RayOptions
from rlmdistill.judge.agreement import AgreementTable, TooFewGradersError, run_agreement
from rlmdistill.judge.main import JudgeConfig, run
from rlmdistill.models.limits import load_prices
from rlmdistill.traces.runs import grader_ids

__all__ = [
    "AgreementOptions",
    "list_graders",
    "load_prices",
    "register",
    "render_agreement",
]

list_graders = grader_ids
"""Grader ids with a verdict file in a run (:func:`rlmdistill.traces.runs.grader_ids`)."""


def render_agreement(table: AgreementTable, console: Console) -> None:
    """Print ``table`` as a rich table (undefined kappa shown as ``undefined`` + reason)."""
    out = Table(title=f"judge agreement: {table.grader_a} (a) vs {table.grader_b} (b)")
    for col in ("criterion type", "n", "agree", "kappa", "a+b+", "a-b-", "a+b-", "a-b+", "ungr."):
        out.add_column(col, justify="left" if col == "criterion type" else "right")
    notes: list[str] = []
    for row in table.rows:
        if row.kappa is None:
            kappa = "undefined"
            notes.append(f"{row.criterion_type}: kappa undefined: {row.kappa_undefined}")
        else:
            kappa = f"{row.kappa:.3f}"
        out.add_row(
            row.criterion_type,
            str(row.n),
            "-" if row.agreement is None else f"{row.agreement:.3f}",
            kappa,
            str(row.both_pass),
            str(row.both_fail),
            str(row.a_pass_b_fail),
            str(row.a_fail_b_pass),
            str(row.n_ungradable),
        )
    console.print(out)
    for note in notes:
        console.print(note)
    console.print(
        f"pairs judged by one grader only: {table.grader_a} {table.n_only_a}, "
        f"{table.grader_b} {table.n_only_b}; UNGRADABLE pairs are left out of agree/kappa"
    )


class AgreementOptions(BaseModel):
    """``rlmdistill judge-agreement``: which graders of a run to compare, or every grader
    against people's labels."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    run_dir: Path
    """Run directory."""
    a: str = "reference"
    """First grader id."""
    b: str | None = None
    """Second grader id (default: the only other grader)."""
    as_json: bool = False
    """Print the table as JSON."""
    human: bool = False
    """Every grader against people's labels (labels.jsonl): sensitivity and specificity with
    Wilson intervals and Cohen's kappa per criterion type."""
    rescore: int | None = Field(default=None, ge=2)
    """With --human: grade the labelled memos K times with --judge, no cache, and report the
    share of criteria whose verdict flips."""
    judge: str | None = None
    """With --rescore: the LLM judge spec (openai:MODEL@URL)."""


def register(app: typer.Typer) -> None:
    """Add the ``judge``, ``judge-agreement`` and ``judge-eval`` commands to ``app``."""
    from rlmdistill.judge.eval_cli import register_eval

    register_eval(app)
    err = Console(stderr=True)

    @config_command(
        app,
        "judge",
        arguments=["run_dir"],
        names={"judge": ["--judge", "--grader"], "cache_path": ["--cache"]},
        exclude=["prices", *(f"ray.{f}" for f in RayOptions.model_fields if f != "address")],
    )
    def judge_cmd(
        config: JudgeConfig,
        prices: Annotated[
            Path | None,
            typer.Option(help="Price table file (YAML/JSON) for judge cost (default: packaged)."),
        ] = None,
    ) -> None:
        """Grade every episode's memo against its room's rubric criteria."""
        try:
            if prices is not None:
                config = config.model_copy(update={"prices": load_prices(prices)})
            report = run(config)
        except (ValueError, FileNotFoundError) as exc:  # one clear line, exit 2 (like main())
            err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
            raise typer.Exit(2) from exc
        res = report.result
        counts = ", ".join(f"{k} {res.counts.get(k, 0)}" for k in ("PASS", "FAIL", "UNGRADABLE"))
        err.print(
            f"graded {res.graded} episodes ({res.skipped} already graded) -> {res.verdicts_path}"
        )
        err.print(f"verdicts written: {counts}")
        s = report.stats
        if s is not None:
            cost = f"${s.cost_usd:.4f}" + (
                f" ({s.unpriced_requests} request(s) unpriced)" if s.unpriced_requests else ""
            )
            err.print(
                f"judge requests: {s.requests} ({s.retries} retries, {s.failed_requests} failed); "
                f"criteria from cache: {s.cache_hits}, judged: {s.judged}, no memo: {s.no_memo}; "
                f"judge tokens: prompt {s.usage.prompt_tokens}, "
                f"completion {s.usage.completion_tokens}; cost {cost} -> {report.usage_path}"
            )
        if report.requests_per_node:
            err.print(
                "judge requests per node: "
                + "; ".join(f"{k}: {n}" for k, n in report.requests_per_node.items()),
                highlight=False,
                markup=False,
            )
        others = [g for g in list_graders(config.run_dir) if g != report.grader_id]
        if others:
            err.print(
                f"other graders on this run: {', '.join(others)} "
                f"(compare: rlmdistill judge-agreement {config.run_dir})"
            )

    @config_command(
        app,
        "judge-agreement",
        arguments=["run_dir"],
        names={"a": ["--a"], "b": ["--b"], "as_json": ["--json"]},
        config_flag=None,
    )
    def agreement_cmd(options: AgreementOptions) -> None:
        """Agreement of two graders per criterion type: n, agreement share, Cohen's kappa;
        with --human, of every grader with people's labels."""
        run_dir, as_json = options.run_dir, options.as_json
        if options.human:
            from rlmdistill.judge.human_cli import human_agreement_main

            code = human_agreement_main(
                run_dir, as_json=as_json, rescore_k=options.rescore, judge=options.judge
            )
            raise typer.Exit(code)
        try:
            table = run_agreement(run_dir, options.a, options.b)
        except TooFewGradersError as exc:  # nothing to compare: exit 1 (as filter, nothing kept)
            err.print(str(exc), highlight=False, markup=False, soft_wrap=True)
            raise typer.Exit(1) from exc
        except (ValueError, FileNotFoundError) as exc:  # one clear line, exit 2 (like main())
            err.print(f"[red]error:[/red] {exc}", highlight=False)
            raise typer.Exit(2) from exc
        console = Console(width=140)
        if as_json:
            typer.echo(json.dumps(table.model_dump(mode="json"), indent=2))
        else:
            render_agreement(table, console)
