"""Build a data room (documents + LAB-shaped task) from CUAD contracts and their lawyer labels.

Command: ``rlmdistill rooms build-cuad SOURCE --contracts N --seed S --out DIR``
(:func:`build_cuad_main`; the engine is :func:`build_cuad_room`).

``SOURCE`` is a CUAD-format folder, either this project's shared subset
(``contracts/*.txt``, ``master_clauses.csv``, optional ``contract_index.csv``) or the official
CUAD v1 release (``full_contract_txt/*.txt`` + ``master_clauses.csv``). Label rows name PDFs;
they are matched to text files by normalised name (accents folded, lowercase, non-alphanumerics
removed), then by fuzzy match (rapidfuzz ratio >= 95); unmatched rows are reported and skipped.

Output::

    OUT/documents/<Folder>/<normalised_name>.txt   contract texts, copied byte for byte
    OUT/task.json                                  LAB-shaped task, one criterion per positive
                                                   M&A label (contract x category)
    OUT/room.json                                  provenance: source, seed, chosen contracts,
                                                   gold-span verbatim checks, unmatched rows
    OUT/ATTRIBUTION.md                             CUAD CC BY 4.0 attribution

Data: Contract Understanding Atticus Dataset (CUAD) v1, The Atticus Project,
https://www.atticusprojectai.org/cuad (arXiv:2103.06268), CC BY 4.0.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import random
import re
import shutil
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rapidfuzz import fuzz, process

from rlmdistill import __version__
from rlmdistill.rooms.meta import CuadRoomMeta, write_room_meta
from rlmdistill.rooms.output import prepare_room_folder
from rlmdistill.rooms.room import DataRoom, decode_text
from rlmdistill.rooms.task import Criterion, Evidence, Task, save_task
from rlmdistill.rooms.text import ascii_fold, content_words, normalise_ws, slugify, words

__all__ = [
    "CUAD_ATTRIBUTION",
    "FOLDERS",
    "MA_CATEGORIES",
    "BuildReport",
    "CuadError",
    "build_cuad_main",
    "build_cuad_room",
    "contract_type_from_name",
    "criteria_per_contract",
    "folder_for_contract_type",
    "labelled_spans",
    "normalise_name",
]

CUAD_ATTRIBUTION = (
    "Contract Understanding Atticus Dataset (CUAD) v1, The Atticus Project, "
    "https://www.atticusprojectai.org/cuad (Hendrycks, Burns, Chen and Ball, "
    "arXiv:2103.06268). Licensed under Creative Commons Attribution 4.0 (CC BY 4.0)."
)
"""Attribution line that must travel with every room built from CUAD."""

MA_CATEGORIES: tuple[str, ...] = (
    "Change Of Control",
    "Anti-Assignment",
    "Exclusivity",
    "Non-Compete",
    "Uncapped Liability",
    "Cap On Liability",
    "Termination For Convenience",
    "Minimum Commitment",
    "Most Favored Nation",
    "Rofr/Rofo/Rofn",
    "Liquidated Damages",
    "Ip Ownership Assignment",
    "Covenant Not To Sue",
    "Audit Rights",
    "Post-Termination Services",
    "Revenue/Profit Sharing",
)
"""CUAD categories (column names) that become rubric criteria when labelled positive."""

FOLDERS: tuple[str, ...] = (
    "Distribution",
    "License",
    "Services",
    "Supply_Manufacturing",
    "Marketing_Endorsement",
    "Strategic_Alliance_JV",
    "Other",
)
"""Category folders of a CUAD room."""

# Checked in order; the first folder whose pattern matches the contract type wins.
_FOLDER_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "Strategic_Alliance_JV",
        re.compile(r"strategic alliance|joint venture|collaboration|cooperation|joint filing"),
    ),
    (
        "Marketing_Endorsement",
        re.compile(r"endorsement|sponsorship|marketing|promotion|branding|affiliate"),
    ),
    ("Distribution", re.compile(r"distribut|reseller|franchise|agency")),
    ("Supply_Manufacturing", re.compile(r"supply|manufactur")),
    (
        "Services",
        re.compile(
            r"servic|outsourc|consult|maintenance|hosting|development|transportation|support"
        ),
    ),
    ("License", re.compile(r"licen[cs]|\bip\b|intellectual property|trademark")),
)

_SPAN_MAX_CHARS = 1000
_FUZZY_CUTOFF = 95.0
_N_KEY_TERMS = 6
_NAME_MAX_CHARS = 100


class CuadError(ValueError):
    """The CUAD source folder is unusable, or the request cannot be met (e.g. too many
    contracts asked for, output folder not empty)."""


@dataclass(frozen=True)
class BuildReport:
    """What :func:`build_cuad_room` did."""

    out: Path
    """Room folder written."""
    task_id: str
    room_hash: str
    n_rows: int
    """Label rows in ``master_clauses.csv``."""
    n_candidates: int
    """Rows matched to a text file (the population sampled from)."""
    n_contracts: int
    """Contracts chosen (= documents in the room)."""
    n_criteria: int
    folders: dict[str, int]
    """Documents per category folder."""
    n_spans: int
    """Gold spans behind the criteria."""
    n_spans_verbatim: int
    """Of those, found verbatim in the text after whitespace normalisation."""
    n_fuzzy_matches: int
    """Rows matched to a text file only by fuzzy name match."""
    unmatched: list[str] = field(default_factory=list)
    """``Filename`` values of label rows with no text file (skipped)."""
    contracts: list[str] = field(default_factory=list)
    """Source text file names of the chosen contracts (sorted), e.g. for ``exclude=``."""
    notes: list[str] = field(default_factory=list)
    """The built room's :meth:`~rlmdistill.rooms.room.DataRoom.notes` (documents not UTF-8,
    with replacement characters, or skipped); printed by the build log."""


@dataclass
class _Contract:
    csv_filename: str
    txt_path: Path
    row: dict[str, str]
    match: str
    contract_type: str
    type_source: str


SAMPLE_SOURCE = Path(__file__).resolve().parent / "cuad_sample"
"""16 CUAD contracts with their labels shipped inside the package (CC BY 4.0; see its README)."""


def normalise_name(name: str) -> str:
    """Matching key of a CUAD file name: extension stripped, accents folded, lowercase,
    non-alphanumerics removed (``"Foo - Bar Agreement.PDF"`` -> ``"foobaragreement"``)."""
    stem = re.sub(r"\.(pdf|txt)$", "", name.strip(), flags=re.IGNORECASE)
    return re.sub(r"[^a-z0-9]+", "", ascii_fold(stem).lower())


def contract_type_from_name(name: str) -> str:
    """Contract type from a CUAD file name's tail (``"..._Distributor Agreement1.pdf"`` ->
    ``"Distributor Agreement"``); the whole stem when the tail names no known type."""
    stem = re.sub(r"\.(pdf|txt)$", "", name.strip(), flags=re.IGNORECASE)
    tail = re.split(r"[_-]", stem)[-1]
    tail = re.sub(r"\d+$", "", tail).strip(" .,()")
    if folder_for_contract_type(tail) != "Other":
        return tail
    return stem


def folder_for_contract_type(contract_type: str) -> str:
    """Category folder (one of :data:`FOLDERS`) for a contract type such as ``"Distributor"``,
    ``"Co Branding"`` or ``"SOFTWARE LICENSE AND MAINTENANCE AGREEMENT"``."""
    text = " ".join(words(contract_type))
    for folder, pattern in _FOLDER_RULES:
        if pattern.search(text):
            return folder
    return "Other"


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8-sig", newline="") as handle:
        return list(csv.DictReader(handle))


def _answer(row: dict[str, str], category: str) -> str:
    for key in (f"{category}-Answer", f"{category}- Answer"):
        if key in row:
            return (row[key] or "").strip()
    return ""


def _spans(row: dict[str, str], category: str) -> list[str]:
    raw = (row.get(category) or "").strip()
    if not raw:
        return []
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return [raw]
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple):
        return []
    return [str(v) for v in value if str(v).strip()]


def _criterion_spans(row: dict[str, str], category: str) -> list[str]:
    """Whitespace-normalised gold spans of ``category`` when it is labelled positive (spans
    present, answer not "No"), else ``[]``: one rubric criterion per non-empty result."""
    spans = [s for s in (normalise_ws(s) for s in _spans(row, category)) if s]
    if not spans or _answer(row, category).lower() == "no":
        return []
    return spans


def criteria_per_contract(source: str | Path) -> dict[str, int]:
    """Rubric criteria each contract of ``source`` would give a room (its positive M&A labels,
    :data:`MA_CATEGORIES`), keyed by source text file name (as in ``BuildReport.contracts``).

    Only contracts matched to a label row are listed. A room has no criterion when every
    contract in it maps to 0 here. Raises :class:`CuadError` like :func:`build_cuad_room` when
    the source is unusable.
    """
    _, candidates, _, _ = _match_contracts(Path(source).resolve())
    return {
        c.txt_path.name: sum(bool(_criterion_spans(c.row, cat)) for cat in MA_CATEGORIES)
        for c in candidates
    }


def _truncate(span: str, limit: int = _SPAN_MAX_CHARS) -> str:
    if len(span) <= limit:
        return span
    cut = span[:limit]
    space = cut.rfind(" ")
    return cut[:space] if space > limit // 2 else cut


def _category_descriptions(source: Path) -> dict[str, str]:
    path = source / "category_descriptions.csv"
    if not path.is_file():
        return {}
    out: dict[str, str] = {}
    for row in _read_csv(path):
        values = list(row.values())
        if len(values) < 2 or not values[0] or not values[1]:
            continue
        name = values[0].removeprefix("Category:").strip()
        out[name] = values[1].removeprefix("Description:").strip()
    return out


def _match_contracts(source: Path) -> tuple[str, list[_Contract], list[str], int]:
    """Return (layout, matched contracts sorted by csv name, unmatched names, n_rows)."""
    if (source / "contracts").is_dir():
        layout, txt_dir = "shared", source / "contracts"
    elif (source / "full_contract_txt").is_dir():
        layout, txt_dir = "official", source / "full_contract_txt"
    else:
        raise CuadError(f"{source}: no contracts/ or full_contract_txt/ folder of .txt files")
    labels = source / "master_clauses.csv"
    if not labels.is_file():
        raise CuadError(f"{source}: master_clauses.csv not found")
    rows = _read_csv(labels)
    if rows and "Filename" not in rows[0]:
        raise CuadError(f"{labels}: no 'Filename' column")

    index: dict[str, dict[str, str]] = {}
    index_path = source / "contract_index.csv"
    if index_path.is_file():
        index = {r["csv_filename"]: r for r in _read_csv(index_path) if r.get("csv_filename")}

    txt_files = sorted(p for p in txt_dir.iterdir() if p.suffix.lower() == ".txt" and p.is_file())
    by_key: dict[str, Path] = {}
    for p in txt_files:
        by_key.setdefault(normalise_name(p.name), p)
    keys = list(by_key)

    used: set[Path] = set()
    matched: list[_Contract] = []
    unmatched: list[str] = []
    for row in rows:
        name = (row.get("Filename") or "").strip()
        if not name:
            continue
        entry = index.get(name)
        txt: Path | None = None
        how = ""
        if entry and entry.get("txt_file") and (txt_dir / entry["txt_file"]).is_file():
            txt, how = txt_dir / entry["txt_file"], "index"
        elif normalise_name(name) in by_key:
            txt, how = by_key[normalise_name(name)], "exact"
        elif keys:
            best = process.extractOne(
                normalise_name(name), keys, scorer=fuzz.ratio, score_cutoff=_FUZZY_CUTOFF
            )
            if best is not None:
                txt, how = by_key[best[0]], f"fuzzy:{best[1]:.0f}"
        if txt is None or txt in used:
            unmatched.append(name)
            continue
        used.add(txt)
        if entry and entry.get("contract_type"):
            ctype, type_source = normalise_ws(entry["contract_type"]), "index"
        else:
            ctype, type_source = contract_type_from_name(name), "file name"
        matched.append(_Contract(name, txt, row, how, ctype, type_source))
    matched.sort(key=lambda c: c.csv_filename)
    return layout, matched, unmatched, len(rows)


def _doc_name(txt_name: str) -> str:
    stem = re.sub(r"\.txt$", "", txt_name, flags=re.IGNORECASE)
    slug = slugify(stem, "_") or "contract"
    if len(slug) > _NAME_MAX_CHARS:  # cut at a word boundary when one is near
        cut = slug[:_NAME_MAX_CHARS]
        slug = cut[: cut.rfind("_")] if cut.rfind("_") > _NAME_MAX_CHARS // 2 else cut
    return slug


def _prepare_out(out: Path, overwrite: bool) -> None:
    prepare_room_folder(out, overwrite, CuadError)


def _attribution_md(chosen: list[tuple[str, str]]) -> str:
    lines = [
        "# Attribution",
        "",
        "The documents and labels of this data room come from the Contract Understanding",
        "Atticus Dataset (CUAD) v1 by The Atticus Project, https://www.atticusprojectai.org/cuad",
        "(Hendrycks, Burns, Chen and Ball, 'CUAD: An Expert-Annotated NLP Dataset for Legal",
        "Contract Review', arXiv:2103.06268).",
        "",
        "CUAD is licensed under the Creative Commons Attribution 4.0 International licence",
        "(CC BY 4.0, https://creativecommons.org/licenses/by/4.0/). Changes made here: a random",
        "subset of contracts was copied unchanged into category folders under new file names,",
        "and rubric criteria were derived from the expert labels.",
        "",
        "| document | CUAD file |",
        "| --- | --- |",
    ]
    lines += [f"| `{doc_id}` | {name} |" for doc_id, name in chosen]
    return "\n".join(lines) + "\n"


def build_cuad_room(
    source: str | Path,
    out: str | Path,
    n_contracts: int,
    seed: int,
    *,
    overwrite: bool = False,
    exclude: Collection[str] = (),
) -> BuildReport:
    """Build a CUAD data room of ``n_contracts`` contracts sampled with ``random.Random(seed)``.

    ``exclude`` names source text files (``BuildReport.contracts`` of other rooms) that must
    not be chosen, so rooms built in sequence share no contract (train / held-out splits).

    Deterministic for a given source, ``n_contracts`` and ``seed`` (candidates are sorted by
    label file name before sampling; nothing time-dependent is written).

    Raises :class:`CuadError` when the source lacks the expected files, ``n_contracts`` is not
    in ``[1, matched contracts]``, or ``out`` is a non-empty folder (with ``overwrite=True`` a
    previously built room there is replaced).
    """
    source = Path(source).resolve()
    out = Path(out).resolve()
    layout, candidates, unmatched, n_rows = _match_contracts(source)
    excluded = set(exclude)
    candidates = [c for c in candidates if c.txt_path.name not in excluded]
    if not 1 <= n_contracts <= len(candidates):
        raise CuadError(
            f"asked for {n_contracts} contracts; {source} has {len(candidates)} usable ones"
            + (f" after excluding {len(excluded)}" if excluded else "")
        )
    chosen = random.Random(seed).sample(candidates, n_contracts)
    chosen.sort(key=lambda c: c.csv_filename)
    _prepare_out(out, overwrite)
    descriptions = _category_descriptions(source)

    # Document ids and texts.
    doc_ids: list[str] = []
    taken: set[str] = set()
    for contract in chosen:
        folder = folder_for_contract_type(contract.contract_type)
        base = f"{folder}/{_doc_name(contract.txt_path.name)}"
        doc_id, k = f"{base}.txt", 2
        while doc_id in taken:
            doc_id, k = f"{base}_{k}.txt", k + 1
        taken.add(doc_id)
        doc_ids.append(doc_id)
        dest = out / "documents" / doc_id
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(contract.txt_path, dest)
    texts = [decode_text(c.txt_path.read_bytes()).text for c in chosen]  # as DataRoom reads them

    # Words that carry no signal for key terms: in every document (3+ docs), or in ids.
    doc_words = [set(content_words(t)) for t in texts]
    common = set.intersection(*doc_words) if len(doc_words) >= 3 else set()
    id_words = {w for d in doc_ids for w in words(d)}

    width = max(2, len(str(n_contracts)))
    criteria: list[Criterion] = []
    contracts_meta: list[dict[str, Any]] = []
    n_spans = n_verbatim = 0
    for i, (contract, doc_id, text) in enumerate(zip(chosen, doc_ids, texts, strict=True), 1):
        norm_text = normalise_ws(text)
        span_meta: list[dict[str, Any]] = []
        crit_ids: list[str] = []
        for category in MA_CATEGORIES:
            spans = _criterion_spans(contract.row, category)
            if not spans:
                continue
            verbatim = [s in norm_text for s in spans]
            n_spans += len(spans)
            n_verbatim += sum(verbatim)
            crit_id = f"cuad-{i:0{width}d}-{slugify(category)}"
            crit_ids.append(crit_id)
            span_meta.append({"category": category, "criterion": crit_id, "verbatim": verbatim})
            exclude = common | id_words | set(words(category))
            counts = Counter(w for s in spans for w in content_words(s) if w not in exclude)
            key_terms = [w for w, _ in counts.most_common(_N_KEY_TERMS)]
            what = descriptions.get(category)
            criteria.append(
                Criterion(
                    id=crit_id,
                    title=f"Memo identifies the {category} provision in {doc_id} and cites it",
                    match_criteria=(
                        f"PASS if the memo identifies the {category} provision of {doc_id}"
                        + (f" ({what.rstrip('.')})" if what else "")
                        + ", states what it provides (quoting or closely paraphrasing it), and "
                        f"cites {doc_id} next to it. FAIL if the provision is not mentioned, the "
                        "memo says the contract has no such provision, or the document is not "
                        "cited."
                    ),
                    deliverables=["memo.md"],
                    sources=[doc_id],
                    type="finding",
                    evidence=Evidence(
                        documents=[doc_id],
                        category=category,
                        spans=[_truncate(s) for s in spans],
                        key_terms=key_terms,
                    ),
                )
            )
        contracts_meta.append(
            {
                "index": i,
                "doc_id": doc_id,
                "folder": doc_id.split("/", 1)[0],
                "contract_type": contract.contract_type,
                "contract_type_source": contract.type_source,
                "csv_filename": contract.csv_filename,
                "source_file": contract.txt_path.name,
                "match": contract.match,
                "n_chars": len(text),
                "criteria": crit_ids,
                "gold_spans": span_meta,
            }
        )

    digest = hashlib.sha256("\n".join(c.csv_filename for c in chosen).encode()).hexdigest()
    task = Task(
        id=f"cuad-s{seed}-n{n_contracts}-{digest[:8]}",
        title=f"Due-diligence review of a CUAD contract room ({n_contracts} contracts)",
        instructions=(
            "You are counsel to a prospective buyer of the business that is party to the "
            "contracts in this data room. Review every document in the data room and write a "
            "due-diligence memo that lists the material findings: change-of-control and "
            "anti-assignment restrictions, exclusivity and non-compete obligations, liability "
            "caps and uncapped exposure, termination rights, minimum commitments, most-favoured "
            "terms, rights of first refusal, IP ownership, audit rights and revenue sharing. "
            "For every finding cite the document it comes from by its document id (its path in "
            f"the room, e.g. {doc_ids[0]}), quote or closely paraphrase the operative language, "
            "quantify the exposure where the documents allow it, and recommend next steps "
            "before signing."
        ),
        work_type="review",
        deliverables=["memo.md"],
        tags=["corporate-ma", "diligence", "cuad"],
        criteria=criteria,
        source="CUAD v1",
        license="CC BY 4.0",
        attribution=CUAD_ATTRIBUTION,
    )
    save_task(task, out / "task.json")

    room_meta = {
        "kind": "cuad",
        "built_by": f"rlmdistill {__version__}",
        "source": str(source),
        "layout": layout,
        "seed": seed,
        "n_contracts": n_contracts,
        "n_label_rows": n_rows,
        "n_candidates": len(candidates),
        "task_id": task.id,
        "categories": list(MA_CATEGORIES),
        "attribution": CUAD_ATTRIBUTION,
        "license": "CC BY 4.0",
        "unmatched_rows": {"count": len(unmatched), "examples": unmatched[:10]},
        "gold_spans": {
            "n": n_spans,
            "n_verbatim": n_verbatim,
            "share_verbatim": round(n_verbatim / n_spans, 4) if n_spans else None,
            "note": "verbatim = found in the text after whitespace normalisation",
        },
        "contracts": contracts_meta,
    }
    write_room_meta(out, CuadRoomMeta.model_validate(room_meta))
    (out / "ATTRIBUTION.md").write_text(
        _attribution_md([(d, c.txt_path.name) for d, c in zip(doc_ids, chosen, strict=True)]),
        encoding="utf-8",
    )

    room = DataRoom.load(out)
    return BuildReport(
        out=out,
        task_id=task.id,
        room_hash=room.room_hash,
        n_rows=n_rows,
        n_candidates=len(candidates),
        n_contracts=n_contracts,
        n_criteria=len(criteria),
        folders=room.folders,
        n_spans=n_spans,
        n_spans_verbatim=n_verbatim,
        n_fuzzy_matches=sum(c.match.startswith("fuzzy") for c in candidates),
        unmatched=unmatched,
        contracts=sorted(c.txt_path.name for c in chosen),
        notes=room.notes(),
    )


def build_cuad_main(
    source: str | Path,
    n_contracts: int,
    seed: int,
    out: str | Path,
    *,
    overwrite: bool = False,
    console: Any = None,
) -> int:
    """CLI body of ``rlmdistill rooms build-cuad``: build the room, print a short report with
    rich, and return the exit code (0 built, 1 the source or request was unusable)."""
    from rich.console import Console

    console = console or Console()
    try:
        report = build_cuad_room(source, out, n_contracts, seed, overwrite=overwrite)
    except (CuadError, OSError) as exc:
        console.print(f"[red]build-cuad failed:[/red] {exc}")
        return 1
    print_build_report(report, console)
    return 0


def print_build_report(report: BuildReport, console: Any) -> None:
    """Print ``report`` as ``rooms build-cuad`` does (a rich ``Console``): folder, task and
    room hash, contracts, folders, criteria, gold spans found verbatim, unmatched label rows,
    the room's notes and the CUAD attribution."""
    from rich.table import Table

    table = Table(title=f"CUAD room {report.out.name}", show_header=False)
    table.add_row("folder", str(report.out))
    table.add_row("task id / room hash", f"{report.task_id} / {report.room_hash}")
    table.add_row("contracts", f"{report.n_contracts} of {report.n_candidates} matched")
    table.add_row("folders", ", ".join(f"{k}: {v}" for k, v in report.folders.items()))
    table.add_row("criteria", str(report.n_criteria))
    share = f"{report.n_spans_verbatim / report.n_spans:.0%}" if report.n_spans else "n/a"
    table.add_row("gold spans verbatim", f"{report.n_spans_verbatim}/{report.n_spans} ({share})")
    unmatched = f"{len(report.unmatched)} of {report.n_rows} label rows"
    if report.unmatched:
        unmatched += " (e.g. " + "; ".join(report.unmatched[:3]) + ")"
    table.add_row("unmatched (skipped)", unmatched)
    if report.n_fuzzy_matches:
        table.add_row("fuzzy name matches", str(report.n_fuzzy_matches))
    console.print(table)
    for line in report.notes:
        console.print(f"note: {line}", markup=False, highlight=False)
    console.print("Attribution: " + CUAD_ATTRIBUTION)


def labelled_spans(source: str | Path) -> dict[str, dict[str, list[str]]]:
    """Every labelled clause of every matched contract of ``source``, all CUAD categories
    (not only :data:`MA_CATEGORIES`): ``{source text file name: {category: [span, ...]}}``.

    Spans are whitespace-normalised and not truncated; a category with no span is left out
    (whatever its ``-Answer``). Categories are the label columns that have an ``-Answer``
    column beside them (the 41 of CUAD v1). Used to find text that no lawyer labelled (e.g.
    :mod:`rlmdistill.judge.evalset` decoys). Raises :class:`CuadError` like
    :func:`build_cuad_room` when the source is unusable.
    """
    _, candidates, _, _ = _match_contracts(Path(source).resolve())
    out: dict[str, dict[str, list[str]]] = {}
    for c in candidates:
        cats = [
            k
            for k in c.row
            if k != "Filename" and (f"{k}-Answer" in c.row or f"{k}- Answer" in c.row)
        ]
        labels: dict[str, list[str]] = {}
        for category in cats:
            spans = [s for s in (normalise_ws(s) for s in _spans(c.row, category)) if s]
            if spans:
                labels[category] = spans
        out[c.txt_path.name] = labels
    return out
