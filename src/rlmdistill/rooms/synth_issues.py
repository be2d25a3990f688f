"""Planted issues of a synthetic room as data: the template types, and the one renderer
(:func:`plant`) that turns a template into an issue planted in the room's plan.

An :class:`IssueTemplate` says, for one kind of issue (``coc-termination``, ``consent``,
``side-letter``, ...), which documents it is planted in, which values it draws (in order:
every draw consumes the plan's seeded ``random.Random``, so the order fixes the room), the
planted text (one :class:`SpanRule` per document), the rubric criterion's title and
PASS/FAIL text, the gold amounts of its ``quantification`` criterion, a ``recommendation``
criterion and, for missing evidence, the absent document. The table of kinds is
:data:`rlmdistill.rooms.synth_kinds.ISSUE_TEMPLATES`; :mod:`rlmdistill.rooms.synth` plans
rooms with it.

Texts are :meth:`str.format` templates over the values: the plan's own (``{t}`` the target's
short name, ``{target}``, ``{buyer}``, ``{structure}``, ``{structure_text}``, ``{loi}`` the
letter of intent) and the template's, in the order they are drawn. A picked document is a
:class:`DocRef` (``{doc.id}``, ``{doc.title}``, ``{doc.cp}`` the counterparty, ``{doc.short}``
its short name, ``{doc.folder}``, ``{doc.slug}``); a drawn company is a :class:`Party`
(``{bank}``, ``{bank.short}``, ``{bank.slug}``). The format spec ``usd`` writes an amount as
:func:`~rlmdistill.rooms.synth_text.format_usd` does (``{amount:usd}`` -> ``$2,450,000``);
``{n:,}`` groups digits as usual.

Value specs (frozen dataclasses, evaluated in order by :func:`plant`):

- draws: :class:`Pick` (a generated document, fewest planted paragraphs first),
  :class:`Choice`, :class:`Int`, :class:`Money`, :class:`Date`, :class:`Company`,
  :class:`Person`;
- derived, no draw: :class:`Text` (a template over earlier values), :class:`ByDeal` (texts
  chosen by the deal structure), :class:`Calc` (a function of earlier values, for arithmetic).

A template is checked when it is made (every name a text uses is defined, picks exclude
earlier picks only, ...): a bad table entry raises :class:`IssueTemplateError` naming the kind
and the field, at import.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal, NamedTuple

from rlmdistill.rooms.synth_catalog import DocKind
from rlmdistill.rooms.synth_text import (
    company_name,
    format_usd,
    person_name,
    random_date,
    short_name,
)
from rlmdistill.rooms.task import Amount
from rlmdistill.rooms.text import slugify

__all__ = [
    "AMOUNT_TOLERANCE",
    "BASE_VALUES",
    "DEAL_STRUCTURES",
    "AmountRule",
    "ByDeal",
    "Calc",
    "Choice",
    "Company",
    "Date",
    "DealStructure",
    "DocRef",
    "Int",
    "IssueClass",
    "IssueTemplate",
    "IssueTemplateError",
    "Money",
    "Party",
    "Person",
    "Pick",
    "PlanContext",
    "PlannedDoc",
    "PlantedIssue",
    "PlantedSpan",
    "Severity",
    "SpanRule",
    "Text",
    "plant",
]

IssueClass = Literal["single", "multi", "missing"]
"""Kinds of planted issue: one document, two or more documents combined, absent document."""
DealStructure = Literal["share purchase", "merger", "asset purchase"]
"""Deal structures a letter of intent can fix."""
Severity = Literal["high", "medium", "low"]
"""An issue's severity; its finding criterion's weight is 3, 2 or 1."""

AMOUNT_TOLERANCE = 0.05
"""Relative tolerance of every gold amount (within 5%, the LAB example's wording)."""

DEAL_STRUCTURES: tuple[DealStructure, ...] = ("share purchase", "merger", "asset purchase")
"""The structures, in the order the plan draws from."""

BASE_VALUES = ("t", "target", "buyer", "structure", "structure_text", "loi")
"""Values every template may use without drawing them (see the module docstring)."""


class IssueTemplateError(ValueError):
    """An issue template is malformed (an undefined name, a pick that excludes a later
    pick, a missing-evidence kind without an absent document, ...); the message names the
    kind and the field."""


# ----------------------------------------------------------------------------- plan records
@dataclass
class PlannedDoc:
    """One document of a room's plan (written later by :mod:`rlmdistill.rooms.synth`)."""

    index: int
    id: str
    """Document id: its POSIX path under ``documents/``."""
    category: str
    """Category folder (``02_Material_Contracts``)."""
    kind: DocKind | None
    """``None`` for a CUAD contract and for the letter of intent."""
    cp: str
    """Counterparty (full name)."""
    n_chars: int
    """Filler characters to generate."""
    cuad: Path | None = None
    """The CUAD contract copied verbatim, or ``None``."""
    inserts: list[str] = field(default_factory=list)
    """Planted paragraphs, each placed as its own paragraph in a random section."""
    fixed: list[str] = field(default_factory=list)
    """Paragraphs the document always opens with (the letter of intent's deal terms)."""


@dataclass
class PlantedSpan:
    """Text of an issue in one document."""

    doc: PlannedDoc
    text: str
    planted: bool = True
    """``False`` for text the document holds anyway (the letter of intent's structure)."""


@dataclass
class PlantedIssue:
    """One issue, rendered from its template: what the rubric and ``room.json`` say of it."""

    kind: str
    klass: IssueClass
    severity: Severity
    category: str
    """Evidence category (CUAD spelling where one fits)."""
    title: str
    """The finding criterion's title."""
    match: str
    """The finding criterion's PASS/FAIL text."""
    spans: list[PlantedSpan]
    amounts: list[Amount] = field(default_factory=list)
    amount_what: str = ""
    """What the amounts are, for the ``quantification`` criterion's text."""
    recommendation: tuple[str, str] | None = None
    """Title and PASS/FAIL text of a ``recommendation`` criterion."""
    absent: dict[str, str] | None = None
    """``{"title", "would_be_id"}`` of the document a missing-evidence issue refers to."""


@dataclass
class PlanContext:
    """What a template draws from: the room's plan and its seeded random generator."""

    rng: random.Random
    target: str
    t: str
    """The target's short name."""
    buyer: str
    structure: DealStructure
    structure_text: str
    """The letter of intent's paragraph stating the structure."""
    loi: PlannedDoc
    docs: list[PlannedDoc]
    by_category: dict[str, list[PlannedDoc]]
    taken_ids: set[str]

    def pick(
        self, category: str, *, exclude: tuple[PlannedDoc, ...] = (), contract: bool = False
    ) -> PlannedDoc:
        """A generated document of ``category`` (fewest planted paragraphs first; with
        ``contract``, a contract where the category has one; any generated document when the
        category has none left)."""
        pool = [d for d in self.by_category[category] if d.kind is not None and d not in exclude]
        if contract:
            pool = [d for d in pool if d.kind is not None and d.kind.family == "contract"] or pool
        if not pool:
            pool = [d for d in self.docs if d.kind is not None and d not in exclude]
        fewest = min(len(d.inserts) for d in pool)
        return self.rng.choice([d for d in pool if len(d.inserts) == fewest])


class Party(str):
    """A company's full name (a ``str``) with its defined short name and file-name slug."""

    __slots__ = ()

    @property
    def short(self) -> str:
        """First word: ``"Kesri Supply LLC"`` -> ``"Kesri"``."""
        return short_name(self)

    @property
    def slug(self) -> str:
        """File-name slug of the short name: ``"kesri"``."""
        return slugify(short_name(self), "_")


class DocRef(NamedTuple):
    """A picked document as templates see it."""

    id: str
    folder: str
    """Leaf folder of the document (its id up to the last ``/``)."""
    title: str
    """Its kind's title (``"Supply Agreement"``; ``"document"`` for one without a kind)."""
    cp: Party
    """Counterparty."""

    @property
    def short(self) -> str:
        """The counterparty's short name."""
        return self.cp.short

    @property
    def slug(self) -> str:
        """The counterparty's file-name slug."""
        return self.cp.slug

    @classmethod
    def of(cls, doc: PlannedDoc) -> DocRef:
        """The view of ``doc``."""
        title = doc.kind.title if doc.kind is not None else "document"
        return cls(doc.id, doc.id.rsplit("/", 1)[0], title, Party(doc.cp))


# ----------------------------------------------------------------------------- value specs
@dataclass(frozen=True)
class Pick:
    """A generated document of ``category`` (:meth:`PlanContext.pick`), not one of the
    earlier picks named in ``exclude``; ``contract`` prefers contracts."""

    category: str
    contract: bool = False
    exclude: tuple[str, ...] = ()


@dataclass(frozen=True)
class Choice:
    """One of ``options`` (``rng.choice``)."""

    options: tuple[Any, ...]


@dataclass(frozen=True)
class Int:
    """An integer in ``[lo, hi]`` (``rng.randint``)."""

    lo: int
    hi: int


@dataclass(frozen=True)
class Money:
    """Whole dollars in ``[lo, hi]`` in steps of ``step``."""

    lo: int
    hi: int
    step: int = 5_000


@dataclass(frozen=True)
class Date:
    """A date in years ``lo``-``hi`` (:func:`~rlmdistill.rooms.synth_text.random_date`)."""

    lo: int
    hi: int


@dataclass(frozen=True)
class Company:
    """A fictitious company (:class:`Party`)."""


@dataclass(frozen=True)
class Person:
    """A fictitious person's name."""


@dataclass(frozen=True)
class Text:
    """A template over earlier values (no draw)."""

    template: str


@dataclass(frozen=True)
class ByDeal:
    """Texts chosen by the deal structure: ``cases[structure]`` maps names to templates;
    the value is a namespace of the filled texts (``{deal.clause}``). No draw."""

    cases: Mapping[DealStructure, Mapping[str, str]]


@dataclass(frozen=True)
class Calc:
    """``fn(values)`` of earlier values (no draw), for arithmetic a template cannot do."""

    fn: Callable[[Mapping[str, Any]], Any]


Spec = Pick | Choice | Int | Money | Date | Company | Person | Text | ByDeal | Calc
"""A value spec."""

_DRAW_SPECS = (Pick, Choice, Int, Money, Date, Company, Person)


@dataclass(frozen=True)
class SpanRule:
    """Planted text ``text`` in the document picked as ``doc`` (``"loi"``: the letter of
    intent); ``planted=False`` for text the document holds anyway."""

    doc: str
    text: str
    planted: bool = True


@dataclass(frozen=True)
class AmountRule:
    """A gold amount: the value named ``value``, in ``unit`` (``"USD"`` or ``"%"``), with a
    ``note`` template for a derived figure (its basis in the documents)."""

    value: str
    unit: str = "USD"
    note: str | None = None


@dataclass(frozen=True)
class IssueTemplate:
    """One kind of planted issue, as data (see the module docstring).

    ``values`` are drawn in their order; ``category``, ``title``, ``match``, ``amount_what``,
    the recommendation, the absent document and every span text are templates over them.
    Raises :class:`IssueTemplateError` when a text names an undefined value, a pick excludes
    a document not picked before it, a span is in a document not picked, or a
    missing-evidence kind has no absent document (and only those have one).
    """

    kind: str
    klass: IssueClass
    severity: Severity
    category: str
    values: Mapping[str, Spec]
    spans: tuple[SpanRule, ...]
    title: str
    match: str
    amounts: tuple[AmountRule, ...] = ()
    amount_what: str = ""
    recommendation: tuple[str, str] | None = None
    """Title and PASS/FAIL text of a ``recommendation`` criterion."""
    absent: tuple[str, str] | None = None
    """Title and would-be document id of the absent document (missing evidence only)."""

    def __post_init__(self) -> None:
        _check(self)

    def texts(self) -> Iterator[tuple[str, str]]:
        """``(field, template)`` for every text filled after the values are drawn."""
        yield "category", self.category
        yield "title", self.title
        yield "match", self.match
        yield "amount_what", self.amount_what
        for i, span in enumerate(self.spans):
            yield f"spans[{i}]", span.text
        for i, rule in enumerate(self.amounts):
            if rule.note is not None:
                yield f"amounts[{i}].note", rule.note
        if self.recommendation is not None:
            yield "recommendation[0]", self.recommendation[0]
            yield "recommendation[1]", self.recommendation[1]
        if self.absent is not None:
            yield "absent[0]", self.absent[0]
            yield "absent[1]", self.absent[1]


# ----------------------------------------------------------------------------- checks
def _names(template: str, kind: str, where: str) -> set[str]:
    """Root names of the fields of ``template`` (``{doc.id}`` -> ``doc``)."""
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise IssueTemplateError(f"issue kind {kind!r}, {where}: {exc} in {template!r}") from None
    roots = set()
    for name in fields:
        root = name.split(".", 1)[0].split("[", 1)[0]
        if not root or root.isdigit():
            raise IssueTemplateError(
                f"issue kind {kind!r}, {where}: positional field {{{name}}} in {template!r}"
            )
        roots.add(root)
    return roots


def _check(tpl: IssueTemplate) -> None:
    kind = tpl.kind
    if not kind or kind != kind.strip():
        raise IssueTemplateError(f"issue kind {kind!r}: kind must be a non-empty name")
    if tpl.klass not in ("single", "multi", "missing"):
        raise IssueTemplateError(f"issue kind {kind!r}: class {tpl.klass!r} is not known")
    if tpl.severity not in ("high", "medium", "low"):
        raise IssueTemplateError(f"issue kind {kind!r}: severity {tpl.severity!r} is not known")
    defined = set(BASE_VALUES)
    picks = {"loi"}
    for name, spec in tpl.values.items():
        where = f"values[{name!r}]"
        if name in defined:
            raise IssueTemplateError(f"issue kind {kind!r}, {where}: {name!r} is already defined")
        if not name.isidentifier():
            raise IssueTemplateError(f"issue kind {kind!r}, {where}: not an identifier")
        if isinstance(spec, Pick):
            for other in spec.exclude:
                if other not in picks:
                    raise IssueTemplateError(
                        f"issue kind {kind!r}, {where}: excludes {other!r}, not picked before"
                    )
            picks.add(name)
        elif isinstance(spec, Text):
            _need(_names(spec.template, kind, where), defined, kind, where)
        elif isinstance(spec, ByDeal):
            for structure in DEAL_STRUCTURES:
                if structure not in spec.cases:
                    raise IssueTemplateError(f"issue kind {kind!r}, {where}: no {structure!r}")
                for key, text in spec.cases[structure].items():
                    _need(_names(text, kind, f"{where}[{key!r}]"), defined, kind, where)
        elif not isinstance(spec, (*_DRAW_SPECS, Calc)):
            raise IssueTemplateError(f"issue kind {kind!r}, {where}: {spec!r} is not a spec")
        defined.add(name)
    if not tpl.spans:
        raise IssueTemplateError(f"issue kind {kind!r}: no spans")
    for i, span in enumerate(tpl.spans):
        if span.doc not in picks:
            raise IssueTemplateError(
                f"issue kind {kind!r}, spans[{i}]: document {span.doc!r} is not picked"
            )
    for i, rule in enumerate(tpl.amounts):
        _need({rule.value}, defined, kind, f"amounts[{i}]")
    for where, text in tpl.texts():
        _need(_names(text, kind, where), defined, kind, where)
    if (tpl.absent is not None) != (tpl.klass == "missing"):
        raise IssueTemplateError(
            f"issue kind {kind!r}: an absent document is for missing-evidence kinds only, "
            "and every missing-evidence kind needs one"
        )


def _need(names: set[str], defined: set[str], kind: str, where: str) -> None:
    undefined = sorted(names - defined)
    if undefined:
        raise IssueTemplateError(
            f"issue kind {kind!r}, {where}: {', '.join(undefined)} not defined before use"
        )


# ----------------------------------------------------------------------------- renderer
class _Formatter(string.Formatter):
    def format_field(self, value: Any, format_spec: str) -> Any:
        if format_spec == "usd":
            return format_usd(value)
        return super().format_field(value, format_spec)


_FORMAT = _Formatter()


def _fill(template: str, values: Mapping[str, Any], kind: str, where: str) -> str:
    try:
        return _FORMAT.vformat(template, (), values)
    except (AttributeError, KeyError, IndexError, TypeError, ValueError) as exc:
        raise IssueTemplateError(f"issue kind {kind!r}, {where}: {exc!r} in {template!r}") from None


def plant(template: IssueTemplate, ctx: PlanContext) -> PlantedIssue:
    """Draw ``template``'s values from ``ctx`` (its ``rng``, in order) and fill its texts.

    Returns the :class:`PlantedIssue`; the caller appends the planted spans to their
    documents' ``inserts``. Raises :class:`IssueTemplateError` when a text cannot be filled
    (an attribute that does not exist, a format spec that does not fit the value).
    """
    kind, rng = template.kind, ctx.rng
    values: dict[str, Any] = {
        "t": ctx.t,
        "target": ctx.target,
        "buyer": ctx.buyer,
        "structure": ctx.structure,
        "structure_text": ctx.structure_text,
        "loi": DocRef.of(ctx.loi),
    }
    docs = {"loi": ctx.loi}
    for name, spec in template.values.items():
        where = f"values[{name!r}]"
        value: Any
        match spec:
            case Pick(category, contract, exclude):
                docs[name] = ctx.pick(
                    category, exclude=tuple(docs[n] for n in exclude), contract=contract
                )
                value = DocRef.of(docs[name])
            case Choice(options):
                value = rng.choice(options)
            case Int(lo, hi):
                value = rng.randint(lo, hi)
            case Money(lo, hi, step):
                value = rng.randrange(lo // step, hi // step + 1) * step
            case Date(lo, hi):
                value = random_date(rng, lo, hi)
            case Company():
                value = Party(company_name(rng))
            case Person():
                value = person_name(rng)
            case Text(text):
                value = _fill(text, values, kind, where)
            case ByDeal(cases):
                case_texts = cases[ctx.structure]
                value = SimpleNamespace(
                    **{k: _fill(v, values, kind, f"{where}[{k!r}]") for k, v in case_texts.items()}
                )
            case Calc(fn):
                value = fn(values)
            case _:  # unreachable: _check admits only the specs above
                raise IssueTemplateError(f"issue kind {kind!r}, {where}: {spec!r} is not a spec")
        values[name] = value

    def fill(text: str, where: str) -> str:
        return _fill(text, values, kind, where)

    amounts = []
    for i, rule in enumerate(template.amounts):
        kwargs: dict[str, Any] = {"value": values[rule.value], "tolerance": AMOUNT_TOLERANCE}
        if rule.unit != "USD":  # left unset otherwise: task.json writes only what is set
            kwargs["unit"] = rule.unit
        if rule.note is not None:
            kwargs["note"] = fill(rule.note, f"amounts[{i}].note")
        amounts.append(Amount(**kwargs))
    rec = template.recommendation
    absent = template.absent
    return PlantedIssue(
        kind,
        template.klass,
        template.severity,
        fill(template.category, "category"),
        fill(template.title, "title"),
        fill(template.match, "match"),
        [
            PlantedSpan(docs[s.doc], fill(s.text, f"spans[{i}]"), s.planted)
            for i, s in enumerate(template.spans)
        ],
        amounts,
        fill(template.amount_what, "amount_what"),
        recommendation=(
            None
            if rec is None
            else (fill(rec[0], "recommendation[0]"), fill(rec[1], "recommendation[1]"))
        ),
        absent=(
            None
            if absent is None
            else {
                "title": fill(absent[0], "absent[0]"),
                "would_be_id": fill(absent[1], "absent[1]"),
            }
        ),
    )
