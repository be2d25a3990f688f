"""A grader measured against people on one run: people's criterion labels
(:mod:`rlmdistill.traces.labels`) paired with the grader's verdicts of the same memo.

The one reading behind ``judge-agreement --human`` and the report (sensitivity and specificity
with Wilson intervals and Cohen's kappa per grader and criterion type,
:func:`human_agreement_rows`) and the report's corrected pass rates, so all count the same
pairs:

- A **pair** is one reviewer's latest label of one criterion of an episode's *current* memo
  (:func:`~rlmdistill.traces.labels.latest_labels` over the labels of that memo) and the
  grader's latest verdict of that criterion for the same memo. Two reviewers of one criterion
  give two pairs. A label of an older memo (stale) never hides a current one; a (reviewer,
  criterion) with stale labels only is not paired, only counted (``n_stale``); so is a label
  whose criterion the grader has no verdict of for the current memo (``n_unmatched``).
- The person's label is the truth: PASS or FAIL. A person's UNGRADABLE is counted apart
  (``n_person_ungradable``) and left out. The grader's verdict counts as passed only when it is
  PASS: a grader's UNGRADABLE is not a pass, as in every pass rate
  (:func:`rlmdistill.traces.scores.pass_rates`).
- The grader's raw pass rate ``n_pass / n`` is over every criterion it graded for the
  current memos of the run (pooled over criteria, not averaged per episode).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from rlmdistill.stats import Estimate, cohen_kappa, wilson_interval
from rlmdistill.traces.labels import Label, is_stale, latest_labels, memo_hash, read_labels
from rlmdistill.traces.runs import load_summaries, load_verdicts
from rlmdistill.traces.schema import EpisodeSummary, Verdict

__all__ = [
    "Calibration",
    "CalibrationPair",
    "HumanAgreementRow",
    "calibration_pairs",
    "human_agreement_rows",
    "run_calibration",
]

VerdictText = Literal["PASS", "FAIL", "UNGRADABLE"]


class CalibrationPair(NamedTuple):
    """A person's label and a grader's verdict of one criterion of one current memo."""

    episode_id: str
    criterion_id: str
    criterion_type: str
    """The verdict's ``criterion_type`` (``"unknown"`` when the grader recorded none)."""
    reviewer: str
    grader: VerdictText
    person: VerdictText


class HumanAgreementRow(BaseModel):
    """One grader against people on the pairs of one criterion type (or ``all``)."""

    model_config = ConfigDict(extra="forbid")

    grader: str
    criterion_type: str
    n: int
    """Pairs with a person's PASS or FAIL."""
    n_person_ungradable: int
    tp: int
    """Person PASS, grader PASS."""
    fn: int
    """Person PASS, grader FAIL or UNGRADABLE."""
    tn: int
    """Person FAIL, grader FAIL or UNGRADABLE."""
    fp: int
    """Person FAIL, grader PASS."""
    sensitivity: Estimate
    """``tp / (tp + fn)`` with its Wilson interval (``value=None``: no person-PASS pair)."""
    specificity: Estimate
    """``tn / (tn + fp)`` with its Wilson interval (``value=None``: no person-FAIL pair)."""
    kappa: float | None
    kappa_undefined: str | None = None


def _agreement_row(grader: str, ctype: str, pairs: Sequence[CalibrationPair]) -> HumanAgreementRow:
    people = [p for p in pairs if p.person != "UNGRADABLE"]
    tp = sum(p.person == "PASS" and p.grader == "PASS" for p in people)
    fn = sum(p.person == "PASS" and p.grader != "PASS" for p in people)
    fp = sum(p.person == "FAIL" and p.grader == "PASS" for p in people)
    tn = len(people) - tp - fn - fp
    kappa = cohen_kappa(np.array([[tp, fp], [fn, tn]]))  # rows: grader pass / not pass
    return HumanAgreementRow(
        grader=grader,
        criterion_type=ctype,
        n=len(people),
        n_person_ungradable=len(pairs) - len(people),
        tp=tp,
        fn=fn,
        tn=tn,
        fp=fp,
        sensitivity=wilson_interval(tp, tp + fn),
        specificity=wilson_interval(tn, tn + fp),
        kappa=kappa.value,
        kappa_undefined=kappa.reason,
    )


def human_agreement_rows(grader: str, pairs: Sequence[CalibrationPair]) -> list[HumanAgreementRow]:
    """One :class:`HumanAgreementRow` per criterion type of ``pairs`` (sorted), then ``all``."""
    types = sorted({p.criterion_type for p in pairs})
    rows = [_agreement_row(grader, t, [p for p in pairs if p.criterion_type == t]) for t in types]
    return [*rows, _agreement_row(grader, "all", pairs)]


class Calibration(BaseModel):
    """Counts of one grader on one run against people's labels (pairing in the module
    docstring); what :func:`rlmdistill.stats.corrected_pass_rate` takes."""

    model_config = ConfigDict(extra="forbid")

    grader: str
    n_pass: int
    """Criteria of current memos the grader passed."""
    n: int
    """Criteria of current memos the grader graded."""
    true_pass: int
    """Of the ``m1`` person-PASS pairs, those the grader passed."""
    m1: int
    true_fail: int
    """Of the ``m0`` person-FAIL pairs, those the grader did not pass."""
    m0: int
    n_person_ungradable: int = 0
    n_stale: int = 0
    """(reviewer, criterion) labelled on an older memo only (left out)."""
    n_unmatched: int = 0
    """Criterion labels of the current memo without a verdict of this grader (left out)."""
    reviewers: list[str]
    agreement: list[HumanAgreementRow] = Field(default_factory=list)
    """The grader against people per criterion type, then ``all``
    (:func:`human_agreement_rows`): what ``judge-agreement --human`` prints."""


def _current_verdicts(
    verdicts: Sequence[Verdict], summaries: dict[str, EpisodeSummary]
) -> dict[tuple[str, str], Verdict]:
    out: dict[tuple[str, str], Verdict] = {}
    for v in verdicts:
        s = summaries.get(v.episode_id)
        if s is not None and v.memo_sha256 == s.memo_sha256:
            out[(v.episode_id, v.criterion_id)] = v  # the latest in file order wins
    return out


class _Pairs(NamedTuple):
    pairs: list[CalibrationPair]
    n_stale: int
    n_unmatched: int
    current: dict[tuple[str, str], Verdict]


def _pairs(
    run_dir: Path, grader: str, labels: Sequence[Label] | None, summaries: list[EpisodeSummary]
) -> _Pairs:
    by_id = {s.episode_id: s for s in summaries}
    current = _current_verdicts(load_verdicts(run_dir, grader), by_id)
    labels = read_labels(run_dir) if labels is None else labels
    pairs: list[CalibrationPair] = []
    fresh: list[Label] = []
    stale_keys: set[tuple[str, str, str, str | None]] = set()
    for label in labels:
        if label.target != "criterion" or label.criterion_id is None:
            continue
        s = by_id.get(label.episode_id)
        if s is None or is_stale(label, memo_hash(s.memo)):
            stale_keys.add(label.key)
        else:
            fresh.append(label)
    latest = latest_labels(fresh)
    stale = len(stale_keys - latest.keys())
    unmatched = 0
    for label in latest.values():
        assert label.criterion_id is not None
        v = current.get((label.episode_id, label.criterion_id))
        if v is None:
            unmatched += 1
            continue
        pairs.append(
            CalibrationPair(
                label.episode_id,
                label.criterion_id,
                v.criterion_type or "unknown",
                label.reviewer,
                v.verdict,
                label.verdict,  # type: ignore[arg-type]  # a criterion label's verdict
            )
        )
    return _Pairs(pairs, stale, unmatched, current)


def calibration_pairs(
    run_dir: Path, grader: str, *, labels: Sequence[Label] | None = None
) -> list[CalibrationPair]:
    """Every (person label, grader verdict) pair of one grader on one run (module docstring),
    in label order. ``labels`` defaults to the run's ``labels.jsonl``. Raises ``NotARunError``
    when ``run_dir`` has no ``run.json``; an unknown grader has no verdicts, so no pairs."""
    return _pairs(Path(run_dir), grader, labels, load_summaries(run_dir)).pairs


def run_calibration(
    run_dir: Path, grader: str, *, labels: Sequence[Label] | None = None
) -> Calibration:
    """:class:`Calibration` of one grader on one run (module docstring)."""
    run_dir = Path(run_dir)
    got = _pairs(run_dir, grader, labels, load_summaries(run_dir))
    people = [p for p in got.pairs if p.person != "UNGRADABLE"]
    return Calibration(
        grader=grader,
        n_pass=sum(v.verdict == "PASS" for v in got.current.values()),
        n=len(got.current),
        true_pass=sum(p.person == "PASS" and p.grader == "PASS" for p in people),
        m1=sum(p.person == "PASS" for p in people),
        true_fail=sum(p.person == "FAIL" and p.grader != "PASS" for p in people),
        m0=sum(p.person == "FAIL" for p in people),
        n_person_ungradable=len(got.pairs) - len(people),
        n_stale=got.n_stale,
        n_unmatched=got.n_unmatched,
        reviewers=sorted({p.reviewer for p in got.pairs}),
        agreement=human_agreement_rows(grader, got.pairs),
    )
