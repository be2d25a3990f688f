"""Credit for sub-calls: which of an episode's sub-calls failed, reached the memo, and
supported a criterion the memo passed (``rlmdistill filter --target sub``).

Computed once per episode from its trajectory's :class:`~rlmdistill.traces.schema.SubCallRecord`
lines, its memo, one grader's verdicts of that memo and the room's rubric (``task.json``).
Per sub-call (method :data:`METHOD`):

- ``error``: the record's ``error`` is set (the call failed after its retries; the harness
  handed the root an error text instead of an answer).
- ``used_in_memo``: the answer's text reached the memo, word for word. Texts are compared as
  runs of :data:`GRAM_WORDS` consecutive normalised words
  (:func:`rlmdistill.rooms.text.words`, the words of the reference grader's quote rule and of
  its copy guard, ``judge/copying.py``); the answer is used when at least
  :data:`USED_SHARE` of its distinct runs occur in the memo. An answer shorter than one run
  (fewer than 8 words) is used when all its words occur in the memo as one run of words.
  The threshold is measured on the 92 episodes of the room-scaling workspace (see
  :data:`USED_SHARE` and ``docs/filter.md``).
- ``supports_pass``: the answer reached a memo *finding* that cites a document of a criterion
  the grader passed. Findings: the memo is cut into list items (bullets, numbered items) and
  paragraphs, each read with the markdown headings it sits under (a simpler form of the
  reference grader's passages and findings, ``judge/reference.py``). A finding cites a
  document as the reference grader does (:func:`rlmdistill.rooms.text.citation_regex`: id,
  file name or stem). A criterion's documents are ``evidence.documents`` (else ``sources``)
  of the rubric, as the reference grader ties a criterion to a document. The answer reached a
  finding when one of the answer's runs occurs in it (at least one 8-word run: the reference
  grader's shortest quote), and the answer is ``used_in_memo``. ``None`` when the episode has
  no verdicts of its current memo (not graded).

The rule only sees text: an answer that the root rewrote in its own words does not count as
used, and an answer that quotes a contract clause the memo also quotes from elsewhere does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlmdistill.rooms.task import Criterion, Task
from rlmdistill.rooms.text import ascii_fold, citation_regex, words
from rlmdistill.traces.artefacts import ArtefactError
from rlmdistill.traces.schema import SubCallRecord, Verdict
from rlmdistill.traces.store import read_jsonl

__all__ = [
    "GRAM_WORDS",
    "METHOD",
    "SUB_DECISIONS",
    "USED_SHARE",
    "CreditParts",
    "Finding",
    "SubCallCredit",
    "SubCallDecision",
    "credit_parts",
    "criterion_documents",
    "memo_findings",
    "passed_documents",
    "read_sub_decisions",
    "sub_call_credit",
    "word_runs",
]

METHOD = "sub-credit-v1"
"""Version of the credit rules above (recorded with a sub export)."""
GRAM_WORDS = 8
"""Words in one run (the reference grader's shortest quote, ``MIN_QUOTE_WORDS``, and the run
length of its copy guard)."""
USED_SHARE = 0.5
"""Share of an answer's distinct runs found in the memo from which the answer is used.

Measured on the room-scaling workspace (``docs/results/room_scaling/workspace.tar.xz``: 92
episodes, 908 sub-calls, 2026-12-05; ``benchmarks/sub_credit_shares.py``): of the 663
answers of 8+ words, 642 were in their own episode's memo whole (share 1.000) and 21 not at
all (0.000: 18 in an episode without a memo, 3 that the memo left out): no answer fell in
between, so any threshold in (0, 1] separates them there; 0.5 (a majority of the answer's
runs, the share of the copy guard in ``judge/copying.py``) sits in the middle of that gap.
Against the memos of *other* episodes of the same room (1,540 pairs: answers those memos
never received) shares spread over the whole range: 466 at 0, 432 strictly between (median
0.571; 238 of them at 0.5 or more) and 642 at 1, since the same sub model often gave the
same or a near-same answer to the same prompt there. So the rule measures the answer's
*text* in the memo, not where the memo got it: a near-identical answer from another call
counts too."""

_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+\S|^\s*\*\*[^*].*\*\*:?\s*$")
_ITEM = re.compile(r"^(\s*)(?:[-*+]|\d{1,3}[.)])\s+")
_INDENT = re.compile(r"^(?:\s{2,}|\t)\S")

Gram = tuple[str, ...]


def word_runs(text: str, n: int = GRAM_WORDS) -> frozenset[Gram]:
    """The distinct runs of ``n`` consecutive normalised words of ``text``
    (:func:`rlmdistill.rooms.text.words`); empty for a text of fewer than ``n`` words."""
    return _runs(words(text), n)


def _runs(tokens: Sequence[str], n: int = GRAM_WORDS) -> frozenset[Gram]:
    """The distinct runs of ``n`` consecutive ``tokens`` (``zip`` of ``n`` shifted copies:
    the same tuples as slicing at each position; written out for the default ``n`` = 8,
    ~2.5x faster than a tuple sliced per position on a 15-word answer)."""
    t = tokens
    if n == 8:
        return frozenset(zip(t, t[1:], t[2:], t[3:], t[4:], t[5:], t[6:], t[7:], strict=False))
    return frozenset(zip(*[t[i:] for i in range(n)], strict=False))


def _joined(tokens: Sequence[str]) -> str:
    """``tokens`` joined by single spaces with a space at both ends: a word sequence ``a``
    occurs contiguously in ``b`` exactly when ``_joined(a)`` is a substring of
    ``_joined(b)`` (words hold no spaces)."""
    return f" {' '.join(tokens)} "


@dataclass(frozen=True)
class Finding:
    """One memo finding: a list item or paragraph (``text``) and the headings above it
    (``context``), both as written."""

    text: str
    context: str

    def cites(self, document_id: str) -> bool:
        """The finding or its headings name ``document_id`` (id, file name or stem;
        :func:`rlmdistill.rooms.text.citation_regex`)."""
        folded = ascii_fold(self.context + "\n" + self.text).lower()
        return citation_regex(document_id).search(folded) is not None


def memo_findings(memo: str) -> list[Finding]:
    """Cut ``memo`` into findings: a top-level list item (``-``, ``*``, ``+``, ``1.``) or a
    paragraph (after a blank line) starts one; wrapped and indented lines, indented
    sub-items and an indented paragraph after a blank line continue it. Markdown headings
    (``#`` .. ``######`` or a whole-line ``**bold**``) are never findings; each finding keeps
    the headings it sits under. Order as in the memo; an empty memo has none."""
    out: list[Finding] = []
    stack: list[tuple[int, str]] = []
    cur: list[str] = []
    gap = False

    def flush() -> None:
        if cur:
            out.append(Finding("\n".join(cur), "\n".join(h for _, h in stack)))
            cur.clear()

    for line in memo.splitlines():
        m = _HEADING.match(line)
        if m:
            flush()
            level = len(m.group(1)) if m.group(1) else 7
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, line.strip()))
            gap = False
            continue
        if not line.strip():
            gap = bool(cur)
            continue
        item = _ITEM.match(line)
        top_item = item is not None and len(item.group(1)) < 2
        continued = cur and not top_item and (not gap or _INDENT.match(line) is not None)
        if not continued:
            flush()
        cur.append(line)
        gap = False
    flush()
    return out


def criterion_documents(criterion: Criterion) -> list[str]:
    """The documents a criterion is about: its ``evidence.documents``, else its ``sources``
    (LAB), else none."""
    if criterion.evidence is not None and criterion.evidence.documents:
        return list(criterion.evidence.documents)
    return list(criterion.sources or [])


def passed_documents(verdicts: Iterable[Verdict], task: Task) -> dict[str, list[str]]:
    """``{document id: [criterion ids]}`` of the criteria of ``task`` that ``verdicts`` pass,
    per document they are about (:func:`criterion_documents`). Verdicts of criteria the task
    does not have are ignored (an older rubric)."""
    by_id = {c.id: c for c in task.criteria}
    out: dict[str, list[str]] = {}
    for v in verdicts:
        c = by_id.get(v.criterion_id)
        if v.verdict != "PASS" or c is None:
            continue
        for doc in criterion_documents(c):
            ids = out.setdefault(doc, [])
            if c.id not in ids:
                ids.append(c.id)
    return out


@dataclass(frozen=True)
class SubCallCredit:
    """Credit of one sub-call (see the module docstring for each rule)."""

    call_id: int
    depth: int
    """1: made by the root's code; 2: made by a subagent's code."""
    subagent: bool
    """The call ran a subagent (a multi-turn REPL) rather than one completion."""
    error: bool
    answer_runs: int
    """Distinct :data:`GRAM_WORDS`-word runs of the answer (0: no answer, or a short one)."""
    runs_in_memo: int
    """How many of those occur in the memo."""
    used_in_memo: bool
    supports_pass: bool | None
    """``None``: no verdicts of the current memo."""
    supported_criteria: tuple[str, ...] = ()
    """Criteria (ids) whose document a finding holding the answer cites, in rubric order."""

    @property
    def memo_share(self) -> float:
        """``runs_in_memo / answer_runs`` in [0, 1]; for a short answer 1.0 when used."""
        if self.answer_runs:
            return self.runs_in_memo / self.answer_runs
        return 1.0 if self.used_in_memo else 0.0


def sub_call_credit(
    sub_calls: Sequence[SubCallRecord],
    memo: str | None,
    verdicts: Sequence[Verdict] | None,
    task: Task | None,
) -> list[SubCallCredit]:
    """Credit of every sub-call of one episode, in ``sub_calls`` order.

    ``memo``: the episode's memo (``None``/empty: nothing is used). ``verdicts``: one
    grader's verdicts of this memo (the caller picks the current memo's,
    :func:`rlmdistill.traces.scores.current_memo_verdicts`); ``None`` or empty, or no
    ``task``: ``supports_pass`` is ``None``. Never raises on text content.
    """
    graded = bool(verdicts) and task is not None
    return [
        SubCallCredit(
            call_id=rec.call_id,
            depth=rec.depth,
            subagent=rec.subagent,
            error=rec.error is not None,
            answer_runs=n_runs,
            runs_in_memo=n_hit,
            used_in_memo=used,
            supports_pass=bool(supported) if graded else None,
            supported_criteria=supported,
        )
        for rec, (n_runs, n_hit, used, supported) in zip(
            sub_calls, credit_parts(sub_calls, memo, verdicts, task), strict=True
        )
    ]


class CreditParts(NamedTuple):
    """What :func:`credit_parts` gives per sub-call: the fields of :class:`SubCallCredit`
    that its rules compute (a tuple: made for every sub-call of a run by the report)."""

    answer_runs: int
    runs_in_memo: int
    used_in_memo: bool
    supported_criteria: tuple[str, ...]


def credit_parts(
    sub_calls: Sequence[SubCallRecord],
    memo: str | None,
    verdicts: Sequence[Verdict] | None,
    task: Task | None,
    answer_words: Sequence[Sequence[str] | None] | None = None,
) -> list[CreditParts]:
    """The rules of :func:`sub_call_credit` without building its objects (the report reads
    them for every sub-call of a run): per sub-call, in order, its :class:`CreditParts`.
    Same arguments, and
    ``answer_words``: per sub-call, its answer's :func:`~rlmdistill.rooms.text.words` when
    the caller has them already (``None`` for a call: computed here). Never raises on text
    content.

    Raises:
        ValueError: ``answer_words`` not one entry per sub-call.
    """
    if answer_words is not None and len(answer_words) != len(sub_calls):
        raise ValueError(f"{len(answer_words)} answer word lists for {len(sub_calls)} sub-calls")
    memo = memo or ""
    memo_words = words(memo)
    memo_runs = _runs(memo_words)
    memo_joined = _joined(memo_words)
    graded = bool(verdicts) and task is not None
    passed = passed_documents(verdicts or (), task) if graded and task is not None else {}
    findings = memo_findings(memo) if passed else []
    finding_words = [words(f.text) for f in findings]
    finding_runs = [_runs(w) for w in finding_words]
    finding_joined = [_joined(w) for w in finding_words]
    rubric_order = {c.id: i for i, c in enumerate(task.criteria)} if task is not None else {}
    out: list[CreditParts] = []
    for i, rec in enumerate(sub_calls):
        answer = rec.response if rec.error is None else None
        given = answer_words[i] if answer_words is not None and answer else None
        aw = given if given is not None else words(answer) if answer else []
        runs = _runs(aw)
        if runs:
            # the whole answer in the memo: each of its runs is a run of the memo
            n_hit = len(runs) if _joined(aw) in memo_joined else len(runs & memo_runs)
            used = n_hit / len(runs) >= USED_SHARE
        else:  # shorter than one run: used when its words occur in the memo as one run
            n_hit = 0
            used = bool(aw) and bool(memo_words) and _joined(aw) in memo_joined
        supported: set[str] = set()
        if used and passed:
            for f, fr, fj in zip(findings, finding_runs, finding_joined, strict=True):
                reached = not runs.isdisjoint(fr) if runs else _joined(aw) in fj
                if not reached:
                    continue
                for doc, crits in passed.items():
                    if f.cites(doc):
                        supported.update(crits)
        order = tuple(sorted(supported, key=rubric_order.__getitem__))
        out.append(CreditParts(len(runs), n_hit, used, order))
    return out


SUB_DECISIONS = "sub_decisions.jsonl"
"""File name, in a dataset folder, of the sub-call decisions of ``rlmdistill filter --target
sub`` (one :class:`SubCallDecision` per sub-call of a kept episode), which the sub export
reads."""


class SubCallDecision(BaseModel):
    """One line of ``sub_decisions.jsonl``: whether one sub-call of an episode the episode
    rules kept becomes a training example of the sub model, with its credit
    (:class:`SubCallCredit`) as computed at filter time."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    run_dir: str
    episode_id: str
    call_id: int
    call_depth: int
    """1: made by the root's code; 2: made by a subagent's code."""
    subagent: bool
    """The call ran a subagent: its example is the subagent's whole trajectory."""
    kept: bool
    reason: str | None = None
    """Why not kept: ``where`` (an expression is false or reads a ``None`` field)."""
    detail: str = ""
    error: bool
    used_in_memo: bool
    memo_share: float
    supports_pass: bool | None
    supported_criteria: list[str] = Field(default_factory=list)
    method: str = METHOD
    """Credit rules (:data:`METHOD`)."""


def read_sub_decisions(path: Path) -> list[SubCallDecision]:
    """Every :class:`SubCallDecision` of a ``sub_decisions.jsonl`` in file order (a torn last
    line is ignored).

    Raises:
        ArtefactError: a line that is not a sub-call decision (names the file and line).
        FileNotFoundError: no such file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no sub-call decisions (rlmdistill filter --target sub)")
    out = []
    for i, raw in enumerate(read_jsonl(path).records, start=1):
        try:
            out.append(SubCallDecision.model_validate(raw))
        except ValidationError as exc:
            raise ArtefactError(f"{path}: line {i}: not a sub-call decision: {exc}") from exc
    return out
