"""Task records: LAB task.json import, round trip, extensions and error messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlmdistill.rooms import Criterion, Evidence, Task, TaskError, load_task, save_task
from rlmdistill.rooms.task import Amount

EXAMPLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "lab" / "task.example.json"
needs_example = pytest.mark.skipif(not EXAMPLE.is_file(), reason=f"{EXAMPLE} not present")

# The public LAB task shape (title, instructions, work_type, deliverables, tags, criteria with
# id/title/deliverables/match_criteria and optional sources), embedded so the round trip is
# tested even where ../shared is absent. Contents invented for this test.
PUBLIC_LAB_TASK: dict[str, Any] = {
    "title": "Review of the target's commercial contracts",
    "instructions": "Review the data room and write memo.md listing the material findings.",
    "work_type": "review",
    "deliverables": ["memo.md"],
    "tags": ["corporate-ma", "diligence"],
    "criteria": [
        {
            "id": "C-001",
            "title": "Memo flags the exclusivity clause",
            "deliverables": ["memo.md"],
            "match_criteria": "PASS if the memo identifies the exclusivity clause. FAIL otherwise.",
        },
        {
            "id": "C-002",
            "title": "Memo quantifies the annual minimum",
            "deliverables": ["memo.md"],
            "match_criteria": "PASS if the memo gives the annual minimum within 5%. FAIL otherwise.",
            "sources": ["02_Material_Contracts/supply.txt"],
        },
    ],
}


@needs_example
def test_example_imports_as_is() -> None:
    task = load_task(EXAMPLE)
    assert task.title == "Red-flag review of the target's data room"
    assert task.work_type == "review"
    assert task.deliverables == ["memo.md"]
    assert [c.id for c in task.criteria] == ["C-001", "C-002", "C-003"]
    c2 = task.criterion("C-002")
    assert c2.sources == ["02_Material_Contracts/Distribution/distribution_agreement.txt"]
    assert c2.type == "finding" and c2.weight == 1.0 and c2.evidence is None
    assert task.criteria[0].sources is None
    assert task.id.startswith("task-") and len(task.id) == len("task-") + 12


@needs_example
def test_example_round_trips_and_keeps_every_field(tmp_path: Path) -> None:
    raw = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    raw["x_vendor"] = {"nested": [1, 2]}
    raw["criteria"][1]["x_points"] = 3
    task = Task.model_validate(raw)
    dumped = task.to_json_dict()
    for key, value in raw.items():
        if key != "criteria":
            assert dumped[key] == value
    for original, out in zip(raw["criteria"], dumped["criteria"], strict=True):
        assert {k: out[k] for k in original} == original
    assert "evidence" not in dumped["criteria"][0]  # unset extensions are left out
    save_task(task, tmp_path / "task.json")
    again = load_task(tmp_path / "task.json")
    assert again == task
    assert again.model_extra == {"x_vendor": {"nested": [1, 2]}}
    assert again.criteria[1].model_extra == {"x_points": 3}


def test_task_id_derived_from_title_and_explicit_id_kept() -> None:
    a = Task(title="T", instructions="i")
    b = Task(title="T", instructions="other")
    assert a.id == b.id != Task(title="U", instructions="i").id
    assert Task(id="my-task", title="T", instructions="i").id == "my-task"


def test_extensions_validate() -> None:
    crit = Criterion(
        id="x",
        title="t",
        match_criteria="PASS if ...",
        type="quantification",
        weight=2.5,
        evidence=Evidence(documents=["A/a.txt"], category="Exclusivity", spans=["s"]),
    )
    assert crit.evidence is not None and crit.evidence.key_terms == []
    with pytest.raises(ValueError):
        Criterion(id="x", title="t", match_criteria="m", type="vibes")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Criterion(id="x", title="t", match_criteria="m", weight=-1)


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "task.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@needs_example
def test_bad_criterion_error_names_file_and_criterion(tmp_path: Path) -> None:
    raw = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    del raw["criteria"][1]["match_criteria"]
    path = _write(tmp_path, raw)
    with pytest.raises(TaskError) as info:
        load_task(path)
    message = str(info.value)
    assert str(path) in message
    assert "criterion #1" in message and "'C-002'" in message and "match_criteria" in message


def test_criterion_without_id_is_named_by_index(tmp_path: Path) -> None:
    path = _write(tmp_path, {"title": "t", "instructions": "i", "criteria": [{"title": "x"}]})
    with pytest.raises(TaskError, match=r"criterion #0 \(no id\)"):
        load_task(path)


def test_duplicate_criterion_ids_are_an_error(tmp_path: Path) -> None:
    crit = {"id": "C-1", "title": "t", "match_criteria": "m"}
    path = _write(tmp_path, {"title": "t", "instructions": "i", "criteria": [crit, crit]})
    with pytest.raises(TaskError) as info:
        load_task(path)
    assert str(path) in str(info.value) and "duplicate criterion id 'C-1'" in str(info.value)


def test_unreadable_task_files(tmp_path: Path) -> None:
    bad = tmp_path / "task.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(TaskError, match="cannot read task JSON"):
        load_task(bad)
    with pytest.raises(TaskError, match="not found"):
        load_task(tmp_path / "missing.json")
    bad.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(TaskError, match="JSON object"):
        load_task(bad)


def _round_trip_file(raw: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    src = _write(tmp_path, raw)
    out = tmp_path / "again.json"
    save_task(load_task(src), out)
    return json.loads(out.read_text(encoding="utf-8"))


def test_public_only_lab_task_round_trips_unchanged(tmp_path: Path) -> None:
    """Issue 4 item 1 acceptance: only public fields in, exactly the same JSON out (no derived
    id, no default type/weight added)."""
    assert _round_trip_file(PUBLIC_LAB_TASK, tmp_path) == PUBLIC_LAB_TASK
    task = Task.model_validate(PUBLIC_LAB_TASK)
    assert task.id.startswith("task-")  # derived in memory, not written
    assert task.criteria[0].type == "finding" and task.criteria[0].weight == 1.0


@needs_example
def test_example_file_round_trips_unchanged(tmp_path: Path) -> None:
    raw = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    assert _round_trip_file(raw, tmp_path) == raw


def test_extensions_set_by_a_builder_are_written(tmp_path: Path) -> None:
    amount = Amount(value=2_450_000, tolerance=0.05)
    crit = Criterion(
        id="Q-1",
        title="t",
        match_criteria="m",
        type="finding",
        weight=1.0,
        evidence=Evidence(documents=["A/a.txt"], amounts=[amount]),
    )
    task = Task(id="x", title="T", instructions="i", criteria=[crit])
    save_task(task, tmp_path / "task.json")
    raw = json.loads((tmp_path / "task.json").read_text(encoding="utf-8"))
    assert raw["id"] == "x"
    assert raw["criteria"][0]["type"] == "finding" and raw["criteria"][0]["weight"] == 1.0
    assert raw["criteria"][0]["evidence"]["amounts"] == [{"value": 2450000.0, "tolerance": 0.05}]
    assert load_task(tmp_path / "task.json") == task


def test_amount_tolerance_is_relative() -> None:
    amount = Amount(value=1_000_000, tolerance=0.05)
    assert amount.unit == "USD"
    assert amount.matches(1_050_000) and amount.matches(950_000)
    assert not amount.matches(1_050_001) and not amount.matches(940_000)
    assert Amount(value=25, unit="%", tolerance=0.0).matches(25)
    with pytest.raises(ValueError):
        Amount(value=1, tolerance=-0.1)
