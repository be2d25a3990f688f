"""Tool-call style: argument parsing (S4), Arrow round trip (S5), malformed calls (T1)."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest
import trl

from rlmdistill.export import (
    REPL_TOOL,
    ExportOptions,
    ToolCallError,
    encode_conversation,
    export_dataset,
    load_messages,
    load_tokenizer,
    normalize_tool_calls,
    probe_template,
)
from rlmdistill.export.dataset import example_row, rows_to_dataset
from rlmdistill.export.render import Conversation
from rlmdistill.export.tools import turn_tool_messages
from rlmdistill.testing.trajectory_runs import synthetic_episode, write_trajectory_run
from rlmdistill.traces.runs import EpisodeRef
from rlmdistill.traces.store import append_records

QWEN_TEMPLATE = Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja"


def _call(args: object, name: str = "run") -> dict:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": name, "arguments": args}}
        ],
    }


def _conv(args: object) -> list[dict]:
    return [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "go"},
        _call(args),
        {"role": "tool", "tool_call_id": "c0", "content": "1"},
        {"role": "assistant", "content": "done"},
    ]


def test_json_string_arguments_parsed_before_templating_case_s4(smollm2_dir: Path) -> None:
    """Case S4: arguments given as a JSON string become a mapping; the rendered call holds
    the object once (never a double-encoded string), and parsing twice changes nothing."""
    msgs = normalize_tool_calls(_conv('{"code":"print(1)"}'), "ep1")
    assert msgs[2]["tool_calls"][0]["function"]["arguments"] == {"code": "print(1)"}
    assert normalize_tool_calls(msgs, "ep1") == msgs
    tok, directory = load_tokenizer(str(smollm2_dir), QWEN_TEMPLATE)  # real Qwen2.5 template
    info = probe_template(tok, directory)
    enc = encode_conversation(tok, info, msgs, [False, False, True, False, True], tools=[REPL_TOOL])
    assert '"arguments": {"code": "print(1)"}' in enc.text
    assert '\\"code\\"' not in enc.text and '"{\\"' not in enc.text


def test_invalid_json_arguments_name_episode_and_message_case_s4_t1() -> None:
    """Cases S4/T1: arguments {"s": "He said "hi""} (unescaped quotes) raise an error naming
    the episode and the message index."""
    with pytest.raises(ToolCallError, match=r"episode ep7 message 2: .*not valid JSON") as err:
        normalize_tool_calls(_conv('{"s": "He said "hi""}'), "ep7")
    assert err.value.episode_id == "ep7" and err.value.index == 2
    with pytest.raises(ToolCallError, match="must be a JSON object"):
        normalize_tool_calls(_conv("[1, 2]"), "ep7")


def test_heterogeneous_arguments_survive_arrow_case_s5(smollm2_dir: Path, tmp_path: Path) -> None:
    """Case S5: row 1 args {"q": "a"}, row 2 {"n": 1}: after save/load through datasets row 1
    has no "n": null and types are unchanged (messages_json string column)."""
    tok, directory = load_tokenizer(str(smollm2_dir), QWEN_TEMPLATE)
    info = probe_template(tok, directory)
    rows = []
    for k, args in enumerate([{"q": "a"}, {"n": 1}]):
        msgs = _conv(args)
        sup = [False, False, True, False, True]
        enc = encode_conversation(tok, info, msgs, sup, tools=[REPL_TOOL])
        conv = Conversation(msgs, sup, [0] * 5, [2, 4], -1, [REPL_TOOL])
        rows.append(
            example_row(conv, enc, episode_id=f"e{k}", run_id="r", room_id="room", task_id="t")
        )
    rows_to_dataset(rows).save_to_disk(str(tmp_path / "ds"))
    back = datasets.load_from_disk(str(tmp_path / "ds"))
    assert load_messages(back[0])[2]["tool_calls"][0]["function"]["arguments"] == {"q": "a"}
    assert load_messages(back[1])[2]["tool_calls"][0]["function"]["arguments"] == {"n": 1}
    assert load_messages(back[0]) == _conv({"q": "a"})
    assert json.loads(back[0]["tools"]) == [REPL_TOOL]
    # the hazard the string column avoids: Arrow widens nested dicts across rows
    naive = datasets.Dataset.from_list([{"a": {"q": "a"}}, {"a": {"n": 1}}])
    assert naive[0]["a"] == {"q": "a", "n": None}


def test_turn_tool_messages_split_per_block() -> None:
    reply = "Reading.\n```repl\nx = 1\nprint(x)\n```\n```repl\nprint(2)\n```"
    obs = "REPL output (block 0):\n```\n1\n```\n\nREPL output (block 1):\n```\n2\n```"
    msgs = turn_tool_messages(reply, obs, episode_id="e", turn=3)
    assert msgs[0]["content"] == "Reading."
    assert [c["function"]["arguments"] for c in msgs[0]["tool_calls"]] == [
        {"code": "x = 1\nprint(x)"},
        {"code": "print(2)"},
    ]
    assert [m["tool_call_id"] for m in msgs[1:]] == ["call_3_0", "call_3_1"]
    assert msgs[1]["content"] == "REPL output (block 0):\n```\n1\n```"
    assert msgs[2]["content"] == "REPL output (block 1):\n```\n2\n```"
    # no code: the observation stays a user message; ended episode: no tool messages
    assert turn_tool_messages("hm", "Write code.", episode_id="e", turn=0)[1]["role"] == "user"
    assert len(turn_tool_messages("```repl\nFINAL_VAR(m)\n```", None, episode_id="e", turn=0)) == 1


def test_malformed_tool_turn_dropped_and_counted_case_t1(smollm2_dir: Path, tmp_path: Path) -> None:
    """Case T1: a turn whose code and REPL output do not line up (a malformed tool call) is
    dropped with a counted reason in tool style, without a crash; examples that do not
    contain it are kept; plain style is unaffected."""
    run = tmp_path / "run"
    write_trajectory_run(run, 1, n_turns=3)
    good = EpisodeRef(run, next((run / "trajectories").glob("*.jsonl")).stem)
    recs = synthetic_episode(
        "synth-0",
        "t1",
        n_turns=3,
        observations=["REPL output (block 0):\n```\nok\n```", "garbled output, no header", None],
    )
    append_records(run / "trajectories" / "t1.jsonl", recs)
    bad = EpisodeRef(run, "t1")
    tools = ExportOptions(
        tokenizer=str(smollm2_dir), chat_template=str(QWEN_TEMPLATE), style="tools"
    )
    report = export_dataset([good, bad], tmp_path / "traj", tools)
    assert report.n_examples == 1 and report.dropped == {"malformed_tool_call": 1}
    item = report.dropped_items[0]
    assert item.episode_id == "t1" and "turn 1" in item.detail
    report = export_dataset([bad], tmp_path / "turn", tools.model_copy(update={"mode": "turn"}))
    assert report.n_examples == 1  # turn 0 kept; turns 1 and 2 contain the bad turn
    assert report.dropped == {"malformed_tool_call": 2}
    assert sorted(d.turn for d in report.dropped_items) == [1, 2]
    plain = ExportOptions(tokenizer=str(smollm2_dir))
    assert export_dataset([bad], tmp_path / "plain", plain).dropped == {}


def test_tool_style_export_structure(smollm2_dir: Path, tmp_path: Path) -> None:
    """Tool style: every assistant turn with code carries repl calls, REPL output comes back
    as tool messages, and the tools column holds the schema."""
    run = tmp_path / "run"
    write_trajectory_run(run, 1, n_turns=3, few_shot=False)
    ref = EpisodeRef(run, next((run / "trajectories").glob("*.jsonl")).stem)
    opts = ExportOptions(
        tokenizer=str(smollm2_dir), chat_template=str(QWEN_TEMPLATE), style="tools"
    )
    export_dataset([ref], tmp_path / "ds", opts)
    row = datasets.load_from_disk(str(tmp_path / "ds"))[0]
    msgs = load_messages(row)
    assert [m["role"] for m in msgs] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert all(m["tool_calls"][0]["function"]["name"] == "repl" for m in msgs[2::2])
    assert json.loads(row["tools"]) == [REPL_TOOL]
    assert row["messages"][3] == {"role": "tool", "content": msgs[3]["content"]}
