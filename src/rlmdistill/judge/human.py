"""Graders measured against people: ``rlmdistill judge-agreement runs/NAME --human``.

For each grader of a run and each criterion type (then ``all``), over the pairs of a person's
criterion label and the grader's verdict of the same current memo
(:mod:`rlmdistill.traces.calibration`: a person's UNGRADABLE left out, a grader's UNGRADABLE
is not a pass):

(the rows are :func:`rlmdistill.traces.calibration.human_agreement_rows`, which the report
shows too)

- ``n``: pairs with a person's PASS or FAIL;
- sensitivity ``q1 = TP / (TP + FN)`` (of the criteria a person passed, the share the grader
  passed) and specificity ``q0 = TN / (TN + FP)`` (of those a person failed, the share the
  grader did not pass), each with a 95% Wilson interval (:func:`rlmdistill.stats.wilson_interval`);
- Cohen's kappa of the 2x2 table grader (pass / not pass) x person (PASS / FAIL)
  (:func:`rlmdistill.stats.cohen_kappa`; undefined with the reason when chance
  agreement is 1 or there are no pairs).

For an LLM judge, :func:`rescore_flips` grades the labelled episodes' current memos K more
times with the same judge *without* its verdict cache (a cached verdict would repeat itself)
and reports the share of criteria whose verdict is not the same every time (verifiers'
``replay --num-rescores`` measures the same spread).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from rlmdistill.judge.llm import LLMGrader, LLMJudgeConfig, judge_model_key, llm_grader_id
from rlmdistill.models.spec import get_client, parse_spec
from rlmdistill.traces.calibration import (
    HumanAgreementRow,
    calibration_pairs,
    human_agreement_rows,
)
from rlmdistill.traces.labels import read_labels
from rlmdistill.traces.layout import RUN_MANIFEST
from rlmdistill.traces.runs import grader_ids, load_room_tasks, load_summaries

__all__ = [
    "FlipReport",
    "HumanAgreement",
    "HumanAgreementRow",
    "human_agreement",
    "human_agreement_rows",
    "rescore_flips",
    "rescore_judge",
]


class HumanAgreement(BaseModel):
    """``judge-agreement --human`` of one run: rows per grader, then per criterion type."""

    model_config = ConfigDict(extra="forbid")

    run_dir: str
    n_labels: int
    """Lines of ``labels.jsonl`` (every label, stale and superseded ones included)."""
    reviewers: list[str]
    rows: list[HumanAgreementRow]


def human_agreement(run_dir: Path, graders: Sequence[str] | None = None) -> HumanAgreement:
    """Every grader of ``run_dir`` (or ``graders``) against people's labels (module docstring).

    Raises:
        FileNotFoundError: ``run_dir`` is not a run directory.
        ValueError: the run has no labels (names the file and the commands that add them), or
            a grader named in ``graders`` has no verdicts on the run (lists those that do).
    """
    run_dir = Path(run_dir)
    if not (run_dir / RUN_MANIFEST).exists():
        raise FileNotFoundError(
            f"{run_dir / RUN_MANIFEST} not found: is {run_dir} a run directory?"
        )
    labels = read_labels(run_dir)
    if not labels:
        raise ValueError(
            f"{run_dir}: no labels in labels.jsonl; label episodes on the dashboard's Review page "
            f"or with `rlmdistill labels import {run_dir} FILE.csv`"
        )
    known = grader_ids(run_dir)
    chosen = list(graders) if graders else known
    unknown = [g for g in chosen if g not in known]
    if unknown:
        raise ValueError(
            f"{run_dir}: no verdicts of grader(s) {', '.join(unknown)}; graders of this run: "
            f"{', '.join(known) or 'none'}"
        )
    rows = [
        r
        for g in chosen
        for r in human_agreement_rows(g, calibration_pairs(run_dir, g, labels=labels))
    ]
    return HumanAgreement(
        run_dir=str(run_dir),
        n_labels=len(labels),
        reviewers=sorted({x.reviewer for x in labels}),
        rows=rows,
    )


class FlipReport(BaseModel):
    """How much an LLM judge's verdicts vary when the same memo is graded again."""

    model_config = ConfigDict(extra="forbid")

    grader: str
    k: int
    """Gradings of each memo (all without the verdict cache)."""
    n_episodes: int
    n_criteria: int
    """Criteria graded ``k`` times."""
    n_flipped: int
    """Criteria whose ``k`` verdicts are not all the same."""
    flip_share: float | None
    """``n_flipped / n_criteria``; ``None`` when no criterion was graded."""


def rescore_flips(
    run_dir: Path, grader: LLMGrader, k: int, *, episode_ids: Sequence[str] | None = None
) -> FlipReport:
    """Grade each chosen episode's current memo ``k`` times with ``grader`` and count the
    criteria whose verdicts differ between gradings.

    ``grader`` must have no verdict cache (``grader.cache is None``): every grading is a fresh
    request, else the cache would answer the second time with the first verdict. Episodes
    default to those with a label in ``labels.jsonl`` (the labelled sample) that have a memo.
    Nothing is written to the run except the judge's usage log if ``grader`` has one.

    Raises ``ValueError`` when ``k < 2`` or the grader has a cache, and ``NotARunError`` for a
    folder without ``run.json``.
    """
    if k < 2:
        raise ValueError(f"rescore_flips: k must be >= 2 to see a flip, got {k}")
    if grader.cache is not None:
        raise ValueError("rescore_flips: the grader must not use its verdict cache (cache=None)")
    run_dir = Path(run_dir)
    summaries = {s.episode_id: s for s in load_summaries(run_dir)}
    if episode_ids is None:
        episode_ids = list(dict.fromkeys(x.episode_id for x in read_labels(run_dir)))
    chosen = [summaries[e] for e in episode_ids if e in summaries and summaries[e].memo]
    tasks = load_room_tasks(run_dir, chosen, on_error="report").tasks
    n_criteria = n_flipped = n_episodes = 0
    for s in chosen:
        task = tasks.get(s.room.room_hash)
        if task is None:
            continue
        n_episodes += 1
        seen: dict[str, set[str]] = {}
        for _ in range(k):
            for v in grader.grade(
                s.memo, task, None, episode_id=s.episode_id, memo_sha256=s.memo_sha256
            ):
                seen.setdefault(v.criterion_id, set()).add(v.verdict)
        n_criteria += len(seen)
        n_flipped += sum(len(v) > 1 for v in seen.values())
    return FlipReport(
        grader=grader.grader_id,
        k=k,
        n_episodes=n_episodes,
        n_criteria=n_criteria,
        n_flipped=n_flipped,
        flip_share=n_flipped / n_criteria if n_criteria else None,
    )


def rescore_judge(
    run_dir: Path, judge: str, k: int, *, episode_ids: Sequence[str] | None = None
) -> FlipReport:
    """:func:`rescore_flips` with the LLM judge of spec ``judge`` (``openai:MODEL@URL``,
    ``local:NAME``) at its default settings (:class:`~rlmdistill.judge.llm.LLMJudgeConfig`:
    temperature 0, seed 0, as ``rlmdistill judge`` grades) and no verdict cache; the judge's
    requests are not logged in the run. Raises ``ValueError`` for ``reference`` (a
    deterministic grader: nothing to measure), a spec that does not parse, or an ``openai``
    server that is not serving the model."""
    if judge == "reference":
        raise ValueError("--rescore measures an LLM judge; the reference grader is deterministic")
    spec = parse_spec(judge)
    if spec.kind == "openai":
        from rlmdistill.models.preflight import preflight

        preflight({"judge": spec})
    grader = LLMGrader(
        get_client(spec),
        judge_model=judge_model_key(spec),
        grader_id=llm_grader_id(spec),
        config=LLMJudgeConfig(),
        cache=None,  # every grading is a fresh request
        usage_path=None,
    )
    return rescore_flips(run_dir, grader, k, episode_ids=episode_ids)
