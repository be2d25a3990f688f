"""Workspace-relative paths in the loop's records, and records of older versions (absolute
paths) still read, also after the workspace moved (issue #25 item 5). The whole loop over a
moved workspace is ``tests/test_loop.py::test_moved_workspace_resumes_and_reports``."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from rlmdistill.loop.config import load_experiment
from rlmdistill.loop.paths import from_record, legacy_match, to_record
from rlmdistill.loop.rooms import read_split
from rlmdistill.loop.run import _experiment_record, _Loop


def test_record_paths_are_relative_inside_the_workspace(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    assert to_record(ws / "rooms" / "train-0", ws) == "rooms/train-0"
    assert to_record(tmp_path / "given" / "room", ws) == str(tmp_path / "given" / "room")
    assert from_record("rooms/train-0", ws) == ws / "rooms" / "train-0"
    assert from_record("/old/ws/rooms/train-0", ws) == Path("/old/ws/rooms/train-0")
    assert legacy_match("/old/ws/adapters/r1", "adapters/r1")
    assert not legacy_match("/old/ws/adapters/r2", "adapters/r1")
    assert not legacy_match("adapters/r1", "adapters/r1")  # not an older (absolute) record
    assert not legacy_match("/r1", "adapters/r1")


def test_split_written_by_an_older_version_still_reads(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "rooms").mkdir(parents=True)
    old = {
        "train": ["/old/ws/rooms/train-0"],
        "holdout": ["rooms/holdout-0"],
        "n_criteria": {"/old/ws/rooms/train-0": 3, "rooms/holdout-0": 4},
    }
    (ws / "rooms" / "split.json").write_text(json.dumps(old), encoding="utf-8")
    train, holdout, n = read_split(ws)
    assert train == [Path("/old/ws/rooms/train-0")] and holdout == [ws / "rooms" / "holdout-0"]
    assert n == {Path("/old/ws/rooms/train-0"): 3, ws / "rooms" / "holdout-0": 4}


def _loop(tmp_path: Path) -> _Loop:
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        yaml.safe_dump(
            {
                "name": "t",
                "workspace": "ws",
                "base": "local:/models/base",
                "sub": "openai:sub@http://127.0.0.1:9/v1",
                "train_rooms": ["ws/rooms/a"],
                "holdout_rooms": [str(tmp_path / "given")],
            }
        ),
        encoding="utf-8",
    )
    return _Loop(load_experiment(exp), log=lambda s: None, progress=False)


def test_tuned_root_is_recorded_relative_and_opened_absolute(tmp_path: Path) -> None:
    loop = _loop(tmp_path)
    ws = tmp_path / "ws"
    spec = loop.tuned_root(ws / "adapters" / "r1", 1)
    assert spec == "local:/models/base+adapter=adapters/r1"
    recorded, opened = loop.recorded_root(ws / "runs" / "r1-eval-tuned", spec)
    assert recorded == spec
    assert opened == {spec: f"local:/models/base+adapter={ws / 'adapters' / 'r1'}"}
    # roots without a workspace adapter are recorded and opened as given
    assert loop.recorded_root(ws / "runs" / "x", "local:/models/base") == (
        "local:/models/base", {}
    )  # fmt: skip


def test_run_of_an_older_version_keeps_its_recorded_root_even_after_a_move(
    tmp_path: Path,
) -> None:
    """A run started before this change recorded the adapter's absolute path (here from where
    the workspace used to be): that spec is kept (episode ids derive from it), and the adapter
    is opened where it is now. Another adapter's spec is not taken for it."""
    loop = _loop(tmp_path)
    ws = tmp_path / "ws"
    run = ws / "runs" / "r1-eval-tuned"
    run.mkdir(parents=True)
    legacy = "local:/models/base+adapter=/old/place/ws/adapters/r1"
    (run / "run.json").write_text(json.dumps({"config": {"root": legacy}}), encoding="utf-8")
    spec = "local:/models/base+adapter=adapters/r1"
    recorded, opened = loop.recorded_root(run, spec)
    assert recorded == legacy
    assert opened == {legacy: f"local:/models/base+adapter={ws / 'adapters' / 'r1'}"}
    other = "local:/models/base+adapter=/old/place/ws/adapters/r2"
    (run / "run.json").write_text(json.dumps({"config": {"root": other}}), encoding="utf-8")
    assert loop.recorded_root(run, spec)[0] == spec  # the run then refuses: another config


def test_experiment_record_loads_back_wherever_the_workspace_is(tmp_path: Path) -> None:
    loop = _loop(tmp_path)
    data = json.loads(_experiment_record(loop.cfg))
    assert data["workspace"] == "."
    assert data["train_rooms"] == ["rooms/a"] and data["holdout_rooms"] == [str(tmp_path / "given")]
    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / "experiment.json").write_text(json.dumps(data), encoding="utf-8")
    again = load_experiment(moved / "experiment.json")  # JSON is YAML
    assert again.workspace == moved and again.train_rooms == [moved / "rooms" / "a"]
    assert again.holdout_rooms == [tmp_path / "given"]


def _older_sft_json(dataset: str) -> dict[str, object]:
    """An ``sft.json`` as an older version wrote it (every field it then had), trained on
    ``dataset``."""
    return {
        "schema_version": 1, "created_at": "2026-11-29T00:00:00Z",
        "updated_at": "2026-11-29T00:10:00Z", "status": "completed",
        "config": {"dataset": dataset, "base": "smollm2-135m", "out": "/old/place/ws/adapters/r1"},
        "base_path": "/models/smollm2-135m", "dataset_path": dataset, "export_sha256": "0" * 64,
        "sources": [], "tokenizer_check": {}, "n_rows": 2, "n_examples": 2, "dropped": {},
        "n_tokens": 100, "n_supervised": 40, "device": "cpu", "precision": "float32",
        "world_size": 1, "seed": 0, "versions": {}, "git_commit": None, "git_dirty": None,
    }  # fmt: skip


def test_adapter_of_an_older_version_is_up_to_date_after_a_move(tmp_path: Path) -> None:
    """Older versions fingerprinted the adapter's settings with the dataset's absolute path
    (``sft.json`` keeps it under ``config.dataset``). Moved, such an adapter is still up to
    date: no training starts (the dataset here is no real one, so training would fail), and a
    record with the new, workspace-relative fingerprint is appended."""
    from rlmdistill.loop.run import _sha_files
    from rlmdistill.sft.config import build_config as sft_config
    from rlmdistill.traces.lineage import LineageRecord, latest_records, record

    loop = _loop(tmp_path)
    ws = tmp_path / "ws"
    dataset, out = ws / "datasets" / "r1", ws / "adapters" / "r1"
    dataset.mkdir(parents=True)
    out.mkdir(parents=True)
    (dataset / "export.json").write_text('{"n_examples": 2}', encoding="utf-8")
    old_dataset = "/old/place/ws/datasets/r1"
    (out / "sft.json").write_text(json.dumps(_older_sft_json(old_dataset)), "utf-8")
    # the fingerprint exactly as the older version computed it, where the workspace was then
    old_cfg = sft_config(None, {"dataset": old_dataset, "base": loop.cfg.base, "out": "x"})
    old_fp = loop.cfg.fingerprint(  # that version had no save_strategy field either
        _sha_files(dataset / "export.json"),
        old_cfg.model_dump(mode="json", exclude={"out", "save_strategy"}),
    )
    record(ws, LineageRecord(artefact="adapters/r1/sft.json", kind="adapter", stage="sft",
                             round=1, inputs=["datasets/r1/export.json"], fingerprint=old_fp,
                             detail={"steps": 3}))  # fmt: skip
    logs: list[str] = []
    loop.log = logs.append
    loop.execute(loop.adapter_stage(1, dataset, out))
    assert logs == ["[skip] adapters/r1: adapter up to date"]
    new = latest_records(ws)["adapters/r1/sft.json"]
    assert new.fingerprint != old_fp and new.detail == {"steps": 3}
    logs.clear()
    loop.execute(loop.adapter_stage(1, dataset, out))  # up to date by the new fingerprint
    assert logs == ["[skip] adapters/r1: adapter up to date"]
