"""traces.artefacts: one typed schema and one reader per artefact file (issue 18).

The golden fixture's ``export.json``, ``sft.json`` and ``train_log.jsonl`` were written in the
format of the code before this change (``tests/golden/build_fixture.py``); they must keep
loading, and a broken file must be named in the error.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from test_golden import load_fixture

from rlmdistill.traces.artefacts import (
    ArtefactError,
    load_export_manifest,
    load_sft_manifest,
    read_train_log,
)
from rlmdistill.traces.scores import run_scores


def test_artefacts_written_before_issue_18_load(tmp_path: Path) -> None:
    ws = load_fixture(tmp_path)
    export = load_export_manifest(ws / "datasets" / "r1")
    assert (export.n_examples, export.n_episodes, export.dropped) == (3, 2, {"too_long": 1})
    assert export.sources[0].episode_ids == ["b-al-0", "b-be-0"]
    assert export.tokenizer.vocab_size is None  # not recorded then
    sft = load_sft_manifest(ws / "adapters" / "r1")
    assert (sft.status, sft.n_examples, sft.global_step) == ("completed", 3, 4)
    assert sft.config["dataset"] == str(ws / "datasets" / "r1")
    log = read_train_log(ws / "adapters" / "r1")
    assert [r.step for r in log.records] == [1, 2, 3, 4]
    assert [r.loss for r in log.records] == [2.5, 2.1, 1.9, 1.6]
    assert not log.torn_tail and log.n_nonfinite == 0


def test_train_log_loose_lines_torn_tail_and_nonfinite(tmp_path: Path) -> None:
    """Only step and loss are required; extra keys are kept; NaN counts apart; torn tail."""
    lines = [{"step": 1, "loss": 3.0, "custom": "x"}, {"step": 2, "loss": float("nan")}]
    text = "".join(json.dumps(x) + "\n" for x in lines) + '{"step": 3, "lo'
    (tmp_path / "train_log.jsonl").write_text(text, encoding="utf-8")
    log = read_train_log(tmp_path)
    assert log.records[0].model_extra == {"custom": "x"}
    assert log.records[0].epoch is None and math.isnan(log.records[1].loss)
    assert log.n_nonfinite == 1 and log.torn_tail and len(log.rows) == 2


def test_broken_artefacts_name_the_file(tmp_path: Path) -> None:
    (tmp_path / "export.json").write_text('{"n_examples": 2}', encoding="utf-8")
    with pytest.raises(ArtefactError, match=r"export\.json: not a valid export\.json"):
        load_export_manifest(tmp_path)
    with pytest.raises(ArtefactError, match=r"sft\.json: not found"):
        load_sft_manifest(tmp_path)
    (tmp_path / "train_log.jsonl").write_text('{"step": 1}\n', encoding="utf-8")
    with pytest.raises(ArtefactError, match=r"train_log\.jsonl: record 1 is not a training log"):
        read_train_log(tmp_path)
    with pytest.raises(FileNotFoundError, match="no training log"):
        read_train_log(tmp_path / "none")


def test_run_written_by_an_earlier_version_scores(tmp_path: Path) -> None:
    """The golden runs (format of the code before issue 18) score through traces.scores with
    the pass rates computed by hand from their verdict labels."""
    ws = load_fixture(tmp_path)
    scores = run_scores(ws / "runs" / "deep", "reference")
    rates = {eid: s.rates.pass_rate for eid, s in scores.scores.items()}
    assert rates == {"d-al-0": 1.0, "d-al-1": 1 / 3, "d-be-0": 1.0, "d-be-1": 0.0}
    assert scores.scores["d-al-1"].pass_rate_by_type() == {"citation": 0.0, "finding": 0.5}
    assert not scores.problems
