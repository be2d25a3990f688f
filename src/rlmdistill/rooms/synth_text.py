"""Word lists, a seeded sentence grammar and filler sections for synthetic data rooms
(:mod:`rlmdistill.rooms.synth`).

Everything here is this project's own text, written for the generator. Names are assembled
from syllables and pools; filler is composed from a small context-free grammar (sentence
templates with alternatives ``[a|b|c]``, named sub-rules and value slots ``{slot}``: dates,
amounts, people, companies, products, reference numbers, durations, section numbers) so that
almost no 64-character stretch of filler recurs across a room's documents, as in a real data
room where the parties, figures and wording differ from document to document. Paragraph
shapes differ by document family: contracts have definitions and lettered lists, minutes have
attendance, motions and resolutions, reports have numbered observations with management
responses, financial statements and reports have figure tables, policies have numbered rules,
schedules have item lists. Boilerplate that recurs in real rooms (standard definitions,
signature lines, headings) may still repeat.

Filler is meant to read like ordinary data-room text and to carry *no* diligence finding: no
change-of-control, assignment, exclusivity, non-compete, uncapped-liability, minimum-purchase,
consent, default or similar language, so the planted issues are the only ones in a room. Every
filler paragraph names the target (by its short name), so two rooms with different targets
share no paragraph verbatim (:mod:`rlmdistill.rooms.roomset` checks this across splits).

All randomness comes from a caller's ``random.Random``; nothing here reads the clock or
``hash()``, so output is reproducible across processes and machines.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from typing import Literal, TypeVar

__all__ = [
    "FAMILY_HEADINGS",
    "Family",
    "company_name",
    "filler_paragraph",
    "filler_sections",
    "format_date",
    "format_usd",
    "person_name",
    "render",
    "short_name",
    "target_name",
]

_T = TypeVar("_T")


def _split(text: str) -> tuple[str, ...]:
    return tuple(text.split())


def _pick(rng: random.Random, seq: Sequence[_T]) -> _T:
    """``seq[i]`` for a uniform ``i`` (one ``random()`` call: faster than ``rng.choice``)."""
    return seq[int(rng.random() * len(seq))]


Family = Literal["contract", "minutes", "report", "financial", "letter", "policy", "schedule"]
"""Document families: which filler sentences, paragraph shapes and headings a document uses."""

_SYL_A = _split(
    "Nor Kes Ald Bri Cal Dun Eld Fen Gar Hal Ish Jor Kal Lum Mar Nev Orl Pel Quen Ros Sel "
    "Tam Ulv Var Wen Xan Yor Zel Bel Cor Dar Ems Fal Gil Hev Ith Kor Lar Mel Nyr"
)
_SYL_B = _split("va ri lo ta ne mo si ra de lu ca te no be fi ga ro sa ve di ma ki pe")
_SYL_C = _split(
    "le ron tis dor lin ton wick mere ford vale gate crest wyn bury ridge holt stead "
    "worth field mont brook haven cott dale"
)
_INDUSTRY = _split(
    "Robotics Therapeutics Logistics Foods Analytics Materials Devices Software Energy "
    "Networks Biosciences Instruments Packaging Systems Health Mobility Optics Chemicals "
    "Semiconductors Media Payments Aerospace Diagnostics Textiles"
)
_COUNTERPARTY_KIND = _split(
    "Industries Holdings Partners Supply Distribution Technologies Manufacturing Group "
    "Services Trading Solutions Labs Components Enterprises Retail Capital"
)
_FORMS = ("Inc.", "Corp.", "LLC", "Ltd.", "L.P.", "GmbH", "S.A.", "plc")
_FIRST = _split(
    "Alice Bram Carla Dev Elena Farid Grace Hiro Ines Jonas Keira Luca Maya Nikhil Olga "
    "Pavel Quinn Rosa Samir Tessa Umar Vera Wes Xin Yara Zane Amara Bruno Chloe Dmitri"
)
_LAST = _split(
    "Abernathy Brandt Castillo Dorsey Eklund Fairbanks Galloway Hartmann Ibarra Jansen "
    "Kowalski Lindqvist Moreau Nakamura Okafor Petrov Quintero Rasmussen Sorensen Takeda "
    "Underwood Varga Whitfield Xu Yilmaz Zimmermann Achebe Bellamy Carvalho Dunmore"
)
# Larger pools for filler people (planted text keeps the pools above).
_FIRST_MORE = _FIRST + _split(
    "Aaron Abigail Adrian Aisha Alejandro Anika Arjun Beatriz Benedikt Bianca Caleb Camille "
    "Chidi Colm Dalia Daniel Dana Diego Eamon Edith Emeka Esther Fatima Felix Fiona Gideon "
    "Greta Hamid Hannah Hector Helena Ibrahim Ingrid Isaac Ivana Jamal Janelle Javier Joanna "
    "Jun Kamala Karim Katarina Kenji Laila Lars Leona Liam Lucia Malik Marek Marisol Mateo "
    "Mei Miriam Nadia Naomi Nils Noor Oren Oscar Paloma Priya Rafael Rania Ravi Renata Rohan "
    "Ruth Sabine Santiago Selin Simone Sofia Stellan Tariq Thea Tobias Ugo Valentina Viktor "
    "Wanjiru Wilhelmina Yusuf Zara Zofia Anders Brigid Cyrus Delphine Emil Floriane"
)
_LAST_MORE = _LAST + _split(
    "Adeyemi Alvarez Andersen Baptiste Bauer Becker Bergstrom Blackwood Bose Brennan "
    "Calloway Chaudhry Costa Dalton Delacroix Diallo Dubois Ellison Escobar Farrell Ferreira "
    "Fitzgerald Fontaine Gallagher Goldberg Guerrero Haddad Halvorsen Hoffman Iyer Jovanovic "
    "Kaminski Keller Kimura Lambert Larsen Leclerc Lombardi Lund Marchetti Mbeki Mendoza "
    "Mercer Morales Novak Nyberg O'Connell Oyelaran Pacheco Palmer Pereira Quinlan Reyes "
    "Richter Rossi Saito Salazar Schmidt Sharma Silva Stavros Strand Sullivan Tanaka Thornton "
    "Torres Vasquez Vogel Wagner Walsh Weber Winslow Yamamoto Zhang Ziegler"
)
_INITIALS = "ABCDEFGHJKLMNPRSTVW"
_ROLES = (
    "Chief Executive Officer",
    "Chief Financial Officer",
    "General Counsel",
    "Controller",
    "Treasurer",
    "Corporate Secretary",
    "Vice President, Operations",
    "Vice President, Sales",
    "Head of Procurement",
    "Director of Quality",
    "Plant Manager",
    "Head of People",
    "Director of Engineering",
    "Head of Internal Audit",
    "IT Director",
    "Facilities Manager",
    "Senior Counsel",
    "Financial Controller",
    "Head of Supply Chain",
    "Compliance Manager",
    "Director of Product",
    "Customer Success Lead",
    "Tax Director",
    "Assistant Secretary",
    "Regional Sales Manager",
    "Head of Information Security",
)
CITIES = _split(
    "Austin Columbus Raleigh Denver Portland Phoenix Pittsburgh Sacramento Tampa Boise "
    "Madison Omaha Richmond Tucson Spokane Reno Albany Dayton Fresno Wichita"
)
_CITIES_MORE = (
    *CITIES,
    "Akron",
    "Allentown",
    "Asheville",
    "Baton Rouge",
    "Birmingham",
    "Burlington",
    "Cedar Rapids",
    "Charleston",
    "Chattanooga",
    "Des Moines",
    "Durham",
    "El Paso",
    "Eugene",
    "Fort Wayne",
    "Grand Rapids",
    "Greenville",
    "Hartford",
    "Huntsville",
    "Knoxville",
    "Lansing",
    "Lexington",
    "Lincoln",
    "Little Rock",
    "Louisville",
    "Lubbock",
    "Memphis",
    "Milwaukee",
    "Mobile",
    "Newark",
    "Norfolk",
    "Ogden",
    "Peoria",
    "Provo",
    "Rochester",
    "Rockford",
    "Salem",
    "Savannah",
    "Scranton",
    "Sioux Falls",
    "Syracuse",
    "Toledo",
    "Topeka",
    "Tulsa",
    "Worcester",
)
STATES = (
    "Delaware",
    "New York",
    "California",
    "Texas",
    "Illinois",
    "Ohio",
    "Washington",
    "Massachusetts",
    "Colorado",
    "Georgia",
)
_STATES_MORE = (
    *STATES,
    "Arizona",
    "Florida",
    "Indiana",
    "Michigan",
    "Minnesota",
    "Missouri",
    "New Jersey",
    "North Carolina",
    "Oregon",
    "Pennsylvania",
    "Tennessee",
    "Utah",
    "Virginia",
    "Wisconsin",
)
PRODUCTS = (
    "Series A controllers",
    "sensor modules",
    "Atlas platform",
    "cold-chain pallets",
    "diagnostic kits",
    "Orbit app",
    "precision bearings",
    "coated films",
    "edge gateways",
    "Ledger suite",
    "battery packs",
    "infusion pumps",
    "spectral cameras",
    "resin blends",
)
_PROD_ADJ = _split(
    "modular compact industrial portable sealed insulated calibrated hybrid wireless "
    "high-flow low-voltage ruggedised stackable reusable dual-channel thermal optical "
    "automated smart heavy-duty lightweight recyclable pressurised embedded"
)
_PROD_NOUN = (
    "controllers",
    "sensor arrays",
    "pallets",
    "test kits",
    "bearings",
    "films",
    "gateways",
    "battery packs",
    "pumps",
    "cameras",
    "resin blends",
    "valves",
    "enclosures",
    "drive units",
    "filters",
    "cable assemblies",
    "power supplies",
    "label printers",
    "scanners",
    "racks",
    "analysers",
    "couplings",
    "display panels",
    "handsets",
    "software licences",
    "routers",
    "containers",
    "actuators",
    "meters",
    "fixtures",
)
_FACILITY = (
    "plant",
    "warehouse",
    "distribution centre",
    "head office",
    "laboratory",
    "service centre",
    "data centre",
    "assembly site",
    "sales office",
    "repair depot",
)
_STREET_KIND = ("Road", "Avenue", "Street", "Drive", "Parkway", "Boulevard", "Way", "Lane")
_DEPTS = (
    "finance",
    "procurement",
    "engineering",
    "quality",
    "logistics",
    "customer support",
    "facilities",
    "internal audit",
    "information technology",
    "human resources",
    "treasury",
    "product management",
    "field service",
    "marketing",
    "research",
    "manufacturing",
    "legal",
    "sales operations",
)
_REF_PREFIX = _split("PO INV SOW CO WO QR TKT RFQ GRN CR DN PR")
_MONTHS = _split(
    "January February March April May June July August September October November December"
)
_ORDINAL = ("first", "second", "third", "fourth")
_ROMAN = _split("I II III IV V VI VII VIII IX X XI XII")


def target_name(rng: random.Random) -> str:
    """A target company name such as ``"Norvaleford Robotics, Inc."`` (three syllables, an
    industry word and a corporate form; about 3.8 million combinations)."""
    stem = rng.choice(_SYL_A) + rng.choice(_SYL_B) + rng.choice(_SYL_C)
    return f"{stem} {rng.choice(_INDUSTRY)}, {rng.choice(('Inc.', 'Corp.'))}"


def company_name(rng: random.Random) -> str:
    """A counterparty name such as ``"Kesri Supply LLC"``."""
    stem = rng.choice(_SYL_A) + rng.choice(_SYL_B) + rng.choice(("", "", *_SYL_C))
    return f"{stem} {rng.choice(_COUNTERPARTY_KIND)} {rng.choice(_FORMS)}"


def short_name(name: str) -> str:
    """Defined short name of a company: its first word (``"Kesri Supply LLC"`` -> ``"Kesri"``)."""
    return name.split()[0].rstrip(",")


def person_name(rng: random.Random) -> str:
    """A person's name such as ``"Maya Okafor"`` (900 names: signatories, planted text)."""
    return f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"


def format_date(year: int, month: int, day: int) -> str:
    """``"March 3, 2021"`` (month 1-12)."""
    return f"{_MONTHS[month - 1]} {day}, {year}"


def random_date(rng: random.Random, lo: int = 2015, hi: int = 2024) -> str:
    """A date between ``lo`` and ``hi`` (years, inclusive), days 1-28."""
    return format_date(rng.randint(lo, hi), rng.randint(1, 12), rng.randint(1, 28))


def format_usd(value: float) -> str:
    """``"$2,450,000"`` (whole dollars)."""
    return f"${round(value):,}"


# ----------------------------------------------------------------------------- value slots
_NUMBER_WORDS = {
    2: "two",
    3: "three",
    5: "five",
    7: "seven",
    10: "ten",
    14: "fourteen",
    15: "fifteen",
    20: "twenty",
    21: "twenty-one",
    30: "thirty",
    45: "forty-five",
    60: "sixty",
    90: "ninety",
    120: "one hundred twenty",
    180: "one hundred eighty",
}
_DAY_COUNTS = tuple(_NUMBER_WORDS)
_DAY_UNITS = ("days", "days", "calendar days", "Business Days")


def _v_days(rng: random.Random) -> str:
    n = _pick(rng, _DAY_COUNTS)
    if n <= 10 and rng.random() < 0.4:
        return f"{_NUMBER_WORDS[n]} ({n}) {'months' if n > 1 else 'month'}"
    return f"{_NUMBER_WORDS[n]} ({n}) {_pick(rng, _DAY_UNITS)}"


def _v_date(rng: random.Random) -> str:
    r = int(rng.random() * 3360)  # 10 years x 12 months x 28 days
    return f"{_MONTHS[r % 12]} {r // 12 % 28 + 1}, {2015 + r // 336}"


def _v_amt(rng: random.Random) -> str:
    value = rng.randrange(1_000, 99_999) * 10 ** int(rng.random() * 3)
    if rng.random() < 0.15:
        return f"${value:,}.{int(rng.random() * 100):02d}"
    return f"${value:,}"


def _v_pct(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.5:
        return f"{1 + int(r * 80)}%"
    return f"{1 + int(rng.random() * 40)}.{int(rng.random() * 10)}%"


def _v_price(rng: random.Random) -> str:
    return f"${rng.randrange(100, 999_999) / 100:,.2f}"


def _v_small(rng: random.Random) -> str:
    return f"${rng.randrange(50, 5_000):,}"


def _v_n(rng: random.Random) -> str:
    return str(2 + int(rng.random() * 480))


def _v_big(rng: random.Random) -> str:
    return f"{rng.randrange(1_200, 480_000):,}"


def _v_year(rng: random.Random) -> str:
    return str(2016 + int(rng.random() * 9))


def _v_sec(rng: random.Random) -> str:
    r = rng.random()
    base = f"{2 + int(r * 17)}.{1 + int(rng.random() * 9)}"
    if r < 0.35:
        return f"Section {base}({'abcdefgh'[int(rng.random() * 8)]})"
    if r < 0.5:
        return f"Clause {base}"
    return f"Section {base}"


def _v_sched(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.4:
        return f"Schedule {1 + int(rng.random() * 14)}"
    if r < 0.8:
        return f"Exhibit {'ABCDEFGH'[int(rng.random() * 8)]}-{1 + int(rng.random() * 6)}"
    return f"Annex {_pick(rng, _ROMAN)}"


def _v_person(rng: random.Random) -> str:
    first = _pick(rng, _FIRST_MORE)
    last = (
        _pick(rng, _LAST_MORE)
        if rng.random() < 0.6
        else _pick(rng, _SYL_A) + _pick(rng, _SYL_C)  # a surname from syllables
    )
    if rng.random() < 0.3:
        return f"{first} {_pick(rng, _INITIALS)}. {last}"
    return f"{first} {last}"


def _v_role(rng: random.Random) -> str:
    return _pick(rng, _ROLES)


def _v_product(rng: random.Random) -> str:
    r = rng.random()
    noun = f"{_pick(rng, _PROD_ADJ)} {_pick(rng, _PROD_NOUN)}"
    if r < 0.3:
        letters = _pick(rng, _SYL_A).upper()[:2]
        return f"{noun} (model {letters}-{100 + int(rng.random() * 900)})"
    return noun


def _v_city(rng: random.Random) -> str:
    return _pick(rng, _CITIES_MORE)


def _v_state(rng: random.Random) -> str:
    return _pick(rng, _STATES_MORE)


def _v_site(rng: random.Random) -> str:
    city, facility = _pick(rng, _CITIES_MORE), _pick(rng, _FACILITY)
    if rng.random() < 0.3:
        return f"{city} {facility}"
    street = _pick(rng, _SYL_A) + _pick(rng, _SYL_C)
    return f"{facility} at {rng.randrange(10, 9_900)} {street} {_pick(rng, _STREET_KIND)}, {city}"


def _v_dept(rng: random.Random) -> str:
    return _pick(rng, _DEPTS)


def _v_company(rng: random.Random) -> str:
    return company_name(rng)


def _v_ref(rng: random.Random) -> str:
    return (
        f"{_pick(rng, _REF_PREFIX)}-{2016 + int(rng.random() * 9)}-{rng.randrange(100, 99_999):05d}"
    )


def _v_qty(rng: random.Random) -> str:
    return f"{rng.randrange(12, 60_000):,}"


def _v_quarter(rng: random.Random) -> str:
    year = 2016 + int(rng.random() * 9)
    if rng.random() < 0.5:
        return f"Q{1 + int(rng.random() * 4)} {year}"
    return f"the {_pick(rng, _ORDINAL)} quarter of {year}"


def _v_month(rng: random.Random) -> str:
    return f"{_pick(rng, _MONTHS)} {2016 + int(rng.random() * 9)}"


def _v_time(rng: random.Random) -> str:
    hour = 8 + int(rng.random() * 9)
    minute = _pick(rng, ("00", "05", "10", "15", "20", "30", "35", "40", "45", "50"))
    return f"{(hour - 1) % 12 + 1}:{minute} {'a.m.' if hour < 12 else 'p.m.'} local time"


def _v_version(rng: random.Random) -> str:
    return f"{1 + int(rng.random() * 9)}.{int(rng.random() * 21)}"


_VALUES: dict[str, Callable[[random.Random], str]] = {
    "days": _v_days,
    "date": _v_date,
    "amt": _v_amt,
    "pct": _v_pct,
    "price": _v_price,
    "small": _v_small,
    "n": _v_n,
    "big": _v_big,
    "year": _v_year,
    "sec": _v_sec,
    "sched": _v_sched,
    "person": _v_person,
    "role": _v_role,
    "product": _v_product,
    "city": _v_city,
    "state": _v_state,
    "site": _v_site,
    "dept": _v_dept,
    "company": _v_company,
    "ref": _v_ref,
    "qty": _v_qty,
    "quarter": _v_quarter,
    "month": _v_month,
    "time": _v_time,
    "version": _v_version,
}
"""Value slots: each call draws a fresh value."""

_FIXED = frozenset({"t", "T", "cp", "CP", "ag", "s0", "p0", "r0", "prod0"})
"""Document slots, given by the caller: target short and full name, counterparty short and
full name; drawn once per document when not given: ``ag``, what a contract calls itself
(``Agreement``, ``Contract``), ``s0`` its main site, ``p0`` its contact person, ``r0`` its
reference number and ``prod0`` its main product. Text repeated inside one document is not
duplicate text across a room, so these carry most of a sentence's variety from document to
document."""


# ----------------------------------------------------------------------------- grammar
# A template is text with ``{name}`` (a value slot, a document slot or a rule) and
# ``[a|b|c]`` (one alternative, chosen uniformly; may nest, may be empty: ``[ very|]``).
# Compiled form: a sequence is a list of items; an item is a str, a tuple of alternatives
# (each a str or a sequence), a value function, a _Rule or a _Slot.
class _Rule:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


class _Slot:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


_Seq = list[object]


def _compile(text: str, rules: frozenset[str]) -> _Seq:
    seq, end = _parse(text, 0, rules, top=True)
    assert end == len(text), text
    return seq


def _parse(text: str, i: int, rules: frozenset[str], *, top: bool) -> tuple[_Seq, int]:
    """Parse a sequence from ``text[i:]`` up to an unmatched ``|`` or ``]`` (or the end)."""
    seq: _Seq = []
    buf: list[str] = []
    while i < len(text):
        c = text[i]
        if c in "|]" and not top:
            break
        if c == "{":
            j = text.index("}", i)
            name = text[i + 1 : j]
            if buf:
                seq.append("".join(buf))
                buf = []
            if name in _FIXED:
                seq.append(_Slot(name))
            elif name in rules:
                seq.append(_Rule(name))
            else:
                seq.append(_VALUES[name])  # KeyError: unknown slot in a template
            i = j + 1
        elif c == "[":
            if buf:
                seq.append("".join(buf))
                buf = []
            alts: list[object] = []
            i += 1
            while True:
                sub, i = _parse(text, i, rules, top=False)
                alts.append("".join(sub) if all(type(s) is str for s in sub) else sub)  # type: ignore[arg-type]
                if text[i] == "]":
                    break
                i += 1  # past "|"
            seq.append(tuple(alts))
            i += 1
        else:
            buf.append(c)
            i += 1
    if buf:
        seq.append("".join(buf))
    return seq, i


def _emit(seq: _Seq, rng: random.Random, fixed: dict[str, str], out: list[str]) -> None:
    rand = rng.random
    for item in seq:
        tp = type(item)
        if tp is str:
            out.append(item)  # type: ignore[arg-type]
        elif tp is tuple:
            alt = item[int(rand() * len(item))]  # type: ignore[index, arg-type]
            if type(alt) is str:
                out.append(alt)
            else:
                _emit(alt, rng, fixed, out)
        elif tp is _Rule:
            bank = _RULES[item.name]  # type: ignore[attr-defined]
            _emit(bank[int(rand() * len(bank))], rng, fixed, out)
        elif tp is _Slot:
            out.append(fixed[item.name])  # type: ignore[attr-defined]
        else:
            out.append(item(rng))  # type: ignore[operator]


def _names_target(seq: _Seq) -> bool:
    """Whether a compiled sentence always names the target (``{t}``/``{T}`` at top level)."""
    return any(type(s) is _Slot and s.name in {"t", "T"} for s in seq)  # type: ignore[attr-defined]


# Shared rules: phrases that sentences of every family use.
_RULE_SRC: dict[str, tuple[str, ...]] = {
    "timing": (
        "within {days} after [receipt of the relevant invoice|{cp}'s written request|each "
        "delivery|the end of each calendar quarter|notice from {t}]",
        "no later than {date}",
        "[on or before|by] the [fifth|tenth|fifteenth|last] [business day|day] of each "
        "[calendar month|quarter]",
        "within {days} of [the date in {sec}|a written request from {person}]",
    ),
    "docref": (
        "{sec}",
        "{sched}",
        "{sec} of {sched}",
        "the [purchase order|work order|change order|statement of work] numbered {ref}",
    ),
    "manner": (
        "in writing",
        "by electronic mail to the address in {sched}",
        "through the [supplier portal|shared workspace|ticketing system] kept by {t}",
        "by courier to the {site}",
        "by registered post to the {site}",
    ),
    "standard": (
        "good industry practice",
        "the specifications in {sched}",
        "the quality plan dated {date}",
        "version {version} of the [technical documentation|service description|operating manual]",
        "the [drawings|tolerances|test protocols] agreed on {date}",
    ),
    "c_item": (
        "comply with the rules of the {s0} as notified by {p0}",
        "keep a log of work under {ref} for {cp}",
        "use only personnel trained on the {prod0} since {date}",
        "notify {person} within {days} of any [safety incident|quality deviation|shipment delay]",
        "provide [monthly|quarterly] reports in the form of {sched}",
        "maintain tooling {ref} at the {s0} in good order",
        "return materials of {cp} within {days} of a request by {p0}",
        "deliver [purchase order {ref}|each order] within the window agreed with {p0}",
        "label each shipment to the {s0} with part number {ref}",
        "store the {product} within the temperature range set out in {sched}",
        "keep at least {qty} units of the {product} in stock at the {site}",
        "give {cp} access to the {site} during working hours on {days}' notice",
    ),
    "definition": (
        '"Business Day" means a day other than a Saturday, Sunday or public holiday in {city}.',
        '"Confidential Information" means all information disclosed by one party to the other '
        "in connection with this {ag}, whether before or after {date}.",
        '"Deliverables" means the {product} and any documentation supplied under {docref}.',
        '"Effective Date" means {date}.',
        '"Fees" means the amounts payable under {docref}.',
        '"Specifications" means the specifications set out in {sched}, as updated from time '
        "to time.",
        '"Site" means the {site} or another location agreed in writing.',
        '"Intellectual Property Rights" means copyrights, trade marks, designs, database rights '
        "and rights in know-how.",
        '"Order" means a purchase order issued by {cp} in the form of {sched}.',
        '"Law" means any statute, regulation or binding code applicable to a party.',
        '"Personnel" means the employees, agents and subcontractors of a party.',
        '"Quarter" means each period of three months ending on March 31, June 30, September '
        "30 or December 31.",
        '"Service Levels" means the service levels set out in {sched}.',
        '"Term" means the period described in {sec}.',
        '"Working Hours" means {time} to {time} in {city} on a Business Day.',
        '"Products" means the {product} and the {product} described in {sched}.',
    ),
    "res": (
        "the {year} [budget|operating plan] of {t}, with revenue of {amt} and capital "
        "expenditure of {amt}, be approved",
        "{person} be appointed as {role} of {t} with effect from {date}",
        "{t} open [a deposit|a payroll|an operating] account with {company} in {city}, with "
        "{person} and {person} as authorised signatories",
        "{person} and {p0} be authorised to sign order {ref} of {t} with {company} for up to {amt}",
        "a [donation|sponsorship payment] of {amt} by {t} to the {city} [technical college|community "
        "fund|science museum] be approved",
        "{person} sign the {year} financial statements of {t} on or before {date}",
        "{company} be [engaged|retained] as {t}'s [payroll provider|freight forwarder|IT "
        "support provider] at an annual cost of {amt}",
    ),
    "obs": (
        "{n} of {n} [invoices|work orders|goods receipts] sampled on {date} lacked a second "
        "approval",
        "the [asset|vendor|user access] register had not been reconciled since {month}",
        "[calibration|training|inspection] records for {n} [instruments|employees|vehicles] "
        "at the {site} were incomplete",
        "backup restore tests were last documented on {date}",
        "goods received notes such as {ref} were filed {days} after receipt",
        "{n} orders, including {ref}, were raised after invoice {ref}",
        "the {dept} procedure still refers to version {version} of the [ERP|ticketing "
        "system|warehouse system]",
    ),
    "action": (
        "update the procedure to version {version}",
        "complete the reconciliation",
        "add the missing records to the register",
        "train {n} staff in {dept}",
        "introduce a monthly review by the {role}",
        "move the approval step into the [ERP|purchasing system] before {month}",
    ),
    "p_item": (
        "expense claims above {small} are approved by the {role}",
        "laptops are encrypted and patched within {days} of a vendor release",
        "visitors to the {site} sign in and are escorted at all times",
        "purchase requests such as {ref} are raised before an order is placed",
        "passwords have at least [twelve|fourteen|sixteen] characters and are changed after "
        "any suspected disclosure",
        "incidents are logged with the {dept} team within {days}",
        "travel is booked through {company} and approved by the {role}",
        "records are retained for [five|seven|ten] years in the {dept} archive",
        "drafts of customer contracts are reviewed by [legal|{person}] before signature",
        "gifts worth more than {small} are recorded with the {dept} team within {days}",
        "new suppliers are screened by {dept} before a first order above {amt}",
    ),
    "s_item": (
        "{ref} dated {date}, {company}, {product}, {qty} units, {amt}",
        "[Supply|Service|Maintenance|Software licence|Logistics] contract with {company} dated "
        "{date} for {n} months, annual value {amt}",
        "{site}: premises of {qty} square feet, [used by {dept}|book value {amt}]",
        "[Trade mark|Domain name|Copyright] registration {ref}, held since {year}",
        "Vehicle fleet at the {site}: {n} vehicles, insured with {company}, premium {amt}",
        "Bank account with {company}, {city} branch, balance at {date}: {amt}",
        "Equipment: {product}, serial {ref}, acquired {date}, book value {amt}",
    ),
}
"""Shared grammar rules (alternatives are drawn uniformly)."""

_SENTENCE_SRC: dict[Family, tuple[str, ...]] = {
    "contract": (
        "{t} shall [deliver|supply|provide] the {prod0} [described|listed|specified] in "
        "{docref} in accordance with {standard}[, and shall notify {cp} {manner} of any "
        "expected delay|, packed for shipment to the {site}|].",
        "Invoices issued by {t} [for the {prod0}|under {docref}|for shipment {ref}] are "
        "payable {timing}[, and amounts not paid by {cp} when due accrue interest at {pct} "
        "per [month|annum]|; {cp} shall identify disputed amounts {manner} within {days}|].",
        "[{t} and {cp} each|{cp} and {t}] [shall keep|keep] [the|all] Confidential Information [of {p0}|received under "
        "{r0}|received since {date}|seen at the {s0}] [confidential|in confidence] and use it "
        "[only for {docref}|to perform this {ag}][, disclosing it only to {company}|, and "
        "return it within {days} of a request from {p0}|].",
        "{cp} shall [give|provide] {t} [a rolling|a non-binding|a twelve-month] forecast of "
        "[its {prod0} requirements|{prod0} volumes for the {s0}] {timing}[, broken down by "
        "site| in the format of {sched}|].",
        "Notices to {t} under [{r0}|this {ag} dated {date}] [go|shall be sent] {manner}[, "
        "attention: {p0}|, marked for the attention of {person}|][, with a copy to the {dept} "
        "team at the {site}|].",
        "The laws of [the State of|] {state} govern [this {ag}|{r0}], and {t} and {cp} [submit "
        "to|accept] the courts [located|sitting] in {city}[ for claims above {amt}|].",
        "Neither {t} nor {cp} is liable for [delay|failure to perform] at the {s0} caused by "
        "[fire or flood|a failure of utilities in {city}|events beyond its reasonable control] "
        "[after {date}|], [if it notifies {p0} {manner} within {days}|provided that {person} "
        "reports progress every {days}].",
        "{t} warrants to {cp} that the {prod0} will conform [in all material respects|] to "
        "{standard} for {days} from [delivery|installation at the {s0}|acceptance on "
        "{date}][; units failing before {date} will be [repaired|replaced] by {t}|].",
        "Acceptance testing of [each delivery to the {s0}|the {prod0}|release {version} of the "
        "{prod0}] shall be [completed|performed] by {p0} of {cp} [within {days}|at the {site}|"
        "using the protocol in {sched}], after which [the delivery is deemed accepted|{t} may "
        "invoice {amt}|{cp} shall sign certificate {ref}].",
        "Prices for the {prod0} [are stated|are set out|appear] in {docref} [and may be "
        "adjusted by {t} on {days}' notice to {p0}|and are fixed until {date}|and include "
        "delivery to the {s0}][, with a unit price of {price}|].",
        "Title to and risk of loss in [each shipment to {cp}|goods shipped under {ref}] pass "
        "from {t} [on delivery to the carrier at the {site}|when unloaded at the {s0}|on "
        "signature of delivery note {ref}].",
        "For the {s0}, {t} shall maintain [ISO 9001 certification|ISO 14001 certification|"
        "calibration records under {ref}][ and send audit reports to {p0} {timing}|].",
        "Service levels for [support|maintenance|hosting] of the {prod0} provided by {t} to "
        "{cp} are described in {docref}; [service credits of up to {pct} are the sole remedy "
        "for a missed service level|{t} shall report performance to {p0} {timing}|response "
        "times run from the logging of a ticket such as {ref}].",
        "The initial term of [this {ag}|{r0}] begins on {date} and [continues for {n} months|"
        "ends on {date}], and [may be extended by {t} and {cp} in writing|renews for one-year "
        "periods unless {t} or {cp} gives notice of non-renewal {days} before expiry].",
        "Disputes between {t} and {cp} [under {docref}|about purchase order {ref}|] shall first "
        "be referred to [{p0} and {person}|{person} and {person}|the managers named in "
        "{sched} and {p0}], who shall meet [within {days} of a request|at the {s0}] [to resolve them|"
        "before {date}].",
        "{cp} shall not reverse engineer, decompile or modify the {prod0}[ except as "
        "permitted in writing by {person} of {t}| except as described in {docref}|].",
        "{t} may [subcontract|outsource] [logistics|installation|calibration] work at the {s0} "
        "to {company}[, remaining responsible to {cp} for its performance|].",
        "Purchase order {ref}, issued by {cp} on {date}, covers {qty} units of the {prod0} at "
        "[{price} per unit|{amt} in aggregate] for delivery to the {s0} by {date}; {t} "
        "acknowledged it on {date}.",
        "{t} implements [a change order|an engineering change request] under {r0} (such as "
        "{ref}) [once {p0} of {cp} has signed it|after {person} signs it for {cp}][, with its "
        "cost of {amt}|].",
        "{t} shall keep [spare parts|replacement units|firmware updates] for the {prod0} "
        "available for {days} after [the last delivery to {cp}|{date}] at [the {s0}|the prices "
        "in {docref}].",
        "Audits of {t}'s [records|invoices|time sheets] under {r0} may be carried out [once "
        "per calendar year|during Working Hours|at the {s0}] by [{cp}|{company}, appointed by "
        "{cp},] on {days}' notice[, at {cp}'s cost|].",
        "{cp} shall pay {t} [a monthly fee of {amt}|{amt} per quarter|{price} per unit] for "
        "the {prod0}[, invoiced from the {s0}|, adjusted on {date}|].",
    ),
    "minutes": (
        "[The Chair,|The chair of the meeting,] {p0}, noted that a quorum of the {t} Board was "
        "present [at the {s0}|on {date}] and that notice [had been given on {date}|was "
        "waived by {person}|was sent by e-mail on {date}].",
        "{person}, {role} of {t}, presented the results for {quarter}: revenue was {amt}[ "
        "against a budget of {amt}|, {pct} above the prior year|] and [the {product} line|"
        "sales from the {site}] contributed {amt}.",
        "[After discussion|Following questions from {person}], the Board of {t} approved the "
        "minutes of the meeting held on {date}[ without amendment| subject to a correction in "
        "item {n}].",
        "{person} reviewed {t}'s cash position of {amt} at {date} and the working capital "
        "forecast [for the next two quarters|through {quarter}].",
        "The Board of {t} approved capital expenditure of {amt} for [new tooling|a roof "
        "replacement|an ERP upgrade|additional racking|a packaging line] at the {site}[, to be "
        "completed by {month}|].",
        "The Audit Committee [reported|confirmed] that it had met {t}'s auditors, {company}, on "
        "{date} and that [no material weakness had been identified|the {year} audit plan had "
        "been agreed|a fee of {amt} had been approved].",
        "The Board of {t} [ratified|approved] the grant of options over {big} shares to {n} "
        "employees under the {year} Equity Incentive Plan, at an exercise price of {price} "
        "per share.",
        "{person} summarised the hiring plan of {t}, which adds {n} roles in {dept}[ and "
        "{dept}|] at the {site} [over the coming year|by {quarter}].",
        "Management of {t} reported on the [ERP migration|warehouse automation project|new "
        "pricing model|quality programme for the {product}], which [remains on schedule for "
        "completion in {month}|is {pct} complete|has spent {amt} of its {amt} budget].",
        "The Board of {t} noted the report of the Compensation Committee dated {date} and "
        "approved the {year} salary bands [as presented by {person}|with {n} changes].",
        "{person} updated the Board of {t} on {company}, [a supplier of {product}|a "
        "distributor in {city}|a customer of the {site}], [whose orders for {quarter} totalled "
        "{amt}|with which purchase order {ref} was agreed on {date}].",
        "[There being no further business|With no other matters raised], {p0} [adjourned|"
        "closed] the meeting of the Board of {t} at {time}.",
    ),
    "report": (
        "This section [summarises|describes] the procedures [{t} performed|performed at {t}|"
        "performed by {company} for {t}] [under engagement {r0}|at the {s0}] for the period "
        "ended {date}[ and the files that {p0} reviewed|].",
        "Interviews [with {person} ({role})|with {person} and {person}] [on {date}|during "
        "{month}] confirmed the information about {t} [at the {s0}|in report {r0}|for "
        "{quarter}].",
        "{t}'s records for the {product} line were sampled on a test basis; {n} items [totalling "
        "{amt}|from {quarter}] were examined [by {p0}|at the {s0}] and [reconciled without "
        "exception|agreed to supporting documents|traced to the general ledger].",
        "The [observations|results|figures] below reflect conditions at the {s0} of {t} as "
        "of {date}[, as confirmed by {person}| ({ref})|].",
        "{t} maintains written procedures for {dept}, [version {version} of which was "
        "approved by {person} on {date}|last reviewed by {person} in {month}].",
        "Responsibility for {dept} at {t} rests with a team of {n} people reporting to "
        "{person}, {role}[, based at the {site}|].",
        "The scope of review {r0} excluded items [below {amt}|recorded after {date}|that {t} "
        "set aside in {quarter}] [by agreement with {person}|at the request of {p0}].",
        "[Supporting documents|Documents] [from|provided by] {t} [are listed in {sched}|were "
        "uploaded to folder {ref}][ with their dates| and checked by {p0} on {date}|].",
        "No exceptions were noted in the sample of {n} [transactions|purchase orders|"
        "shipments|journal entries] that {t} recorded during {quarter}[, with a combined value "
        "of {amt}|].",
        "{t} has engaged {company} as an outside adviser on {dept} since {year}[, at an annual "
        "fee of {amt}|].",
        "[Throughput|Utilisation|On-time delivery] at the {site} of {t} was {pct} in "
        "{quarter}, compared with {pct} a year earlier.",
        "{t} [tracks|monitors] [open tickets|returned units|overdue actions] in [its ticketing "
        "system|a register kept by {dept}]; {n} were open at {date}, the oldest being {ref}.",
    ),
    "financial": (
        "{t}'s revenue for the year ended December 31, {year} was {amt}, of which the "
        "{product} line contributed {pct}[ and the {site} {amt}|].",
        "Gross margin of {t} [improved|declined] by {pct} [percentage points|] in {quarter}, "
        "reflecting [lower freight costs at the {site}|a change in product mix toward the "
        "{product}|prices agreed with {company}].",
        "Operating expenses of {t} [for {year}|] include [research and development|marketing|"
        "software subscription|travel] costs of {amt}[ (Note {n})|], [all of which were "
        "expensed as incurred|up from {amt} in {year}].",
        "Accounts receivable of {t} [at {date}|] [are stated net of|are shown after] an "
        "allowance of {amt}[ (Note {n})|]; days sales outstanding were {n} at {date}.",
        "Inventories of {t} [at the {site}|of {product}|] totalled {amt} at {date}[ (Note "
        "{n})|], [at the lower of cost and net realisable value|at weighted average cost|on "
        "a first-in, first-out basis].",
        "Property, plant and equipment of {t} [at the {site}|] had a net book value of {amt} "
        "at {date}, [depreciated straight-line|depreciated on a straight-line basis] over "
        "[two|three|five] to [seven|ten|fifteen|twenty] years; the {year} charge was {amt}.",
        "{t} recognises revenue on the {product} when the goods are [shipped from|delivered "
        "to] the {site}[, net of rebates of {amt}|].",
        "Cash and cash equivalents of {t} at {date} were {amt}, held [with {company}|in "
        "operating accounts in {city}|mainly in money market funds].",
        "Capital expenditure by {t} in {year} was {amt}, mainly for [tooling|IT equipment|a "
        "second line at the {site}|building works at the {site}].",
        "{t}'s headcount at {date} was {n} full-time employees[ and {n} temporary staff|].",
        "Accrued expenses of {t} at {date} include {amt} for [bonuses|professional fees|"
        "utilities at the {site}|freight].",
        "Foreign exchange [gains|losses] of {amt} arose in {year} on [euro|sterling|Canadian "
        "dollar] balances held by {t}.",
    ),
    "letter": (
        "We write on behalf of {CP} further to our [discussion|call|meeting] with {person} of "
        "{t} on {date}[ about purchase order {ref}|].",
        "Please find enclosed the documents that {t} requested on {date}, as listed in {sched}.",
        "We would be grateful if {t} could confirm receipt of [this letter|our letter {r0}] "
        "[by {date}|to {p0}|to {person}].",
        "Should {t} have any questions, please contact {p0} at our {city} office[ quoting "
        "file {ref}|].",
        "This letter [{r0}|] is sent to {t} without prejudice to any rights of {cp}, all of "
        "which are reserved[ as at {date}|].",
        "We look forward to [continuing our work with {t} during {year}|meeting the {t} team "
        "at the {site} on {date}].",
        "As agreed with {person}, {t} will receive a revised [draft|copy] of {sched} within "
        "{days}.",
        "Our invoice {ref} for [the work performed for {t} in {quarter}|the {product} shipped "
        "to {t} on {date}] is enclosed and is payable in the ordinary course[; the amount due "
        "is {amt}|].",
        "We have updated [our records|the records of {cp}] to reflect {t}'s new [billing|"
        "delivery] address at the {site} from {date}.",
        "The meeting with {t}'s {dept} team [in {city}|at the {site}] has been moved to {date} "
        "at {time}.",
        "We confirm that the figures provided to {t} on {date}[, including the total of "
        "{amt},|] remain accurate.",
        "Copies of this letter have been provided to {person} of {t}'s outside counsel, {company}.",
    ),
    "policy": (
        "Policy {r0} [applies to|covers] [all employees|employees and officers|staff and "
        "agency workers] of {t} [at the {site}|in {dept}|] from {date}.",
        "{t} reviews this policy at least annually; version {version} was approved by "
        "{person}, {role}, on {date}.",
        "Questions about this policy should be addressed to {p0} of the {t} {dept} team [in "
        "{city}|at the {s0}|through ticket queue {ref}].",
        "Managers at {t} [are responsible for ensuring|must ensure] that their teams at the "
        "{site} complete [the related training|course {ref}] within {days} of joining[, and "
        "{p0} reports completion rates quarterly|].",
        "Departures from policy {r0} are reported to {t}'s {role}, {person}, and may lead to "
        "disciplinary action.",
        "{t} keeps records of [training completion|approvals|exceptions] for at least [three|"
        "five|seven] years in [its document system|the {dept} archive at the {site}].",
        "Exceptions to this policy require written approval by [{p0}|the {role} of {t}] and "
        "are logged under a reference such as {ref}.",
        "{t} communicates changes to this policy through its intranet, [staff briefings at the "
        "{site}|a notice from {person}] and [its quarterly newsletter|team meetings].",
        "Employees of {t} must record any gift worth more than {small} from [suppliers|"
        "customers|business partners] with {p0} within {days}.",
    ),
    "schedule": (
        "Schedule {r0} lists the items {t} [found|identified] for request {ref} [as of {date}|on {date}].",
        "Amounts[ in {r0}|][ are in U.S. dollars and|] reflect {t}'s books [as of|at] {date}[; items below "
        "{amt} are omitted|].",
        "[{person}|{p0}] will update schedule {r0} for {t} [before signing|by {date}] if an item changes.",
        "Totals for the items listed by {t} come to {amt}[ across {n} entries|].",
    ),
}
"""Sentence templates per family (a paragraph opens with one that names the target)."""

# Paragraph-shape templates (lists and blocks; single newlines keep them one paragraph).
_RULE_SRC.update(
    {
        "attendance": (
            "[A meeting|A regular meeting|A special meeting] of the Board of Directors of {T} "
            "was held [at the {site}|by video conference|at the offices of {company} in {city}] "
            "on {date} at {time}.\nPresent: {person} (Chair), {person}, {person}[, {person}|]"
            "\nIn attendance: {person} ({role}), {person} ({role})\nSecretary to the meeting: "
            "{person}",
        ),
        "resolution": ("RESOLVED, that {res}; and\nFURTHER RESOLVED, that {res}.",),
        "motion": (
            "On a motion [made by {person} and seconded by {person}|duly made and seconded], "
            "the Board of {t} [unanimously|] resolved that {res} ([five|six|seven] votes in "
            "favour[, one abstaining|]).",
        ),
        "observation": (
            "Observation {n} [({p0}, {date})|at the {s0}|({ref})]: [at the {site}|in {dept}|for "
            "the {product} line], {obs}; rated [low|moderate|advisory] by {person}.\n"
            "[Response|Agreed action] ({person}, {date}): {t} [will|is to] {action} by {date}.",
        ),
        "c_list": (
            "{t} shall, in performing this {ag}[ at the {site}|]:\n(a) {c_item};\n(b) {c_item};"
            "\n(c) {c_item}; and\n(d) {c_item}.",
            "Without limiting {sec}, {t} shall:\n(a) {c_item};\n(b) {c_item}; and\n(c) {c_item}.",
        ),
        "definitions": (
            "In {r0} between {t} and {cp} dated {date}, [these terms have the meanings below|"
            "capitalised terms mean]:",
        ),
        "p_list": (
            "Under policy {r0}, {t} [requires|expects] that:\n1) {p_item};\n2) {p_item};\n3) "
            "{p_item}; and\n4) {p_item}.",
            "At the {site} and every other site of {t}:\n1) {p_item};\n2) {p_item}; and\n3) "
            "{p_item}.",
        ),
        "s_list": (
            "[The items below|The following items] are [the open orders|the contracts|the assets|"
            "the registrations] of {t} [responsive to request {ref}|as of {date}|held at the "
            "{site}]:\n1. {s_item}\n2. {s_item}\n3. {s_item}\n4. {s_item}[\n5. {s_item}|]",
        ),
    }
)
# Word-level variety (generator synth-v3): each occurrence of one of these words in a template
# becomes a choice between it and near-synonyms that fit every place the word is used, so a
# 64-character stretch of template text has several times more spellings than templates
# (duplicated text in a 5,000-document room at --length-scale 4: 38% with synth-v2). None of
# the alternatives is issue language.
_SYNONYMS: dict[str, tuple[str, ...]] = {
    "shall": ("will",),
    "approved": ("endorsed",),
    "described": ("set out",),
    "performed": ("carried out",),
    "during": ("in the course of", "throughout"),
    "listed": ("itemised", "shown"),
    "reviewed": ("examined", "checked"),
    "issued": ("raised",),
    "received": ("obtained",),
    "confirmed": ("verified",),
    "updated": ("revised",),
    "recorded": ("logged", "entered"),
    "maintain": ("keep",),
    "maintains": ("keeps",),
    "procedures": ("processes", "routines"),
    "procedure": ("process", "routine"),
    "identified": ("found",),
    "employees": ("staff members", "personnel"),
    "responsible": ("accountable",),
    "information": ("data", "details"),
    "sampled": ("selected", "picked"),
    "exceptions": ("deviations",),
    "noted": ("found", "observed"),
    "figures": ("amounts", "numbers"),
    "kept": ("held",),
    "costs": ("expenses",),
    "mainly": ("largely", "chiefly"),
    "confirm": ("verify",),
    "authorised": ("approved",),
    "retained": ("kept",),
    "vendor": ("supplier",),
    "supplier": ("vendor",),
    "specified": ("stated",),
    "expected": ("anticipated",),
    "team": ("group",),
    "staff": ("personnel",),
    "delivery": ("shipment", "dispatch"),
    "shipment": ("consignment", "delivery"),
    "goods": ("products", "items"),
    "summarises": ("outlines", "sets out"),
    "reflect": ("show",),
    "combined": ("total", "aggregate"),
    "uploaded": ("saved", "filed"),
    "certification": ("certificate",),
    "send": ("submit", "provide"),
    "sent": ("submitted", "forwarded"),
    "written": ("documented",),
    "quality": ("product quality",),
    "provide": ("supply", "furnish"),
    "records": ("files",),
    "register": ("log",),
    "review": ("check",),
    "questions": ("queries",),
    "completed": ("finished",),
    "prepared": ("compiled", "drawn up"),
    "items": ("entries", "lines"),
    "documents": ("papers", "files"),
    "conform": ("comply",),
    "implements": ("applies", "operates"),
    "performing": ("carrying out",),
    "rests": ("lies", "sits"),
    "adviser": ("consultant", "advisor"),
    "outside": ("external", "independent"),
    "engineering": ("technical", "design"),
    "people": ("persons", "employees"),
    "based": ("located", "stationed"),
    "reporting": ("answering",),
    "monitors": ("tracks", "follows"),
    "supporting": ("underlying", "backing"),
    "interviews": ("discussions", "meetings"),
    "totalling": ("amounting to", "worth"),
    "engaged": ("retained", "hired"),
    "fee": ("charge",),
    "version": ("release", "revision"),
    "folder": ("directory",),
    "test": ("sample",),
    "customer": ("client",),
    "customers": ("clients",),
    "shipments": ("consignments", "deliveries"),
    "invoices": ("bills",),
    "invoice": ("bill",),
    "documentation": ("manuals",),
    "manual": ("handbook",),
    "requires": ("needs",),
    "require": ("need",),
    "approval": ("sign-off", "authorisation"),
    "ensure": ("make sure",),
    "ensuring": ("making sure",),
    "applicable": ("relevant",),
    "relevant": ("applicable",),
    "regular": ("routine", "scheduled"),
    "notify": ("inform", "tell"),
    "notifies": ("informs", "tells"),
    "promptly": ("without delay", "quickly"),
    "keep": ("maintain", "hold"),
    "store": ("hold",),
    "provides": ("supplies",),
    "includes": ("covers", "contains"),
    "include": ("cover",),
    "covers": ("includes",),
    "describes": ("explains", "sets out"),
    "centre": ("hub", "facility"),
    "range": ("band", "limits"),
    "material": ("significant",),
    "period": ("term",),
    "communicates": ("announces", "publishes"),
    "events": ("circumstances", "occurrences"),
    "perform": ("carry out", "deliver"),
    "logging": ("recording", "filing"),
    "remedy": ("recourse",),
    "missed": ("failed",),
    "location": ("place", "site"),
    "agreed": ("settled", "fixed"),
    "writing": ("written form",),
    "before": ("prior to",),
    "after": ("following",),
    "amounts": ("sums",),
    "presented": ("tabled", "submitted"),
    "results": ("outcomes",),
    "reported": ("stated",),
    "sole": ("only",),
    "intranet": ("staff portal", "internal site"),
    "govern": ("apply to",),
    "total": ("sum",),
    "support": ("assistance",),
    "agreement": ("contract",),
    "meeting": ("session",),
    "company": ("business",),
    "units": ("pieces",),
    "price": ("rate",),
    "prices": ("rates",),
    "system": ("platform",),
    "plan": ("programme",),
    "through": ("via",),
}
_SYN_WORD = re.compile(r"\b(" + "|".join(sorted(_SYNONYMS, key=len, reverse=True)) + r")\b")


def _vary(template: str) -> str:
    """``template`` with every listed (lowercase) word outside ``{...}`` slots turned into a
    choice ``[word|synonym|...]`` (:data:`_SYNONYMS`). Capitalised words (sentence starts,
    defined terms such as "Confidential Information") stay as they are."""
    parts = re.split(r"(\{[^}]*\})", template)
    for i in range(0, len(parts), 2):
        parts[i] = _SYN_WORD.sub(lambda m: "[" + "|".join((m[1], *_SYNONYMS[m[1]])) + "]", parts[i])
    return "".join(parts)


_RULE_NAMES = frozenset(_RULE_SRC)
_RULES: dict[str, tuple[_Seq, ...]] = {
    name: tuple(_compile(_vary(t), _RULE_NAMES) for t in alts) for name, alts in _RULE_SRC.items()
}
_SENTENCES: dict[Family, tuple[_Seq, ...]] = {
    fam: tuple(_compile(_vary(t), _RULE_NAMES) for t in bank) for fam, bank in _SENTENCE_SRC.items()
}
_OPENERS: dict[Family, tuple[_Seq, ...]] = {
    fam: tuple(s for s in bank if _names_target(s)) for fam, bank in _SENTENCES.items()
}
assert all(_OPENERS.values()), "every family needs sentences that name the target"

FAMILY_HEADINGS: dict[Family, tuple[str, ...]] = {
    "contract": (
        "DEFINITIONS",
        "SCOPE OF SUPPLY",
        "PRICE AND PAYMENT",
        "DELIVERY",
        "ACCEPTANCE",
        "WARRANTIES",
        "CONFIDENTIALITY",
        "TERM AND RENEWAL",
        "SERVICE LEVELS",
        "RECORDS AND AUDIT",
        "COMPLIANCE",
        "NOTICES",
        "FORCE MAJEURE",
        "GOVERNING LAW",
        "DISPUTE RESOLUTION",
        "GENERAL PROVISIONS",
        "QUALITY",
        "FORECASTS AND ORDERS",
        "AMENDMENTS",
        "SPARE PARTS",
        "SUBCONTRACTING",
        "CHANGE ORDERS",
    ),
    "minutes": (
        "Attendance, Quorum and Notice",
        "Minutes of the Previous Meeting",
        "Financial Report",
        "Budget",
        "Audit Committee Report",
        "Equity Grants",
        "Hiring Plan",
        "Operations",
        "Compensation",
        "Banking and Signatories",
        "Suppliers and Customers",
        "Other Business",
    ),
    "report": (
        "Scope",
        "Procedures",
        "Sources",
        "Observations",
        "Organisation",
        "Sampling",
        "Limitations",
        "Performance Indicators",
        "Open Actions",
        "Appendix",
    ),
    "financial": (
        "Revenue",
        "Margins",
        "Operating Expenses",
        "Receivables",
        "Inventories",
        "Fixed Assets",
        "Revenue Recognition",
        "Liquidity",
        "Capital Expenditure",
        "People",
        "Accruals",
        "Foreign Exchange",
    ),
    "letter": ("Re: Our Correspondence", "Enclosures", "Next Steps"),
    "policy": (
        "Purpose",
        "Scope",
        "Responsibilities",
        "Rules",
        "Training",
        "Reporting",
        "Records",
        "Exceptions",
        "Review",
    ),
    "schedule": ("Items", "Notes", "Basis of Preparation"),
}
"""Section headings per family (filler sections follow these in order, then repeat at
random)."""

# Paragraph shapes per family and their weights (prose = sentences from the family's bank).
_SHAPES: dict[Family, tuple[tuple[str, ...], tuple[float, ...]]] = {
    "contract": (("prose", "c_list"), (0.75, 1.0)),
    "minutes": (("prose", "resolution", "motion"), (0.55, 0.8, 1.0)),
    "report": (("prose", "observation", "table"), (0.6, 0.87, 1.0)),
    "financial": (("prose", "table"), (0.6, 1.0)),
    "letter": (("prose",), (1.0,)),
    "policy": (("prose", "p_list"), (0.65, 1.0)),
    "schedule": (("s_list", "prose"), (0.65, 1.0)),
}
_TABLE_WHAT = (
    ("revenue", True),
    ("cost of sales", True),
    ("operating expenses", True),
    ("capital expenditure", True),
    ("units shipped", False),
    ("headcount", False),
)


_TABLE_TITLES = (
    "Table {n}: {t} {what} by {by}, {a} and {b} ({u})",
    "Table {n}. {t}: {what} by {by} for {a} and {b}, {u}",
    "Table {n} - {what} of {t} per {by}, {a} against {b} ({u})",
    "Table {n}: {what} at {t} by {by} ({u}), years {a} and {b}",
)
_UNITS = {
    True: ("USD thousands", "USD '000", "thousands of US dollars"),
    False: ("number", "count"),
}


def render(rule: str, rng: random.Random, slots: dict[str, str]) -> str:
    """Text of one alternative of grammar rule ``rule`` (e.g. ``"obs"``, ``"c_list"``),
    slots filled from ``slots`` (``t``, ``T``, ``cp``, ``CP``, ``ag``) and fresh draws."""
    out: list[str] = []
    bank = _RULES[rule]
    _emit(bank[int(rng.random() * len(bank))], rng, _with_defaults(rng, slots), out)
    return _tidy("".join(out))


def _with_defaults(rng: random.Random, slots: dict[str, str]) -> dict[str, str]:
    """``slots`` plus the per-document slots it lacks (drawn from ``rng``)."""
    if all(k in slots for k in _FIXED):
        return slots
    fixed = dict(slots)
    fixed.setdefault("ag", _pick(rng, ("Agreement", "Agreement", "Contract")))
    fixed.setdefault("s0", _v_site(rng))
    fixed.setdefault("p0", _v_person(rng))
    fixed.setdefault("r0", _v_ref(rng))
    fixed.setdefault("prod0", _v_product(rng))
    return fixed


def _tidy(text: str) -> str:
    """Spacing left by empty alternatives and names ending in a full stop (``Ltd..``)."""
    return text.replace("  ", " ").replace(" .", ".").replace(" ,", ",").replace("..", ".")


def _prose(rng: random.Random, family: Family, fixed: dict[str, str]) -> str:
    bank = _SENTENCES[family]
    openers = _OPENERS[family]
    out: list[str] = []
    first = openers[int(rng.random() * len(openers))]
    _emit(first, rng, fixed, out)
    used = {id(first)}
    for _ in range(1 + int(rng.random() * 4)):
        seq = bank[int(rng.random() * len(bank))]
        if id(seq) in used:  # a sentence at most once per paragraph
            continue
        used.add(id(seq))
        out.append(" ")
        _emit(seq, rng, fixed, out)
    return _tidy("".join(out))


def _definitions(rng: random.Random, fixed: dict[str, str]) -> str:
    out: list[str] = []
    _emit(_RULES["definitions"][0], rng, fixed, out)
    bank = _RULES["definition"]
    for i in sorted(rng.sample(range(len(bank)), 5 + int(rng.random() * 5))):
        out.append("\n")
        _emit(bank[i], rng, fixed, out)
    return _tidy("".join(out))


def _table(rng: random.Random, fixed: dict[str, str]) -> str:
    what, money = _pick(rng, _TABLE_WHAT)
    by = _pick(rng, ("product line", "site", "quarter"))
    year = 2017 + int(rng.random() * 7)
    n_rows = 4 if by == "quarter" else 3 + int(rng.random() * 6)
    n, t = 1 + int(rng.random() * 40), fixed["t"]
    unit = _pick(rng, _UNITS[money])
    title = _pick(rng, _TABLE_TITLES).format(n=n, t=t, what=what, by=by, a=year, b=year + 1, u=unit)
    change = _pick(rng, ("change", "change", "var.", "movement", "% chg"))
    lines = [title, f"{by.capitalize():<44}{year:>12}{year + 1:>12}{change:>9}"]
    total_a = total_b = 0
    for i in range(n_rows):
        if by == "quarter":
            label = f"Q{i + 1}"
        elif by == "site":
            label = f"{_pick(rng, _CITIES_MORE)} {_pick(rng, _FACILITY)}"
        else:
            label = _v_product(rng)
        a = rng.randrange(40, 60_000)
        b = max(1, round(a * (0.7 + rng.random() * 0.7)))
        total_a, total_b = total_a + a, total_b + b
        lines.append(f"{label:<44}{a:>12,}{b:>12,}{(b - a) / a:>+9.1%}")
    lines.append(f"{'Total':<44}{total_a:>12,}{total_b:>12,}{(total_b - total_a) / total_a:>+9.1%}")
    return "\n".join(lines)


def _paragraph(rng: random.Random, family: Family, fixed: dict[str, str]) -> str:
    shapes, cum = _SHAPES[family]
    r = rng.random()
    shape = next(s for s, c in zip(shapes, cum, strict=True) if r < c)
    if shape == "prose":
        return _prose(rng, family, fixed)
    if shape == "table":
        return _table(rng, fixed)
    out: list[str] = []
    bank = _RULES[shape]
    _emit(bank[int(rng.random() * len(bank))], rng, fixed, out)
    return _tidy("".join(out))


def filler_paragraph(rng: random.Random, family: Family, slots: dict[str, str]) -> str:
    """One prose paragraph (2-5 sentences, one line) of ``family`` filler.

    ``slots`` must hold ``t``, ``T``, ``cp`` and ``CP`` (``ag``, what a contract calls
    itself, and the other per-document slots are drawn when not given); the first sentence names the target, so every
    paragraph is room-specific.
    """
    return _prose(rng, family, _with_defaults(rng, slots))


def filler_sections(
    rng: random.Random, family: Family, slots: dict[str, str], n_chars: int
) -> list[tuple[str, list[str]]]:
    """Filler sections ``(heading, paragraphs)`` (1-3 paragraphs each) until about ``n_chars``
    characters of paragraph text; headings follow :data:`FAMILY_HEADINGS` in order, then
    repeat at random.

    Paragraphs take the family's shapes (prose, lettered or numbered lists, resolutions,
    observations, tables; a list or table keeps its lines in one paragraph, separated by
    single newlines). A contract opens with a definitions paragraph, minutes with the
    attendance. ``slots`` as for :func:`filler_paragraph`; the per-document slots it lacks are
    drawn here. Every paragraph names the target.
    """
    fixed = _with_defaults(rng, slots)
    headings = FAMILY_HEADINGS[family]
    out: list[tuple[str, list[str]]] = []
    total = 0
    while total < n_chars:
        k = len(out)
        heading = headings[k] if k < len(headings) else _pick(rng, headings)
        paragraphs = [_paragraph(rng, family, fixed) for _ in range(1 + int(rng.random() * 3))]
        if k == 0 and family == "contract":
            paragraphs[0] = _definitions(rng, fixed)
        elif k == 0 and family == "minutes":
            paragraphs[0] = render("attendance", rng, fixed)
        out.append((heading, paragraphs))
        total += sum(len(p) + 8 for p in paragraphs) + len(heading) + 6
    return out
