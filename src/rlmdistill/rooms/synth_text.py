"""Word lists and filler templates for synthetic data rooms (:mod:`rlmdistill.rooms.synth`).

Everything here is this project's own text, written for the generator: names are assembled
from syllables, and filler paragraphs from sentence templates per document family (contract,
minutes, report, financial, letter, policy). Filler is meant to read like ordinary data-room
boilerplate and to carry *no* diligence finding: no change-of-control, assignment, exclusivity,
non-compete, uncapped-liability, minimum-purchase or similar language, so that the planted
issues are the only ones in a room. Every filler paragraph names the target (by its short
name) so that two rooms with different targets share no paragraph verbatim.

All randomness comes from a caller's ``random.Random``; nothing here reads the clock or
``hash()``, so output is reproducible across processes and machines.
"""

from __future__ import annotations

import random
from typing import Literal

__all__ = [
    "FAMILY_HEADINGS",
    "Family",
    "company_name",
    "filler_paragraph",
    "filler_sections",
    "format_date",
    "format_usd",
    "person_name",
    "short_name",
    "target_name",
]


def _split(text: str) -> tuple[str, ...]:
    return tuple(text.split())


Family = Literal["contract", "minutes", "report", "financial", "letter", "policy", "schedule"]
"""Document families: which filler sentences and headings a document is built from."""

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
CITIES = _split(
    "Austin Columbus Raleigh Denver Portland Phoenix Pittsburgh Sacramento Tampa Boise "
    "Madison Omaha Richmond Tucson Spokane Reno Albany Dayton Fresno Wichita"
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
_MONTHS = _split(
    "January February March April May June July August September October November December"
)


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
    """A person's name such as ``"Maya Okafor"``."""
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


_NUMBER_WORDS = {
    5: "five",
    10: "ten",
    15: "fifteen",
    30: "thirty",
    45: "forty-five",
    60: "sixty",
    90: "ninety",
    120: "one hundred twenty",
    180: "one hundred eighty",
}


def _days(rng: random.Random) -> str:
    n = rng.choice(tuple(_NUMBER_WORDS))
    return f"{_NUMBER_WORDS[n]} ({n}) days"


# ----------------------------------------------------------------------------- sentences
# Slots: {t} target short name, {T} target full name, {cp} counterparty short name, {CP} its
# full name, {date}, {days}, {amt}, {pct}, {state}, {city}, {product}, {person}, {year}, {sec}.
_SENTENCES: dict[Family, tuple[str, ...]] = {
    "contract": (
        "{t} shall deliver the {product} described in the applicable Statement of Work in "
        "accordance with the specifications set out in Exhibit {sec}.",
        "Invoices issued by {t} are payable within {days} of receipt, and undisputed amounts "
        "not paid when due accrue interest at {pct}% per month.",
        "Each party shall keep the other's Confidential Information in confidence and use it "
        "only to perform its obligations to {t} or {cp} under this instrument.",
        "{cp} shall provide {t} with a rolling forecast of its requirements for the {product} "
        "no later than the fifth business day of each calendar month.",
        "All notices to {t} shall be sent to its offices in {city}, attention: General "
        "Counsel, with a copy by electronic mail to the address last designated by {t}.",
        "The laws of the State of {state} govern this instrument, and {t} and {cp} submit to "
        "the jurisdiction of the state and federal courts located in {city}.",
        "Neither {t} nor {cp} is liable for delay caused by events beyond its reasonable "
        "control, provided that it notifies the other within {days} of the event.",
        "{t} warrants that the {product} will conform in all material respects to the "
        "documentation for a period of twelve months from delivery.",
        "Acceptance testing of each delivery of the {product} shall be completed by {cp} within "
        "{days}, after which the delivery is deemed accepted by {cp} and {t}.",
        "Prices for the {product} are stated in the price list attached as Schedule {sec} and "
        "may be adjusted by {t} once per calendar year on {days}' notice.",
        "{cp} shall maintain accurate records of its use of the {product} and provide a "
        "summary to {t} upon reasonable request, not more than once per year.",
        "Title to and risk of loss in each shipment of the {product} pass from {t} to {cp} on "
        "delivery to the carrier at {t}'s facility in {city}.",
        "This instrument, together with its schedules, is the entire understanding of {t} and "
        "{cp} on its subject matter and supersedes earlier proposals.",
        "Any amendment must be in writing and signed by authorised representatives of {t} and "
        "{cp}; a waiver on one occasion is not a waiver on any other.",
        "Each party shall comply with applicable anti-bribery laws in performing this "
        "instrument, and {t} may request a compliance certificate annually.",
        "{t} shall maintain a quality management system certified to ISO 9001 for the "
        "facilities in {city} that produce the {product}.",
        "Service levels for support provided by {t} are described in Schedule {sec}; service "
        "credits are the sole remedy for a missed service level.",
        "The initial term runs for three years from {date} and renews for successive one-year "
        "periods unless {t} or {cp} gives notice of non-renewal {days} before expiry.",
        "Disputes between {t} and {cp} shall first be referred to senior executives, who "
        "shall meet within {days} of a written request to resolve them.",
        "{cp} shall not reverse engineer, decompile or modify the {product} except as "
        "expressly permitted in writing by {t}.",
    ),
    "minutes": (
        "The Chair noted that a quorum of the Board of {T} was present and that notice of "
        "the meeting had been duly given on {date}.",
        "Management of {t} presented the quarterly results; revenue for the {product} line was "
        "in line with the budget approved for {year}.",
        "After discussion, the Board of {t} approved the minutes of the previous meeting "
        "without amendment.",
        "{person}, Chief Financial Officer of {t}, reviewed cash flow and the working capital "
        "forecast for the next two quarters.",
        "The Board of {t} approved the annual budget for {year}, including capital expenditure "
        "for the {city} facility.",
        "The Audit Committee reported that it had met with {t}'s auditors and that no material "
        "weakness had been identified for {year}.",
        "The Board of {t} ratified the grant of options under the Equity Incentive Plan to the "
        "employees listed in the annex, at an aggregate exercise price of {amt}.",
        "{person} summarised the hiring plan of {t}, which adds {n} roles in engineering and "
        "sales in {city} over the coming year.",
        "There being no further business, the meeting of the Board of {t} was adjourned.",
        "The Board of {t} noted the report of the Compensation Committee and approved the "
        "salary bands for {year} as presented.",
        "Management of {t} reported on the status of the ERP migration, which remains on "
        "schedule for completion in {year}.",
    ),
    "report": (
        "This section summarises the procedures {t} performed and the documents it reviewed "
        "for the period ended {date}.",
        "Interviews were held with {person} and other members of {t}'s management team in "
        "{city} to confirm the information in this report.",
        "{t}'s records for the {product} line were sampled on a test basis; {n} items were "
        "examined and reconciled without exception.",
        "The findings below reflect conditions observed at {t}'s sites as of {date} and may "
        "change as further information becomes available.",
        "{t} maintains written procedures for this area, which were last reviewed by "
        "{person} in {year}.",
        "Responsibility for this function at {t} rests with a team of {n} people reporting to "
        "the Chief Operating Officer.",
        "The scope of this review excluded matters that {t} identified as immaterial, defined "
        "as items below {amt} individually.",
        "Supporting documents provided by {t} are listed in the appendix together with their "
        "dates and the person who supplied them.",
        "No exceptions were noted in the sample of {n} transactions that {t} recorded during "
        "{year}.",
        "{t} has engaged {cp} as an outside adviser in this area since {year}.",
    ),
    "financial": (
        "{t}'s revenue for the year ended December 31, {year} was {amt}, of which the "
        "{product} line contributed {pct}%.",
        "Gross margin of {t} improved by {pct} percentage points, reflecting lower freight "
        "costs at the {city} facility.",
        "Operating expenses of {t} include research and development costs of {amt}, all of "
        "which were expensed as incurred.",
        "Accounts receivable of {t} are stated net of an allowance for doubtful accounts of "
        "{amt}; days sales outstanding were {n}.",
        "Inventories of {t} are valued at the lower of cost and net realisable value using "
        "the first-in, first-out method.",
        "Property, plant and equipment of {t} is depreciated on a straight-line basis over "
        "useful lives of three to {n} years.",
        "{t} recognises revenue when control of the {product} passes to the customer, "
        "generally on shipment from {city}.",
        "Cash and cash equivalents of {t} at year end were {amt}, held with two banks.",
        "Capital expenditure by {t} in {year} was {amt}, mainly for tooling and IT equipment.",
        "{t}'s headcount at year end was {n} full-time employees.",
    ),
    "letter": (
        "We write on behalf of {CP} further to our discussion with {person} of {t} on {date}.",
        "Please find enclosed the documents that {t} requested, as listed in the schedule to "
        "this letter.",
        "We would be grateful if {t} could confirm receipt of this letter at its earliest "
        "convenience.",
        "Should {t} have any questions, please contact {person} at our {city} office.",
        "This letter is sent to {t} without prejudice to any rights of {cp}, all of which are "
        "reserved.",
        "We look forward to continuing our work with {t} during {year}.",
        "As agreed with {person}, {t} will receive a revised draft of the schedule within {days}.",
        "Our invoice for the work performed for {t} in {year} is enclosed and is payable in "
        "the ordinary course.",
        "We have updated our records to reflect {t}'s new address in {city}.",
        "The meeting with {t}'s finance team in {city} has been moved to {date}.",
        "We confirm that the figures provided to {t} on {date} remain accurate.",
        "Copies of this letter have been provided to {t}'s outside counsel.",
    ),
    "policy": (
        "This policy applies to all employees, officers and contractors of {T} and its "
        "subsidiaries.",
        "{t} reviews this policy at least annually; the current version was approved by "
        "{person} on {date}.",
        "Questions about this policy should be addressed to the {t} compliance team in {city}.",
        "Managers at {t} are responsible for ensuring that their teams complete the related "
        "training within {days} of joining.",
        "Breaches of this policy are reported to {t}'s Head of Compliance and may lead to "
        "disciplinary action.",
        "{t} keeps records of training completion for at least {n} years.",
        "Exceptions to this policy require written approval by an officer of {t}.",
        "{t} communicates changes to this policy through its intranet and staff briefings.",
    ),
    "schedule": (
        "This schedule lists the items {t} identified as responsive to the request, as of {date}.",
        "Amounts are stated in U.S. dollars and reflect {t}'s books as of {date}.",
        "{t} will update this schedule before signing if any item changes.",
    ),
}

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
        "RECORDS",
        "COMPLIANCE",
        "NOTICES",
        "FORCE MAJEURE",
        "GOVERNING LAW",
        "DISPUTE RESOLUTION",
        "GENERAL PROVISIONS",
        "QUALITY",
        "FORECASTS",
        "AMENDMENTS",
    ),
    "minutes": (
        "Quorum and Notice",
        "Minutes of the Previous Meeting",
        "Financial Report",
        "Budget",
        "Audit Committee Report",
        "Equity Grants",
        "Hiring Plan",
        "Operations",
        "Compensation",
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
    ),
    "letter": ("Re: Our Correspondence", "Enclosures", "Next Steps"),
    "policy": (
        "Purpose",
        "Scope",
        "Responsibilities",
        "Training",
        "Reporting",
        "Records",
        "Exceptions",
        "Review",
    ),
    "schedule": ("Notes", "Basis of Preparation"),
}
"""Section headings per family (filler sections draw from these, in random order)."""


def _fill(template: str, rng: random.Random, slots: dict[str, str]) -> str:
    values = dict(slots)
    values.setdefault("date", random_date(rng))
    values["days"] = _days(rng)
    values["amt"] = format_usd(rng.randrange(20, 9000) * 1000)
    values["pct"] = str(rng.randint(2, 40))
    values["n"] = str(rng.randint(3, 400))
    values["year"] = str(rng.randint(2018, 2024))
    values["sec"] = rng.choice("ABCDEFGH") + str(rng.randint(1, 9))
    values["product"] = rng.choice(PRODUCTS)
    values["city"] = rng.choice(CITIES)
    values["person"] = person_name(rng)
    values["state"] = rng.choice(STATES)
    return template.format(**values)


def filler_paragraph(rng: random.Random, family: Family, slots: dict[str, str]) -> str:
    """One paragraph (2-5 sentences, one line) of ``family`` filler.

    ``slots`` must hold ``t``, ``T``, ``cp`` and ``CP``; the first sentence is one that names
    the target, so every paragraph is room-specific.
    """
    bank = _SENTENCES[family]
    with_target = [s for s in bank if "{t}" in s or "{T}" in s]
    first = rng.choice(with_target)
    rest = [s for s in bank if s is not first]
    sentences = [first, *rng.sample(rest, min(len(rest), rng.randint(1, 4)))]
    return " ".join(_fill(s, rng, slots) for s in sentences)


def filler_sections(
    rng: random.Random, family: Family, slots: dict[str, str], n_chars: int
) -> list[tuple[str, list[str]]]:
    """Filler sections ``(heading, paragraphs)`` (1-3 paragraphs each) until about ``n_chars``
    characters of paragraph text; headings follow :data:`FAMILY_HEADINGS` in order, then
    repeat at random."""
    headings = FAMILY_HEADINGS[family]
    out: list[tuple[str, list[str]]] = []
    total = 0
    while total < n_chars:
        k = len(out)
        heading = headings[k] if k < len(headings) else rng.choice(headings)
        paragraphs = [filler_paragraph(rng, family, slots) for _ in range(rng.randint(1, 3))]
        out.append((heading, paragraphs))
        total += sum(len(p) + 8 for p in paragraphs) + len(heading) + 6
    return out
