"""Catalogue of a synthetic data room: category folders, sub-folders and document kinds.

Fourteen categories (numbered folders, as in LAB's example ``02_Material_Contracts/...``), each
with up to twelve sub-folders; a room of ``n`` documents uses ``clamp(n // 60, 14, 80)`` leaf
folders (80 for 5,000 documents), adding sub-folders to the categories with the most documents
per folder first. Every sub-folder lists the document kinds it holds: a file-name slug, a
title and a :data:`~rlmdistill.rooms.synth_text.Family` (which filler the document is built
from and how long it is).

Document kinds never include the titles that missing-evidence issues refer to (side letters,
shareholders' agreements, settlement agreements, intercreditor agreements, SOC 2 reports,
permit schedules), so a referenced-but-absent document is really absent.
"""

from __future__ import annotations

from typing import NamedTuple

from rlmdistill.rooms.synth_text import Family

__all__ = ["CATEGORIES", "FAMILY_CHARS", "Category", "DocKind", "SubFolder"]


class DocKind(NamedTuple):
    """One kind of document: ``slug`` (file-name stem), ``title`` and filler ``family``."""

    slug: str
    title: str
    family: Family


class SubFolder(NamedTuple):
    """A sub-folder of a category and the kinds of document it holds."""

    name: str
    kinds: tuple[DocKind, ...]


class Category(NamedTuple):
    """A top-level category folder: ``folder`` name, ``label``, share of documents
    (``weight``, relative) and its sub-folders in the order they are opened."""

    folder: str
    label: str
    weight: float
    subfolders: tuple[SubFolder, ...]


FAMILY_CHARS: dict[Family, tuple[int, int]] = {
    "contract": (12_000, 45_000),
    "minutes": (3_000, 10_000),
    "report": (8_000, 30_000),
    "financial": (6_000, 20_000),
    "letter": (1_500, 4_000),
    "policy": (5_000, 15_000),
    "schedule": (2_000, 8_000),
}
"""Length range (characters of filler, before scaling) per family, drawn uniformly. Chosen so
that the mean document is ~13k characters (~3k tokens): board minutes and letters are short,
contracts and reports long, as in a real data room (CUAD contracts average ~50k characters)."""


def _k(slug: str, title: str, family: Family) -> DocKind:
    return DocKind(slug, title, family)


def _s(name: str, *kinds: DocKind) -> SubFolder:
    return SubFolder(name, kinds)


CATEGORIES: tuple[Category, ...] = (
    Category(
        "01_Corporate",
        "corporate",
        0.07,
        (
            _s(
                "Board_Minutes",
                _k("board_minutes", "Minutes of a Meeting of the Board of Directors", "minutes"),
            ),
            _s(
                "Charter",
                _k("certificate_of_incorporation", "Certificate of Incorporation", "schedule"),
                _k("bylaws", "Bylaws", "policy"),
            ),
            _s(
                "Shareholders",
                _k("stock_ledger", "Stock Ledger", "schedule"),
                _k("shareholder_consent", "Written Consent of the Stockholders", "minutes"),
            ),
            _s("Subsidiaries", _k("subsidiary_overview", "Subsidiary Overview", "report")),
            _s(
                "Resolutions",
                _k("board_consent", "Unanimous Written Consent of the Board", "minutes"),
            ),
            _s(
                "Registers",
                _k("register_of_officers", "Register of Directors and Officers", "schedule"),
            ),
            _s("Powers_of_Attorney", _k("power_of_attorney", "Power of Attorney", "letter")),
        ),
    ),
    Category(
        "02_Material_Contracts",
        "material contracts",
        0.22,
        (
            _s("Customers", _k("customer_agreement", "Master Customer Agreement", "contract")),
            _s("Suppliers", _k("supply_agreement", "Supply Agreement", "contract")),
            _s("Distribution", _k("distribution_agreement", "Distribution Agreement", "contract")),
            _s("Licensing", _k("license_agreement", "License Agreement", "contract")),
            _s("Services", _k("services_agreement", "Master Services Agreement", "contract")),
            _s(
                "Partnerships", _k("collaboration_agreement", "Collaboration Agreement", "contract")
            ),
            _s("Procurement", _k("purchase_agreement", "Purchase Agreement", "contract")),
            _s("Channel", _k("reseller_agreement", "Reseller Agreement", "contract")),
            _s("Logistics", _k("logistics_agreement", "Logistics Services Agreement", "contract")),
            _s("Marketing", _k("marketing_agreement", "Marketing Agreement", "contract")),
            _s("NDAs", _k("mutual_nda", "Mutual Non-Disclosure Agreement", "contract")),
            _s(
                "Framework_Agreements", _k("framework_agreement", "Framework Agreement", "contract")
            ),
        ),
    ),
    Category(
        "03_Intellectual_Property",
        "intellectual property",
        0.07,
        (
            _s(
                "Patents", _k("patent_schedule", "Schedule of Patents and Applications", "schedule")
            ),
            _s("Trademarks", _k("trademark_schedule", "Schedule of Trademarks", "schedule")),
            _s(
                "Assignments",
                _k("invention_assignment", "Employee Invention Assignment", "contract"),
            ),
            _s("Licenses_In", _k("inbound_license", "Technology License Agreement", "contract")),
            _s("Software", _k("open_source_report", "Open Source Software Audit", "report")),
            _s("Domain_Names", _k("domain_register", "Domain Name Register", "schedule")),
            _s("Freedom_to_Operate", _k("fto_opinion", "Freedom-to-Operate Review", "report")),
        ),
    ),
    Category(
        "04_Employment",
        "employment",
        0.09,
        (
            _s(
                "Executives",
                _k("executive_employment_agreement", "Executive Employment Agreement", "contract"),
            ),
            _s("Offer_Letters", _k("offer_letter", "Offer Letter", "letter")),
            _s(
                "Plans",
                _k("equity_incentive_plan", "Equity Incentive Plan", "policy"),
                _k("bonus_plan", "Annual Bonus Plan", "policy"),
            ),
            _s("Policies", _k("employee_handbook", "Employee Handbook", "policy")),
            _s("Contractors", _k("consulting_agreement", "Consulting Agreement", "contract")),
            _s("Census", _k("employee_census", "Employee Census", "schedule")),
            _s("Benefits", _k("benefits_summary", "Summary of Employee Benefits", "policy")),
        ),
    ),
    Category(
        "05_Litigation",
        "litigation",
        0.05,
        (
            _s("Pending", _k("litigation_summary", "Summary of Pending Litigation", "report")),
            _s("Threatened", _k("demand_letter", "Demand Letter", "letter")),
            _s(
                "Counsel_Letters",
                _k("audit_response_letter", "Legal Counsel Audit Response Letter", "letter"),
            ),
            _s("Settled", _k("closed_matters", "Schedule of Closed Matters", "schedule")),
            _s(
                "Regulatory_Inquiries",
                _k("inquiry_response", "Response to Regulatory Inquiry", "letter"),
            ),
            _s(
                "Investigations",
                _k("internal_investigation", "Internal Investigation Report", "report"),
            ),
        ),
    ),
    Category(
        "06_Real_Estate",
        "real estate",
        0.05,
        (
            _s("Leases", _k("lease_agreement", "Lease Agreement", "contract")),
            _s("Owned_Property", _k("property_schedule", "Schedule of Real Property", "schedule")),
            _s("Estoppels", _k("estoppel_certificate", "Tenant Estoppel Certificate", "letter")),
            _s("Facilities", _k("facility_report", "Facility Condition Report", "report")),
        ),
    ),
    Category(
        "07_Finance",
        "finance",
        0.10,
        (
            _s(
                "Audited_Financials",
                _k("audited_financial_statements", "Audited Financial Statements", "financial"),
            ),
            _s(
                "Management_Accounts",
                _k("management_accounts", "Monthly Management Accounts", "financial"),
            ),
            _s("Debt", _k("credit_agreement_summary", "Summary of Credit Facilities", "report")),
            _s("Guarantees", _k("guarantee_schedule", "Schedule of Guarantees", "schedule")),
            _s("Banking", _k("bank_accounts", "Schedule of Bank Accounts", "schedule")),
            _s("Forecasts", _k("budget", "Annual Budget and Forecast", "financial")),
            _s("Grants", _k("grant_agreement", "Grant Agreement", "contract")),
        ),
    ),
    Category(
        "08_Tax",
        "tax",
        0.06,
        (
            _s("Returns", _k("tax_return_summary", "Summary of Tax Returns", "financial")),
            _s("Assessments", _k("tax_correspondence", "Tax Authority Correspondence", "letter")),
            _s(
                "Transfer_Pricing", _k("transfer_pricing_study", "Transfer Pricing Study", "report")
            ),
            _s("Indirect_Tax", _k("sales_tax_review", "Sales and Use Tax Review", "report")),
            _s("Incentives", _k("tax_incentive_agreement", "Tax Incentive Agreement", "contract")),
        ),
    ),
    Category(
        "09_Regulatory",
        "regulatory",
        0.07,
        (
            _s("Permits", _k("operating_permit", "Operating Permit", "schedule")),
            _s("Correspondence", _k("regulator_letter", "Letter from Regulator", "letter")),
            _s(
                "Certifications", _k("certification_report", "Certification Audit Report", "report")
            ),
            _s(
                "Trade_Compliance",
                _k("export_classification", "Export Classification Review", "report"),
            ),
            _s("Product_Safety", _k("product_safety_report", "Product Safety Report", "report")),
            _s("Licences", _k("licence_register", "Register of Regulatory Licences", "schedule")),
        ),
    ),
    Category(
        "10_Insurance",
        "insurance",
        0.04,
        (
            _s(
                "Policies", _k("insurance_policy_schedule", "Insurance Policy Schedule", "schedule")
            ),
            _s("Claims", _k("claims_history", "Claims History", "report")),
            _s("Brokers", _k("broker_letter", "Letter from Insurance Broker", "letter")),
            _s("Risk_Reports", _k("risk_survey", "Risk Engineering Survey", "report")),
        ),
    ),
    Category(
        "11_Data_Privacy",
        "data privacy",
        0.05,
        (
            _s("Policies", _k("privacy_policy", "Privacy Policy", "policy")),
            _s(
                "Processing_Agreements",
                _k("data_processing_agreement", "Data Processing Agreement", "contract"),
            ),
            _s("Incidents", _k("incident_log", "Security Incident Log", "report")),
            _s(
                "Assessments",
                _k("privacy_impact_assessment", "Privacy Impact Assessment", "report"),
            ),
            _s(
                "Transfers",
                _k("transfer_assessment", "International Transfer Assessment", "report"),
            ),
        ),
    ),
    Category(
        "12_Environmental",
        "environmental",
        0.04,
        (
            _s(
                "Site_Reports", _k("phase_i_esa", "Phase I Environmental Site Assessment", "report")
            ),
            _s("Permits", _k("discharge_permit", "Wastewater Discharge Permit", "schedule")),
            _s("Remediation", _k("remediation_update", "Remediation Status Update", "report")),
            _s("Compliance", _k("ehs_audit", "Environmental, Health and Safety Audit", "report")),
        ),
    ),
    Category(
        "13_Information_Technology",
        "information technology",
        0.05,
        (
            _s("Systems", _k("it_systems_overview", "IT Systems Overview", "report")),
            _s(
                "Software_Licenses",
                _k("software_license", "Enterprise Software License", "contract"),
            ),
            _s(
                "Outsourcing",
                _k("it_outsourcing_agreement", "IT Outsourcing Agreement", "contract"),
            ),
            _s("Security", _k("penetration_test", "Penetration Test Summary", "report")),
        ),
    ),
    Category(
        "14_Transaction",
        "transaction",
        0.04,
        (
            _s(
                "Deal_Documents",
                _k("disclosure_schedule_index", "Index to the Disclosure Schedule", "schedule"),
            ),
            _s("Process", _k("process_letter", "Process Letter", "letter")),
        ),
    ),
)
"""The fourteen categories (80 sub-folders in all). ``14_Transaction`` always holds the letter
of intent (the deal structure) as its first document."""
