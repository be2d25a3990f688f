"""CUAD room builder on the shared CUAD subset and on the official release layout."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest
from conftest import CUAD_SOURCE as CUAD
from rich.console import Console

from rlmdistill.rooms import DataRoom, load_task
from rlmdistill.rooms.cuad import (
    FOLDERS,
    MA_CATEGORIES,
    CuadError,
    build_cuad_main,
    build_cuad_room,
    contract_type_from_name,
    folder_for_contract_type,
    normalise_name,
)


def _tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".rlmdistill" not in p.parts
    }


def test_build_is_deterministic_and_well_formed(tmp_path: Path) -> None:
    a = build_cuad_room(CUAD, tmp_path / "a", n_contracts=6, seed=3)
    b = build_cuad_room(CUAD, tmp_path / "b", n_contracts=6, seed=3)
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")
    assert a.room_hash == b.room_hash and a.task_id == b.task_id
    c = build_cuad_room(CUAD, tmp_path / "c", n_contracts=6, seed=4)
    assert c.room_hash != a.room_hash

    with (CUAD / "master_clauses.csv").open(encoding="utf-8-sig", newline="") as fh:
        n_rows = sum(1 for _ in csv.DictReader(fh))
    assert a.n_rows == n_rows and a.n_candidates == n_rows and a.unmatched == []
    room = DataRoom.load(tmp_path / "a")
    assert len(room.documents) == 6 and sum(a.folders.values()) == 6
    assert all(d.folder in FOLDERS and d.id.count("/") == 1 for d in room.documents)

    meta = json.loads((tmp_path / "a" / "room.json").read_text(encoding="utf-8"))
    assert meta["seed"] == 3 and meta["n_contracts"] == 6 and "CC BY 4.0" in meta["license"]
    for contract in meta["contracts"]:
        original = CUAD / "contracts" / contract["source_file"]
        assert room.get(contract["doc_id"]).path.read_bytes() == original.read_bytes()
        for gold in contract["gold_spans"]:
            assert all(isinstance(v, bool) for v in gold["verbatim"])
    spans = meta["gold_spans"]
    assert spans["n"] == a.n_spans and spans["n_verbatim"] == a.n_spans_verbatim
    assert spans["n"] > 0 and spans["share_verbatim"] > 0.7

    task = load_task(tmp_path / "a" / "task.json")
    assert task.title == "Due-diligence review of a CUAD contract room (6 contracts)"
    assert "document id" in task.instructions and task.deliverables == ["memo.md"]
    assert len(task.criteria) == a.n_criteria > 0
    for crit in task.criteria:
        ev = crit.evidence
        assert ev is not None and ev.category in MA_CATEGORIES
        assert crit.sources == ev.documents and ev.documents[0] in room
        assert crit.id.startswith("cuad-") and crit.type == "finding"
        assert crit.match_criteria.startswith("PASS if") and "FAIL if" in crit.match_criteria
        assert ev.documents[0] in crit.title and ev.spans and ev.key_terms
        assert all(len(s) <= 1000 and "  " not in s for s in ev.spans)
    attribution = (tmp_path / "a" / "ATTRIBUTION.md").read_text(encoding="utf-8")
    assert "CC BY 4.0" in attribution and "atticusprojectai.org/cuad" in attribution
    assert "2103.06268" in attribution and "The Atticus Project" in attribution


def test_criteria_follow_positive_labels(tmp_path: Path) -> None:
    build_cuad_room(CUAD, tmp_path / "r", n_contracts=5, seed=21)
    meta = json.loads((tmp_path / "r" / "room.json").read_text(encoding="utf-8"))
    with (CUAD / "master_clauses.csv").open(encoding="utf-8-sig", newline="") as fh:
        rows = {r["Filename"]: r for r in csv.DictReader(fh)}
    for contract in meta["contracts"]:
        row = rows[contract["csv_filename"]]
        expected = [
            cat
            for cat in MA_CATEGORIES
            if row[cat].strip() not in ("", "[]") and row[f"{cat}-Answer"].strip() != "No"
        ]
        assert [g["category"] for g in contract["gold_spans"]] == expected


def _official_source(tmp_path: Path, n: int = 5) -> tuple[Path, list[str]]:
    """Copy ``n`` contracts into the official layout (no index) plus a row for a missing file."""
    src = tmp_path / "CUAD_v1"
    (src / "full_contract_txt").mkdir(parents=True)
    with (CUAD / "master_clauses.csv").open(encoding="utf-8-sig", newline="") as fh:
        reader = csv.DictReader(fh)
        fields = reader.fieldnames
        rows = [r for r in reader][:n]
    assert fields is not None
    for row in rows:
        txt = Path(row["Filename"]).stem + ".txt"
        shutil.copyfile(CUAD / "contracts" / txt, src / "full_contract_txt" / txt)
    # one text file renamed slightly: only a fuzzy match finds it
    first = src / "full_contract_txt" / (Path(rows[0]["Filename"]).stem + ".txt")
    first.rename(first.with_name(first.stem + "x.txt"))
    missing = dict(rows[0], Filename="NoSuchCompany_2001-EX-10-SUPPLY AGREEMENT.pdf")
    with (src / "master_clauses.csv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows([*rows, missing])
    return src, [r["Filename"] for r in rows]


def test_official_layout_reports_unmatched_rows(tmp_path: Path) -> None:
    src, names = _official_source(tmp_path)
    report = build_cuad_room(src, tmp_path / "out", n_contracts=5, seed=0)
    assert report.unmatched == ["NoSuchCompany_2001-EX-10-SUPPLY AGREEMENT.pdf"]
    assert report.n_rows == 6 and report.n_candidates == 5 and report.n_fuzzy_matches == 1
    meta = json.loads((tmp_path / "out" / "room.json").read_text(encoding="utf-8"))
    assert meta["layout"] == "official"
    assert meta["unmatched_rows"] == {"count": 1, "examples": [report.unmatched[0]]}
    assert sorted(c["csv_filename"] for c in meta["contracts"]) == sorted(names)
    assert {c["contract_type_source"] for c in meta["contracts"]} == {"file name"}
    assert sum(c["match"].startswith("fuzzy") for c in meta["contracts"]) == 1

    console = Console(file=io.StringIO(), width=200)
    assert build_cuad_main(src, 3, 1, tmp_path / "cli", console=console) == 0
    printed = console.file.getvalue()  # type: ignore[attr-defined]
    assert "1 of 6 label rows" in printed and "NoSuchCompany" in printed and "CC BY 4.0" in printed


def test_bad_requests(tmp_path: Path) -> None:
    with pytest.raises(CuadError, match="usable"):
        build_cuad_room(CUAD, tmp_path / "big", n_contracts=1000, seed=0)
    with pytest.raises(CuadError, match="no contracts/"):
        build_cuad_room(tmp_path, tmp_path / "x", n_contracts=1, seed=0)
    build_cuad_room(CUAD, tmp_path / "r", n_contracts=2, seed=0)
    with pytest.raises(CuadError, match="not empty"):
        build_cuad_room(CUAD, tmp_path / "r", n_contracts=2, seed=1)
    report = build_cuad_room(CUAD, tmp_path / "r", n_contracts=3, seed=1, overwrite=True)
    assert len(DataRoom.load(tmp_path / "r").documents) == 3 == report.n_contracts
    console = Console(file=io.StringIO())
    assert build_cuad_main(CUAD, 0, 0, tmp_path / "zero", console=console) == 1
    assert "build-cuad failed" in console.file.getvalue()  # type: ignore[attr-defined]


def test_names_and_types() -> None:
    assert normalise_name("LECLANCHÉ S.A. - JOINT DEVELOPMENT.PDF") == "leclanchesajointdevelopment"
    assert normalise_name("Foo_Bar Agreement1.txt") == "foobaragreement1"
    assert contract_type_from_name("X_20140520_10-Q_EX-10.27_Distributor Agreement1.pdf") == (
        "Distributor Agreement"
    )
    assert contract_type_from_name("ACME INC - Marketing Agreement.pdf") == "Marketing Agreement"
    assert folder_for_contract_type("Distributor Agreement") == "Distribution"
    assert folder_for_contract_type("-ENDORSEMENT AGREEMENT") == "Marketing_Endorsement"
    assert folder_for_contract_type("Co Branding") == "Marketing_Endorsement"
    assert folder_for_contract_type("IP") == "License"
    assert folder_for_contract_type("Manufacturing") == "Supply_Manufacturing"
    assert folder_for_contract_type("Joint Venture   Filing") == "Strategic_Alliance_JV"
    assert folder_for_contract_type("Outsourcing") == "Services"
    assert folder_for_contract_type("Non Compete Non Solicit") == "Other"


def test_exclude_gives_disjoint_rooms_and_names_the_shortfall(tmp_path):
    from rlmdistill.rooms.cuad import SAMPLE_SOURCE

    a = build_cuad_room(SAMPLE_SOURCE, tmp_path / "a", 10, 0)
    b = build_cuad_room(SAMPLE_SOURCE, tmp_path / "b", 6, 0, exclude=a.contracts)
    assert len(a.contracts) == 10 and len(b.contracts) == 6
    assert not set(a.contracts) & set(b.contracts)
    texts_a = {p.read_bytes() for p in (tmp_path / "a" / "documents").rglob("*.txt")}
    texts_b = {p.read_bytes() for p in (tmp_path / "b" / "documents").rglob("*.txt")}
    assert len(texts_a) == 10 and not texts_a & texts_b
    with pytest.raises(CuadError, match="has 0 usable ones after excluding 16"):
        build_cuad_room(SAMPLE_SOURCE, tmp_path / "c", 1, 0, exclude=a.contracts + b.contracts)
