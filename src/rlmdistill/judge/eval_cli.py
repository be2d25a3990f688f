"""Thin CLI adapter of ``rlmdistill judge-eval`` (the work is
:func:`rlmdistill.judge.evaluation.run`).

    rlmdistill judge-eval ../shared/data/cuad --part heldout --out evals/judge-heldout
    rlmdistill judge-eval src/rlmdistill/rooms/cuad_sample --part all --out /tmp/je --json
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from rlmdistill.cliconfig import config_command
from rlmdistill.judge.evaluation import ACCEPTANCE, JudgeEvalConfig, JudgeEvalReport, run

__all__ = ["register_eval", "render_eval"]


def render_eval(report: JudgeEvalReport, console: Console) -> None:
    """Print the figures of ``report`` as a table, then the acceptance targets."""
    table = Table(
        title=(
            f"judge-eval: {report.grader} {report.grader_version} on {report.config.part} "
            f"({report.n_documents} documents, {report.n_criteria} criteria, "
            f"{report.n_cases} memos)"
        )
    )
    for col in ("memo kind", "expected", "PASS", "memos", "docs", "PASS share", "95% interval"):
        table.add_column(col, justify="left" if col in ("memo kind", "expected") else "right")
    for fig in report.figures.values():
        est = fig.pass_share
        interval = (
            "-" if est.low is None or est.high is None else f"[{est.low:.3f}, {est.high:.3f}]"
        )
        table.add_row(
            fig.kind,
            fig.expected,
            str(fig.n_pass),
            str(fig.n_cases),
            str(fig.n_documents),
            "-" if est.value is None else f"{est.value:.3f}",
            interval,
        )
    console.print(table)
    for kind, met in report.acceptance.items():
        op, bound = ACCEPTANCE[kind]
        console.print(f"{kind}: PASS share {op} {bound}: {'met' if met else 'NOT met'}")


def register_eval(app: typer.Typer) -> None:
    """Add the ``judge-eval`` command to ``app``."""
    err = Console(stderr=True)

    @config_command(app, "judge-eval", arguments=["source"], exclude=["n_resamples"])
    def judge_eval_cmd(
        config: JudgeEvalConfig,
        as_json: Annotated[bool, typer.Option("--json", help="Print report.json.")] = False,
    ) -> None:
        """Recall and false-pass rate of the reference grader on memos built from CUAD labels."""
        out = config.out
        try:
            report = run(config)
        except (ValueError, FileNotFoundError) as exc:
            err.print(f"[red]error:[/red] {exc}", highlight=False)
            raise typer.Exit(2) from exc
        if as_json:
            typer.echo(report.model_dump_json(indent=2))
        else:
            render_eval(report, Console())
            err.print(
                f"memos and verdicts -> {out / 'cases.jsonl'}; figures -> {out / 'report.json'}"
            )
