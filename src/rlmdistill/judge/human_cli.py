"""``rlmdistill judge-agreement runs/NAME --human``: the adapter from
:func:`rlmdistill.judge.human.human_agreement` (and, with ``--rescore K --judge SPEC``,
:func:`rlmdistill.judge.human.rescore_flips`) to a printed table or JSON and an exit code.

    rlmdistill judge-agreement runs/NAME --human
    rlmdistill judge-agreement runs/NAME --human --json
    rlmdistill judge-agreement runs/NAME --human --rescore 5 --judge openai:MODEL@URL
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rlmdistill.judge.human import HumanAgreement, human_agreement, rescore_judge
from rlmdistill.stats import Estimate

__all__ = ["human_agreement_main", "render_human_agreement"]


def _est(e: Estimate) -> str:
    if e.value is None:
        return "-"
    return f"{e.value:.3f} [{e.low:.3f}, {e.high:.3f}]"


def render_human_agreement(table: HumanAgreement, console: Console) -> None:
    """Print ``table``: one row per grader and criterion type (sensitivity and specificity
    with their 95% Wilson intervals, kappa, counts); undefined kappa's reason below."""
    out = Table(
        title=f"graders against people: {table.run_dir} ({table.n_labels} labels by "
        f"{', '.join(table.reviewers)})"
    )
    cols = ("grader", "criterion type", "n", "sensitivity [95%]", "specificity [95%]", "kappa")
    for col in (*cols, "TP", "FN", "TN", "FP", "person ungr."):
        out.add_column(col, justify="left" if col in ("grader", "criterion type") else "right")
    notes: list[str] = []
    for r in table.rows:
        if r.kappa is None:
            notes.append(f"{r.grader} / {r.criterion_type}: kappa undefined: {r.kappa_undefined}")
        out.add_row(
            r.grader,
            r.criterion_type,
            str(r.n),
            _est(r.sensitivity),
            _est(r.specificity),
            "undefined" if r.kappa is None else f"{r.kappa:.3f}",
            *(str(x) for x in (r.tp, r.fn, r.tn, r.fp, r.n_person_ungradable)),
        )
    console.print(out)
    for note in notes:
        console.print(note, markup=False, highlight=False)
    console.print(
        "pairs: a reviewer's latest label of a criterion and the grader's verdict of the same "
        "current memo; a grader's UNGRADABLE counts as not passed",
        markup=False,
        highlight=False,
    )


def human_agreement_main(
    run_dir: Path,
    *,
    as_json: bool = False,
    rescore_k: int | None = None,
    judge: str | None = None,
    console: Console | None = None,
) -> int:
    """Print the ``--human`` table (and the flip share with ``rescore_k``); return the exit
    code: 0, or 2 with one clear line on stderr for a bad run, no labels or a bad judge."""
    err = Console(stderr=True)
    console = console or Console(width=160)
    try:
        table = human_agreement(run_dir)
        flips = None
        if rescore_k is not None:
            if judge is None:
                raise ValueError("--rescore needs --judge SPEC (the LLM judge to grade again)")
            flips = rescore_judge(run_dir, judge, rescore_k)
    except (ValueError, FileNotFoundError) as exc:
        err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2
    if as_json:
        data = table.model_dump(mode="json")
        if flips is not None:
            data["rescore"] = flips.model_dump(mode="json")
        console.print_json(json.dumps(data))
        return 0
    render_human_agreement(table, console)
    if flips is not None:
        share = "-" if flips.flip_share is None else f"{flips.flip_share:.3f}"
        console.print(
            f"{flips.grader}: graded {flips.n_episodes} labelled episodes' memos {flips.k} times "
            f"(no cache): {flips.n_flipped} of {flips.n_criteria} criteria flipped "
            f"(share {share})",
            markup=False,
            highlight=False,
        )
    return 0
