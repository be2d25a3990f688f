"""A labelled evaluation set for the reference grader, built from CUAD's lawyer labels.

For every rubric criterion of a CUAD room (one positive M&A label: document x category) it
writes memos whose right verdict is known, each a short due-diligence memo with a heading
that cites the document and one finding per bullet:

=====================  ========  =============================================================
kind                   expected  the finding that names the criterion's category ...
=====================  ========  =============================================================
``gold_quote``         PASS      quotes the gold clause (its first 30 words, see
                                 :func:`quote_text`)
``paraphrase``         PASS      restates the gold clause: its content words and numbers in
                                 order, each once, in groups of 4 joined by "and also" (so it
                                 quotes no 8-word run; :func:`paraphrase_text`)
``unlabelled``         FAIL      quotes a random 30-word passage of the same document that
                                 overlaps no labelled clause of any CUAD category
``unlabelled_nearest`` FAIL      the same, the passage sharing most content words with the
                                 gold clause (the hardest such decoy)
``other_clause``       FAIL      quotes a clause of the same document labelled under another
                                 category, overlapping no gold clause of this one
``neighbour``          FAIL      quotes an unlabelled passage, while the next bullet, which
                                 names another category, quotes the gold clause
=====================  ========  =============================================================

"Overlaps no labelled clause": its character range in the whitespace-normalised document
meets no located part of a labelled span, and it shares no 6-word run with any labelled
span (which also covers the ~7% of spans not found verbatim). Passages start at a sentence
start and hold at least 12 content words. Every choice is seeded by (seed, contract,
category), so the set is the same on every machine.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict

from rlmdistill.judge.reference import MIN_QUOTE_WORDS, span_parts
from rlmdistill.rooms.room import DataRoom
from rlmdistill.rooms.task import Criterion
from rlmdistill.rooms.text import content_words, normalise_ws, words

__all__ = [
    "EXPECTED",
    "QUOTE_WORDS",
    "SHAPED_ON",
    "EvalCase",
    "EvalKind",
    "Split",
    "build_cases",
    "contract_split",
    "paraphrase_text",
    "quote_text",
]

EvalKind = Literal[
    "gold_quote", "paraphrase", "unlabelled", "unlabelled_nearest", "other_clause", "neighbour"
]
Split = Literal["tune", "heldout"]
EXPECTED: dict[str, Literal["PASS", "FAIL"]] = {
    "gold_quote": "PASS",
    "paraphrase": "PASS",
    "unlabelled": "FAIL",
    "unlabelled_nearest": "FAIL",
    "other_clause": "FAIL",
    "neighbour": "FAIL",
}
"""The right verdict of each kind of memo."""

QUOTE_WORDS = 30
"""Words of a clause or passage a memo quotes."""
OVERLAP_WORDS = 6
"""A passage sharing a run of this many words with a labelled span overlaps it."""
MIN_PASSAGE_CONTENT_WORDS = 12
"""Decoy passages hold at least this many content words (no signature blocks or tables)."""
METADATA_CATEGORIES = frozenset({"Document Name", "Parties", "Agreement Date", "Effective Date"})
"""Labelled "clauses" that are names and dates, not clauses: never quoted as decoys."""
SPLIT_SALT = "rlmdistill-judge-eval-v1"
SHAPED_ON: frozenset[str] = frozenset(
    (
        "ADIANUTRITION,INC_04_01_2005-EX-10.D2-RESELLER AGREEMENT.txt",
        "AgapeAtpCorp_20191202_10-KA_EX-10.1_11911128_EX-10.1_Supply Agreement.txt",
        "BNLFINANCIALCORP_03_30_2007-EX-10.8-OUTSOURCING AGREEMENT.txt",
        "DYNTEKINC_07_30_1999-EX-10-ONLINE HOSTING AGREEMENT.txt",
        "GSITECHNOLOGYINC_11_16_2009-EX-10.2-INTELLECTUAL PROPERTY AGREEMENT between SONY ELECTRONICS INC. and GSI TECHNOLOGY, INC..txt",
        "GridironBionutrientsInc_20171206_8-K_EX-10.1_10972555_EX-10.1_Endorsement Agreement.txt",
        "IVILLAGEINC_03_17_1999-EX-10.16-SPONSORSHIP AGREEMENT.txt",
        "InmodeLtd_20190729_F-1A_EX-10.9_11743243_EX-10.9_Manufacturing Agreement.txt",
        "InnerscopeHearingTechnologiesInc_20181109_8-K_EX-10.6_11419704_EX-10.6_Distributor Agreement.txt",
        "MERITLIFEINSURANCECO_06_19_2020-EX-10.(XIV)-MASTER SERVICES AGREEMENT.txt",
        "MJBIOTECH,INC_12_06_2018-EX-99.01-JOINT VENTURE AGREEMENT.txt",
        "OAKTREECAPITALGROUP,LLC_03_02_2020-EX-10.8-Services Agreement.txt",
        "SIBANNAC,INC_12_04_2017-EX-2.1-Strategic Alliance Agreement.txt",
        "SPARKLINGSPRINGWATERHOLDINGSLTD_07_03_2002-EX-10.13-SOFTWARE LICENSE AND MAINTENANCE AGREEMENT.txt",
        "SightLife Surgical, Inc. - STRATEGIC SALES _ MARKETING AGREEMENT.txt",
        "SimplicityEsportsGamingCompany_20181130_8-K_EX-10.1_11444071_EX-10.1_Franchise Agreement.txt",
        "SteelVaultCorp_20081224_10-K_EX-10.16_3074935_EX-10.16_Affiliate Agreement.txt",
    )
)
"""Contracts the reference grader's rules or its tests were shaped on, always ``"tune"``: the
16 contracts packaged in ``rooms/cuad_sample`` (every test grades memos of them, and two of
the grader's rules fix false passes found on the Agape ATP supply and MJ Biotech joint venture
agreements) and the Oaktree services agreement (a rule fixes a false pass on its term clause).
Held-out figures are measured on contracts outside this set only."""


class EvalCase(BaseModel):
    """One labelled memo of the evaluation set (a line of ``cases.jsonl``)."""

    model_config = ConfigDict(extra="forbid")

    case_id: str
    """``<criterion id>:<kind>[:<k>]``, unique within a room."""
    room: str
    """Room folder name."""
    document: str
    """Document id of the criterion."""
    contract: str
    """CUAD source text file name of the document."""
    criterion_id: str
    category: str
    kind: EvalKind
    expected: Literal["PASS", "FAIL"]
    memo: str
    note: str = ""
    """What was quoted when it is not the gold clause (e.g. ``"other clause: Insurance"``)."""


def contract_split(name: str) -> Split:
    """Fixed split of a CUAD contract by its source text file name: ``"tune"`` when it is in
    :data:`SHAPED_ON` or when the first 8 hex digits of ``sha256(SPLIT_SALT + ":" + name)``
    form an even number, else ``"heldout"`` (about half each; independent of which other
    contracts exist)."""
    if name in SHAPED_ON:
        return "tune"
    digest = hashlib.sha256(f"{SPLIT_SALT}:{name}".encode()).hexdigest()
    return "tune" if int(digest[:8], 16) % 2 == 0 else "heldout"


def quote_text(span: str, n_words: int = QUOTE_WORDS) -> str:
    """What a memo quotes of a labelled span: the first ``n_words`` words of its first part
    (parts split at ``<omitted>``) of at least :data:`MIN_QUOTE_WORDS` words, else of its
    longest part."""
    parts = [p.split() for p in span_parts(span)]
    if not parts:
        return ""
    part = next((p for p in parts if len(p) >= MIN_QUOTE_WORDS), max(parts, key=len))
    return " ".join(part[:n_words])


def paraphrase_text(span: str) -> str:
    """A restatement of ``span`` that keeps its distinctive words but quotes no 8-word run:
    its content words (:func:`~rlmdistill.rooms.text.content_words`) and numbers, in order,
    each once, in groups of 4 joined by ``"and also"``."""
    seen: dict[str, None] = {}
    for part in span_parts(span):
        for w in words(part):
            if w.isdigit() or content_words([w]):
                seen.setdefault(w, None)
    kept = list(seen)
    groups = [" ".join(kept[i : i + 4]) for i in range(0, len(kept), 4)]
    return ", and also ".join(groups)


def _grams(tokens: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}


def _span_grams(spans: Iterable[str], n: int = OVERLAP_WORDS) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for span in spans:
        for part in span_parts(span):
            out |= _grams(words(part), n)
    return out


def _located(text: str, spans: Iterable[str]) -> list[tuple[int, int]]:
    """Character ranges in ``text`` of every occurrence of every part of ``spans``."""
    out: list[tuple[int, int]] = []
    for span in spans:
        for part in span_parts(span):
            part = normalise_ws(part)
            start = text.find(part)
            while start >= 0 and part:
                out.append((start, start + len(part)))
                start = text.find(part, start + 1)
    return out


def _passages(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, passage)``: :data:`QUOTE_WORDS` words from each sentence start."""
    toks = list(re.finditer(r"\S+", text))
    out = []
    for i, tok in enumerate(toks):
        if i and not toks[i - 1].group(0).endswith((".", ";", ":")):
            continue
        run = toks[i : i + QUOTE_WORDS]
        if len(run) < QUOTE_WORDS:
            break
        start, end = tok.start(), run[-1].end()
        out.append((start, end, text[start:end]))
    return out


def _memo(doc_id: str, findings: list[str]) -> str:
    bullets = "\n".join(f"- {f}" for f in findings)
    return (
        f"# Due-diligence memo\n\nFindings for {doc_id} follow, one per bullet.\n\n"
        f"## {doc_id}\n\n{bullets}\n"
    )


def _finding(category: str, quoted: str) -> str:
    return f'**{category}**: the contract provides that "{quoted}".'


def build_cases(
    room: DataRoom,
    contracts: Mapping[str, str],
    labels: Mapping[str, Mapping[str, list[str]]],
    *,
    decoys: int = 2,
    seed: int = 0,
) -> list[EvalCase]:
    """The evaluation memos of every criterion of ``room`` (see the module docstring).

    Args:
        room: a CUAD room (:func:`~rlmdistill.rooms.cuad.build_cuad_room`) with its task.
        contracts: document id -> CUAD source text file name (``room.json``'s contracts).
        labels: source text file name -> category -> labelled spans, every CUAD category
            (:func:`~rlmdistill.rooms.cuad.labelled_spans`).
        decoys: memos per criterion of each of the kinds ``unlabelled`` and
            ``other_clause`` (fewer when the document has fewer candidates).
        seed: seeds every random choice, with the contract and category.

    Criteria without evidence, or whose document is not in ``contracts``, give no case.
    Raises ``ValueError`` when ``room`` has no task.
    """
    if room.task is None:
        raise ValueError(f"{room.path}: room has no task.json, so no criteria to evaluate")
    by_doc: dict[str, list[Criterion]] = {}
    for crit in room.task.criteria:
        ev = crit.evidence
        if ev is None or not ev.documents or not ev.category or not ev.spans:
            continue
        if ev.documents[0] in contracts:
            by_doc.setdefault(ev.documents[0], []).append(crit)
    cases: list[EvalCase] = []
    for doc_id, crits in by_doc.items():
        contract = contracts[doc_id]
        doc_labels = labels.get(contract, {})
        text = normalise_ws(room.get(doc_id).text)
        all_spans = [s for spans in doc_labels.values() for s in spans]
        taken = _located(text, all_spans)
        labelled_grams = _span_grams(all_spans)
        free = [
            (s, e, p)
            for s, e, p in _passages(text)
            if not any(s < b and a < e for a, b in taken)
            and not (_grams(words(p), OVERLAP_WORDS) & labelled_grams)
            and len(content_words(p)) >= MIN_PASSAGE_CONTENT_WORDS
        ]
        for crit in crits:
            cases.extend(
                _criterion_cases(
                    room,
                    doc_id,
                    contract,
                    crit,
                    doc_labels,
                    free,
                    text,
                    by_doc[doc_id],
                    decoys,
                    seed,
                )
            )
    return cases


def _criterion_cases(
    room: DataRoom,
    doc_id: str,
    contract: str,
    crit: Criterion,
    doc_labels: Mapping[str, list[str]],
    free: list[tuple[int, int, str]],
    text: str,
    doc_crits: list[Criterion],
    decoys: int,
    seed: int,
) -> list[EvalCase]:
    assert crit.evidence is not None and crit.evidence.category is not None
    category = crit.evidence.category
    gold_span = crit.evidence.spans[0]
    rng = random.Random(f"{seed}:{contract}:{category}")

    def case(kind: EvalKind, memo: str, note: str = "", k: int | None = None) -> EvalCase:
        suffix = "" if k is None else f":{k}"
        return EvalCase(
            case_id=f"{crit.id}:{kind}{suffix}",
            room=room.room_id,
            document=doc_id,
            contract=contract,
            criterion_id=crit.id,
            category=category,
            kind=kind,
            expected=EXPECTED[kind],
            memo=memo,
            note=note,
        )

    gold_quote = quote_text(gold_span)
    out = [case("gold_quote", _memo(doc_id, [_finding(category, gold_quote)]))]
    para = paraphrase_text(gold_span)
    gold_tokens = [words(p) for p in span_parts(gold_span)]
    para_grams = _grams(words(para), MIN_QUOTE_WORDS)
    if para and not any(para_grams & _grams(t, MIN_QUOTE_WORDS) for t in gold_tokens):
        finding = f"**{category}**: in substance, {para}."
        out.append(case("paraphrase", _memo(doc_id, [finding])))

    # Passages that overlap no labelled clause: random ones, then the nearest to the gold.
    picked = rng.sample(free, min(decoys, len(free)))
    for k, (_, _, passage) in enumerate(picked):
        memo = _memo(doc_id, [_finding(category, passage)])
        out.append(case("unlabelled", memo, f"passage: {passage[:60]}...", k))
    gold_words = set(content_words(" ".join(crit.evidence.spans)))
    rest = [f for f in free if f not in picked]
    if rest:
        nearest = max(rest, key=lambda f: (len(gold_words & set(content_words(f[2]))), -f[0]))
        memo = _memo(doc_id, [_finding(category, nearest[2])])
        out.append(case("unlabelled_nearest", memo, f"passage: {nearest[2][:60]}..."))

    # Clauses labelled under another category that overlap no gold clause of this one.
    own_spans = doc_labels.get(category, crit.evidence.spans)
    own_ranges = _located(text, own_spans)
    own_grams = _span_grams(own_spans)
    others: list[tuple[str, str]] = []
    for other_cat, spans in sorted(doc_labels.items()):
        if other_cat == category or other_cat in METADATA_CATEGORIES:
            continue
        for span in spans:
            quoted = quote_text(span)
            if len(quoted.split()) < MIN_QUOTE_WORDS:
                continue
            ranges = _located(text, [span])
            if any(s < b and a < e for s, e in ranges for a, b in own_ranges):
                continue
            if _span_grams([span]) & own_grams:
                continue
            others.append((other_cat, quoted))
    for k, (other_cat, quoted) in enumerate(rng.sample(others, min(decoys, len(others)))):
        memo = _memo(doc_id, [_finding(category, quoted)])
        out.append(case("other_clause", memo, f"other clause: {other_cat}", k))

    # The gold quote attributed to another category on the next line.
    if free:
        neighbour_cat = next(
            (
                c.evidence.category
                for c in doc_crits
                if c.evidence is not None and c.evidence.category not in (None, category)
            ),
            "Governing Law",
        )
        passage = picked[0][2] if picked else free[0][2]
        memo = _memo(doc_id, [_finding(category, passage), f'**{neighbour_cat}**: "{gold_quote}".'])
        out.append(case("neighbour", memo, f"gold quote under: {neighbour_cat}"))
    return out
