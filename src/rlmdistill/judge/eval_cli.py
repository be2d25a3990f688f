"""Thin CLI adapter of ``rlmdistill judge-eval`` (the work is
:func:`rlmdistill.judge.evaluation.run`).

    rlmdistill judge-eval ../shared/data/cuad --part heldout --out evals/judge-heldout
    rlmdistill judge-eval src/rlmdistill/rooms/cuad_sample --part all --out /tmp/je --json
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.console import Console
from rich.table import Table

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

    @app.command("judge-eval")
    def judge_eval_cmd(
        source: Annotated[
            Path, typer.Argument(help="CUAD folder (contracts/ + master_clauses.csv).")
        ],
        out: Annotated[
            Path, typer.Option(help="Output folder (rooms/, cases.jsonl, report.json).")
        ],
        part: Annotated[
            str, typer.Option(help="Part of the fixed contract split: tune, heldout or all.")
        ] = "heldout",
        contracts_per_room: Annotated[int, typer.Option(min=1, help="Contracts per room.")] = 4,
        max_contracts: Annotated[
            int | None, typer.Option(min=1, help="Only the first N contracts of the part.")
        ] = None,
        decoys: Annotated[
            int, typer.Option(min=0, help="Decoys per criterion of each random kind.")
        ] = 2,
        seed: Annotated[int, typer.Option(help="Seed of decoy choice and bootstrap.")] = 0,
        as_json: Annotated[bool, typer.Option("--json", help="Print report.json.")] = False,
    ) -> None:
        """Recall and false-pass rate of the reference grader on memos built from CUAD labels."""
        if part not in ("tune", "heldout", "all"):
            err.print(f"[red]error:[/red] --part must be tune, heldout or all, not {part!r}")
            raise typer.Exit(2)
        chosen: Literal["tune", "heldout", "all"] = part  # type: ignore[assignment]
        config = JudgeEvalConfig(
            source=source,
            out=out,
            part=chosen,
            contracts_per_room=contracts_per_room,
            max_contracts=max_contracts,
            decoys=decoys,
            seed=seed,
        )
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
