"""Seeded synthetic data rooms at LAB-Diligence scale, with planted issues and their rubric.

Command: ``rlmdistill rooms synth --docs N --seed S --out DIR`` (:func:`synth_main`; the
engine is :func:`build_synth_room`). Room sets: :mod:`rlmdistill.rooms.roomset`.

A room is a target company's data room for a proposed acquisition: 14 numbered category
folders (:data:`~rlmdistill.rooms.synth_catalog.CATEGORIES`) with up to 80 leaf folders, a
letter of intent that fixes the deal structure (share purchase, merger or asset purchase),
filler documents built from templates (:mod:`rlmdistill.rooms.synth_text`) and, in the
material-contracts folders, real CUAD contracts copied byte for byte (attributed in
``ATTRIBUTION.md``; one per ten documents, as many as the CUAD source has). Planted issues are
the findings a good memo must make; there are ``clamp(round(2.5 * sqrt(N)), 6, 250)`` of them,
half single-document, 30% needing two or three documents combined and 20% missing evidence:

- **single**: one clause or statement in one document (a change-of-control termination right,
  an uncapped indemnity, a tax assessment of a stated amount, ...);
- **multi**: facts that only make a finding together, e.g. a consent-on-change-of-control
  clause in a contract plus the deal structure in the letter of intent, or a customer's
  termination-for-convenience right plus its share of revenue in the finance folder;
- **missing**: a document refers to another document (a side letter, a shareholders'
  agreement, ...) that is not in the room.

Each issue becomes one or more rubric criteria (``task.json``, LAB shape with this project's
extensions): the finding (``finding`` or ``missing-evidence``), a ``quantification`` criterion
with the gold amount and a 5% tolerance when the issue has one, a ``citation`` criterion for
multi-document issues and a ``recommendation`` criterion for consent issues; three
memo-structure criteria (executive summary, exposure quantified, next steps) close the rubric.
Every criterion about an issue carries ``evidence``: the documents, the planted text (``spans``,
verbatim in those documents), key terms and amounts.

Output::

    OUT/documents/<NN_Category>[/<Sub_Folder>]/<file>.txt|.md
    OUT/task.json        the task and rubric
    OUT/room.json        provenance: generator version, seed, parameters, deal, every planted
                         issue (documents, criteria, absent documents), sizes, room hash
    OUT/ATTRIBUTION.md   CUAD CC BY 4.0 attribution for the copied contracts

Determinism: the same seed, size, length scale and CUAD source give a byte-identical room
(every random draw comes from ``random.Random`` seeded with strings derived from the seed;
nothing time-dependent is written).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rlmdistill import __version__
from rlmdistill.rooms.cuad import CUAD_ATTRIBUTION, SAMPLE_SOURCE
from rlmdistill.rooms.output import prepare_room_folder
from rlmdistill.rooms.synth_catalog import CATEGORIES, FAMILY_CHARS, DocKind
from rlmdistill.rooms.synth_text import (
    CITIES,
    PRODUCTS,
    STATES,
    company_name,
    filler_sections,
    format_usd,
    person_name,
    random_date,
    short_name,
    target_name,
)
from rlmdistill.rooms.task import Amount, Criterion, Evidence, Task, save_task
from rlmdistill.rooms.text import content_words, slugify

__all__ = [
    "CHARS_PER_TOKEN",
    "GENERATOR",
    "MAX_DOCS",
    "MIN_DOCS",
    "IssueClass",
    "SynthError",
    "SynthReport",
    "build_synth_room",
    "n_issues_for",
    "n_leaf_folders_for",
    "target_for_seed",
]

GENERATOR = "synth-v3"
"""Generator version written to ``room.json``; bump when the same seed would give other bytes."""
MIN_DOCS = 20
"""Smallest room (documents)."""
MAX_DOCS = 5000
"""Largest room (documents), LAB-Diligence scale."""
CHARS_PER_TOKEN = 4.0
"""Characters per token used for the *approximate* token counts printed and stored (a common
rule of thumb for English; ``benchmarks/bench_synth_room.py`` measures it with a real
tokenizer)."""

IssueClass = Literal["single", "multi", "missing"]
"""Kinds of planted issue: one document, two or more documents combined, absent document."""
DealStructure = Literal["share purchase", "merger", "asset purchase"]

_Severity = Literal["high", "medium", "low"]
_WEIGHT: dict[_Severity, float] = {"high": 3.0, "medium": 2.0, "low": 1.0}
_CLASS_SHARE: dict[IssueClass, float] = {"multi": 0.3, "missing": 0.2}
_CUAD_EVERY = 10
_AMOUNT_TOLERANCE = 0.05


class SynthError(ValueError):
    """A synthetic room cannot be built: bad size, seed or scale, unusable CUAD source, or an
    output folder that is not empty."""


@dataclass(frozen=True)
class SynthReport:
    """What :func:`build_synth_room` wrote."""

    out: Path
    """Room folder."""
    seed: int
    task_id: str
    room_hash: str
    """Equal to :attr:`rlmdistill.rooms.room.DataRoom.room_hash` of the written room."""
    target: str
    """Target company's name."""
    n_docs: int
    n_cuad_docs: int
    """Of which CUAD contracts copied verbatim."""
    n_chars: int
    """Characters of text over all documents (as :class:`DataRoom` extracts them)."""
    n_bytes: int
    """Bytes written under ``documents/``."""
    approx_tokens: int
    """``n_chars / CHARS_PER_TOKEN``, rounded."""
    n_categories: int
    """Top-level category folders."""
    n_folders: int
    """Leaf folders holding documents (category folders without sub-folders count once)."""
    n_criteria: int
    criteria_by_type: dict[str, int]
    issues_by_class: dict[str, int]
    folders: dict[str, int] = field(default_factory=dict)
    """Documents per leaf folder (relative path)."""


# ----------------------------------------------------------------------------- sizing
def n_issues_for(n_docs: int) -> int:
    """Planted issues in a room of ``n_docs`` documents: ``clamp(round(2.5 * sqrt(n)), 6,
    250)`` (11 for 20 documents, 43 for 300, 177 for 5,000)."""
    return max(6, min(250, round(2.5 * math.sqrt(n_docs))))


def n_leaf_folders_for(n_docs: int) -> int:
    """Target leaf folders: ``clamp(n_docs // 60, 14, 80)`` (80 at 5,000 documents)."""
    return max(len(CATEGORIES), min(80, n_docs // 60))


def _allocate(total: int, weights: list[float], minimum: int) -> list[int]:
    """Largest-remainder split of ``total`` by ``weights`` with a per-item ``minimum``."""
    base = [minimum] * len(weights)
    rest = total - minimum * len(weights)
    wsum = sum(weights)
    quotas = [rest * w / wsum for w in weights]
    counts = [int(q) for q in quotas]
    order = sorted(range(len(weights)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in order[: rest - sum(counts)]:
        counts[i] += 1
    return [b + c for b, c in zip(base, counts, strict=True)]


def target_for_seed(seed: int) -> str:
    """The target company's name for ``seed`` (cheap: room sets use it to keep targets of
    different rooms distinct)."""
    return target_name(random.Random(f"{GENERATOR}:target:{seed}"))


# ----------------------------------------------------------------------------- plan records
@dataclass
class _Doc:
    index: int
    id: str
    category: str
    kind: DocKind | None
    """``None`` for a CUAD contract and for the letter of intent."""
    cp: str
    """Counterparty (full name)."""
    n_chars: int
    """Filler characters to generate."""
    cuad: Path | None = None
    inserts: list[str] = field(default_factory=list)
    """Planted paragraphs, each placed as its own paragraph in a random section."""
    fixed: list[str] = field(default_factory=list)
    """Paragraphs the document always opens with (the letter of intent's deal terms)."""


@dataclass
class _Span:
    doc: _Doc
    text: str
    planted: bool = True
    """``False`` for text the document holds anyway (the letter of intent's structure)."""


@dataclass
class _Issue:
    kind: str
    klass: IssueClass
    severity: _Severity
    category: str
    title: str
    match: str
    spans: list[_Span]
    amounts: list[Amount] = field(default_factory=list)
    amount_what: str = ""
    recommendation: tuple[str, str] | None = None
    absent: dict[str, str] | None = None


@dataclass
class _Ctx:
    rng: random.Random
    target: str
    t: str
    buyer: str
    structure: DealStructure
    structure_text: str
    loi: _Doc
    docs: list[_Doc]
    by_category: dict[str, list[_Doc]]
    taken_ids: set[str]

    def pick(
        self, category: str, *, exclude: tuple[_Doc, ...] = (), contract: bool = False
    ) -> _Doc:
        """A generated document of ``category`` (fewest planted paragraphs first)."""
        pool = [d for d in self.by_category[category] if d.kind is not None and d not in exclude]
        if contract:
            pool = [d for d in pool if d.kind is not None and d.kind.family == "contract"] or pool
        if not pool:
            pool = [d for d in self.docs if d.kind is not None and d not in exclude]
        fewest = min(len(d.inserts) for d in pool)
        return self.rng.choice([d for d in pool if len(d.inserts) == fewest])


def _title(doc: _Doc) -> str:
    return doc.kind.title if doc.kind is not None else "document"


def _days(rng: random.Random) -> str:
    n = rng.choice((15, 30, 45, 60, 90))
    return f"{n} days"


def _money(rng: random.Random, lo: int, hi: int, step: int = 5_000) -> int:
    return rng.randrange(lo // step, hi // step + 1) * step


# ----------------------------------------------------------------------------- issue kinds
def _single(ctx: _Ctx, kind: str) -> _Issue:
    rng, t = ctx.rng, ctx.t
    mc = "02_Material_Contracts"
    if kind in {
        "coc-termination",
        "uncapped-indemnity",
        "non-compete",
        "exclusivity",
        "mfn",
        "minimum-commitment",
    }:
        doc = ctx.pick(mc, contract=True)
        cp = short_name(doc.cp)
        product = rng.choice(PRODUCTS)
        if kind == "coc-termination":
            text = (
                f"If {t} undergoes a Change of Control, {cp} may terminate this Agreement with "
                f"immediate effect by written notice given within {_days(rng)} after it learns "
                "of the Change of Control."
            )
            return _Issue(
                kind,
                "single",
                "high",
                "Change Of Control",
                f"Memo flags {cp}'s right to terminate the {_title(doc)} on a change of control of {t}",
                f"PASS if the memo states that {doc.cp} may terminate the {_title(doc)} ({doc.id}) "
                f"upon a change of control of {t} and cites {doc.id}. FAIL if the right is "
                "not mentioned or the document is not cited.",
                [_Span(doc, text)],
            )
        if kind == "uncapped-indemnity":
            text = (
                f"The limitations of liability in this Agreement do not apply to {t}'s "
                "indemnification obligations for third-party intellectual property claims, which "
                "are unlimited in amount."
            )
            return _Issue(
                kind,
                "single",
                "high",
                "Uncapped Liability",
                f"Memo flags {t}'s uncapped IP indemnity in the {_title(doc)} with {cp}",
                f"PASS if the memo states that {t}'s indemnity for third-party IP claims "
                f"under {doc.id} is not subject to the liability cap (uncapped) and cites "
                f"{doc.id}. FAIL otherwise.",
                [_Span(doc, text)],
            )
        if kind == "non-compete":
            years = rng.choice(("two (2)", "three (3)", "five (5)"))
            text = (
                f"During the term of this Agreement and for {years} years after it ends, {t} "
                f"shall not, directly or indirectly, develop, sell or market any product that "
                f"competes with the products of {cp} anywhere in North America."
            )
            return _Issue(
                kind,
                "single",
                "high",
                "Non-Compete",
                f"Memo flags the non-compete binding {t} in the {_title(doc)} with {cp}",
                f"PASS if the memo identifies the non-compete restricting {t} for {years} "
                f"years after the end of {doc.id}, notes that it may bind the buyer's "
                f"group after closing, and cites {doc.id}. FAIL otherwise.",
                [_Span(doc, text)],
            )
        if kind == "exclusivity":
            region = rng.choice(
                ("Canada", "the European Union", "Latin America", "Japan", "Australia")
            )
            text = (
                f"{cp} is appointed the sole and exclusive distributor of {t}'s {product} in "
                f"{region}, and {t} shall not sell the {product} in {region} other than through {cp}."
            )
            return _Issue(
                kind,
                "single",
                "medium",
                "Exclusivity",
                f"Memo flags {cp}'s exclusive distribution rights for {region}",
                f"PASS if the memo states that {doc.cp} holds exclusive rights to the "
                f"{product} in {region} under {doc.id} and cites it. FAIL otherwise.",
                [_Span(doc, text)],
            )
        if kind == "mfn":
            text = (
                f"If {t} offers any other customer prices for the {product} lower than those "
                f"charged to {cp}, {t} shall promptly offer the same lower prices to {cp} and "
                "refund the difference for the preceding twelve months."
            )
            return _Issue(
                kind,
                "single",
                "medium",
                "Most Favored Nation",
                f"Memo flags the most-favoured-customer pricing owed to {cp}",
                f"PASS if the memo identifies the most-favoured-nation pricing and refund "
                f"obligation in {doc.id} and cites it. FAIL otherwise.",
                [_Span(doc, text)],
            )
        amount = _money(rng, 500_000, 12_000_000, 50_000)
        text = (
            f"{t} shall purchase from {cp} products with an aggregate price of at least "
            f"{format_usd(amount)} in each contract year, and shall pay {cp} any shortfall within "
            f"{_days(rng)} after the end of the contract year."
        )
        return _Issue(
            kind,
            "single",
            "medium",
            "Minimum Commitment",
            f"Memo flags {t}'s take-or-pay minimum purchase commitment to {cp}",
            f"PASS if the memo identifies the annual minimum purchase commitment with "
            f"shortfall payment in {doc.id} and cites it. FAIL otherwise.",
            [_Span(doc, text)],
            [Amount(value=amount, tolerance=_AMOUNT_TOLERANCE)],
            "the annual minimum purchase commitment",
        )
    if kind == "litigation":
        doc = ctx.pick("05_Litigation")
        plaintiff = company_name(rng)
        amount = _money(rng, 750_000, 25_000_000, 50_000)
        text = (
            f"In the action filed on {random_date(rng, 2021, 2024)} in the {rng.choice(STATES)} "
            f"Superior Court, {plaintiff} alleges that {t} breached a supply contract and "
            f"misappropriated trade secrets, and seeks damages of not less than {format_usd(amount)}."
        )
        return _Issue(
            kind,
            "single",
            "high",
            "Litigation",
            f"Memo reports the pending action by {plaintiff} against {t}",
            f"PASS if the memo reports the pending lawsuit by {plaintiff} (breach of "
            f"contract and trade secrets) and cites {doc.id}. FAIL otherwise.",
            [_Span(doc, text)],
            [Amount(value=amount, tolerance=_AMOUNT_TOLERANCE)],
            f"the damages claimed by {plaintiff}",
        )
    if kind == "tax-assessment":
        doc = ctx.pick("08_Tax")
        amount = _money(rng, 150_000, 6_000_000)
        y1 = rng.randint(2016, 2020)
        state = rng.choice(STATES)
        text = (
            f"On {random_date(rng, 2022, 2024)} the {state} Department of Revenue issued {t} a "
            f"notice of proposed assessment of {format_usd(amount)} in sales and use tax, "
            f"penalties and interest for the tax years {y1} through {y1 + 3}; {t} has not "
            "recorded a reserve for it."
        )
        return _Issue(
            kind,
            "single",
            "high",
            "Tax",
            f"Memo reports the unreserved {state} sales and use tax assessment",
            f"PASS if the memo reports the proposed {state} sales and use tax "
            f"assessment against {t}, notes that no reserve is recorded, and cites "
            f"{doc.id}. FAIL otherwise.",
            [_Span(doc, text)],
            [Amount(value=amount, tolerance=_AMOUNT_TOLERANCE)],
            "the proposed tax assessment",
        )
    if kind == "contamination":
        doc = ctx.pick("12_Environmental")
        amount = _money(rng, 250_000, 9_000_000)
        city = rng.choice(CITIES)
        text = (
            f"Soil sampling at {t}'s {city} facility found trichloroethylene above state "
            f"cleanup levels; the consultant estimates the cost of remediation at "
            f"{format_usd(amount)}."
        )
        return _Issue(
            kind,
            "single",
            "high",
            "Environmental",
            f"Memo reports the soil contamination at the {city} facility",
            f"PASS if the memo reports the trichloroethylene contamination at {t}'s "
            f"{city} facility and cites {doc.id}. FAIL otherwise.",
            [_Span(doc, text)],
            [Amount(value=amount, tolerance=_AMOUNT_TOLERANCE)],
            f"the estimated remediation cost at {city}",
        )
    if kind == "data-breach":
        doc = ctx.pick("11_Data_Privacy")
        n = rng.randrange(5_000, 900_000)
        text = (
            f"On {random_date(rng, 2022, 2024)} an unauthorised third party accessed a {t} "
            f"database holding the names and payment card details of {n:,} customers; {t} has "
            "not notified the affected individuals or any regulator."
        )
        return _Issue(
            kind,
            "single",
            "high",
            "Data Privacy",
            f"Memo reports the unnotified data breach affecting {n:,} customers",
            f"PASS if the memo reports the breach of payment card data of about {n:,} "
            f"customers, notes that no notification was made, and cites {doc.id}. "
            "FAIL otherwise.",
            [_Span(doc, text)],
        )
    if kind == "ip-not-assigned":
        doc = ctx.pick("03_Intellectual_Property")
        number = f"{rng.randint(9, 11)},{rng.randint(100, 999)},{rng.randint(100, 999)}"
        founder = person_name(rng)
        text = (
            f"U.S. Patent No. {number}, which covers the core technology of the "
            f"{rng.choice(PRODUCTS)}, is registered in the name of {founder}, a founder of {t}, "
            f"and no assignment of it to {t} has been executed or recorded."
        )
        return _Issue(
            kind,
            "single",
            "high",
            "Ip Ownership Assignment",
            f"Memo flags that Patent No. {number} is owned by {founder}, not {t}",
            f"PASS if the memo states that U.S. Patent No. {number} is held by the "
            f"founder {founder} and not assigned to {t}, and cites {doc.id}. FAIL "
            "otherwise.",
            [_Span(doc, text)],
        )
    if kind == "permit-expired":
        doc = ctx.pick("09_Regulatory")
        permit = f"{rng.choice('ABCDEFG')}{rng.choice('KLMNPQR')}-{rng.randint(1000, 9999)}"
        city = rng.choice(CITIES)
        text = (
            f"Operating permit No. {permit} for {t}'s {city} plant expired on "
            f"{random_date(rng, 2022, 2024)}, and {t} has continued operations without filing "
            "an application for renewal."
        )
        return _Issue(
            kind,
            "single",
            "medium",
            "Regulatory",
            f"Memo flags the expired operating permit {permit} at the {city} plant",
            f"PASS if the memo reports that permit {permit} for the {city} plant has "
            f"expired with no renewal filed and cites {doc.id}. FAIL otherwise.",
            [_Span(doc, text)],
        )
    if kind == "insurance-lapse":
        doc = ctx.pick("10_Insurance")
        date = random_date(rng, 2024, 2025)
        text = (
            f"{t}'s directors and officers liability policy expires on {date} and contains no "
            "run-off or extended reporting period, so claims first made after that date are "
            "not covered."
        )
        return _Issue(
            kind,
            "single",
            "medium",
            "Insurance",
            f"Memo flags the D&O policy expiring on {date} without run-off cover",
            f"PASS if the memo notes that the D&O policy expires on {date} with no "
            f"run-off or tail cover and cites {doc.id}. FAIL otherwise.",
            [_Span(doc, text)],
        )
    if kind == "covenant-breach":
        doc = ctx.pick("07_Finance")
        bank = company_name(rng)
        ratio = f"{rng.randint(4, 6)}.{rng.randint(10, 95)}"
        text = (
            f"As of {random_date(rng, 2023, 2024)}, {t} was not in compliance with the maximum "
            f"leverage ratio of 3.50 to 1.00 under its credit agreement with {bank} (actual "
            f"ratio: {ratio} to 1.00), and {short_name(bank)} has reserved all of its rights."
        )
        return _Issue(
            kind,
            "single",
            "high",
            "Finance",
            f"Memo flags the leverage covenant breach under the {short_name(bank)} credit agreement",
            f"PASS if the memo reports that {t} breaches the 3.50x leverage covenant "
            f"(actual {ratio}x) under its credit agreement with {bank} and cites "
            f"{doc.id}. FAIL otherwise.",
            [_Span(doc, text)],
        )
    if kind == "lease-termination":
        doc = ctx.pick("06_Real_Estate", contract=True)
        city = rng.choice(CITIES)
        text = (
            f"The Landlord may terminate this lease of {t}'s premises in {city} at any time on "
            f"{_days(rng)}' notice without paying any compensation to {t}."
        )
        return _Issue(
            kind,
            "single",
            "medium",
            "Termination For Convenience",
            f"Memo flags the landlord's right to terminate the {city} lease at will",
            f"PASS if the memo states that the landlord may terminate the lease of the "
            f"{city} premises for convenience without compensation and cites {doc.id}. "
            "FAIL otherwise.",
            [_Span(doc, text)],
        )
    # misclassification
    doc = ctx.pick("04_Employment")
    n = rng.randint(12, 180)
    amount = _money(rng, 200_000, 4_000_000)
    text = (
        f"{n} individuals who work full time for {t} under its direction are engaged as "
        "independent contractors and receive no overtime or benefits; counsel estimates back "
        f"pay and penalties of {format_usd(amount)} if they are reclassified as employees."
    )
    return _Issue(
        "misclassification",
        "single",
        "medium",
        "Employment",
        f"Memo flags the misclassification of {n} contractors",
        f"PASS if the memo reports that {n} full-time workers are treated as "
        f"contractors, with back-pay exposure, and cites {doc.id}. FAIL otherwise.",
        [_Span(doc, text)],
        [Amount(value=amount, tolerance=_AMOUNT_TOLERANCE)],
        "the reclassification exposure",
    )


_SINGLE_KINDS = (
    "coc-termination",
    "uncapped-indemnity",
    "non-compete",
    "exclusivity",
    "mfn",
    "minimum-commitment",
    "litigation",
    "tax-assessment",
    "contamination",
    "data-breach",
    "ip-not-assigned",
    "permit-expired",
    "insurance-lapse",
    "covenant-breach",
    "lease-termination",
    "misclassification",
)


def _multi(ctx: _Ctx, kind: str) -> _Issue:
    rng, t = ctx.rng, ctx.t
    loi = _Span(ctx.loi, ctx.structure_text, planted=False)
    if kind == "consent":
        doc = ctx.pick("02_Material_Contracts", contract=True)
        cp = short_name(doc.cp)
        if ctx.structure == "asset purchase":
            text = (
                f"Neither {t} nor {cp} may assign or transfer this Agreement or any right under "
                "it, by operation of law or otherwise, without the prior written consent of the "
                "other, and any purported assignment without that consent is void."
            )
            category, why = (
                "Anti-Assignment",
                "the asset purchase transfers the contract to the buyer",
            )
        else:
            text = (
                f"A Change of Control of {t}, including a merger or a sale of more than fifty "
                f"percent of its voting securities, is treated as an assignment of this "
                f"Agreement and requires the prior written consent of {cp}, which {cp} may "
                "withhold in its sole discretion."
            )
            category, why = (
                "Change Of Control",
                f"the {ctx.structure} is a change of control of {t}",
            )
        return _Issue(
            kind,
            "multi",
            "high",
            category,
            f"Memo concludes that the deal needs {cp}'s consent under the {_title(doc)}",
            f"PASS if the memo connects the consent requirement in {doc.id} with the deal "
            f"structure in {ctx.loi.id} ({why}) and concludes that {doc.cp}'s consent is needed "
            "for the transaction. FAIL if either fact is missing or no consent requirement is "
            "concluded.",
            [_Span(doc, text), loi],
            recommendation=(
                f"Memo recommends obtaining {cp}'s consent before closing",
                f"PASS if the memo recommends obtaining {doc.cp}'s written consent (or making it a "
                "closing condition) before closing. FAIL otherwise.",
            ),
        )
    if kind == "loan-acceleration":
        doc = ctx.pick("07_Finance")
        other = ctx.pick("07_Finance", exclude=(doc,))
        bank = company_name(rng)
        amount = _money(rng, 2_000_000, 60_000_000, 100_000)
        clause = (
            f"It is an event of default under {t}'s term loan from {bank} if {t} undergoes a "
            "change of control or sells all or substantially all of its assets, whereupon all "
            "outstanding loans become immediately due and payable."
        )
        balance = (
            f"The outstanding principal of {t}'s term loan from {short_name(bank)} at the "
            f"balance sheet date was {format_usd(amount)}."
        )
        return _Issue(
            kind,
            "multi",
            "high",
            "Change Of Control",
            f"Memo concludes that the {short_name(bank)} term loan becomes repayable at closing",
            f"PASS if the memo connects the change-of-control default in {doc.id}, the deal "
            f"structure in {ctx.loi.id} and the outstanding balance in {other.id}, and concludes "
            "that the loan will have to be repaid or waived at closing. FAIL otherwise.",
            [_Span(doc, clause), _Span(other, balance), loi],
            [Amount(value=amount, tolerance=_AMOUNT_TOLERANCE)],
            f"the term loan from {short_name(bank)} repayable at closing",
        )
    if kind == "customer-concentration":
        doc = ctx.pick("02_Material_Contracts", contract=True)
        fin = ctx.pick("07_Finance")
        cp = short_name(doc.cp)
        pct = rng.randint(18, 46)
        revenue = _money(rng, 3_000_000, 80_000_000, 100_000)
        clause = f"{cp} may terminate this Agreement for convenience at any time on {_days(rng)}' written notice to {t}."
        share = (
            f"Sales to {doc.cp} were {format_usd(revenue)}, or {pct}% of {t}'s total revenue, "
            f"making it {t}'s largest customer."
        )
        return _Issue(
            kind,
            "multi",
            "high",
            "Termination For Convenience",
            f"Memo flags that {t}'s largest customer ({pct}% of revenue) can terminate for convenience",
            f"PASS if the memo connects {cp}'s right to terminate for convenience in {doc.id} with "
            f"its {pct}% share of revenue in {fin.id}. FAIL if either fact is missing.",
            [_Span(doc, clause), _Span(fin, share)],
            [
                Amount(value=pct, unit="%", tolerance=_AMOUNT_TOLERANCE),
                Amount(value=revenue, tolerance=_AMOUNT_TOLERANCE),
            ],
            f"the revenue at risk from {cp}",
        )
    if kind == "lease-consent":
        lease = ctx.pick("06_Real_Estate", contract=True)
        other = ctx.pick("06_Real_Estate", exclude=(lease,))
        landlord = lease.cp
        city = rng.choice(CITIES)
        pct = rng.randint(30, 90)
        clause = (
            f"Any transfer of a controlling interest in {t}, or any sale of all or substantially "
            f"all of its assets, is deemed an assignment of this lease of the {city} premises "
            f"and requires the prior written consent of the Landlord, {landlord}."
        )
        fact = (
            f"The {city} premises house {t}'s only manufacturing line, which produced {pct}% "
            f"of {t}'s revenue last year."
        )
        return _Issue(
            kind,
            "multi",
            "high",
            "Anti-Assignment",
            f"Memo concludes that the landlord's consent is needed for {t}'s only plant in {city}",
            f"PASS if the memo connects the landlord-consent clause in {lease.id} with the "
            f"importance of the {city} site in {other.id} and concludes that the landlord's "
            "consent is needed for the deal. FAIL otherwise.",
            [_Span(lease, clause), _Span(other, fact)],
            recommendation=(
                f"Memo recommends securing the {city} landlord's consent before closing",
                f"PASS if the memo recommends obtaining {landlord}'s consent (or a closing "
                "condition) before closing. FAIL otherwise.",
            ),
        )
    if kind == "executive-payment":
        agreement = ctx.pick("04_Employment")
        census = ctx.pick("04_Employment", exclude=(agreement,))
        exec_name = person_name(rng)
        role = rng.choice(
            ("Chief Technology Officer", "Chief Operating Officer", "Chief Revenue Officer")
        )
        salary = _money(rng, 220_000, 650_000, 5_000)
        mult = rng.choice((1.5, 2, 2.5, 3))
        mult_text = {1.5: "one and one-half", 2: "two", 2.5: "two and one-half", 3: "three"}[mult]
        clause = (
            f"If the employment of {exec_name} ends for any reason within twelve months after a "
            f"Change in Control of {t}, {t} shall pay {exec_name} a lump sum equal to "
            f"{mult_text} times the executive's annual base salary."
        )
        row = f"{exec_name}, {role} of {t}: annual base salary {format_usd(salary)}."
        payment = mult * salary
        return _Issue(
            kind,
            "multi",
            "medium",
            "Change Of Control",
            f"Memo quantifies the change-in-control payment to {exec_name}",
            f"PASS if the memo identifies the change-in-control payment to {exec_name} in "
            f"{agreement.id} and uses the salary in {census.id}. FAIL otherwise.",
            [_Span(agreement, clause), _Span(census, row)],
            [
                Amount(
                    value=payment,
                    tolerance=_AMOUNT_TOLERANCE,
                    note=f"{mult_text} times the base salary of {format_usd(salary)}",
                )
            ],
            f"the change-in-control payment to {exec_name}",
        )
    # uninsured-environmental
    site = ctx.pick("12_Environmental")
    policy = ctx.pick("10_Insurance")
    city = rng.choice(CITIES)
    amount = _money(rng, 400_000, 12_000_000)
    estimate = (
        f"Remediation of the former plating area at {t}'s {city} site is estimated to cost "
        f"{format_usd(amount)}."
    )
    exclusion = (
        f"The general liability policy of {t} excludes all loss arising from the discharge or "
        f"release of pollutants, and {t} holds no separate pollution legal liability policy."
    )
    return _Issue(
        "uninsured-environmental",
        "multi",
        "high",
        "Environmental",
        f"Memo concludes that the {city} remediation cost is uninsured",
        f"PASS if the memo connects the remediation estimate in {site.id} with the pollution "
        f"exclusion in {policy.id} and concludes that the cost is uninsured. FAIL otherwise.",
        [_Span(site, estimate), _Span(policy, exclusion)],
        [Amount(value=amount, tolerance=_AMOUNT_TOLERANCE)],
        f"the uninsured remediation cost at {city}",
    )


_MULTI_KINDS = (
    "consent",
    "loan-acceleration",
    "customer-concentration",
    "lease-consent",
    "executive-payment",
    "uninsured-environmental",
)


def _missing(ctx: _Ctx, kind: str) -> _Issue:
    rng, t, target = ctx.rng, ctx.t, ctx.target
    date = random_date(rng, 2016, 2023)
    if kind == "side-letter":
        doc = ctx.pick("02_Material_Contracts", contract=True)
        title = f"Side Letter between {target} and {doc.cp} dated {date}"
        text = (
            f"Pricing under this Agreement is subject to the Side Letter between {target} and "
            f'{doc.cp} dated {date} (the "Side Letter"), which is incorporated by reference.'
        )
        would_be = f"{doc.id.rsplit('/', 1)[0]}/side_letter_{slugify(short_name(doc.cp), '_')}.txt"
    elif kind == "shareholders-agreement":
        doc = ctx.pick("01_Corporate")
        title = f"Shareholders' Agreement of {target} dated {date}"
        text = (
            f"The Board noted that any transfer of shares in {t} is subject to the rights of "
            f"first refusal in the Shareholders' Agreement of {target} dated {date}."
        )
        would_be = "01_Corporate/shareholders_agreement.txt"
    elif kind == "settlement":
        doc = ctx.pick("05_Litigation")
        other = company_name(rng)
        title = f"Settlement Agreement between {target} and {other} dated {date}"
        text = (
            f"The dispute with {other} was resolved under the Settlement Agreement between "
            f"{target} and {other} dated {date}, under which {t} agreed to pay amounts in "
            f"instalments through {rng.randint(2025, 2028)}."
        )
        would_be = f"05_Litigation/settlement_agreement_{slugify(short_name(other), '_')}.txt"
    elif kind == "intercreditor":
        doc = ctx.pick("07_Finance")
        bank1, bank2 = company_name(rng), company_name(rng)
        title = f"Intercreditor Agreement between {bank1} and {bank2} dated {date}"
        text = (
            f"The security granted by {t} over its assets is shared under the Intercreditor "
            f"Agreement between {bank1} and {bank2} dated {date}."
        )
        would_be = "07_Finance/intercreditor_agreement.txt"
    elif kind == "soc2-report":
        doc = ctx.pick("13_Information_Technology")
        auditor = company_name(rng)
        title = f"SOC 2 Type II report for the period ended {date}, prepared by {auditor}"
        text = (
            f"{t}'s customer contracts rely on its SOC 2 Type II report for the period ended "
            f"{date}, prepared by {auditor}, as evidence of its security controls."
        )
        would_be = "13_Information_Technology/soc2_type_ii_report.txt"
    else:  # permit-conditions
        doc = ctx.pick("12_Environmental")
        number = rng.randint(2, 9)
        title = (
            f"Schedule {number} (Special Conditions) to {target}'s discharge permit dated {date}"
        )
        text = (
            f"The wastewater discharge permit held by {t} is issued subject to the conditions in "
            f"Schedule {number} (Special Conditions) to {target}'s discharge permit dated {date}."
        )
        would_be = f"12_Environmental/permit_schedule_{number}.txt"
    return _Issue(
        kind,
        "missing",
        "medium",
        "Missing Document",
        f"Memo notes that the {title} is not in the data room",
        f"PASS if the memo states that the {title}, referred to in {doc.id}, is missing from "
        "the data room and asks for it (or treats its terms as unknown). FAIL if the memo does "
        "not mention it or describes its terms as if it had been reviewed.",
        [_Span(doc, text)],
        absent={"title": title, "would_be_id": would_be},
    )


_MISSING_KINDS = (
    "side-letter",
    "shareholders-agreement",
    "settlement",
    "intercreditor",
    "soc2-report",
    "permit-conditions",
)


# ----------------------------------------------------------------------------- planning
_STRUCTURES: tuple[DealStructure, ...] = ("share purchase", "merger", "asset purchase")


def _structure_text(structure: DealStructure, buyer: str, target: str) -> str:
    if structure == "share purchase":
        return (
            f"{buyer} will acquire all of the issued and outstanding shares of {target} from its "
            f"shareholders, following which {target} will be a wholly owned subsidiary of {buyer}."
        )
    if structure == "merger":
        return (
            f"A wholly owned subsidiary of {buyer} will merge with and into {target}, with "
            f"{target} surviving the merger as a wholly owned subsidiary of {buyer}."
        )
    return (
        f"{buyer} will purchase substantially all of the assets of {target}, including its "
        "rights under the contracts listed in the disclosure schedule, and will assume only the "
        "liabilities expressly listed there."
    )


def _cuad_pool(source: Path | None, partition: tuple[int, int]) -> list[Path]:
    """CUAD contract files (sorted by name) in part ``k`` of ``m`` (every m-th from k)."""
    if source is None:
        return []
    k, m = partition
    folder = source / "contracts"
    if not folder.is_dir():
        folder = source / "full_contract_txt"
    if not folder.is_dir():
        raise SynthError(f"{source}: no contracts/ or full_contract_txt/ folder of CUAD .txt files")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() == ".txt" and p.is_file())
    if not files:
        raise SynthError(f"{folder}: no .txt contracts")
    return files[k::m]


def _leaf_plan(counts: list[int], n_leaves: int) -> list[int]:
    """Sub-folders opened per category: start at 1, then add one to the category with the most
    documents per folder until ``n_leaves`` or no category can open another (or has fewer
    documents than folders)."""
    opened = [1] * len(CATEGORIES)
    while sum(opened) < n_leaves:
        best, best_load = -1, 0.0
        for i, cat in enumerate(CATEGORIES):
            if opened[i] < len(cat.subfolders) and counts[i] > opened[i]:
                load = counts[i] / opened[i]
                if load > best_load:
                    best, best_load = i, load
        if best < 0:
            break
        opened[best] += 1
    return opened


def _plan(n_docs: int, seed: int, scale: float, cuad: list[Path]) -> tuple[_Ctx, list[_Issue]]:
    rng = random.Random(f"{GENERATOR}:plan:{seed}")
    target = target_for_seed(seed)
    t = short_name(target)
    buyer = company_name(rng).split()[0] + " Acquisition Holdings LLC"
    structure = rng.choice(_STRUCTURES)
    n_cuad = min(len(cuad), n_docs // _CUAD_EVERY)
    chosen_cuad = sorted(rng.sample(cuad, n_cuad)) if n_cuad else []

    counts = _allocate(n_docs - n_cuad, [c.weight for c in CATEGORIES], 1)
    mc = [c.folder for c in CATEGORIES].index("02_Material_Contracts")
    counts[mc] += n_cuad
    if counts[mc] < n_cuad + 2:  # the material-contracts folder needs generated contracts too
        raise SynthError(f"internal: too few material contracts for {n_docs} documents")
    opened = _leaf_plan(counts, n_leaf_folders_for(n_docs))
    counterparties = sorted({company_name(rng) for _ in range(max(12, n_docs // 3))})

    docs: list[_Doc] = []
    taken: set[str] = set()
    by_category: dict[str, list[_Doc]] = {c.folder: [] for c in CATEGORIES}

    def add(category: str, leaf: str, stem: str, suffix: str, **kw: Any) -> _Doc:
        base = f"{leaf}/{stem}"
        doc_id, k = f"{base}{suffix}", 2
        while doc_id in taken:
            doc_id, k = f"{base}_{k}{suffix}", k + 1
        taken.add(doc_id)
        doc = _Doc(index=len(docs), id=doc_id, category=category, **kw)
        docs.append(doc)
        by_category[category].append(doc)
        return doc

    loi: _Doc | None = None
    for ci, (cat, count) in enumerate(zip(CATEGORIES, counts, strict=True)):
        subs = cat.subfolders[: opened[ci]]
        leaves = [cat.folder] if len(subs) == 1 else [f"{cat.folder}/{s.name}" for s in subs]
        if len(subs) == 1:  # one leaf: the category folder holds every kind of the category
            kinds_of = [tuple(k for sub in cat.subfolders for k in sub.kinds)]
        else:
            kinds_of = [sub.kinds for sub in subs]
        slot = 0
        if cat.folder == "14_Transaction":
            loi = add(
                cat.folder,
                leaves[0],
                "letter_of_intent",
                ".txt",
                kind=None,
                cp=buyer,
                n_chars=int(rng.randint(6_000, 12_000) * scale),
            )
            slot = 1
        if ci == mc:
            for path in chosen_cuad:
                leaf = leaves[slot % len(leaves)]
                stem = "cuad_" + slugify(path.stem, "_")[:60].rstrip("_")
                add(cat.folder, leaf, stem, ".txt", kind=None, cp="", n_chars=0, cuad=path)
                slot += 1
        for j in range(slot, count):
            li = j % len(leaves)
            kind = rng.choice(kinds_of[li])
            cp = rng.choice(counterparties)
            lo, hi = FAMILY_CHARS[kind.family]
            if kind.family in {"minutes", "policy", "report"}:
                stem, suffix = (
                    f"{kind.slug}_{rng.randint(2018, 2024)}_{rng.randint(1, 12):02d}",
                    ".md",
                )
            elif kind.family in {"contract", "letter"}:
                stem, suffix = f"{kind.slug}_{slugify(short_name(cp), '_')}", ".txt"
            else:
                stem, suffix = f"{kind.slug}_{rng.randint(2018, 2024)}", ".txt"
            add(
                cat.folder,
                leaves[li],
                stem,
                suffix,
                kind=kind,
                cp=cp,
                n_chars=max(500, int(rng.randint(lo, hi) * scale)),
            )
    assert loi is not None
    structure_text = _structure_text(structure, buyer, target)
    loi.fixed.append(structure_text)
    ctx = _Ctx(rng, target, t, buyer, structure, structure_text, loi, docs, by_category, taken)

    n_issues = n_issues_for(n_docs)
    n_multi = max(1, round(n_issues * _CLASS_SHARE["multi"]))
    n_missing = max(1, round(n_issues * _CLASS_SHARE["missing"]))
    n_single = n_issues - n_multi - n_missing
    plan: list[tuple[IssueClass, str]] = []
    groups: tuple[tuple[IssueClass, tuple[str, ...], int], ...] = (
        ("single", _SINGLE_KINDS, n_single),
        ("multi", _MULTI_KINDS, n_multi),
        ("missing", _MISSING_KINDS, n_missing),
    )
    for klass, kinds, n in groups:
        order = list(kinds)
        rng.shuffle(order)
        plan += [(klass, order[i % len(order)]) for i in range(n)]
    rng.shuffle(plan)
    makers: dict[IssueClass, Callable[[_Ctx, str], _Issue]] = {
        "single": _single,
        "multi": _multi,
        "missing": _missing,
    }
    issues: list[_Issue] = []
    for klass, issue_kind in plan:
        issue = makers[klass](ctx, issue_kind)
        for span in issue.spans:
            if span.planted:
                span.doc.inserts.append(span.text)
        issues.append(issue)
    return ctx, issues


# ----------------------------------------------------------------------------- rendering
def _render(doc: _Doc, ctx: _Ctx, seed: int) -> str:
    """Full text of one generated document (planted paragraphs placed in random sections)."""
    rng = random.Random(f"{GENERATOR}:doc:{seed}:{doc.index}")
    kind = doc.kind
    family = kind.family if kind is not None else "letter"
    title = kind.title if kind is not None else "Letter of Intent"
    cp_short = short_name(doc.cp)
    slots = {"t": ctx.t, "T": ctx.target, "cp": cp_short, "CP": doc.cp}
    date = random_date(rng, 2017, 2024)
    markdown = doc.id.endswith(".md")
    if kind is None:  # letter of intent
        preamble = [
            f"{date}",
            f"{ctx.target}\nAttention: Board of Directors",
            f"Re: Proposed acquisition of {ctx.target} by {ctx.buyer}",
            f"This non-binding letter of intent sets out the principal terms on which {ctx.buyer} "
            f'proposes to acquire {ctx.target} (the "Transaction").',
            *doc.fixed,
        ]
    elif family == "contract":
        preamble = [
            f'Dated {date}, this {title} (this "Agreement") is between {doc.cp} ("{cp_short}") '
            f'and {ctx.target}, a {rng.choice(STATES)} corporation ("{ctx.t}").'
        ]
    elif family == "letter":
        preamble = [date, f"{ctx.target}\nAttention: {person_name(rng)}"]
    else:
        preamble = [
            f"{ctx.target}",
            f"Prepared {date}" + (f" with {doc.cp}" if family == "report" else ""),
        ]
    sections = filler_sections(rng, family, slots, doc.n_chars)
    placed: dict[int, list[str]] = {}
    for text in doc.inserts:
        placed.setdefault(rng.randrange(len(sections)), []).append(text)
    parts: list[str] = [f"# {title}" if markdown else title.upper(), *preamble]
    for number, (heading, paragraphs) in enumerate(sections, 1):
        paragraphs = list(paragraphs)
        for text in placed.get(number - 1, []):
            paragraphs.insert(rng.randint(0, len(paragraphs)), text)
        parts.append(f"## {number}. {heading}" if markdown else f"{number}. {heading.upper()}")
        parts += [f"{number}.{k} {p}" for k, p in enumerate(paragraphs, 1)]
    if family == "contract":
        parts.append(
            f"IN WITNESS WHEREOF, {ctx.t} and {cp_short} have executed this {title} as of the "
            f"date first written above.\n\n{ctx.target}\nBy: {person_name(rng)}\n\n{doc.cp}\nBy: "
            f"{person_name(rng)}"
        )
    elif family == "letter" or kind is None:
        parts.append(f"Yours sincerely,\n\n{person_name(rng)}\n{doc.cp}")
    return "\n\n".join(parts) + "\n"


# ----------------------------------------------------------------------------- task
def _key_terms(spans: list[str], exclude: set[str]) -> list[str]:
    counts = Counter(w for s in spans for w in content_words(s) if w not in exclude)
    return [w for w, _ in counts.most_common(6)]


def _criteria(ctx: _Ctx, issues: list[_Issue]) -> tuple[list[Criterion], list[dict[str, Any]]]:
    width = max(3, len(str(len(issues))))
    names = {w for n in (ctx.target, ctx.buyer) for w in content_words(n)}
    criteria: list[Criterion] = []
    meta: list[dict[str, Any]] = []
    n_quant = 0
    for i, issue in enumerate(issues, 1):
        base = f"I{i:0{width}d}-{issue.kind}"
        doc_ids = list(dict.fromkeys(s.doc.id for s in issue.spans))
        spans = [s.text for s in issue.spans]
        evidence = Evidence(
            documents=doc_ids,
            category=issue.category,
            spans=spans,
            key_terms=_key_terms(spans, names),
        )
        weight = _WEIGHT[issue.severity]
        ids = [base]
        criteria.append(
            Criterion(
                id=base,
                title=issue.title,
                match_criteria=issue.match,
                deliverables=["memo.md"],
                sources=doc_ids,
                type="missing-evidence" if issue.klass == "missing" else "finding",
                weight=weight,
                evidence=evidence,
            )
        )
        if issue.amounts:
            n_quant += 1
            figures = "; ".join(
                (f"{a.value:g}%" if a.unit == "%" else format_usd(a.value))
                + (f" ({a.note})" if a.note else "")
                for a in issue.amounts
            )
            criteria.append(
                Criterion(
                    id=f"{base}-amount",
                    title=f"Memo quantifies {issue.amount_what}",
                    match_criteria=(
                        f"PASS if the memo states {issue.amount_what} as {figures}, each within 5%, "
                        f"next to the finding. FAIL if no figure is given or it is outside 5%."
                    ),
                    deliverables=["memo.md"],
                    sources=doc_ids,
                    type="quantification",
                    weight=weight,
                    evidence=evidence.model_copy(update={"amounts": issue.amounts}),
                )
            )
            ids.append(f"{base}-amount")
        if issue.klass == "multi":
            criteria.append(
                Criterion(
                    id=f"{base}-cites",
                    title="Memo cites every document the finding rests on",
                    match_criteria=(
                        "PASS if the memo cites " + " and ".join(doc_ids) + " for this finding. "
                        "FAIL if any of them is not cited."
                    ),
                    deliverables=["memo.md"],
                    sources=doc_ids,
                    type="citation",
                    weight=1.0,
                    evidence=evidence,
                )
            )
            ids.append(f"{base}-cites")
        if issue.recommendation is not None:
            title, match = issue.recommendation
            criteria.append(
                Criterion(
                    id=f"{base}-next-step",
                    title=title,
                    match_criteria=match,
                    deliverables=["memo.md"],
                    sources=doc_ids,
                    type="recommendation",
                    weight=1.0,
                    evidence=evidence,
                )
            )
            ids.append(f"{base}-next-step")
        meta.append(
            {
                "id": base,
                "kind": issue.kind,
                "class": issue.klass,
                "severity": issue.severity,
                "category": issue.category,
                "documents": doc_ids,
                "criteria": ids,
                "planted": [s.planted for s in issue.spans],
                **({"absent_document": issue.absent} if issue.absent else {}),
            }
        )
    n_findings = min(5, len(issues))
    criteria += [
        Criterion(
            id="MEMO-executive-summary",
            title="Memo opens with an executive summary",
            match_criteria=(
                f"PASS if the memo opens with an executive summary that names at least "
                f"{n_findings} of the most critical findings. FAIL otherwise."
            ),
            deliverables=["memo.md"],
            type="finding",
            weight=1.0,
        ),
        Criterion(
            id="MEMO-exposure-quantified",
            title="Memo quantifies the exposure",
            match_criteria=(
                f"PASS if the memo gives a figure for at least half of the {n_quant} findings "
                "whose documents state an amount, and an overall view of the exposure. FAIL "
                "otherwise."
            ),
            deliverables=["memo.md"],
            type="quantification",
            weight=1.0,
        ),
        Criterion(
            id="MEMO-next-steps",
            title="Memo recommends next steps before signing",
            match_criteria=(
                "PASS if the memo ends with concrete next steps before signing (consents to "
                "obtain, documents to request, protections to negotiate). FAIL otherwise."
            ),
            deliverables=["memo.md"],
            type="recommendation",
            weight=1.0,
        ),
    ]
    return criteria, meta


# ----------------------------------------------------------------------------- build
def _prepare_out(out: Path, overwrite: bool) -> None:
    prepare_room_folder(out, overwrite, SynthError)


def _attribution(cuad_docs: list[_Doc]) -> str:
    lines = [
        "# Attribution",
        "",
        "This is a synthetic data room generated by rlmdistill "
        f"({GENERATOR}): the target, its counterparties and every generated document are "
        "fictitious, written from this project's own templates.",
        "",
    ]
    if cuad_docs:
        lines += [
            "The documents listed below are contracts from the Contract Understanding Atticus",
            "Dataset (CUAD) v1 by The Atticus Project, https://www.atticusprojectai.org/cuad",
            "(Hendrycks, Burns, Chen and Ball, 'CUAD: An Expert-Annotated NLP Dataset for Legal",
            "Contract Review', arXiv:2103.06268), licensed under the Creative Commons Attribution",
            "4.0 International licence (CC BY 4.0, https://creativecommons.org/licenses/by/4.0/).",
            "Changes made here: the contracts were copied unchanged under new file names into the",
            "material-contracts folders of this room; their parties are unrelated to the target.",
            "",
            "| document | CUAD file |",
            "| --- | --- |",
        ]
        lines += [f"| `{d.id}` | {d.cuad.name if d.cuad else ''} |" for d in cuad_docs]
    else:
        lines.append("No third-party text is included.")
    return "\n".join(lines) + "\n"


def _check_args(n_docs: int, seed: int, length_scale: float, partition: tuple[int, int]) -> None:
    if isinstance(n_docs, bool) or not isinstance(n_docs, int):
        raise SynthError(f"docs must be an integer, got {n_docs!r}")
    if not MIN_DOCS <= n_docs <= MAX_DOCS:
        raise SynthError(f"docs must be between {MIN_DOCS} and {MAX_DOCS}, got {n_docs}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SynthError(f"seed must be a non-negative integer, got {seed!r}")
    if not (isinstance(length_scale, int | float) and 0.05 <= length_scale <= 20):
        raise SynthError(f"length_scale must be between 0.05 and 20, got {length_scale!r}")
    k, m = partition
    if not (m >= 1 and 0 <= k < m):
        raise SynthError(f"cuad_partition must be (k, m) with 0 <= k < m, got {partition!r}")


def build_synth_room(
    out: str | Path,
    n_docs: int,
    seed: int,
    *,
    length_scale: float = 1.0,
    cuad_source: str | Path | None = SAMPLE_SOURCE,
    cuad_partition: tuple[int, int] = (0, 1),
    overwrite: bool = False,
) -> SynthReport:
    """Generate a synthetic room of ``n_docs`` documents for ``seed`` into ``out``.

    ``length_scale`` multiplies every generated document's length (1.0: mean ~13k characters;
    about 4.5 approaches LAB-Diligence's ~80M tokens at 5,000 documents). ``cuad_source`` is a
    CUAD-format folder (``contracts/*.txt``; default the packaged 16-contract sample, ``None``
    for no CUAD text); ``cuad_partition=(k, m)`` restricts it to every ``m``-th contract from
    the ``k``-th (sorted by file name), so that rooms of different splits use disjoint
    contracts. Deterministic for equal arguments (see the module docstring).

    Returns a :class:`SynthReport`. Raises :class:`SynthError` for a size outside
    ``[MIN_DOCS, MAX_DOCS]``, a negative seed, a scale outside ``[0.05, 20]``, an unusable CUAD
    source, or a non-empty ``out`` (``overwrite=True`` replaces a previously built room).
    """
    _check_args(n_docs, seed, length_scale, cuad_partition)
    out = Path(out).resolve()
    source = Path(cuad_source).resolve() if cuad_source is not None else None
    pool = _cuad_pool(source, cuad_partition)
    ctx, issues = _plan(n_docs, seed, float(length_scale), pool)
    criteria, issue_meta = _criteria(ctx, issues)
    _prepare_out(out, overwrite)

    docs_root = out / "documents"
    made: set[Path] = set()
    digest = hashlib.sha256()
    n_chars = n_bytes = 0
    per_doc_sha: dict[str, str] = {}
    for doc in ctx.docs:
        dest = docs_root / doc.id
        if dest.parent not in made:
            dest.parent.mkdir(parents=True, exist_ok=True)
            made.add(dest.parent)
        if doc.cuad is not None:
            data = doc.cuad.read_bytes()
            dest.write_bytes(data)
            text = data.decode("utf-8", errors="replace")
        else:
            text = _render(doc, ctx, seed)
            data = text.encode("utf-8")
            dest.write_bytes(data)
        n_chars += len(text)
        n_bytes += len(data)
        per_doc_sha[doc.id] = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    for doc_id in sorted(per_doc_sha):
        digest.update(doc_id.encode("utf-8") + b"\0" + per_doc_sha[doc_id].encode("ascii") + b"\0")
    room_hash = digest.hexdigest()[:16]

    task_digest = hashlib.sha256(f"{GENERATOR}:{seed}:{n_docs}:{room_hash}".encode()).hexdigest()
    task = Task(
        id=f"synth-s{seed}-n{n_docs}-{task_digest[:8]}",
        title=f"Due-diligence review of {ctx.target} ({n_docs}-document data room)",
        instructions=(
            f"You are counsel to {ctx.buyer}, which proposes to acquire {ctx.target} on the "
            f"terms of the letter of intent in the data room ({ctx.loi.id}). Review the data "
            "room and write a due-diligence memo (memo.md) that opens with an executive "
            "summary, lists every material finding (including consents the deal structure "
            "triggers and documents that are referred to but missing from the room), cites the "
            "documents each finding rests on by their document id (their path in the room), "
            "quantifies the exposure where the documents allow it, and ends with recommended "
            "next steps before signing."
        ),
        work_type="review",
        deliverables=["memo.md"],
        tags=["corporate-ma", "diligence", "synthetic"],
        criteria=criteria,
        source=f"rlmdistill {GENERATOR}",
        **(
            {"license": "CC BY 4.0 (CUAD documents)", "attribution": CUAD_ATTRIBUTION}
            if any(d.cuad for d in ctx.docs)
            else {}
        ),
    )
    save_task(task, out / "task.json")

    leaves = Counter(d.id.rsplit("/", 1)[0] for d in ctx.docs)
    cuad_docs = [d for d in ctx.docs if d.cuad is not None]
    by_type = Counter(c.type for c in criteria)
    by_class = Counter(i.klass for i in issues)
    cuad_label = None
    if source is not None:
        cuad_label = "rlmdistill:cuad_sample" if source == SAMPLE_SOURCE.resolve() else str(source)
    room_meta = {
        "kind": "synthetic",
        "generator": GENERATOR,
        "built_by": f"rlmdistill {__version__}",
        "seed": seed,
        "n_docs": n_docs,
        "length_scale": length_scale,
        "cuad_source": cuad_label,
        "cuad_partition": list(cuad_partition),
        "task_id": task.id,
        "room_hash": room_hash,
        "target": ctx.target,
        "buyer": ctx.buyer,
        "deal_structure": ctx.structure,
        "letter_of_intent": ctx.loi.id,
        "sizes": {
            "documents": n_docs,
            "cuad_documents": len(cuad_docs),
            "chars": n_chars,
            "bytes": n_bytes,
            "approx_tokens": round(n_chars / CHARS_PER_TOKEN),
            "chars_per_token_assumed": CHARS_PER_TOKEN,
            "categories": len(CATEGORIES),
            "leaf_folders": len(leaves),
            "criteria": len(criteria),
        },
        "criteria_by_type": dict(sorted(by_type.items())),
        "issues_by_class": dict(sorted(by_class.items())),
        "folders": dict(sorted(leaves.items())),
        "cuad_documents": {d.id: d.cuad.name for d in cuad_docs if d.cuad is not None},
        "issues": issue_meta,
        "attribution": CUAD_ATTRIBUTION if cuad_docs else None,
    }
    (out / "room.json").write_text(
        json.dumps(room_meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (out / "ATTRIBUTION.md").write_text(_attribution(cuad_docs), encoding="utf-8")
    return SynthReport(
        out=out,
        seed=seed,
        task_id=task.id,
        room_hash=room_hash,
        target=ctx.target,
        n_docs=n_docs,
        n_cuad_docs=len(cuad_docs),
        n_chars=n_chars,
        n_bytes=n_bytes,
        approx_tokens=round(n_chars / CHARS_PER_TOKEN),
        n_categories=len(CATEGORIES),
        n_folders=len(leaves),
        n_criteria=len(criteria),
        criteria_by_type=dict(sorted(by_type.items())),
        issues_by_class=dict(sorted(by_class.items())),
        folders=dict(sorted(leaves.items())),
    )
