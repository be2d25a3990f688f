"""``rlmdistill filter --target sub`` (issue 43): sub-call selection over sub-call fields, and
the sub export's examples and masks, on a hand-built depth-2 run.

Episode ``e1`` (completed, memo ``test_sub_credit.MEMO``, graded) has four
sub-calls: 0 a depth-1 completion whose answer the alpha bullet quotes (C1 passed), 1 a
failed completion, 2 a subagent of two turns whose answer the beta bullet quotes (C2
failed), 3 a completion the subagent's code made (depth 2), not in the memo. Episode ``e2``
timed out: the episode rules drop it, so its sub-call is never judged.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
import typer
from test_sub_credit import MEMO, TASK
from typer.testing import CliRunner

from rlmdistill.filter.cli import register
from rlmdistill.filter.main import FilterConfig, run
from rlmdistill.filter.rules import FilterRuleError, FilterRules
from rlmdistill.filter.select import select_episodes
from rlmdistill.filter.sub_select import select_sub_calls
from rlmdistill.models.base import Message, Sampling, Usage
from rlmdistill.rooms.task import save_task
from rlmdistill.traces import layout
from rlmdistill.traces.rebuild import messages_sha256
from rlmdistill.traces.schema import (
    EpisodeEnd,
    EpisodeStart,
    EpisodeSummary,
    ModelSettings,
    RoomInfo,
    RunManifest,
    SubagentTurnRecord,
    SubCallRecord,
    TokenUsage,
    Verdict,
)
from rlmdistill.traces.scores import memo_sha256
from rlmdistill.traces.store import append_records
from rlmdistill.traces.sub_credit import SUB_DECISIONS, read_sub_decisions

T0 = dt.datetime(2026, 12, 5, tzinfo=dt.UTC)
A0 = "The alpha agreement lets either party terminate on ninety days written notice to the other."
A2 = "Beta may not assign the contract without prior written consent of the licensor."
A3 = "Gamma has an uncapped indemnity for third party intellectual property claims."
SUB_SYSTEM = "You are a subagent with a REPL."
SUB_TASK = "Answer: can beta assign the contract?"
R0 = "```repl\nprint(context[:200])\n```"
OBS0 = "REPL output:\nBeta may not assign ..."
R1 = "FINAL(" + A2 + ")"


def _call(episode: str, call_id: int, response: str | None, **kw: Any) -> SubCallRecord:
    return SubCallRecord(
        episode_id=episode,
        call_id=call_id,
        turn=0,
        block=0,
        batch_id=call_id,
        batch_size=1,
        prompt=f"Question {call_id} about the room.",
        response=response,
        **kw,
    )


def _subagent_turns(episode: str, call_id: int) -> list[SubagentTurnRecord]:
    initial = [Message(role="system", content=SUB_SYSTEM), Message(role="user", content=SUB_TASK)]
    after0 = [*initial, Message(role="assistant", content=R0), Message(role="user", content=OBS0)]
    common: dict[str, Any] = {
        "episode_id": episode,
        "call_id": call_id,
        "started_at": T0,
        "usage": Usage(),
        "latency_s": 0.1,
    }
    return [
        SubagentTurnRecord(
            turn=0,
            n_messages_before=2,
            prompt_sha256=messages_sha256(initial),
            completion=R0,
            observation=OBS0,
            initial_messages=initial,
            **common,
        ),
        SubagentTurnRecord(
            turn=1,
            n_messages_before=4,
            prompt_sha256=messages_sha256(after0),
            completion=R1,
            final_answer_source="final_call",
            **common,
        ),
    ]


def _episode(run_dir: Path, eid: str, room: RoomInfo, status: str, records: list[Any]) -> None:
    model = ModelSettings(spec="openai:m@http://x", model_id="m", sampling=Sampling())
    start = EpisodeStart(
        episode_id=eid,
        run_id="sub-run",
        sample_index=0,
        room=room,
        task_id=TASK.id,
        root=model,
        sub=model,
        depth=2,
        seed=0,
        prompt_version="v",
        limits={},
        initial_messages=[
            Message(role="system", content="root"),
            Message(role="user", content="go"),
        ],
    )
    end = EpisodeEnd(episode_id=eid, status=status, memo=MEMO)  # type: ignore[arg-type]
    append_records(layout.trajectory_path(run_dir, eid), [start, *records, end])


@pytest.fixture
def sub_run(tmp_path: Path) -> Path:
    """The run of the module docstring, with its room's task.json and reference verdicts."""
    room_dir = tmp_path / "rooms" / "r"
    room_dir.mkdir(parents=True)
    save_task(TASK, room_dir / layout.TASK)
    room = RoomInfo(room_id="r", room_hash="f" * 16, path=str(room_dir), n_documents=3, n_chars=9)
    run_dir = tmp_path / "runs" / "sub-run"
    (run_dir / layout.TRAJECTORIES).mkdir(parents=True)
    manifest = RunManifest(
        run_id="sub-run", created_at=T0, config={}, config_hash="0", versions={}, rooms=[room]
    )
    (run_dir / layout.RUN_MANIFEST).write_text(manifest.model_dump_json(), encoding="utf-8")
    _episode(
        run_dir,
        "e1",
        room,
        "completed",
        [
            _call("e1", 0, A0),
            _call("e1", 1, None, error="[retryable] down", error_kind="retryable"),
            *_subagent_turns("e1", 2),
            _call("e1", 2, A2, subagent=True),
            _call("e1", 3, A3, depth=2, parent_call_id=2, sub_turn=0, sub_block=0),
        ],
    )
    _episode(run_dir, "e2", room, "timeout", [_call("e2", 0, A0)])
    summaries = [
        EpisodeSummary(
            episode_id=eid,
            run_id="sub-run",
            sample_index=i,
            room=room,
            task_id=TASK.id,
            root_model="m",
            sub_model="m",
            depth=2,
            seed=i,
            status=status,  # type: ignore[arg-type]
            n_turns=1,
            n_sub_calls=n,
            tokens=TokenUsage(),
            wall_time_s=1.0,
            memo=MEMO,
            memo_chars=len(MEMO),
            memo_sha256=memo_sha256(MEMO) + ("" if eid == "e1" else "x"),
            started_at=T0,
            ended_at=T0,
        )
        for i, (eid, status, n) in enumerate([("e1", "completed", 4), ("e2", "timeout", 1)])
    ]
    append_records(run_dir / layout.EPISODES, summaries)
    verdicts = [
        Verdict(
            episode_id="e1",
            grader="reference",
            grader_version="ref-v4",
            criterion_id=c,
            verdict=label,  # type: ignore[arg-type]
            reason="",
            memo_sha256=memo_sha256(MEMO),
        )
        for c, label in [("C1", "PASS"), ("C2", "FAIL"), ("C3", "PASS"), ("C4", "PASS")]
    ]
    append_records(run_dir / layout.VERDICTS / "reference.jsonl", verdicts)
    return run_dir


def _kept(rules: FilterRules, run_dir: Path) -> dict[int, bool]:
    return {d.call_id: d.kept for d in select_sub_calls([run_dir], rules).decisions}


def test_sub_selection_judges_each_sub_call_by_its_fields(sub_run: Path) -> None:
    sub = select_sub_calls([sub_run], FilterRules(where=["not error"]))
    assert sub.episodes.n_kept == 1  # e2 timed out
    got = {
        d.call_id: (
            d.episode_id,
            d.call_depth,
            d.subagent,
            d.kept,
            d.reason,
            d.error,
            d.used_in_memo,
            d.supports_pass,
            d.supported_criteria,
        )
        for d in sub.decisions
    }
    assert got == {
        0: ("e1", 1, False, True, None, False, True, True, ["C1"]),
        1: ("e1", 1, False, False, "where", True, False, False, []),
        2: ("e1", 1, True, True, None, False, True, False, []),
        3: ("e1", 2, False, True, None, False, False, False, []),
    }
    assert sub.decisions[1].detail == "false: 'not error'"
    assert _kept(FilterRules(where=["used_in_memo and supports_pass"]), sub_run) == {
        0: True,
        1: False,
        2: False,
        3: False,
    }
    assert _kept(FilterRules(where=["subagent or call_depth == 2"]), sub_run) == {
        0: False,
        1: False,
        2: True,
        3: True,
    }
    # episode and sub-call fields together; subagent_turns counts the subagent's turns
    assert _kept(FilterRules(where=["subagent_turns == 2 and pass_rate == 0.75"]), sub_run) == {
        0: False,
        1: False,
        2: True,
        3: False,
    }
    assert sub.counts() == {
        "sub-calls of kept episodes": 4,
        "kept": 3,
        "kept: subagent trajectories": 1,
        "kept: depth-1 completions": 1,
        "kept: depth-2 completions": 1,
        "error": 1,
        "used_in_memo": 2,
        "supports_pass": 1,
    }


def test_root_target_refuses_sub_call_fields(sub_run: Path) -> None:
    rules = FilterRules(where=["used_in_memo"])  # valid for --target sub
    with pytest.raises(
        FilterRuleError, match=r"sub-call field\(s\) used_in_memo: only with --target sub"
    ):
        select_episodes([sub_run], rules)
    with pytest.raises(FilterRuleError, match="unknown name 'nonsense'"):
        FilterRules.from_dict({"where": ["nonsense > 1"]})
    # supports_pass needs a grader, as pass_rate does
    assert FilterRules(where=["supports_pass"]).needs_pass_rate()
    assert not FilterRules(where=["used_in_memo"]).needs_pass_rate()


def test_filter_stage_writes_sub_decisions(sub_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "datasets" / "sub"
    outcome = run(
        FilterConfig(runs=[sub_run], out=out, rules=FilterRules(where=["not error"]), target="sub")
    )
    assert outcome.sub_decisions == out / SUB_DECISIONS
    assert [(d.call_id, d.kept) for d in read_sub_decisions(out / SUB_DECISIONS)] == [
        (0, True),
        (1, False),
        (2, True),
        (3, True),
    ]
    assert "## Sub-calls (--target sub)" in (out / layout.FILTER_REPORT_MD).read_text()
    assert "| kept | 3 |" in outcome.card_section()
    outcome.require_kept()
    # root target on the same run: no sub files
    root = run(FilterConfig(runs=[sub_run], out=tmp_path / "root", rules=FilterRules()))
    assert root.sub is None and not (tmp_path / "root" / SUB_DECISIONS).exists()


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)

    @app.command("noop")
    def noop() -> None:  # a second command keeps typer in multi-command mode
        """Unused."""

    return app


def test_sub_export_masks_cover_exactly_the_answers(
    sub_run: Path, tmp_path: Path, smollm2_dir: Path
) -> None:
    """Every row's supervised tokens are exactly its answers' tokens, each followed by the
    template's end-of-turn token (ChatML ``<|im_end|>``), and nothing else."""
    import datasets
    from transformers import AutoTokenizer

    out = tmp_path / "datasets" / "sub"
    args = ["filter", str(sub_run), "--out", str(out), "--target", "sub"]
    args += ["--where", "not error", "--tokenizer", str(smollm2_dir)]
    result = CliRunner().invoke(_app(), args)
    assert result.exit_code == 0, result.output
    assert "kept 3 of 4 sub-calls of the kept episodes" in result.output
    ds = datasets.load_from_disk(str(out))
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    end = tok.convert_tokens_to_ids("<|im_end|>")
    rows = {r["call_id"]: r for r in ds}
    assert sorted(rows) == [0, 2, 3]
    answers = {0: [A0], 2: [R0, R1], 3: [A3]}
    for call_id, row in rows.items():
        expected: list[int] = []
        for answer in answers[call_id]:
            expected += tok(answer, add_special_tokens=False)["input_ids"] + [end]
        ids, mask = row["input_ids"], row["assistant_masks"]
        assert [i for i, m in zip(ids, mask, strict=True) if m] == expected
        runs = sum(1 for k, m in enumerate(mask) if m and (k == 0 or not mask[k - 1]))
        assert runs == len(answers[call_id])  # one contiguous run per answer
        assert row["n_supervised"] == len(expected) and row["turn"] == -1
        roles = [m["role"] for m in json.loads(row["messages_json"])]
        if call_id == 2:
            assert roles == ["system", "user", "assistant", "user", "assistant"]
            assert row["message_weights"] == [0, 0, 1, 0, 1]
        else:
            assert roles == ["user", "assistant"] and row["message_weights"] == [0, 1]
    assert (rows[0]["used_in_memo"], rows[0]["supports_pass"], rows[0]["call_depth"]) == (
        True,
        True,
        1,
    )
    assert (rows[2]["subagent"], rows[2]["supports_pass"], rows[3]["call_depth"]) == (
        True,
        False,
        2,
    )
    assert rows[0]["pass_rate"] == 0.75  # C1, C3, C4 of 4 criteria passed
    manifest = json.loads((out / layout.EXPORT_MANIFEST).read_text())
    assert (manifest["mode"], manifest["n_examples"], manifest["default_system"]) == (
        "sub",
        3,
        "allow",
    )
    assert manifest["options"]["target"] == "sub"
    assert "# rlmdistill SFT dataset: sub-calls" in (out / "README.md").read_text()


def test_sub_export_refuses_turn_mode(sub_run: Path, tmp_path: Path, smollm2_dir: Path) -> None:
    args = ["filter", str(sub_run), "--out", str(tmp_path / "o"), "--target", "sub"]
    args += ["--tokenizer", str(smollm2_dir), "--mode", "turn"]
    result = CliRunner().invoke(_app(), args)
    assert result.exit_code == 2
    assert "not supported: mode='turn'" in result.output
    bad = CliRunner().invoke(
        _app(),
        ["filter", str(sub_run), "--out", str(tmp_path / "p"), "--target", "x", "--report-only"],
    )
    assert bad.exit_code == 2 and "--target must be root or sub" in bad.output


def test_sub_call_fields_match_the_table_and_the_docs(sub_run: Path) -> None:
    from rlmdistill.filter.fields import EPISODE_FIELDS, SUB_CALL_FIELDS, sub_call_fields
    from rlmdistill.traces.runs import load_trajectory
    from rlmdistill.traces.sub_credit import sub_call_credit

    traj = load_trajectory(sub_run, "e1")
    credit = sub_call_credit(traj.sub_calls, MEMO, None, TASK)
    values = sub_call_fields(traj.sub_calls[2], credit[2], 2)
    assert set(values) == set(SUB_CALL_FIELDS)
    assert not set(SUB_CALL_FIELDS) & set(EPISODE_FIELDS)
    assert values == {
        "call_id": 2,
        "call_depth": 1,
        "subagent": True,
        "error": False,
        "error_kind": None,
        "prompt_chars": len("Question 2 about the room."),
        "answer_chars": len(A2),
        "call_truncated": False,
        "subagent_turns": 2,
        "used_in_memo": True,
        "memo_share": 1.0,
        "supports_pass": None,
    }
    text = (Path(__file__).resolve().parents[1] / "docs" / "filter.md").read_text()
    assert [n for n in SUB_CALL_FIELDS if f"`{n}`" not in text] == []
