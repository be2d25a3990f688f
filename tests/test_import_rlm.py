"""``rlmdistill import rlm``: logs that a real ``rlms`` 0.1.3 wrote (recorded under
``tests/data/import/`` by ``python tests/test_import_rlm_real.py``: a real RLM against the
fake server on the clause room below) imported as a run; bad input; the stages after it."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import typer
from pydantic import TypeAdapter
from typer.testing import CliRunner

from rlmdistill.importers.cli import register
from rlmdistill.importers.common import ImportFormatError, file_sha256, imported_episode_id
from rlmdistill.importers.rlm import FORMAT, import_rlm, source_requests
from rlmdistill.testing.rooms import write_clause_room
from rlmdistill.traces.rebuild import root_requests, subagent_requests
from rlmdistill.traces.runs import load_manifest, load_summaries
from rlmdistill.traces.schema import TrajectoryRecord
from rlmdistill.traces.store import parse_records

DATA = Path(__file__).parent / "data" / "import"
D1 = DATA / "rlms-0.1.3-depth1.jsonl"
D2 = DATA / "rlms-0.1.3-depth2.jsonl"
_ADAPTER: TypeAdapter[TrajectoryRecord] = TypeAdapter(TrajectoryRecord)


def count(text: str) -> int:
    """The token counter the recording's fake server used (whitespace words)."""
    return len(text.split())


def clause_room(tmp: Path, *, evidence: bool = False) -> Path:
    """The room the recorded logs ran on (the clause room, 3 documents x 60 repeats)."""
    room = write_clause_room(tmp / "room", n_documents=3, repeats=60)
    if evidence:
        task = json.loads((room / "task.json").read_text())
        task["criteria"][0]["evidence"] = {
            "documents": ["Contracts/c0.txt"],
            "category": "Governing Law",
            "spans": ["Clause text. Clause text. Clause text."],
        }
        (room / "task.json").write_text(json.dumps(task))
    return room


def records(run: Path, episode_id: str) -> list[TrajectoryRecord]:
    return list(parse_records(run / "trajectories" / f"{episode_id}.jsonl", _ADAPTER))


def of_type(recs: list[TrajectoryRecord], kind: str) -> list[TrajectoryRecord]:
    return [r for r in recs if r.record_type == kind]


def raw_iterations(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()[1:]]


def test_depth1_log_episodes_turns_sub_calls_memo_and_manifest(tmp_path):
    room = clause_room(tmp_path)
    result = import_rlm([D1], room, tmp_path / "runs" / "r1", command=["t"])
    run = tmp_path / "runs" / "r1"
    assert (result.n_episodes, result.n_turns, result.n_sub_calls) == (2, 8, 6)
    assert result.warnings == []
    sha = file_sha256(D1)
    summaries = load_summaries(run)
    assert [s.episode_id for s in summaries] == [
        imported_episode_id(FORMAT, sha, i) for i in (0, 1)
    ]
    its = raw_iterations(D1)
    for k, s in enumerate(summaries):
        src = its[k * 4 : (k + 1) * 4]
        recs = records(run, s.episode_id)
        start = recs[0]
        turns = of_type(recs, "turn")
        calls = of_type(recs, "sub_call")
        assert s.status == "completed" and s.memo == src[-1]["final_answer"]
        assert s.memo.startswith("MEMO: ANSWER<Summarise: Contract 0.")
        assert [t.completion for t in turns] == [it["response"] for it in src]
        # Exact requests rlms sent: each iteration's logged prompt (a snapshot at log time).
        sent = source_requests(start.initial_messages, turns)
        for t, it in enumerate(src):
            assert [m.model_dump() for m in sent[t]] == it["prompt"]
        assert len(root_requests(start, turns)) == 4  # hashes agree with our own rebuild
        # A reply without code: the observation is the next "Turn k/N" prompt alone.
        assert turns[1].blocks == [] and turns[1].observation == "Turn 3/6:"
        # REPL output + next turn prompt: joined for our schema, kept apart under extra.
        assert turns[0].observation.startswith("REPL output:\n")
        assert turns[0].observation.endswith("\n\nTurn 2/6:")
        assert len(turns[0].extra["observation_messages"]) == 2
        assert turns[3].observation is None and turns[3].final_answer_source == "final_call"
        assert turns[0].blocks[0].code == src[0]["code_blocks"][0]["code"]
        assert turns[0].blocks[0].stdout_full == src[0]["code_blocks"][0]["result"]["stdout"]
        # Sub-calls: one llm_query in turn 0, a batch of two in turn 2.
        assert [(c.turn, c.block, c.depth) for c in calls] == [(0, 0, 1), (2, 0, 1), (2, 0, 1)]
        assert calls[1].prompt.startswith("Quote A: ") and calls[2].prompt.startswith("Quote B")
        logged = src[0]["code_blocks"][0]["result"]["rlm_calls"][0]
        assert calls[0].prompt == logged["prompt"] and calls[0].response == logged["response"]
        # The server counted words + 4 per message; rlms logged it; we kept it.
        assert calls[0].usage.prompt_tokens == count(calls[0].prompt) + 4
        assert calls[0].usage.completion_tokens == count(calls[0].response)
        assert calls[0].latency_s == logged["execution_time"]
        assert s.n_sub_calls == 3 and s.sub_model == "sub" and s.root_model == "root"
        assert s.tokens.sub.prompt_tokens == sum(c.usage.prompt_tokens for c in calls)
        assert s.coverage is not None and 0 < s.coverage.overall <= 1
        assert s.wall_time_s == pytest.approx(sum(it["iteration_time"] for it in src))
        assert start.extra["metadata"]["max_iterations"] == 6
    manifest = load_manifest(run)
    assert manifest.source is not None
    assert (manifest.source.format, manifest.source.version) == ("rlms-log", "0.1.3")
    assert [(f.sha256, f.n_episodes) for f in manifest.source.files] == [(sha, 2)]
    assert manifest.config.rooms == [str(room.resolve())] and manifest.config.depth == 1


def test_depth2_log_subagent_turns_and_nested_calls(tmp_path):
    room = clause_room(tmp_path)
    import_rlm([D2], room, tmp_path / "r2", command=["t"])
    (s,) = load_summaries(tmp_path / "r2")
    recs = records(tmp_path / "r2", s.episode_id)
    sub_turns = of_type(recs, "subagent_turn")
    top, nested = of_type(recs, "sub_call")
    assert s.depth == 2 and s.n_turns == 2 and len(sub_turns) == 2
    assert top.subagent and top.depth == 1 and top.parent_call_id is None
    assert (nested.depth, nested.parent_call_id, nested.sub_turn, nested.turn) == (2, 0, 0, 0)
    assert nested.prompt.startswith("Quote: Find clauses in: Contract 0.")
    assert top.response == "CHILD: " + nested.response
    child = raw_iterations(D2)[0]["code_blocks"][0]["result"]["rlm_calls"][0]["metadata"]
    assert [t.completion for t in sub_turns] == [it["response"] for it in child["iterations"]]
    assert len(subagent_requests(sub_turns)) == 2
    exact = source_requests(sub_turns[0].initial_messages or [], sub_turns)
    # rlms keeps a child's iteration prompts as one list (the final history): turn 1's request
    # is its prefix up to the second reply.
    full = child["iterations"][-1]["prompt"]
    assert [m.model_dump() for m in exact[1]] == full
    # The subagent's own usage: rlms's total for the child minus its nested call's.
    reported = top.extra["reported_usage"]
    assert top.usage.prompt_tokens == reported["prompt_tokens"] - nested.usage.prompt_tokens
    assert s.memo == "MEMO: " + top.response


def test_same_file_same_episode_ids_whatever_the_out_folder(tmp_path):
    room = clause_room(tmp_path)
    import_rlm([D1], room, tmp_path / "a", command=["t"])
    copy = tmp_path / "logs" / "renamed.jsonl"
    copy.parent.mkdir()
    shutil.copy(D1, copy)
    import_rlm([copy.parent], room, tmp_path / "b", command=["t"])
    ids_a = [s.episode_id for s in load_summaries(tmp_path / "a")]
    assert ids_a == [s.episode_id for s in load_summaries(tmp_path / "b")]
    assert len(set(ids_a)) == 2


def test_unknown_format_version_names_it_and_writes_nothing(tmp_path):
    room = clause_room(tmp_path)
    lines = D1.read_text().splitlines()
    meta = json.loads(lines[0])
    meta["version"] = "0.2.0"
    bad = tmp_path / "new.jsonl"
    bad.write_text("\n".join([json.dumps(meta), *lines[1:]]) + "\n")
    out = tmp_path / "runs" / "x"
    with pytest.raises(ImportFormatError) as info:
        import_rlm([D1, bad], room, out, command=["t"])
    msg = str(info.value)
    assert "'0.2.0'" in msg and "supported versions: 0.1.3" in msg and str(bad) in msg
    assert not out.exists() and not (tmp_path / "runs").exists()


def test_record_of_another_shape_is_an_error_naming_file_and_line(tmp_path):
    room = clause_room(tmp_path)
    lines = D1.read_text().splitlines()
    it = json.loads(lines[2])
    del it["code_blocks"]
    it["steps"] = []
    bad = tmp_path / "old.jsonl"
    bad.write_text("\n".join([lines[0], lines[1], json.dumps(it), *lines[3:]]) + "\n")
    with pytest.raises(ImportFormatError, match=r"old\.jsonl:3: iteration lacks \['code_blocks'\]"):
        import_rlm([bad], room, tmp_path / "x", command=["t"])
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("raw", [float("nan"), float("inf"), -2.0, "soon"])
def test_a_time_that_is_no_duration_is_read_as_missing_kept_and_counted(tmp_path, raw):
    """An ``iteration_time`` that is no number of seconds >= 0 (Python's json writes NaN and
    Infinity): the turn reads it as missing (0 s), keeps its JSON text under
    ``extra.iteration_time_raw``, and the import warns with the count; the run reads back
    (NaN in a float field used to stop the import with "cannot convert float NaN")."""
    room = clause_room(tmp_path)
    lines = D1.read_text().splitlines()
    it = json.loads(lines[1])
    it["iteration_time"] = raw
    log = tmp_path / "odd.jsonl"
    log.write_text("\n".join([lines[0], json.dumps(it), *lines[2:]]) + "\n")
    with pytest.warns(UserWarning, match="1 iteration_time values are not a number of seconds"):
        import_rlm([log], room, tmp_path / "r", command=["t"])
    first = load_summaries(tmp_path / "r")[0]
    path = tmp_path / "r" / "trajectories" / f"{first.episode_id}.jsonl"
    turns = [r for r in parse_records(path, TrajectoryRecord) if r.record_type == "turn"]
    assert turns[0].latency_s == 0.0 and turns[1].latency_s > 0
    assert turns[0].extra["iteration_time_raw"] == json.dumps(raw)  # "NaN", "Infinity", ...
    assert first.wall_time_s == pytest.approx(sum(t.latency_s for t in turns))


def test_torn_last_line_is_left_out_with_a_warning(tmp_path):
    room = clause_room(tmp_path)
    text = D1.read_text()
    torn = tmp_path / "torn.jsonl"
    torn.write_text(text[: len(text) - 200])  # the crash cut the last iteration's line
    with pytest.warns(UserWarning, match="torn last line"):
        result = import_rlm([torn], room, tmp_path / "r", command=["t"])
    first, second = load_summaries(tmp_path / "r")
    assert (first.n_turns, first.status) == (4, "completed")
    assert (second.n_turns, second.status, second.memo) == (3, "no_memo", None)
    assert any("torn last line" in w for w in result.warnings)
    assert any("torn last line" in w for w in load_manifest(tmp_path / "r").source.warnings)


def test_sub_call_prompts_not_from_the_room_are_counted(tmp_path):
    other = tmp_path / "other"
    (other / "documents").mkdir(parents=True)
    (other / "documents" / "lease.txt").write_text("The tenant shall pay rent monthly. " * 40)
    shutil.copy(clause_room(tmp_path) / "task.json", other / "task.json")
    with pytest.warns(UserWarning, match=r"6 of 6 sub-call prompts share no text with room"):
        result = import_rlm([D1], other, tmp_path / "r", command=["t"])
    assert result.n_episodes == 2
    # On the room they ran on, no warning.
    ok = import_rlm([D1], tmp_path / "room", tmp_path / "r2", command=["t"])
    assert ok.warnings == []


def test_cli_imports_and_refuses_bad_input_with_exit_2(tmp_path):
    app = typer.Typer()
    register(app)
    room = clause_room(tmp_path)
    runner = CliRunner()
    ok = runner.invoke(
        app, ["import", "rlm", str(D1), "--room", str(room), "--out", str(tmp_path / "r")]
    )
    assert ok.exit_code == 0, ok.output
    assert "2 episodes (8 root turns, 6 sub-calls)" in ok.output
    again = runner.invoke(
        app, ["import", "rlm", str(D1), "--room", str(room), "--out", str(tmp_path / "r")]
    )
    assert again.exit_code == 2 and "not empty" in again.output
    missing = runner.invoke(app, ["import", "rlm", "nope.jsonl", "--room", str(room), "--out", "x"])
    assert missing.exit_code == 2 and "nope.jsonl" in missing.output


def test_judge_filter_export_report_run_on_an_imported_run(tmp_path, smollm2_dir):
    """An imported run goes through judge (reference grader), filter, export and report as
    any run."""
    import datasets

    from rlmdistill.export.main import ExportConfig
    from rlmdistill.export.main import run as export_stage
    from rlmdistill.export.options import build_export_options
    from rlmdistill.filter.main import FilterConfig
    from rlmdistill.filter.main import run as filter_stage
    from rlmdistill.filter.rules import FilterRules
    from rlmdistill.judge.main import JudgeConfig
    from rlmdistill.judge.main import run as judge_stage
    from rlmdistill.traces.runs import load_verdicts

    room = clause_room(tmp_path, evidence=True)
    run = tmp_path / "runs" / "imp"
    import_rlm([D1, D2], room, run, command=["t"])
    judge_stage(JudgeConfig(run_dir=run))
    verdicts = load_verdicts(run, "reference")
    summaries = load_summaries(run)
    assert {v.episode_id for v in verdicts} == {s.episode_id for s in summaries}
    # The memos cite no document: the reference grader's citation rule fails them.
    assert {v.verdict for v in verdicts} == {"FAIL"}
    assert all(v.memo_sha256 == s.memo_sha256 for v, s in zip(verdicts, summaries, strict=True))
    out = tmp_path / "datasets" / "d"
    outcome = filter_stage(
        FilterConfig(runs=[run], out=out, rules=FilterRules(dedup=[], min_pass_rate=0.0))
    )
    assert outcome.selection.n_kept == 3
    export_stage(
        ExportConfig(
            out=out,
            options=build_export_options(tokenizer=str(smollm2_dir), max_length=8192),
            episodes=outcome.decisions,
        ),
        progress=False,
    )
    ds = datasets.load_from_disk(str(out))
    assert sorted(set(ds["episode_id"])) == sorted(s.episode_id for s in summaries)
    assert all(sum(row["assistant_masks"]) > 0 for row in ds)
    # and the report over it
    from rlmdistill.analysis.main import ReportConfig
    from rlmdistill.analysis.main import run as report_stage

    report = report_stage(ReportConfig(runs=[run], out=tmp_path / "reports" / "r", draw=False))
    (arm,) = report.arms
    assert (arm.run_id, arm.grader, arm.depth) == ("imp", "reference", 2)
    assert (tmp_path / "reports" / "r" / "report.md").is_file()


def test_shares_text_finds_spans_of_79_characters_and_never_below_64(tmp_path):
    """The room check of sub-call prompts: the coverage probe's rule (aligned windows of 64
    normalised characters every 16; a span of 64 + 16 - 1 = 79 always holds one)."""
    from rlmdistill.coverage.index import CoverageIndex
    from rlmdistill.rooms import DataRoom

    room = tmp_path / "r"
    (room / "documents").mkdir(parents=True)
    rng = random.Random(0)
    text = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(400))
    (room / "documents" / "d.txt").write_text(text)
    index = CoverageIndex.build(DataRoom.load(room))
    for start in (0, 5, 100, 321):
        assert index.shares_text("prompt: " + text[start : start + 79] + " end")
    assert not index.shares_text(text[5 : 5 + 63])  # shorter than one window
    assert index.shares_text(text[16:80].upper())  # one aligned window, normalised case
    assert not index.shares_text(text[17:81])  # 64 characters holding no aligned window
    assert not index.shares_text("The tenant shall pay rent monthly. " * 5)


def _coverages(run: Path) -> list[object]:
    return [s.coverage for s in load_summaries(run)]


def test_spawned_coverage_workers_equal_forked_ones(tmp_path, monkeypatch):
    """Where fork is not offered (macOS's default, Windows), the workers are spawned and load
    the room's cached index themselves: the same coverage as forked workers."""
    from rlmdistill.importers import common

    room = clause_room(tmp_path)
    import_rlm([D1, D2], room, tmp_path / "fork", jobs=2, command=["t"])
    monkeypatch.setattr(common.multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    import_rlm([D1, D2], room, tmp_path / "spawn", jobs=2, command=["t"])
    forked = _coverages(tmp_path / "fork")
    assert all(c is not None and c.overall > 0 for c in forked)
    assert forked == _coverages(tmp_path / "spawn")


def test_coverage_in_worker_processes_equals_coverage_here(tmp_path):
    room = clause_room(tmp_path)
    import_rlm([D1, D2], room, tmp_path / "one", jobs=1, command=["t"])
    import_rlm([D1, D2], room, tmp_path / "two", jobs=2, command=["t"])
    here = [s.coverage for s in load_summaries(tmp_path / "one")]
    there = [s.coverage for s in load_summaries(tmp_path / "two")]
    assert len(here) == 3 and all(c is not None and c.overall > 0 for c in here)
    assert here == there
    for name in ("one", "two"):  # everything else of the runs is equal too
        lines = (tmp_path / name / "episodes.jsonl").read_text().splitlines()
        assert [json.loads(x)["run_id"] for x in lines] == [name] * 3
    strip = lambda t: t.replace('"run_id":"two"', '"run_id":"one"')  # noqa: E731
    assert (
        strip((tmp_path / "two" / "episodes.jsonl").read_text())
        == (tmp_path / "one" / "episodes.jsonl").read_text()
    )


def test_default_answer_after_max_iterations_keeps_each_prompt(tmp_path):
    """rlms's default answer (out of iterations): one more call whose prompt ends with an
    assistant message of its own; the history is no longer prompt + replies + observations, so
    each turn keeps its logged prompt under extra.prompt_messages, with a warning."""
    lines = D1.read_text().splitlines()
    meta, its = lines[0], [json.loads(x) for x in lines[1:4]]  # episode 0, iterations 1-3
    history = [*its[2]["prompt"], {"role": "assistant", "content": its[2]["response"]}]
    history.append({"role": "user", "content": "REPL output:\n\nok\n"})
    ask = "Please provide a final answer to the user's question based on the information provided."
    final = {
        "type": "iteration",
        "iteration": 4,
        "timestamp": its[2]["timestamp"],
        "prompt": [*history, {"role": "assistant", "content": ask}],
        "response": "FINAL MEMO from the default answer",
        "code_blocks": [],
        "final_answer": "FINAL MEMO from the default answer",
        "iteration_time": None,
    }
    log = tmp_path / "default.jsonl"
    log.write_text("\n".join([meta, *(json.dumps(i) for i in [*its, final])]) + "\n")
    with pytest.warns(UserWarning, match="not the first prompt plus replies"):
        import_rlm([log], clause_room(tmp_path), tmp_path / "r", command=["t"])
    (s,) = load_summaries(tmp_path / "r")
    assert (s.status, s.memo, s.n_turns) == ("completed", final["final_answer"], 4)
    turns = of_type(records(tmp_path / "r", s.episode_id), "turn")
    assert turns[3].final_answer_source == "text" and turns[3].blocks == []
    assert [t.extra["prompt_messages"] for t in turns] == [i["prompt"] for i in [*its, final]]
    assert turns[0].observation == its[1]["prompt"][-2]["content"] + "\n\nTurn 2/6:"


def test_failed_call_and_message_list_prompt_are_kept(tmp_path):
    lines = D1.read_text().splitlines()
    it = json.loads(lines[1])
    call = it["code_blocks"][0]["result"]["rlm_calls"][0]
    msgs = [{"role": "user", "content": call["prompt"]}]
    call.update(prompt=msgs, response="", error="llm() call failed - boom", new_field=7)
    log = tmp_path / "err.jsonl"
    log.write_text("\n".join([lines[0], json.dumps(it), *lines[2:]]) + "\n")
    import_rlm([log], clause_room(tmp_path), tmp_path / "r", command=["t"])
    first = load_summaries(tmp_path / "r")[0]
    c0 = of_type(records(tmp_path / "r", first.episode_id), "sub_call")[0]
    assert c0.prompt == json.dumps(msgs, ensure_ascii=False) and c0.extra["prompt"] == msgs
    assert (c0.error, c0.response, c0.extra["new_field"]) == ("llm() call failed - boom", "", 7)
    assert first.n_sub_call_errors == 1


def test_coverage_chunks_go_to_the_workers_while_the_source_is_parsed(tmp_path, monkeypatch):
    """With worker processes, a chunk of parsed episodes is sent as soon as it is full, not
    after the whole source is parsed; the results equal those computed here."""
    from rlmdistill.importers import common
    from rlmdistill.importers.rlm import parse_log

    room = clause_room(tmp_path)
    binding = common.bind_room(room)
    episodes, _, _ = parse_log(D1, file_sha256(D1))
    monkeypatch.setattr(common._Coverages, "CHUNK", 2)
    there = common._Coverages(binding, jobs=2)
    here = common._Coverages(binding, jobs=1)
    try:
        sent = []
        for ep in episodes:
            there.add(ep)
            here.add(ep)
            sent.append(len(there.futures))
        assert len(episodes) == 2 and sent == [0, 1]  # the first chunk left at its 2nd episode
        there.finish()
        assert here.pool is None and len(there.futures) == 1
        got = [there.get(i) for i in range(2)]
        assert got == [here.get(i) for i in range(2)]
        assert all(cov is not None and cov.overall > 0 and foreign == 0 for cov, foreign in got)
    finally:
        there.close()


@pytest.mark.parametrize("enabled", [True, False])
def test_the_cycle_collector_is_paused_during_an_import_and_restored(tmp_path, enabled):
    import gc

    room = clause_room(tmp_path)
    seen: list[bool] = []
    from rlmdistill.importers import common

    real = common.write_run

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(common, "write_run", spy)
            import_rlm([D1], room, tmp_path / "ok", command=["t"])
            assert seen == [False] and gc.isenabled() is enabled
            with pytest.raises(FileNotFoundError):
                import_rlm([tmp_path / "missing.jsonl"], room, tmp_path / "bad", command=["t"])
            assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
