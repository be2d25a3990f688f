"""The Review page's queue: which episodes of a run a person labels, and in which order.

Four samplers (:data:`SAMPLERS`), all deterministic for a given seed:

- ``random``: a seeded permutation of the run's episodes with a memo. Labels taken in this
  order from the front of the queue are a simple random sample of episodes (each criterion of
  a sampled episode is labelled: a cluster sample), the unbiased calibration sample the
  corrected pass rate needs.
- ``stratified``: the episodes whose current memo has at least one PASS verdict of the grader
  (the PASS stratum) and those with none (the FAIL stratum), each shuffled with the seed, taken
  in turn (PASS first; when one stratum runs out the other goes on). On a run where few memos
  pass, a random sample labels almost no grader PASS; this one labels both.
- ``disagreement``: the episodes whose current memo two graders (two files
  ``verdicts/<grader>.jsonl``) graded differently on at least one criterion, most disagreeing
  criteria first (ties in seeded order). Episodes where they agree are not queued.
- ``informative``: the next episode is the one with the most unlabelled criteria in the grader
  verdict class (passed or not) whose next label is expected to narrow the interval of the
  Rogan-Gladen corrected pass rate most (:func:`informative_class`, with
  :func:`rlmdistill.stats.corrected_pass_rate`). The episodes this reviewer labelled come
  first, in the order of their first label, so the page's position in the queue stays on the
  episode being labelled while the rest is re-ranked after each label.

Only the random queue gives the sample the corrected pass rate assumes (labelled criteria
random given their true class); the other three choose episodes by the graders' verdicts, so
their labels move the estimated sensitivity and specificity (they are for finding errors).

Only episodes with a memo are queued (without one there is nothing to grade). The grader's
verdicts are those of the episode's *current* memo, the latest per criterion
(:func:`~rlmdistill.traces.scores.current_memo_verdicts`).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal, NamedTuple

from rlmdistill.dashboard.runview import RunView
from rlmdistill.stats import corrected_pass_rate
from rlmdistill.traces.columns import VerdictRow
from rlmdistill.traces.scores import current_memo_verdicts

__all__ = [
    "SAMPLERS",
    "CalibrationCounts",
    "QueueItem",
    "Sampler",
    "calibration_counts",
    "expected_widths",
    "informative_class",
    "queue_items",
    "review_queue",
]

Sampler = Literal["random", "stratified", "disagreement", "informative"]

SAMPLERS: dict[Sampler, str] = {
    "random": "Random (unbiased calibration sample)",
    "stratified": "Stratified by grader verdict (PASS and FAIL both labelled)",
    "disagreement": "Disagreement between two graders",
    "informative": "Most informative (narrows the corrected pass rate's interval most)",
}
"""Sampler -> how the page names it."""

GradedClass = Literal["PASS", "FAIL"]


class QueueItem(NamedTuple):
    """One episode a reviewer may label, with what the samplers read of it."""

    episode_id: str
    verdicts: dict[str, str]
    """Criterion id -> the grader's verdict (``PASS``/``FAIL``/``UNGRADABLE``) of the current
    memo; ``{}`` when the grader did not grade it."""
    other: dict[str, str]
    """The same for the second grader (``{}`` without one)."""


def _current(rows: Iterable[VerdictRow], memo_sha: str | None) -> dict[str, str]:
    """Criterion id -> verdict of the current memo, the latest line per criterion."""
    return {v.criterion_id: v.verdict for v in current_memo_verdicts(rows, memo_sha)}


def queue_items(view: RunView, grader: str | None, other: str | None = None) -> list[QueueItem]:
    """The run's episodes with a memo, in ``episodes.jsonl`` order, with ``grader``'s and
    ``other``'s verdicts of their current memo (either ``None``: no verdicts)."""
    mine = view.verdict_rows(grader) if grader else {}
    theirs = view.verdict_rows(other) if other else {}
    return [
        QueueItem(
            s.episode_id,
            _current(mine.get(s.episode_id, []), s.memo_sha256),
            _current(theirs.get(s.episode_id, []), s.memo_sha256),
        )
        for s in view.summaries().values()
        if s.memo is not None
    ]


class CalibrationCounts(NamedTuple):
    """Labelled criteria against the grader's verdicts, and the grader's raw counts over the
    run, counted as :mod:`rlmdistill.traces.calibration` counts them: the grader *passed* a
    criterion when its verdict is PASS (its UNGRADABLE is not a pass); a person's UNGRADABLE
    is left out."""

    pass_pass: int
    """Person PASS, grader passed (true positives of the grader)."""
    pass_fail: int
    """Person PASS, grader did not pass."""
    fail_fail: int
    """Person FAIL, grader did not pass (true negatives)."""
    fail_pass: int
    """Person FAIL, grader passed."""
    n_pass: int
    """Criteria of the run's current memos the grader passed."""
    n: int
    """Criteria of the run's current memos the grader graded."""


def _graded(verdict: str) -> GradedClass:
    return "PASS" if verdict == "PASS" else "FAIL"


def calibration_counts(
    items: Sequence[QueueItem], human: Mapping[tuple[str, str], str]
) -> CalibrationCounts:
    """:class:`CalibrationCounts` of ``items`` (their grader verdicts) and ``human``:
    ``(episode_id, criterion_id) -> person's verdict`` (the latest label of the current memo)."""
    cells = {("PASS", "PASS"): 0, ("PASS", "FAIL"): 0, ("FAIL", "FAIL"): 0, ("FAIL", "PASS"): 0}
    n_pass = n = 0
    for item in items:
        for cid, g in item.verdicts.items():
            n += 1
            n_pass += g == "PASS"
            h = human.get((item.episode_id, cid))
            if h in ("PASS", "FAIL"):
                cells[(h, _graded(g))] += 1
    return CalibrationCounts(
        cells[("PASS", "PASS")],
        cells[("PASS", "FAIL")],
        cells[("FAIL", "FAIL")],
        cells[("FAIL", "PASS")],
        n_pass,
        n,
    )


def _width(c: CalibrationCounts) -> tuple[float, float, float] | None:
    """``(theta, q1, interval width)`` of the corrected pass rate at counts ``c``
    (:func:`rlmdistill.stats.corrected_pass_rate`); ``None`` when it has no interval."""
    r = corrected_pass_rate(
        c.n_pass,
        c.n,
        true_pass=c.pass_pass,
        m1=c.pass_pass + c.pass_fail,
        true_fail=c.fail_fail,
        m0=c.fail_fail + c.fail_pass,
    )
    e = r.corrected
    if e.value is None or e.low is None or e.high is None or r.sensitivity is None:
        return None
    return e.value, r.sensitivity, e.high - e.low


def expected_widths(c: CalibrationCounts) -> tuple[float, float] | None:
    """``(after a criterion the grader passed, after one it did not pass)``: the expected
    width of the corrected pass rate's interval (:func:`rlmdistill.stats.corrected_pass_rate`,
    as a share) after one more label, over the person's two possible verdicts (probabilities
    in :func:`informative_class`); ``None`` when the interval is undefined now or after either
    verdict."""
    now = _width(c)
    if now is None or c.n == 0:
        return None
    theta, q1, _ = now
    p = min(max(c.n_pass / c.n, 1e-6), 1 - 1e-6)
    ppv = min(theta * q1 / p, 1.0)  # P(person PASS | grader passed)
    pfor = min(theta * (1 - q1) / (1 - p), 1.0)  # P(person PASS | grader did not pass)
    after = [
        _width(c._replace(pass_pass=c.pass_pass + 1)),  # grader passed, person PASS
        _width(c._replace(fail_pass=c.fail_pass + 1)),  # grader passed, person FAIL
        _width(c._replace(pass_fail=c.pass_fail + 1)),  # grader did not, person PASS
        _width(c._replace(fail_fail=c.fail_fail + 1)),  # grader did not, person FAIL
    ]
    if any(w is None for w in after):
        return None
    pp, pf, fp, ff = (w[2] for w in after if w is not None)
    return ppv * pp + (1 - ppv) * pf, pfor * fp + (1 - pfor) * ff


def informative_class(counts: CalibrationCounts) -> GradedClass:
    """The grader verdict class (passed: ``PASS``; not passed: ``FAIL``) whose next labelled
    criterion is expected to narrow the corrected pass rate's interval most.

    While the corrected rate has an interval (:func:`rlmdistill.stats.corrected_pass_rate`:
    at least 3 labels of each person class and ``q0 + q1 > 1``), one more label of a
    criterion the grader passed is a person's PASS with probability ``theta q1 / p``, one it
    did not pass with ``theta (1 - q1) / (1 - p)`` (Bayes, with ``theta`` the corrected rate,
    ``q1`` the sensitivity and ``p`` the raw pass rate); for each class the interval is
    recomputed for both outcomes, and the class with the smaller expected width wins (PASS on
    ties).

    Before that (too few labels, or a grader no better than chance), the delta method's part
    of the variance that the labels carry, ``(theta^2 q1 (1 - q1) / n1 + (1 - theta)^2 q0
    (1 - q0) / n0) / J^2`` with ``J = q0 + q1 - 1`` (arXiv 2511.21140 allocates labels
    between the two classes by these two terms), is used instead: one more person-PASS label
    removes ``d1 = theta^2 q1 (1 - q1) (1/n1 - 1/(n1 + 1))``, a person-FAIL label ``d0``
    likewise, and the class with the larger expected decrease wins. Its estimates use one
    pseudo-label per cell (``q1 = (TP + 1) / (n1 + 2)``, ``n + 1`` for ``n``), so the rule is
    defined before any label; ``theta`` is clipped to [0, 1] and is 0.5 when ``J <= 0``.
    """
    widths = expected_widths(counts)
    if widths is not None:
        return "PASS" if widths[0] <= widths[1] else "FAIL"
    n1 = counts.pass_pass + counts.pass_fail
    n0 = counts.fail_fail + counts.fail_pass
    q1 = (counts.pass_pass + 1) / (n1 + 2)
    q0 = (counts.fail_fail + 1) / (n0 + 2)
    p = min(max(counts.n_pass / counts.n if counts.n else 0.5, 1e-6), 1 - 1e-6)
    j = q0 + q1 - 1
    theta = min(max((p + q0 - 1) / j, 0.0), 1.0) if j > 0 else 0.5
    m1, m0 = n1 + 1, n0 + 1
    d1 = theta**2 * q1 * (1 - q1) * (1 / m1 - 1 / (m1 + 1))
    d0 = (1 - theta) ** 2 * q0 * (1 - q0) * (1 / m0 - 1 / (m0 + 1))
    ppv = min(theta * q1 / p, 1.0)  # P(person PASS | grader passed)
    pfor = min(theta * (1 - q1) / (1 - p), 1.0)  # P(person PASS | grader did not pass)
    gain_pass = ppv * d1 + (1 - ppv) * d0
    gain_fail = pfor * d1 + (1 - pfor) * d0
    return "PASS" if gain_pass >= gain_fail else "FAIL"


def _shuffled(ids: list[str], rng: random.Random) -> list[str]:
    out = list(ids)
    rng.shuffle(out)
    return out


def review_queue(
    items: Sequence[QueueItem],
    sampler: Sampler,
    *,
    seed: int = 0,
    human: Mapping[tuple[str, str], str] | None = None,
    reviewed: Sequence[str] = (),
) -> list[str]:
    """Episode ids of ``items`` in the order ``sampler`` queues them (see the module).

    ``human`` (``(episode_id, criterion_id) -> verdict``, every reviewer's latest label of
    the current memo) and ``reviewed`` (episode ids this reviewer labelled, in the order of
    their first label) are read by ``informative`` only. The same arguments give the same
    queue. Raises ``ValueError`` for an unknown sampler.
    """
    rng = random.Random(seed)
    ids = [i.episode_id for i in items]
    if sampler == "random":
        return _shuffled(ids, rng)
    if sampler == "stratified":
        passed = _shuffled([i.episode_id for i in items if "PASS" in i.verdicts.values()], rng)
        failed = _shuffled([i.episode_id for i in items if "PASS" not in i.verdicts.values()], rng)
        out: list[str] = []
        for k in range(max(len(passed), len(failed))):
            out += passed[k : k + 1] + failed[k : k + 1]
        return out
    if sampler == "disagreement":
        order = {e: k for k, e in enumerate(_shuffled(ids, rng))}
        differ = {
            i.episode_id: sum(
                1 for cid, v in i.verdicts.items() if cid in i.other and i.other[cid] != v
            )
            for i in items
        }
        return sorted((e for e in ids if differ[e] > 0), key=lambda e: (-differ[e], order[e]))
    if sampler == "informative":
        human = human or {}
        cls = informative_class(calibration_counts(items, human))
        order = {e: k for k, e in enumerate(_shuffled(ids, rng))}
        known = set(ids)
        done = [e for e in dict.fromkeys(reviewed) if e in known]
        gain = {
            i.episode_id: sum(
                1
                for cid, v in i.verdicts.items()
                if _graded(v) == cls and (i.episode_id, cid) not in human
            )
            for i in items
        }
        rest = sorted((e for e in ids if e not in set(done)), key=lambda e: (-gain[e], order[e]))
        return done + rest
    raise ValueError(f"unknown sampler {sampler!r}; choose one of {', '.join(SAMPLERS)}")
