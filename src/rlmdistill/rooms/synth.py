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

The kinds are data: one :class:`~rlmdistill.rooms.synth_issues.IssueTemplate` each in
:data:`~rlmdistill.rooms.synth_kinds.ISSUE_TEMPLATES` (documents, values drawn, planted text,
criterion texts, amounts), rendered by :func:`~rlmdistill.rooms.synth_issues.plant`; this
module sizes and plans the room, cycles through each class's kinds and writes the files.

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
import math
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlmdistill import __version__
from rlmdistill.rooms.cuad import CUAD_ATTRIBUTION, SAMPLE_SOURCE
from rlmdistill.rooms.meta import SynthRoomMeta, write_room_meta
from rlmdistill.rooms.output import prepare_room_folder
from rlmdistill.rooms.synth_catalog import CATEGORIES, FAMILY_CHARS
from rlmdistill.rooms.synth_issues import (
    DEAL_STRUCTURES,
    DealStructure,
    IssueClass,
    PlanContext,
    PlannedDoc,
    PlantedIssue,
    Severity,
    plant,
)
from rlmdistill.rooms.synth_kinds import ISSUE_TEMPLATES, TEMPLATES_BY_KIND
from rlmdistill.rooms.synth_text import (
    STATES,
    company_name,
    filler_sections,
    format_usd,
    person_name,
    random_date,
    short_name,
    target_name,
)
from rlmdistill.rooms.task import Criterion, Evidence, Task, save_task
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
"""Generator version written to ``room.json``; bump when the same seed would give other bytes
(``tests/data/synth_rooms_sha256.json`` pins the bytes of ``synth-v3`` rooms)."""
MIN_DOCS = 20
"""Smallest room (documents)."""
MAX_DOCS = 5000
"""Largest room (documents), LAB-Diligence scale."""
CHARS_PER_TOKEN = 4.0
"""Characters per token used for the *approximate* token counts printed and stored (a common
rule of thumb for English; ``benchmarks/bench_synth_room.py`` measures it with a real
tokenizer)."""

_WEIGHT: dict[Severity, float] = {"high": 3.0, "medium": 2.0, "low": 1.0}
_CLASS_SHARE: dict[IssueClass, float] = {"multi": 0.3, "missing": 0.2}
_CUAD_EVERY = 10


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


# ----------------------------------------------------------------------------- planning
_STRUCTURE_TEXT: dict[DealStructure, str] = {
    "share purchase": (
        "{buyer} will acquire all of the issued and outstanding shares of {target} from its "
        "shareholders, following which {target} will be a wholly owned subsidiary of {buyer}."
    ),
    "merger": (
        "A wholly owned subsidiary of {buyer} will merge with and into {target}, with "
        "{target} surviving the merger as a wholly owned subsidiary of {buyer}."
    ),
    "asset purchase": (
        "{buyer} will purchase substantially all of the assets of {target}, including its "
        "rights under the contracts listed in the disclosure schedule, and will assume only the "
        "liabilities expressly listed there."
    ),
}
"""The letter of intent's paragraph stating each deal structure."""
_KINDS_OF: dict[IssueClass, tuple[str, ...]] = {
    "single": tuple(t.kind for t in ISSUE_TEMPLATES if t.klass == "single"),
    "multi": tuple(t.kind for t in ISSUE_TEMPLATES if t.klass == "multi"),
    "missing": tuple(t.kind for t in ISSUE_TEMPLATES if t.klass == "missing"),
}
"""Issue kinds of each class, in the table's order (the plan shuffles from it)."""


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


def _plan(
    n_docs: int, seed: int, scale: float, cuad: list[Path]
) -> tuple[PlanContext, list[PlantedIssue]]:
    rng = random.Random(f"{GENERATOR}:plan:{seed}")
    target = target_for_seed(seed)
    t = short_name(target)
    buyer = company_name(rng).split()[0] + " Acquisition Holdings LLC"
    structure = rng.choice(DEAL_STRUCTURES)
    n_cuad = min(len(cuad), n_docs // _CUAD_EVERY)
    chosen_cuad = sorted(rng.sample(cuad, n_cuad)) if n_cuad else []

    counts = _allocate(n_docs - n_cuad, [c.weight for c in CATEGORIES], 1)
    mc = [c.folder for c in CATEGORIES].index("02_Material_Contracts")
    counts[mc] += n_cuad
    if counts[mc] < n_cuad + 2:  # the material-contracts folder needs generated contracts too
        raise SynthError(f"internal: too few material contracts for {n_docs} documents")
    opened = _leaf_plan(counts, n_leaf_folders_for(n_docs))
    counterparties = sorted({company_name(rng) for _ in range(max(12, n_docs // 3))})

    docs: list[PlannedDoc] = []
    taken: set[str] = set()
    by_category: dict[str, list[PlannedDoc]] = {c.folder: [] for c in CATEGORIES}

    def add(category: str, leaf: str, stem: str, suffix: str, **kw: Any) -> PlannedDoc:
        base = f"{leaf}/{stem}"
        doc_id, k = f"{base}{suffix}", 2
        while doc_id in taken:
            doc_id, k = f"{base}_{k}{suffix}", k + 1
        taken.add(doc_id)
        doc = PlannedDoc(index=len(docs), id=doc_id, category=category, **kw)
        docs.append(doc)
        by_category[category].append(doc)
        return doc

    loi: PlannedDoc | None = None
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
    structure_text = _STRUCTURE_TEXT[structure].format(buyer=buyer, target=target)
    loi.fixed.append(structure_text)
    ctx = PlanContext(
        rng, target, t, buyer, structure, structure_text, loi, docs, by_category, taken
    )

    n_issues = n_issues_for(n_docs)
    n_multi = max(1, round(n_issues * _CLASS_SHARE["multi"]))
    n_missing = max(1, round(n_issues * _CLASS_SHARE["missing"]))
    n_single = n_issues - n_multi - n_missing
    plan: list[tuple[IssueClass, str]] = []
    groups: tuple[tuple[IssueClass, tuple[str, ...], int], ...] = (
        ("single", _KINDS_OF["single"], n_single),
        ("multi", _KINDS_OF["multi"], n_multi),
        ("missing", _KINDS_OF["missing"], n_missing),
    )
    for klass, kinds, n in groups:
        order = list(kinds)
        rng.shuffle(order)
        plan += [(klass, order[i % len(order)]) for i in range(n)]
    rng.shuffle(plan)
    issues: list[PlantedIssue] = []
    for _klass, issue_kind in plan:
        issue = plant(TEMPLATES_BY_KIND[issue_kind], ctx)
        for span in issue.spans:
            if span.planted:
                span.doc.inserts.append(span.text)
        issues.append(issue)
    return ctx, issues


# ----------------------------------------------------------------------------- rendering
def _render(doc: PlannedDoc, ctx: PlanContext, seed: int) -> str:
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


def _criteria(
    ctx: PlanContext, issues: list[PlantedIssue]
) -> tuple[list[Criterion], list[dict[str, Any]]]:
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


def _attribution(cuad_docs: list[PlannedDoc]) -> str:
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
    write_room_meta(out, SynthRoomMeta.model_validate(room_meta))
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
