"""``rlmdistill import verifiers``: rollouts that verifiers 0.4.0's own code wrote (recorded
under ``tests/data/import/`` by ``python tests/test_import_verifiers_real.py``: verifiers'
interception server, trace graph and episode writer against the fake server, with an
emulated nano-rlm agent on the clause room below) imported as a run; bad input; the stages
after it. Runs without the verifiers package (the pinned field names); with it installed,
the main test also runs through verifiers' own models."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import typer
from pydantic import TypeAdapter
from typer.testing import CliRunner

from rlmdistill.importers.cli import register
from rlmdistill.importers.common import ImportFormatError, file_sha256, imported_episode_id
from rlmdistill.importers.verifiers import FORMAT, import_verifiers, source_requests
from rlmdistill.testing.rooms import write_clause_room
from rlmdistill.traces.rebuild import root_requests, subagent_requests
from rlmdistill.traces.runs import load_manifest, load_summaries
from rlmdistill.traces.schema import TrajectoryRecord
from rlmdistill.traces.store import parse_records

DATA = Path(__file__).parent / "data" / "import"
VF = DATA / "verifiers-0.4.0-rlm.jsonl"
_ADAPTER: TypeAdapter[TrajectoryRecord] = TypeAdapter(TrajectoryRecord)


def count(text: str) -> int:
    """The recording's fake-server token counter (whitespace words)."""
    return len(text.split())


def clause_room(tmp: Path) -> Path:
    """The room the recorded rollouts ran on (the clause room, 3 documents x 60 repeats)."""
    return write_clause_room(tmp / "room", n_documents=3, repeats=60)


def episodes() -> list[dict[str, Any]]:
    return [json.loads(x) for x in VF.read_text().splitlines()]


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def records(run: Path, episode_id: str) -> list[Any]:
    return list(parse_records(run / "trajectories" / f"{episode_id}.jsonl", _ADAPTER))


def of_type(recs: list[Any], kind: str) -> list[Any]:
    return [r for r in recs if r.record_type == kind]


PARSERS = [
    False,
    pytest.param(
        True,
        marks=pytest.mark.skipif(
            importlib.util.find_spec("verifiers") is None, reason="verifiers not installed"
        ),
    ),
]


@pytest.mark.parametrize("use_verifiers", PARSERS)
def test_recorded_rollouts_turns_subagents_memo_and_manifest(tmp_path, use_verifiers):
    room = clause_room(tmp_path)
    run = tmp_path / "runs" / "vf"
    result = import_verifiers([VF], room, run, use_verifiers=use_verifiers, command=["t"])
    assert (result.n_episodes, result.n_turns, result.n_sub_calls) == (2, 5, 4)
    assert result.warnings == []
    sha = file_sha256(VF)
    summaries = load_summaries(run)
    assert [s.episode_id for s in summaries] == [
        imported_episode_id(FORMAT, sha, i) for i in (0, 1)
    ]
    raw = [e["traces"][0] for e in episodes()]
    s0, s1 = summaries
    # Episode 0: read a contract, one sub-agent, the memo.
    recs = records(run, s0.episode_id)
    start, turns = recs[0], of_type(recs, "turn")
    (call,) = of_type(recs, "sub_call")
    sub_turns = of_type(recs, "subagent_turn")
    nodes = raw[0]["nodes"]
    assert [(m.role, m.content) for m in start.initial_messages] == [
        ("system", nodes[0]["message"]["content"]),
        ("user", "Review the contracts."),
    ]
    assert turns[0].completion == (
        "Let me read the first contract.\n\n```repl\ntext = open(DOCS + '/c0.txt').read()\n"
        "print(text[:300])\n```"
    )
    contract0 = "Contract 0. " + "Clause text. " * 60
    assert turns[0].observation == contract0[:300] + "\n" == turns[0].blocks[0].stdout_full
    assert turns[0].extra["observation_messages"][0]["role"] == "tool"
    assert turns[1].completion == (
        "```repl\nr = await rlm('Quote the clauses of: ' + text[:400])\nprint(r.answer)\n```"
    )
    memo = "MEMO: QUOTED: Contract 0. Clause text. Clause text. (66 words)"
    assert s0.memo == memo == raw[0]["root_reply"] and s0.status == "completed"
    assert turns[2].completion == memo and turns[2].final_answer_source == "text"
    assert turns[2].observation is None and turns[2].blocks == []
    # The server counted words + 4 per message; verifiers recorded it; we kept it.
    system = nodes[0]["message"]["content"]
    assert turns[0].usage.prompt_tokens == count(system) + 4 + 3 + 4
    assert turns[0].usage.completion_tokens == count("Let me read the first contract.") + count(
        nodes[2]["message"]["tool_calls"][0]["arguments"]
    )
    assert s0.tokens.root.prompt_tokens == sum(t.usage.prompt_tokens for t in turns)
    assert [t.latency_s for t in turns] == [
        pytest.approx(c["time"]["end"] - c["time"]["start"]) for c in raw[0]["calls"][:2]
    ] + [pytest.approx(raw[0]["calls"][4]["time"]["end"] - raw[0]["calls"][4]["time"]["start"])]
    # The sub-agent: spawned in root turn 1 (its subagent_call link), two turns of its own.
    brief = "Quote the clauses of: " + contract0[:400]
    assert (call.turn, call.block, call.depth, call.subagent, call.prompt) == (1, 0, 1, True, brief)
    assert call.response == "QUOTED: Contract 0. Clause text. Clause text. (66 words)"
    assert call.usage.prompt_tokens == sum(t.usage.prompt_tokens for t in sub_turns)
    assert [t.turn for t in sub_turns] == [0, 1] and sub_turns[0].observation == "66\n"
    assert sub_turns[0].initial_messages[1].content == brief
    assert len(subagent_requests(sub_turns)) == 2 and len(root_requests(start, turns)) == 3
    assert s0.depth == 2 and s0.n_sub_calls == 1 and s0.root_model == s0.sub_model == "root"
    assert s0.coverage is not None and 0 < s0.coverage.overall <= 1
    assert s0.extra["rewards"] == {"judge": {"score": 1.0, "weight": 1.0}}
    assert s0.extra["metrics"] == {"num_turns": 5.0, "num_subagents": 1.0}
    agent = raw[0]["timing"]["agent"]
    assert s0.wall_time_s == pytest.approx(agent["end"] - agent["start"])
    assert start.limits == {"max_turns": 20, "max_total_tokens": None, "max_depth": 2}
    assert start.extra["parsed_with"] == (
        "verifiers models" if use_verifiers else "pinned field names"
    )
    assert start.extra["verifiers_version"] == "0.4.0" and start.extra["trace_version"] == 1
    # Episode 1: two sub-agents in one cell (one batch), the first with its own (depth 2).
    calls = of_type(records(run, s1.episode_id), "sub_call")
    assert [(c.call_id, c.depth, c.parent_call_id, c.turn, c.sub_turn) for c in calls] == [
        (0, 1, None, 0, None),
        (1, 1, None, 0, None),
        (2, 2, 0, 0, 0),
    ]
    assert [(c.batch_id, c.batch_size) for c in calls] == [(0, 2), (0, 2), (2, 1)]
    assert calls[0].prompt.startswith("Find clauses in: Contract 1.")
    assert calls[1].prompt.startswith("Find dates in: ")
    assert calls[0].response == "CLAUSES: " + calls[2].response
    assert s1.n_sub_batches == 2 and s1.n_turns == 2
    manifest = load_manifest(run)
    assert manifest.source is not None
    assert (manifest.source.format, manifest.source.version) == ("verifiers-trace", "1")
    assert [(f.sha256, f.n_episodes) for f in manifest.source.files] == [(sha, 2)]
    assert manifest.config.depth == 2 and manifest.config.rooms == [str(room.resolve())]


def test_a_folder_is_read_for_its_traces_jsonl_and_ids_stay_put(tmp_path):
    room = clause_room(tmp_path)
    folder = tmp_path / "outputs" / "evals" / "rlm"
    folder.mkdir(parents=True)
    (folder / "traces.jsonl").write_bytes(VF.read_bytes())
    (folder / "other.jsonl").write_text("not read\n")
    import_verifiers([folder], room, tmp_path / "a", command=["t"])
    import_verifiers([VF], room, tmp_path / "b", command=["t"])
    ids = [[s.episode_id for s in load_summaries(tmp_path / n)] for n in ("a", "b")]
    assert ids[0] == ids[1] and len(ids[0]) == 2


def test_bare_trace_lines_read_as_episode_lines(tmp_path):
    room = clause_room(tmp_path)
    bare = write(tmp_path / "bare.jsonl", [e["traces"][0] for e in episodes()])
    import_verifiers([bare], room, tmp_path / "a", command=["t"])
    import_verifiers([VF], room, tmp_path / "b", command=["t"])
    for a, b in zip(load_summaries(tmp_path / "a"), load_summaries(tmp_path / "b"), strict=True):
        assert (a.memo, a.n_turns, a.n_sub_calls, a.tokens) == (
            b.memo,
            b.n_turns,
            b.n_sub_calls,
            b.tokens,
        )
        assert "episode" not in records(tmp_path / "a", a.episode_id)[0].extra


def test_unknown_trace_version_is_refused_naming_it_and_nothing_is_written(tmp_path):
    rows = episodes()
    rows[1]["traces"][0]["version"] = 2
    bad = write(tmp_path / "v2.jsonl", rows)
    out = tmp_path / "runs" / "x"
    with pytest.raises(ImportFormatError) as err:
        import_verifiers([VF, bad], clause_room(tmp_path), out, command=["t"])
    assert str(err.value) == (
        f"{bad}:2: unknown verifiers trace version 2 (field 'traces[0].version') (written by "
        "verifiers 0.4.0); supported versions: 1 (verifiers 0.4.0)"
    )
    assert not out.exists() and not list((tmp_path / "runs").glob("*"))
    del rows[1]["traces"][0]["version"]
    with pytest.raises(ImportFormatError, match=r"v2.jsonl:2: traces\[0\] has no 'version'"):
        import_verifiers([write(bad, rows)], tmp_path / "room", out, command=["t"])


def test_records_of_another_shape_are_refused_naming_file_and_line(tmp_path):
    room = clause_room(tmp_path)
    other = write(tmp_path / "o.jsonl", [episodes()[0], {"task_key": "t", "valid": True}])
    with pytest.raises(ImportFormatError, match=r"o.jsonl:2: record 1 is neither an Episode"):
        import_verifiers([other], room, tmp_path / "r", command=["t"])
    rows = episodes()
    rows[0]["traces"][0]["nodes"][3]["parent"] = 7
    with pytest.raises(ImportFormatError, match=r"p.jsonl:1: node 3 has parent 7"):
        import_verifiers([write(tmp_path / "p.jsonl", rows)], room, tmp_path / "r", command=["t"])
    rows = episodes()
    rows[1]["traces"][0]["nodes"][0]["message"]["role"] = "developer"
    log = write(tmp_path / "d.jsonl", rows)
    with pytest.raises(
        ImportFormatError, match=r"d.jsonl:2: agent 0's prompt holds a message of role 'developer'"
    ):
        import_verifiers([log], room, tmp_path / "r", use_verifiers=False, command=["t"])
    assert not (tmp_path / "r").exists()


def test_torn_last_line_is_left_out_with_a_warning(tmp_path):
    lines = VF.read_text().splitlines()
    torn = tmp_path / "torn.jsonl"
    torn.write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])
    with pytest.warns(UserWarning, match="torn last line"):
        result = import_verifiers([torn], clause_room(tmp_path), tmp_path / "r", command=["t"])
    assert result.n_episodes == 1
    manifest = load_manifest(tmp_path / "r")
    assert manifest.source is not None and "torn last line" in manifest.source.warnings[0]
    (s,) = load_summaries(tmp_path / "r")
    assert s.memo == json.loads(lines[0])["traces"][0]["root_reply"]


def test_without_subagent_links_sub_agents_hang_off_the_root_turn_they_ran_after(tmp_path):
    rows = episodes()
    for e in rows:
        for n in e["traces"][0]["nodes"]:
            n["semantic_parents"] = []
    log = write(tmp_path / "nolinks.jsonl", rows)
    with pytest.warns(UserWarning, match="3 sub-agents have no subagent_call link"):
        import_verifiers([log], clause_room(tmp_path), tmp_path / "r", command=["t"])
    s0, s1 = load_summaries(tmp_path / "r")
    (c0,) = of_type(records(tmp_path / "r", s0.episode_id), "sub_call")
    assert (c0.turn, c0.depth, c0.extra["linked"]) == (1, 1, False)
    calls = of_type(records(tmp_path / "r", s1.episode_id), "sub_call")
    # The nested one cannot be told apart from the root's own: depth 1, root turn 0.
    assert [(c.depth, c.parent_call_id, c.turn) for c in calls] == [(1, None, 0)] * 3


def test_errors_timeouts_and_cached_tokens(tmp_path):
    room = clause_room(tmp_path)
    rows = [copy.deepcopy(episodes()[0]) for _ in range(3)]
    t0, t1, t2 = (r["traces"][0] for r in rows)
    t0["ok"] = False
    t0["errors"] = [{"type": "ProviderError", "message": "upstream 500"}]
    t0["calls"].append(
        {"model": "root", "error": {"type": "ProviderError", "message": "upstream 500"}}
    )
    t1["is_timeout"], t1["stop_condition"] = True, "rollout_timeout"
    t2["calls"][0]["usage"]["cached_input_tokens"] = 5
    t2["root_reply"] = None
    del t2["nodes"][11]  # the memo reply is gone: the last root turn called a tool
    t2["calls"] = t2["calls"][:4]
    t2["stop_condition"] = "max_turns"
    import_verifiers([write(tmp_path / "e.jsonl", rows)], room, tmp_path / "r", command=["t"])
    s0, s1, s2 = load_summaries(tmp_path / "r")
    assert (s0.status, s0.status_detail) == ("error", "ProviderError: upstream 500")
    assert (
        records(tmp_path / "r", s0.episode_id)[0].extra["failed_calls"][0]["error"]["message"]
        == "upstream 500"
    )
    assert (s1.status, s1.status_detail) == ("timeout", "rollout_timeout")
    assert (s2.status, s2.memo, s2.n_turns) == ("budget_exceeded", None, 2)
    turn0 = of_type(records(tmp_path / "r", s2.episode_id), "turn")[0]
    assert (turn0.usage.prompt_tokens, turn0.usage.cached_tokens) == (
        t2["calls"][0]["usage"]["prompt_tokens"] + 5,
        5,
    )


def test_cli_imports_and_refuses_bad_input_with_exit_2(tmp_path):
    app = typer.Typer()
    register(app)
    room = clause_room(tmp_path)
    runner = CliRunner()
    args = ["import", "verifiers", str(VF), "--room", str(room), "--out", str(tmp_path / "r")]
    ok = runner.invoke(app, args)
    assert ok.exit_code == 0, ok.output
    assert "2 episodes (5 root turns, 4 sub-agents)" in ok.output
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "not empty" in again.output
    rows = episodes()
    rows[0]["traces"][0]["version"] = 7
    bad = write(tmp_path / "v7.jsonl", rows)
    refused = runner.invoke(
        app, ["import", "verifiers", str(bad), "--room", str(room), "--out", str(tmp_path / "s")]
    )
    assert refused.exit_code == 2 and "unknown verifiers trace version 7" in refused.output
    assert not (tmp_path / "s").exists()


def test_judge_filter_export_run_on_an_imported_run(tmp_path, smollm2_dir):
    """An imported verifiers run goes through judge (reference grader), filter and export."""
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

    run = tmp_path / "runs" / "vf"
    import_verifiers([VF], clause_room(tmp_path), run, command=["t"])
    judge_stage(JudgeConfig(run_dir=run))
    summaries = load_summaries(run)
    verdicts = load_verdicts(run, "reference")
    assert {v.episode_id for v in verdicts} == {s.episode_id for s in summaries}
    out = tmp_path / "datasets" / "d"
    outcome = filter_stage(
        FilterConfig(runs=[run], out=out, rules=FilterRules(dedup=[], min_pass_rate=0.0))
    )
    assert outcome.selection.n_kept == 2
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
    # The root's replies are trained on as rendered: text, then the code as a repl block.
    msgs = (
        json.loads(ds[0]["messages_json"])
        if "messages_json" in ds.column_names
        else ds[0]["messages"]
    )
    replies = [m["content"] for m in msgs if m["role"] == "assistant"]
    assert any("```repl\n" in r for r in replies)
    assert all(sum(row["assistant_masks"]) > 0 for row in ds)


NANO = DATA / "verifiers-0.4.0-nano-rlm-83ef01f.jsonl"


def test_real_nano_rlm_rollouts_without_links(tmp_path):
    """The real nano-rlm (snapshot 83ef01f, headless, no ACP) through verifiers' interception
    server: its system prompt, ipython tool calls and sub-agents; no subagent_call links, so
    every sub-agent hangs off the root turn it ran after (the nested one too)."""
    room = clause_room(tmp_path)
    with pytest.warns(UserWarning, match="sub-agents have no subagent_call link"):
        result = import_verifiers([NANO], room, tmp_path / "r", command=["t"])
    assert (result.n_episodes, result.n_turns, result.n_sub_calls) == (2, 6, 3)
    assert len(result.warnings) == 2
    s0, s1 = load_summaries(tmp_path / "r")
    recs = records(tmp_path / "r", s0.episode_id)
    start, turns = recs[0], of_type(recs, "turn")
    (call,) = of_type(recs, "sub_call")
    system = start.initial_messages[0]
    assert system.role == "system"
    assert system.content.startswith(
        "You are a general purpose agent that uses code to solve tasks."
    )
    assert start.initial_messages[1].content == "Review the first contract."
    assert turns[0].completion == (
        "Reading c0.\n\n```repl\ntext = open('Contracts/c0.txt').read()\nprint(text[:300])\n```"
    )
    contract0 = "Contract 0. " + "Clause text. " * 60
    assert turns[0].observation == contract0[:300] + "\n"
    assert turns[0].usage.prompt_tokens == count(system.content) + 4 + 4 + 4
    assert turns[0].extra["tool_calls"][0]["name"] == "ipython"
    assert (call.turn, call.depth, call.parent_call_id, call.extra["linked"]) == (1, 1, None, False)
    assert call.prompt == "Quote the clauses of: " + contract0[:400]
    assert call.response == "FOUND: Quote the clauses of: Contract 0. Clause text."
    assert s0.memo == "MEMO: " + call.response and s0.status == "completed"
    recs1 = records(tmp_path / "r", s1.episode_id)
    calls = of_type(recs1, "sub_call")
    assert [(c.depth, c.turn, c.parent_call_id) for c in calls] == [(1, 1, None), (1, 1, None)]
    assert calls[0].prompt.startswith("Find clauses in: Contract 1.")
    assert (
        calls[1].prompt.startswith("Check: ")
        and calls[0].response == "CLAUSES: " + calls[1].response
    )
    # The root and its first sub-agent share the system node; each keeps it as its own.
    sub0 = [t for t in of_type(recs1, "subagent_turn") if t.call_id == 0]
    assert sub0[0].initial_messages[0] == recs1[0].initial_messages[0]
    assert [
        len(
            subagent_requests(
                [t for t in of_type(recs1, "subagent_turn") if t.call_id == c.call_id]
            )
        )
        for c in calls
    ] == [2, 1]


def test_source_requests_give_back_each_request_as_the_agent_sent_it(tmp_path):
    """The last root request of episode 0, rebuilt from the records: the assistant messages
    with their tool calls (not the rendered repl blocks), the tool results with their ids."""
    import_verifiers([VF], clause_room(tmp_path), tmp_path / "r", command=["t"])
    s0 = load_summaries(tmp_path / "r")[0]
    recs = records(tmp_path / "r", s0.episode_id)
    nodes = episodes()[0]["traces"][0]["nodes"]
    sent = source_requests(recs[0].initial_messages, of_type(recs, "turn"))
    call = lambda n: [  # noqa: E731
        {
            "id": c["id"],
            "type": "function",
            "function": {"name": "ipython", "arguments": c["arguments"]},
        }
        for c in nodes[n]["message"]["tool_calls"]
    ]
    tool = lambda n: {  # noqa: E731
        "role": "tool",
        "content": nodes[n]["message"]["content"],
        "tool_call_id": nodes[n]["message"]["tool_call_id"],
    }
    assert sent[2] == [
        {"role": "system", "content": nodes[0]["message"]["content"]},
        {"role": "user", "content": "Review the contracts."},
        {"role": "assistant", "content": "Let me read the first contract.", "tool_calls": call(2)},
        tool(3),
        {"role": "assistant", "content": None, "tool_calls": call(4)},
        tool(10),
    ]
    assert [len(x) for x in sent] == [2, 4, 6]
