"""The table of planted-issue kinds of a synthetic room: one :class:`IssueTemplate` each.

Sixteen single-document kinds, six multi-document kinds (facts that only make a finding
together) and six missing-evidence kinds (a document refers to one that is not in the room);
:mod:`rlmdistill.rooms.synth` cycles through each class's kinds in a seeded order. The types
and the renderer are :mod:`rlmdistill.rooms.synth_issues`.

Order is part of the data: a class's kinds are shuffled from their order here, and each
template's values are drawn in their order, so moving, adding or removing an entry (or a
value) changes the rooms built for a seed. Bump :data:`rlmdistill.rooms.synth.GENERATOR` and
re-record ``tests/data/synth_rooms_sha256.json`` when you do (``docs/synth.md``).

Some values are drawn and not used (the material-contract kinds all draw ``product``; only
``exclusivity`` and ``mfn`` name it): they keep the draws, and so the rooms, of ``synth-v3``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlmdistill.rooms.synth_issues import (
    AmountRule,
    ByDeal,
    Calc,
    Choice,
    Company,
    Date,
    Int,
    IssueTemplate,
    IssueTemplateError,
    Money,
    Person,
    Pick,
    SpanRule,
    Spec,
    Text,
)
from rlmdistill.rooms.synth_text import CITIES, PRODUCTS, STATES

__all__ = ["ISSUE_TEMPLATES", "TEMPLATES_BY_KIND"]

_MC = "02_Material_Contracts"
_DAYS = Choice(("15 days", "30 days", "45 days", "60 days", "90 days"))
"""A notice period."""
_LOI = SpanRule("loi", "{structure_text}", planted=False)
"""The letter of intent's structure paragraph, which a multi-document finding rests on."""
_TIMES = {1.5: "one and one-half", 2: "two", 2.5: "two and one-half", 3: "three"}


def _contract_kind(values: Mapping[str, Spec] | None = None, **kw: Any) -> IssueTemplate:
    """A single-document kind planted in a material contract (``{doc}``; ``{product}`` drawn)."""
    return IssueTemplate(
        klass="single",
        values={"doc": Pick(_MC, contract=True), "product": Choice(PRODUCTS), **(values or {})},
        **kw,
    )


def _missing_kind(
    kind: str,
    doc: Pick,
    missing: str,
    text: str,
    would_be: str,
    values: Mapping[str, Spec] | None = None,
) -> IssueTemplate:
    """A missing-evidence kind: ``{date}`` then ``{doc}`` are drawn, then ``values``; the
    absent document's title is ``missing`` (``{missing}`` in ``text``, the planted sentence)
    and ``would_be`` the id it would have."""
    return IssueTemplate(
        kind=kind,
        klass="missing",
        severity="medium",
        category="Missing Document",
        values={"date": Date(2016, 2023), "doc": doc, **(values or {}), "missing": Text(missing)},
        spans=(SpanRule("doc", text),),
        title="Memo notes that the {missing} is not in the data room",
        match=(
            "PASS if the memo states that the {missing}, referred to in {doc.id}, is missing from "
            "the data room and asks for it (or treats its terms as unknown). FAIL if the memo does "
            "not mention it or describes its terms as if it had been reviewed."
        ),
        absent=("{missing}", would_be),
    )


_COC_CONSENT = {
    "clause": (
        "A Change of Control of {t}, including a merger or a sale of more than fifty "
        "percent of its voting securities, is treated as an assignment of this "
        "Agreement and requires the prior written consent of {doc.short}, which {doc.short} may "
        "withhold in its sole discretion."
    ),
    "category": "Change Of Control",
    "why": "the {structure} is a change of control of {t}",
}
_ASSIGNMENT_CONSENT = {
    "clause": (
        "Neither {t} nor {doc.short} may assign or transfer this Agreement or any right under "
        "it, by operation of law or otherwise, without the prior written consent of the "
        "other, and any purported assignment without that consent is void."
    ),
    "category": "Anti-Assignment",
    "why": "the asset purchase transfers the contract to the buyer",
}

ISSUE_TEMPLATES: tuple[IssueTemplate, ...] = (
    # ------------------------------------------------------------------ single document
    _contract_kind(
        kind="coc-termination",
        severity="high",
        category="Change Of Control",
        values={"days": _DAYS},
        spans=(
            SpanRule(
                "doc",
                "If {t} undergoes a Change of Control, {doc.short} may terminate this Agreement "
                "with immediate effect by written notice given within {days} after it learns "
                "of the Change of Control.",
            ),
        ),
        title="Memo flags {doc.short}'s right to terminate the {doc.title} on a change of control of {t}",
        match=(
            "PASS if the memo states that {doc.cp} may terminate the {doc.title} ({doc.id}) "
            "upon a change of control of {t} and cites {doc.id}. FAIL if the right is "
            "not mentioned or the document is not cited."
        ),
    ),
    _contract_kind(
        kind="uncapped-indemnity",
        severity="high",
        category="Uncapped Liability",
        spans=(
            SpanRule(
                "doc",
                "The limitations of liability in this Agreement do not apply to {t}'s "
                "indemnification obligations for third-party intellectual property claims, which "
                "are unlimited in amount.",
            ),
        ),
        title="Memo flags {t}'s uncapped IP indemnity in the {doc.title} with {doc.short}",
        match=(
            "PASS if the memo states that {t}'s indemnity for third-party IP claims "
            "under {doc.id} is not subject to the liability cap (uncapped) and cites "
            "{doc.id}. FAIL otherwise."
        ),
    ),
    _contract_kind(
        kind="non-compete",
        severity="high",
        category="Non-Compete",
        values={"years": Choice(("two (2)", "three (3)", "five (5)"))},
        spans=(
            SpanRule(
                "doc",
                "During the term of this Agreement and for {years} years after it ends, {t} "
                "shall not, directly or indirectly, develop, sell or market any product that "
                "competes with the products of {doc.short} anywhere in North America.",
            ),
        ),
        title="Memo flags the non-compete binding {t} in the {doc.title} with {doc.short}",
        match=(
            "PASS if the memo identifies the non-compete restricting {t} for {years} "
            "years after the end of {doc.id}, notes that it may bind the buyer's "
            "group after closing, and cites {doc.id}. FAIL otherwise."
        ),
    ),
    _contract_kind(
        kind="exclusivity",
        severity="medium",
        category="Exclusivity",
        values={
            "region": Choice(
                ("Canada", "the European Union", "Latin America", "Japan", "Australia")
            )
        },
        spans=(
            SpanRule(
                "doc",
                "{doc.short} is appointed the sole and exclusive distributor of {t}'s {product} in "
                "{region}, and {t} shall not sell the {product} in {region} other than through "
                "{doc.short}.",
            ),
        ),
        title="Memo flags {doc.short}'s exclusive distribution rights for {region}",
        match=(
            "PASS if the memo states that {doc.cp} holds exclusive rights to the "
            "{product} in {region} under {doc.id} and cites it. FAIL otherwise."
        ),
    ),
    _contract_kind(
        kind="mfn",
        severity="medium",
        category="Most Favored Nation",
        spans=(
            SpanRule(
                "doc",
                "If {t} offers any other customer prices for the {product} lower than those "
                "charged to {doc.short}, {t} shall promptly offer the same lower prices to "
                "{doc.short} and refund the difference for the preceding twelve months.",
            ),
        ),
        title="Memo flags the most-favoured-customer pricing owed to {doc.short}",
        match=(
            "PASS if the memo identifies the most-favoured-nation pricing and refund "
            "obligation in {doc.id} and cites it. FAIL otherwise."
        ),
    ),
    _contract_kind(
        kind="minimum-commitment",
        severity="medium",
        category="Minimum Commitment",
        values={"amount": Money(500_000, 12_000_000, 50_000), "days": _DAYS},
        spans=(
            SpanRule(
                "doc",
                "{t} shall purchase from {doc.short} products with an aggregate price of at least "
                "{amount:usd} in each contract year, and shall pay {doc.short} any shortfall "
                "within {days} after the end of the contract year.",
            ),
        ),
        title="Memo flags {t}'s take-or-pay minimum purchase commitment to {doc.short}",
        match=(
            "PASS if the memo identifies the annual minimum purchase commitment with "
            "shortfall payment in {doc.id} and cites it. FAIL otherwise."
        ),
        amounts=(AmountRule("amount"),),
        amount_what="the annual minimum purchase commitment",
    ),
    IssueTemplate(
        kind="litigation",
        klass="single",
        severity="high",
        category="Litigation",
        values={
            "doc": Pick("05_Litigation"),
            "plaintiff": Company(),
            "amount": Money(750_000, 25_000_000, 50_000),
            "filed": Date(2021, 2024),
            "state": Choice(STATES),
        },
        spans=(
            SpanRule(
                "doc",
                "In the action filed on {filed} in the {state} Superior Court, {plaintiff} alleges "
                "that {t} breached a supply contract and misappropriated trade secrets, and seeks "
                "damages of not less than {amount:usd}.",
            ),
        ),
        title="Memo reports the pending action by {plaintiff} against {t}",
        match=(
            "PASS if the memo reports the pending lawsuit by {plaintiff} (breach of "
            "contract and trade secrets) and cites {doc.id}. FAIL otherwise."
        ),
        amounts=(AmountRule("amount"),),
        amount_what="the damages claimed by {plaintiff}",
    ),
    IssueTemplate(
        kind="tax-assessment",
        klass="single",
        severity="high",
        category="Tax",
        values={
            "doc": Pick("08_Tax"),
            "amount": Money(150_000, 6_000_000),
            "y1": Int(2016, 2020),
            "state": Choice(STATES),
            "y2": Calc(lambda v: v["y1"] + 3),
            "issued": Date(2022, 2024),
        },
        spans=(
            SpanRule(
                "doc",
                "On {issued} the {state} Department of Revenue issued {t} a "
                "notice of proposed assessment of {amount:usd} in sales and use tax, "
                "penalties and interest for the tax years {y1} through {y2}; {t} has not "
                "recorded a reserve for it.",
            ),
        ),
        title="Memo reports the unreserved {state} sales and use tax assessment",
        match=(
            "PASS if the memo reports the proposed {state} sales and use tax "
            "assessment against {t}, notes that no reserve is recorded, and cites "
            "{doc.id}. FAIL otherwise."
        ),
        amounts=(AmountRule("amount"),),
        amount_what="the proposed tax assessment",
    ),
    IssueTemplate(
        kind="contamination",
        klass="single",
        severity="high",
        category="Environmental",
        values={
            "doc": Pick("12_Environmental"),
            "amount": Money(250_000, 9_000_000),
            "city": Choice(CITIES),
        },
        spans=(
            SpanRule(
                "doc",
                "Soil sampling at {t}'s {city} facility found trichloroethylene above state "
                "cleanup levels; the consultant estimates the cost of remediation at "
                "{amount:usd}.",
            ),
        ),
        title="Memo reports the soil contamination at the {city} facility",
        match=(
            "PASS if the memo reports the trichloroethylene contamination at {t}'s "
            "{city} facility and cites {doc.id}. FAIL otherwise."
        ),
        amounts=(AmountRule("amount"),),
        amount_what="the estimated remediation cost at {city}",
    ),
    IssueTemplate(
        kind="data-breach",
        klass="single",
        severity="high",
        category="Data Privacy",
        values={
            "doc": Pick("11_Data_Privacy"),
            "n": Int(5_000, 899_999),
            "when": Date(2022, 2024),
        },
        spans=(
            SpanRule(
                "doc",
                "On {when} an unauthorised third party accessed a {t} "
                "database holding the names and payment card details of {n:,} customers; {t} has "
                "not notified the affected individuals or any regulator.",
            ),
        ),
        title="Memo reports the unnotified data breach affecting {n:,} customers",
        match=(
            "PASS if the memo reports the breach of payment card data of about {n:,} "
            "customers, notes that no notification was made, and cites {doc.id}. "
            "FAIL otherwise."
        ),
    ),
    IssueTemplate(
        kind="ip-not-assigned",
        klass="single",
        severity="high",
        category="Ip Ownership Assignment",
        values={
            "doc": Pick("03_Intellectual_Property"),
            "n1": Int(9, 11),
            "n2": Int(100, 999),
            "n3": Int(100, 999),
            "number": Text("{n1},{n2},{n3}"),
            "founder": Person(),
            "product": Choice(PRODUCTS),
        },
        spans=(
            SpanRule(
                "doc",
                "U.S. Patent No. {number}, which covers the core technology of the "
                "{product}, is registered in the name of {founder}, a founder of {t}, "
                "and no assignment of it to {t} has been executed or recorded.",
            ),
        ),
        title="Memo flags that Patent No. {number} is owned by {founder}, not {t}",
        match=(
            "PASS if the memo states that U.S. Patent No. {number} is held by the "
            "founder {founder} and not assigned to {t}, and cites {doc.id}. FAIL "
            "otherwise."
        ),
    ),
    IssueTemplate(
        kind="permit-expired",
        klass="single",
        severity="medium",
        category="Regulatory",
        values={
            "doc": Pick("09_Regulatory"),
            "p1": Choice(tuple("ABCDEFG")),
            "p2": Choice(tuple("KLMNPQR")),
            "p3": Int(1000, 9999),
            "permit": Text("{p1}{p2}-{p3}"),
            "city": Choice(CITIES),
            "expired": Date(2022, 2024),
        },
        spans=(
            SpanRule(
                "doc",
                "Operating permit No. {permit} for {t}'s {city} plant expired on "
                "{expired}, and {t} has continued operations without filing "
                "an application for renewal.",
            ),
        ),
        title="Memo flags the expired operating permit {permit} at the {city} plant",
        match=(
            "PASS if the memo reports that permit {permit} for the {city} plant has "
            "expired with no renewal filed and cites {doc.id}. FAIL otherwise."
        ),
    ),
    IssueTemplate(
        kind="insurance-lapse",
        klass="single",
        severity="medium",
        category="Insurance",
        values={"doc": Pick("10_Insurance"), "date": Date(2024, 2025)},
        spans=(
            SpanRule(
                "doc",
                "{t}'s directors and officers liability policy expires on {date} and contains no "
                "run-off or extended reporting period, so claims first made after that date are "
                "not covered.",
            ),
        ),
        title="Memo flags the D&O policy expiring on {date} without run-off cover",
        match=(
            "PASS if the memo notes that the D&O policy expires on {date} with no "
            "run-off or tail cover and cites {doc.id}. FAIL otherwise."
        ),
    ),
    IssueTemplate(
        kind="covenant-breach",
        klass="single",
        severity="high",
        category="Finance",
        values={
            "doc": Pick("07_Finance"),
            "bank": Company(),
            "r1": Int(4, 6),
            "r2": Int(10, 95),
            "ratio": Text("{r1}.{r2}"),
            "as_of": Date(2023, 2024),
        },
        spans=(
            SpanRule(
                "doc",
                "As of {as_of}, {t} was not in compliance with the maximum "
                "leverage ratio of 3.50 to 1.00 under its credit agreement with {bank} (actual "
                "ratio: {ratio} to 1.00), and {bank.short} has reserved all of its rights.",
            ),
        ),
        title="Memo flags the leverage covenant breach under the {bank.short} credit agreement",
        match=(
            "PASS if the memo reports that {t} breaches the 3.50x leverage covenant "
            "(actual {ratio}x) under its credit agreement with {bank} and cites "
            "{doc.id}. FAIL otherwise."
        ),
    ),
    IssueTemplate(
        kind="lease-termination",
        klass="single",
        severity="medium",
        category="Termination For Convenience",
        values={
            "doc": Pick("06_Real_Estate", contract=True),
            "city": Choice(CITIES),
            "days": _DAYS,
        },
        spans=(
            SpanRule(
                "doc",
                "The Landlord may terminate this lease of {t}'s premises in {city} at any time on "
                "{days}' notice without paying any compensation to {t}.",
            ),
        ),
        title="Memo flags the landlord's right to terminate the {city} lease at will",
        match=(
            "PASS if the memo states that the landlord may terminate the lease of the "
            "{city} premises for convenience without compensation and cites {doc.id}. "
            "FAIL otherwise."
        ),
    ),
    IssueTemplate(
        kind="misclassification",
        klass="single",
        severity="medium",
        category="Employment",
        values={
            "doc": Pick("04_Employment"),
            "n": Int(12, 180),
            "amount": Money(200_000, 4_000_000),
        },
        spans=(
            SpanRule(
                "doc",
                "{n} individuals who work full time for {t} under its direction are engaged as "
                "independent contractors and receive no overtime or benefits; counsel estimates "
                "back pay and penalties of {amount:usd} if they are reclassified as employees.",
            ),
        ),
        title="Memo flags the misclassification of {n} contractors",
        match=(
            "PASS if the memo reports that {n} full-time workers are treated as "
            "contractors, with back-pay exposure, and cites {doc.id}. FAIL otherwise."
        ),
        amounts=(AmountRule("amount"),),
        amount_what="the reclassification exposure",
    ),
    # ------------------------------------------------------------------ multi-document
    IssueTemplate(
        kind="consent",
        klass="multi",
        severity="high",
        category="{deal.category}",
        values={
            "doc": Pick(_MC, contract=True),
            "deal": ByDeal(
                {
                    "share purchase": _COC_CONSENT,
                    "merger": _COC_CONSENT,
                    "asset purchase": _ASSIGNMENT_CONSENT,
                }
            ),
        },
        spans=(SpanRule("doc", "{deal.clause}"), _LOI),
        title="Memo concludes that the deal needs {doc.short}'s consent under the {doc.title}",
        match=(
            "PASS if the memo connects the consent requirement in {doc.id} with the deal "
            "structure in {loi.id} ({deal.why}) and concludes that {doc.cp}'s consent is needed "
            "for the transaction. FAIL if either fact is missing or no consent requirement is "
            "concluded."
        ),
        recommendation=(
            "Memo recommends obtaining {doc.short}'s consent before closing",
            "PASS if the memo recommends obtaining {doc.cp}'s written consent (or making it a "
            "closing condition) before closing. FAIL otherwise.",
        ),
    ),
    IssueTemplate(
        kind="loan-acceleration",
        klass="multi",
        severity="high",
        category="Change Of Control",
        values={
            "doc": Pick("07_Finance"),
            "other": Pick("07_Finance", exclude=("doc",)),
            "bank": Company(),
            "amount": Money(2_000_000, 60_000_000, 100_000),
        },
        spans=(
            SpanRule(
                "doc",
                "It is an event of default under {t}'s term loan from {bank} if {t} undergoes a "
                "change of control or sells all or substantially all of its assets, whereupon all "
                "outstanding loans become immediately due and payable.",
            ),
            SpanRule(
                "other",
                "The outstanding principal of {t}'s term loan from {bank.short} at the "
                "balance sheet date was {amount:usd}.",
            ),
            _LOI,
        ),
        title="Memo concludes that the {bank.short} term loan becomes repayable at closing",
        match=(
            "PASS if the memo connects the change-of-control default in {doc.id}, the deal "
            "structure in {loi.id} and the outstanding balance in {other.id}, and concludes "
            "that the loan will have to be repaid or waived at closing. FAIL otherwise."
        ),
        amounts=(AmountRule("amount"),),
        amount_what="the term loan from {bank.short} repayable at closing",
    ),
    IssueTemplate(
        kind="customer-concentration",
        klass="multi",
        severity="high",
        category="Termination For Convenience",
        values={
            "doc": Pick(_MC, contract=True),
            "fin": Pick("07_Finance"),
            "pct": Int(18, 46),
            "revenue": Money(3_000_000, 80_000_000, 100_000),
            "days": _DAYS,
        },
        spans=(
            SpanRule(
                "doc",
                "{doc.short} may terminate this Agreement for convenience at any time on "
                "{days}' written notice to {t}.",
            ),
            SpanRule(
                "fin",
                "Sales to {doc.cp} were {revenue:usd}, or {pct}% of {t}'s total revenue, "
                "making it {t}'s largest customer.",
            ),
        ),
        title="Memo flags that {t}'s largest customer ({pct}% of revenue) can terminate for convenience",
        match=(
            "PASS if the memo connects {doc.short}'s right to terminate for convenience in "
            "{doc.id} with its {pct}% share of revenue in {fin.id}. FAIL if either fact is missing."
        ),
        amounts=(AmountRule("pct", unit="%"), AmountRule("revenue")),
        amount_what="the revenue at risk from {doc.short}",
    ),
    IssueTemplate(
        kind="lease-consent",
        klass="multi",
        severity="high",
        category="Anti-Assignment",
        values={
            "lease": Pick("06_Real_Estate", contract=True),
            "other": Pick("06_Real_Estate", exclude=("lease",)),
            "city": Choice(CITIES),
            "pct": Int(30, 90),
        },
        spans=(
            SpanRule(
                "lease",
                "Any transfer of a controlling interest in {t}, or any sale of all or "
                "substantially all of its assets, is deemed an assignment of this lease of the "
                "{city} premises and requires the prior written consent of the Landlord, "
                "{lease.cp}.",
            ),
            SpanRule(
                "other",
                "The {city} premises house {t}'s only manufacturing line, which produced {pct}% "
                "of {t}'s revenue last year.",
            ),
        ),
        title="Memo concludes that the landlord's consent is needed for {t}'s only plant in {city}",
        match=(
            "PASS if the memo connects the landlord-consent clause in {lease.id} with the "
            "importance of the {city} site in {other.id} and concludes that the landlord's "
            "consent is needed for the deal. FAIL otherwise."
        ),
        recommendation=(
            "Memo recommends securing the {city} landlord's consent before closing",
            "PASS if the memo recommends obtaining {lease.cp}'s consent (or a closing "
            "condition) before closing. FAIL otherwise.",
        ),
    ),
    IssueTemplate(
        kind="executive-payment",
        klass="multi",
        severity="medium",
        category="Change Of Control",
        values={
            "agreement": Pick("04_Employment"),
            "census": Pick("04_Employment", exclude=("agreement",)),
            "executive": Person(),
            "role": Choice(
                ("Chief Technology Officer", "Chief Operating Officer", "Chief Revenue Officer")
            ),
            "salary": Money(220_000, 650_000, 5_000),
            "mult": Choice(tuple(_TIMES)),
            "times": Calc(lambda v: _TIMES[v["mult"]]),
            "payment": Calc(lambda v: v["mult"] * v["salary"]),
        },
        spans=(
            SpanRule(
                "agreement",
                "If the employment of {executive} ends for any reason within twelve months after "
                "a Change in Control of {t}, {t} shall pay {executive} a lump sum equal to "
                "{times} times the executive's annual base salary.",
            ),
            SpanRule("census", "{executive}, {role} of {t}: annual base salary {salary:usd}."),
        ),
        title="Memo quantifies the change-in-control payment to {executive}",
        match=(
            "PASS if the memo identifies the change-in-control payment to {executive} in "
            "{agreement.id} and uses the salary in {census.id}. FAIL otherwise."
        ),
        amounts=(AmountRule("payment", note="{times} times the base salary of {salary:usd}"),),
        amount_what="the change-in-control payment to {executive}",
    ),
    IssueTemplate(
        kind="uninsured-environmental",
        klass="multi",
        severity="high",
        category="Environmental",
        values={
            "site": Pick("12_Environmental"),
            "policy": Pick("10_Insurance"),
            "city": Choice(CITIES),
            "amount": Money(400_000, 12_000_000),
        },
        spans=(
            SpanRule(
                "site",
                "Remediation of the former plating area at {t}'s {city} site is estimated to "
                "cost {amount:usd}.",
            ),
            SpanRule(
                "policy",
                "The general liability policy of {t} excludes all loss arising from the "
                "discharge or release of pollutants, and {t} holds no separate pollution legal "
                "liability policy.",
            ),
        ),
        title="Memo concludes that the {city} remediation cost is uninsured",
        match=(
            "PASS if the memo connects the remediation estimate in {site.id} with the pollution "
            "exclusion in {policy.id} and concludes that the cost is uninsured. FAIL otherwise."
        ),
        amounts=(AmountRule("amount"),),
        amount_what="the uninsured remediation cost at {city}",
    ),
    # ------------------------------------------------------------------ missing evidence
    _missing_kind(
        "side-letter",
        Pick(_MC, contract=True),
        "Side Letter between {target} and {doc.cp} dated {date}",
        'Pricing under this Agreement is subject to the {missing} (the "Side Letter"), which is '
        "incorporated by reference.",
        "{doc.folder}/side_letter_{doc.slug}.txt",
    ),
    _missing_kind(
        "shareholders-agreement",
        Pick("01_Corporate"),
        "Shareholders' Agreement of {target} dated {date}",
        "The Board noted that any transfer of shares in {t} is subject to the rights of "
        "first refusal in the {missing}.",
        "01_Corporate/shareholders_agreement.txt",
    ),
    _missing_kind(
        "settlement",
        Pick("05_Litigation"),
        "Settlement Agreement between {target} and {other} dated {date}",
        "The dispute with {other} was resolved under the {missing}, under which {t} agreed to "
        "pay amounts in instalments through {until}.",
        "05_Litigation/settlement_agreement_{other.slug}.txt",
        {"other": Company(), "until": Int(2025, 2028)},
    ),
    _missing_kind(
        "intercreditor",
        Pick("07_Finance"),
        "Intercreditor Agreement between {bank1} and {bank2} dated {date}",
        "The security granted by {t} over its assets is shared under the {missing}.",
        "07_Finance/intercreditor_agreement.txt",
        {"bank1": Company(), "bank2": Company()},
    ),
    _missing_kind(
        "soc2-report",
        Pick("13_Information_Technology"),
        "SOC 2 Type II report for the period ended {date}, prepared by {auditor}",
        "{t}'s customer contracts rely on its {missing}, as evidence of its security controls.",
        "13_Information_Technology/soc2_type_ii_report.txt",
        {"auditor": Company()},
    ),
    _missing_kind(
        "permit-conditions",
        Pick("12_Environmental"),
        "Schedule {number} (Special Conditions) to {target}'s discharge permit dated {date}",
        "The wastewater discharge permit held by {t} is issued subject to the conditions in "
        "{missing}.",
        "12_Environmental/permit_schedule_{number}.txt",
        {"number": Int(2, 9)},
    ),
)
"""Every issue kind, by class (single, multi, missing) and within a class in the order the
plan shuffles from."""


def _by_kind(templates: tuple[IssueTemplate, ...]) -> dict[str, IssueTemplate]:
    out: dict[str, IssueTemplate] = {}
    for tpl in templates:
        if tpl.kind in out:
            raise IssueTemplateError(f"issue kind {tpl.kind!r} is in the table twice")
        out[tpl.kind] = tpl
    return out


TEMPLATES_BY_KIND: dict[str, IssueTemplate] = _by_kind(ISSUE_TEMPLATES)
""":data:`ISSUE_TEMPLATES` by kind (a kind is in the table once)."""
