"""Episode metrics (analysis/metrics.py) over a real collected run, values recomputed by hand."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rlmdistill.analysis.metrics import (
    MEMO_WRITE,
    answer_reaches_memo,
    load_run_metrics,
    metrics_table,
    word_tokens,
)
from rlmdistill.models.limits import ModelPrice, PriceTable
from rlmdistill.traces.runs import NotARunError
from rlmdistill.traces.store import TraceFileError

PRICES = PriceTable(
    version="test-prices-1",
    prices=[
        ModelPrice(pattern="openai:root@*", input=1.0, cached_input=0.5, output=2.0),
        ModelPrice(pattern="openai:sub@*", input=0.5, output=1.0),
    ],
)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _copy(run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(run, out)
    return out


def test_metrics_of_a_real_run_match_its_files(collected_run):
    rows = metrics_table(collected_run, prices=PRICES)
    summaries = {s["episode_id"]: s for s in _lines(collected_run / "episodes.jsonl")}
    verdicts = _lines(collected_run / "verdicts" / "reference.jsonl")
    room_path = Path(next(iter(summaries.values()))["room"]["path"])
    task = json.loads((room_path / "task.json").read_text(encoding="utf-8"))
    n_criteria = len(task["criteria"])
    assert len(rows) == 2
    for r in rows:
        s = summaries[r.episode_id]
        mine = [
            v
            for v in verdicts
            if v["episode_id"] == r.episode_id and v["memo_sha256"] == s["memo_sha256"]
        ]
        n_pass = sum(v["verdict"] == "PASS" for v in mine)
        assert r.grader == "reference"
        assert r.n_criteria == n_criteria
        assert r.pass_rate == n_pass / n_criteria
        assert set(r.criteria) == {c["id"] for c in task["criteria"]}
        assert r.coverage == s["coverage"]["overall"]
        assert r.coverage_per_folder == s["coverage"]["per_folder"]
        assert r.room_documents == 3 and r.room_chars == s["room"]["n_chars"]
        # the scripted root reads all three documents in one batch, then writes the memo
        assert r.docs_read == 3 and r.docs_read_share == 1.0
        assert r.early_give_up is False and r.read_no_memo is False
        assert (r.n_turns, r.n_sub_calls, r.n_sub_batches) == (2, 3, 1)
        assert r.root_batch_sizes == [3] and r.mean_batch_size == 3.0 and r.max_batch_size == 3
        assert r.n_sub_calls_with_text == 3 and r.share_sub_calls_with_text == 1.0
        # every sub-call answer is pasted into the memo; the memo variable is first written
        # in turn 1 (the last of two): share (1 + 1) / 2
        assert r.n_answers == 3 and r.answer_reach == 1.0
        assert r.memo_first_turn == 1 and r.memo_first_turn_share == 1.0
        assert r.has_memo and r.memo_chars == len(s["memo"])
        t = s["tokens"]
        rp, rc = t["root"]["prompt_tokens"], t["root"]["completion_tokens"]
        sp, sc = t["sub"]["prompt_tokens"], t["sub"]["completion_tokens"]
        assert r.sub_token_share == pytest.approx((sp + sc) / (rp + rc + sp + sc))
        assert r.sub_input_share == pytest.approx(sp / (rp + sp))
        assert r.sub_output_share == pytest.approx(sc / (rc + sc))
        # USD per 1M tokens: root input 1, output 2; sub input 0.5, output 1
        assert r.root_cost_usd == pytest.approx((rp * 1.0 + rc * 2.0) / 1e6)
        assert r.sub_cost_usd == pytest.approx((sp * 0.5 + sc * 1.0) / 1e6)
        assert r.root_cost_usd is not None and r.sub_cost_usd is not None
        assert r.cost_usd == pytest.approx(r.root_cost_usd + r.sub_cost_usd)
        assert r.price_table == "test-prices-1"
        assert r.wall_time_s == s["wall_time_s"]


def test_summaries_only_leaves_trajectory_metrics_unset(collected_run):
    rows = metrics_table(collected_run, trajectories=False)
    assert all(r.answer_reach is None and r.root_batch_sizes is None for r in rows)
    assert all(r.pass_rate is not None for r in rows)


def test_cached_tokens_are_priced_and_unpriced_models_give_none(collected_run, tmp_path):
    run = _copy(collected_run, tmp_path)
    path = run / "episodes.jsonl"
    lines = _lines(path)
    lines[0]["tokens"]["root"]["cached_tokens"] = 451
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    row = metrics_table(run, prices=PRICES, trajectories=False)[0]
    root = lines[0]["tokens"]["root"]
    p, c = root["prompt_tokens"], root["completion_tokens"]
    assert row.root_cached_tokens == 451
    assert row.root_cost_usd == pytest.approx(((p - 451) * 1.0 + 451 * 0.5 + c * 2.0) / 1e6)
    no_sub = PriceTable(version="v", prices=[PRICES.prices[0]])
    row = metrics_table(run, prices=no_sub, trajectories=False)[0]
    assert row.root_cost_usd is not None and row.sub_cost_usd is None and row.cost_usd is None


def test_unreported_cached_tokens_are_unknown_and_cost_an_upper_bound(collected_run, tmp_path):
    """A server that does not report cached tokens (vllm#16162): unknown, never 0; every
    prompt token is priced as uncached and the row says the cost is an upper bound."""
    run = _copy(collected_run, tmp_path)
    path = run / "episodes.jsonl"
    lines = _lines(path)
    for line in lines:
        line["tokens"]["root"]["cached_tokens"] = 0
        line["tokens"]["sub"]["cached_tokens"] = 0
    lines[0]["tokens"]["root"]["cached_tokens"] = None
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    first, second = metrics_table(run, prices=PRICES, trajectories=False)[:2]
    root = lines[0]["tokens"]["root"]
    p, c = root["prompt_tokens"], root["completion_tokens"]
    assert (first.root_cached_tokens, first.cost_is_upper_bound) == (None, True)
    assert first.root_cost_usd == pytest.approx((p * 1.0 + c * 2.0) / 1e6)  # all uncached
    assert (second.root_cached_tokens, second.cost_is_upper_bound) == (0, False)


def test_no_memo_is_early_give_up_and_read_but_no_memo(collected_run, tmp_path):
    run = _copy(collected_run, tmp_path)
    path = run / "episodes.jsonl"
    lines = _lines(path)
    lines[0].update(memo=None, memo_chars=0, memo_sha256=None, status="no_memo")
    # second episode: memo, but only one of three documents read -> gave up early (1/3 < 0.5)
    per_doc = lines[1]["coverage"]["per_document"]
    for k in list(per_doc)[1:]:
        per_doc[k] = 0.0
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    a, b = metrics_table(run, trajectories=False)
    assert (a.has_memo, a.early_give_up, a.read_no_memo, a.memo_words) == (False, True, True, 0)
    assert a.pass_rate is None
    assert a.score_note == "reference verdicts are for another memo (memo_sha256 differs)"
    assert (b.docs_read, b.docs_read_share) == (1, pytest.approx(1 / 3))
    assert (b.early_give_up, b.read_no_memo) == (True, False)


def test_missing_task_and_grader_choice(collected_run, tmp_path):
    run = _copy(collected_run, tmp_path)
    # the room moved away: scores are None with the reason, never a made-up 0
    lines = _lines(run / "episodes.jsonl")
    for x in lines:
        x["room"]["path"] = str(tmp_path / "gone")
    (run / "episodes.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), "utf-8")
    manifest = json.loads((run / "run.json").read_text())
    manifest["rooms"][0]["path"] = str(tmp_path / "gone")
    (run / "run.json").write_text(json.dumps(manifest), "utf-8")
    rows = metrics_table(run, trajectories=False)
    assert all(r.pass_rate is None for r in rows)
    assert rows[0].score_note == f"{tmp_path / 'gone' / 'task.json'}: task file not found"
    # graders: side files are not graders; two graders need a choice
    shutil.copy(run / "verdicts" / "reference.jsonl", run / "verdicts" / "other.jsonl")
    (run / "verdicts" / "other.cache.jsonl").write_text("", "utf-8")
    with pytest.raises(ValueError, match=r"several graders have verdicts \(other, reference\)"):
        load_run_metrics(run, None, trajectories=False)
    with pytest.raises(ValueError, match=r"grader 'llm' has no verdicts"):
        load_run_metrics(run, "llm")
    assert load_run_metrics(run, "other", trajectories=False).grader == "other"
    with pytest.raises(NotARunError):
        metrics_table(tmp_path / "nothing")


def _room_copy(run: Path, tmp_path: Path) -> Path:
    """Copy the run's room to tmp_path/room and point run.json and episodes.jsonl at it."""
    lines = _lines(run / "episodes.jsonl")
    room = tmp_path / "room"
    shutil.copytree(lines[0]["room"]["path"], room)
    for x in lines:
        x["room"]["path"] = str(room)
    (run / "episodes.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), "utf-8")
    manifest = json.loads((run / "run.json").read_text())
    manifest["rooms"][0]["path"] = str(room)
    (run / "run.json").write_text(json.dumps(manifest), "utf-8")
    return room


def test_other_task_is_a_note_and_invalid_task_an_error(collected_run, tmp_path):
    run = _copy(collected_run, tmp_path)
    room = _room_copy(run, tmp_path)
    ran = _lines(run / "episodes.jsonl")[0]["task_id"]
    task = json.loads((room / "task.json").read_text(encoding="utf-8"))
    task["id"] = "another-task"
    (room / "task.json").write_text(json.dumps(task), "utf-8")
    rows = metrics_table(run, trajectories=False)
    assert [r.pass_rate for r in rows] == [None, None]
    assert rows[0].score_note == (
        f"{room / 'task.json'}: task another-task, but the run's episodes in room "
        f"{rows[0].room_id} ran {ran}"
    )
    (room / "task.json").write_text("{not json", "utf-8")
    with pytest.raises(ValueError, match=r"task\.json: cannot read task JSON"):
        metrics_table(run, trajectories=False)


def test_missing_trajectory_is_an_error_naming_the_episode(collected_run, tmp_path):
    run = _copy(collected_run, tmp_path)
    eid = _lines(run / "episodes.jsonl")[0]["episode_id"]
    (run / "trajectories" / f"{eid}.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match=f"no trajectory for episode {eid}"):
        metrics_table(run)


def _set_in_sub_calls(path: Path, **fields: object) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    for line in lines:
        rec = json.loads(line)
        if rec["record_type"] == "sub_call":
            rec.update(fields)
        out.append(json.dumps(rec))
    path.write_text("\n".join(out) + "\n", encoding="utf-8")


def test_trajectory_the_fast_reader_refuses_goes_to_the_validated_reader(
    collected_run, tmp_path, monkeypatch
):
    """The trajectory metrics read raw records and type-check the fields they use; a record
    they do not take as written falls back to pydantic: what pydantic accepts gives the same
    row, anything else is an error naming the file and record."""
    import rlmdistill.analysis.metrics as metrics_mod

    validated = metrics_mod.load_trajectory

    def refuse(*args: object) -> None:
        raise AssertionError("the validated reader was used on a clean trajectory")

    monkeypatch.setattr(metrics_mod, "load_trajectory", refuse)
    want = metrics_table(collected_run, prices=PRICES)  # every file read by the fast reader
    monkeypatch.setattr(metrics_mod, "load_trajectory", validated)
    run = _copy(collected_run, tmp_path)
    eid = want[0].episode_id
    path = run / "trajectories" / f"{eid}.jsonl"
    _set_in_sub_calls(path, batch_id="0")  # a numeric string: lax pydantic reads it as 0
    got = metrics_table(run, prices=PRICES)
    assert [r.model_dump() for r in got] == [r.model_dump() for r in want]
    assert got[0].root_batch_sizes == [3]
    _set_in_sub_calls(path, batch_id="first")
    with pytest.raises(TraceFileError, match=rf"{eid}\.jsonl: record \d+ is invalid"):
        metrics_table(run, prices=PRICES)


def test_verdicts_are_read_as_columns_and_a_bad_one_is_named(collected_run, tmp_path, monkeypatch):
    """Verdicts are read as checked columns; a file whose columns fail the record model's
    checks goes to the validated reader, which names the file and line."""
    import rlmdistill.traces.columns as columns_mod  # the one columnar verdict reader

    validated = columns_mod.load_verdicts

    def refuse(*args: object) -> None:
        raise AssertionError("the validated reader was used on a clean verdict file")

    monkeypatch.setattr(columns_mod, "load_verdicts", refuse)
    want = metrics_table(collected_run, prices=PRICES, trajectories=False)
    monkeypatch.setattr(columns_mod, "load_verdicts", validated)
    assert all(r.pass_rate is not None for r in want)
    run = _copy(collected_run, tmp_path)
    path = run / "verdicts" / "reference.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    bad = json.loads(lines[1])
    bad["verdict"] = "MAYBE"
    path.write_text("\n".join([lines[0], json.dumps(bad), *lines[2:]]) + "\n", encoding="utf-8")
    with pytest.raises(TraceFileError, match=r"reference\.jsonl:2: record 2 is invalid"):
        metrics_table(run, prices=PRICES, trajectories=False)


def test_answer_reach_measure():
    memo = word_tokens("Finding: The Agreement may NOT be assigned without prior written consent.")
    grams = {tuple(memo[i : i + 8]) for i in range(len(memo) - 7)}
    joined = f" {' '.join(memo)} "
    # 8 shared consecutive words (case and punctuation ignored)
    long_answer = word_tokens("Clause 9: the agreement may not be assigned without prior approval")
    assert answer_reaches_memo(long_answer, grams, joined, 8)
    seven = word_tokens("the agreement may not be assigned without any consent at all")
    assert not answer_reaches_memo(seven, grams, joined, 8)
    # answers shorter than 8 words must appear whole
    assert answer_reaches_memo(word_tokens("prior written consent"), grams, joined, 8)
    assert not answer_reaches_memo(word_tokens("prior consent"), grams, joined, 8)


@pytest.mark.parametrize(
    ("code", "writes"),
    [
        ("memo = '# Memo'", True),
        ("memo += section", True),
        ("memo_parts.append(x)", True),
        ("final_memo['risks'] = r", True),
        ("if memo == '':\n    pass", False),
        ("print(memo)", False),
        ("notes = llm_query(p)", False),
    ],
)
def test_memo_write_pattern(code, writes):
    assert bool(MEMO_WRITE.search(code)) is writes
