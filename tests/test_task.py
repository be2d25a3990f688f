"""Task records: LAB task.json import, round trip, extensions and error messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlmdistill.rooms import Criterion, Evidence, Task, TaskError, load_task, save_task

EXAMPLE = Path("/work/shared/data/lab/task.example.json")


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
