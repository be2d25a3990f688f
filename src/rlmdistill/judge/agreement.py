"""Judge agreement: how often two graders of one run agree, per criterion type, with Cohen's kappa.

Pairing: for each grader the *last* verdict per (episode, criterion) counts (as in
:func:`rlmdistill.judge.base.pass_rates`); a pair is an (episode, criterion) both graders
judged for the same memo (``memo_sha256`` equal, or unknown on either side). Pairs where either
grader said UNGRADABLE are counted apart (``n_ungradable``) and left out of agreement and kappa,
which are over the binary PASS/FAIL labels.

Cohen's kappa (Cohen 1960, "A coefficient of agreement for nominal scales"), from the 2x2
confusion matrix ``C`` of ``n`` pairs: ``p_o = trace(C) / n``,
``p_e = sum_k rows_k * cols_k / n^2``, ``kappa = (p_o - p_e) / (1 - p_e)``. It is *undefined*
(``None`` with a reason, never NaN) when ``n = 0`` or ``p_e = 1`` (both graders gave
one and the same label to every pair: chance agreement is already perfect).

The criterion type of a pair is the first grader's ``criterion_type`` (else the second's, else
``"unknown"``); the table has one row per type plus an ``all`` row.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from rlmdistill.stats import Kappa, cohen_kappa
from rlmdistill.traces.layout import RUN_MANIFEST, verdicts_path
from rlmdistill.traces.runs import grader_ids, load_verdicts
from rlmdistill.traces.schema import Verdict

__all__ = [
    "AgreementRow",
    "AgreementTable",
    "Kappa",
    "TooFewGradersError",
    "agreement_table",
    "cohen_kappa",
    "run_agreement",
]

_LABELS = ("PASS", "FAIL")


class AgreementRow(BaseModel):
    """Agreement of two graders over the pairs of one criterion type (or ``all``)."""

    model_config = ConfigDict(extra="forbid")

    criterion_type: str
    n: int
    """Pairs both graders labelled PASS or FAIL."""
    n_ungradable: int
    """Pairs left out because either grader said UNGRADABLE."""
    both_pass: int
    both_fail: int
    a_pass_b_fail: int
    a_fail_b_pass: int
    agreement: float | None
    """Share of the ``n`` pairs with equal labels; ``None`` when ``n = 0``."""
    kappa: float | None
    """Cohen's kappa; ``None`` when undefined (see ``kappa_undefined``)."""
    kappa_undefined: str | None = None
    """Why kappa is undefined."""


class AgreementTable(BaseModel):
    """Per-criterion-type agreement of grader ``a`` with grader ``b`` on one run."""

    model_config = ConfigDict(extra="forbid")

    grader_a: str
    grader_b: str
    rows: list[AgreementRow]
    """One row per criterion type (sorted), then ``all``."""
    n_only_a: int
    """(episode, criterion) judged by ``a`` only (or for another memo)."""
    n_only_b: int


def _latest(verdicts: Iterable[Verdict]) -> dict[tuple[str, str], Verdict]:
    out: dict[tuple[str, str], Verdict] = {}
    for v in verdicts:
        out[(v.episode_id, v.criterion_id)] = v
    return out


def _row(ctype: str, pairs: list[tuple[str, str]]) -> AgreementRow:
    c = np.zeros((2, 2), dtype=int)
    n_ung = 0
    for a, b in pairs:
        if a == "UNGRADABLE" or b == "UNGRADABLE":
            n_ung += 1
        else:
            c[_LABELS.index(a), _LABELS.index(b)] += 1
    n = int(c.sum())
    kappa = cohen_kappa(c)
    return AgreementRow(
        criterion_type=ctype,
        n=n,
        n_ungradable=n_ung,
        both_pass=int(c[0, 0]),
        both_fail=int(c[1, 1]),
        a_pass_b_fail=int(c[0, 1]),
        a_fail_b_pass=int(c[1, 0]),
        agreement=float(np.trace(c)) / n if n else None,
        kappa=kappa.value,
        kappa_undefined=kappa.reason,
    )


def agreement_table(
    verdicts_a: Iterable[Verdict],
    verdicts_b: Iterable[Verdict],
    *,
    grader_a: str,
    grader_b: str,
) -> AgreementTable:
    """Agreement of two graders' verdicts (pairing and method in the module docstring)."""
    a, b = _latest(verdicts_a), _latest(verdicts_b)
    by_type: dict[str, list[tuple[str, str]]] = {}
    matched: set[tuple[str, str]] = set()
    for key, va in a.items():
        vb = b.get(key)
        if vb is None:
            continue
        if va.memo_sha256 and vb.memo_sha256 and va.memo_sha256 != vb.memo_sha256:
            continue
        matched.add(key)
        ctype = va.criterion_type or vb.criterion_type or "unknown"
        by_type.setdefault(ctype, []).append((va.verdict, vb.verdict))
    rows = [_row(t, by_type[t]) for t in sorted(by_type)]
    rows.append(_row("all", [p for t in sorted(by_type) for p in by_type[t]]))
    return AgreementTable(
        grader_a=grader_a,
        grader_b=grader_b,
        rows=rows,
        n_only_a=len(a) - len(matched),
        n_only_b=len(b) - len(matched),
    )


class TooFewGradersError(ValueError):
    """The run has verdicts from fewer than two graders, so there is no agreement to compute;
    the message names the ``rlmdistill judge`` command that adds the missing grader."""


def run_agreement(run_dir: Path, a: str = "reference", b: str | None = None) -> AgreementTable:
    """Agreement table of graders ``a`` and ``b`` on ``run_dir`` (method in
    :mod:`rlmdistill.judge.agreement`).

    ``b`` defaults to the one grader other than ``a`` that judged the run. Raises
    :class:`TooFewGradersError` (a ``ValueError``) when the run has verdicts from fewer than
    two graders, ``FileNotFoundError`` when a grader's verdict file is missing and
    ``ValueError`` when ``b`` is not given and there is not exactly one candidate (the message
    lists them); ``FileNotFoundError`` too when ``run_dir`` is not a run directory.
    """
    run_dir = Path(run_dir)
    if not (run_dir / RUN_MANIFEST).exists():
        raise FileNotFoundError(
            f"{run_dir / RUN_MANIFEST} not found: is {run_dir} a run directory?"
        )
    graders = grader_ids(run_dir)
    if len(graders) < 2:
        raise TooFewGradersError(_too_few_graders(run_dir, graders))
    if b is None:
        others = [g for g in graders if g != a]
        if len(others) != 1:
            raise ValueError(
                f"{run_dir}: pick the second grader with --b; graders with verdicts: "
                + (", ".join(graders) or "none")
            )
        b = others[0]
    for g in (a, b):
        if g not in graders:
            raise FileNotFoundError(
                f"{verdicts_path(run_dir, g)} not found; graders with verdicts: "
                + (", ".join(graders) or "none")
            )
    return agreement_table(
        load_verdicts(run_dir, a), load_verdicts(run_dir, b), grader_a=a, grader_b=b
    )


def _too_few_graders(run_dir: Path, graders: list[str]) -> str:
    reference = f"  rlmdistill judge {run_dir}"
    llm = (
        f"  rlmdistill judge {run_dir} --judge openai:MODEL@URL"
        "   (or --judge local:qwen2.5-coder-1.5b)"
    )
    if not graders:
        return (
            f"{run_dir}: judge agreement needs verdicts from two graders; this run has none "
            f"yet. Grade it with the reference grader and an LLM judge:\n{reference}\n{llm}"
        )
    (only,) = graders
    add = llm if only == "reference" else reference
    return (
        f"{run_dir}: judge agreement needs verdicts from two graders; this run has one "
        f"({only}). Add a second, then run judge-agreement again:\n{add}"
    )
