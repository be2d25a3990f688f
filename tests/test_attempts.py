"""Fail fast (preflight), failed attempts, exit 3, re-runs, max_attempts, old runs resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rlmdistill.collect.attempts import EXIT_INFRASTRUCTURE, UnfinishedEpisodes
from rlmdistill.collect.config import OPERATIONAL_FIELDS, CollectConfig
from rlmdistill.collect.main import check_finished
from rlmdistill.collect.runner import collect
from rlmdistill.models.openai_client import OpenAIChatClient
from rlmdistill.models.preflight import ServerUnavailableError, preflight
from rlmdistill.rooms import DataRoom
from rlmdistill.testing.fake_openai import FakeOpenAIServer, FakeReply, ScriptedHandler
from rlmdistill.testing.rooms import write_clause_room
from rlmdistill.traces.schema import AttemptRecord, EpisodeSummary
from rlmdistill.traces.store import parse_records

OLD_RUN = Path(__file__).parent / "data" / "run_b25d9e7"
"""run.json + episodes.jsonl written by the code before attempts existed (commit b25d9e7,
2 episodes on ``write_clause_room(n_documents=3, repeats=5)``, specs at 127.0.0.1:9)."""

DEAD = "http://127.0.0.1:9/v1"  # the discard port: nothing listens, connections are refused


class Switch:
    """Root/sub handler whose server can 'lose' the model (HTTP 404 on chat, as a server
    restarted without it) or be healthy; counts chat requests."""

    def __init__(self) -> None:
        self.inner = ScriptedHandler(["FINAL(memo)"], lambda p: "ok")
        self.models = self.inner.models
        self.down = False
        self.calls = 0

    def __call__(self, request: dict[str, Any]) -> FakeReply | str:
        self.calls += 1
        if self.down:
            return FakeReply.error(404, f"The model `{request.get('model')}` does not exist.")
        return self.inner(request)


@pytest.fixture()
def room(tmp_path: Path) -> Path:
    return write_clause_room(tmp_path / "room", n_documents=3, repeats=5)


def collect_argv(room: Path, url: str, out: Path, model: str = "root") -> list[str]:
    return [
        "collect", "--room", str(room), "--root", f"openai:{model}@{url}",
        "--sub", f"openai:sub@{url}", "--episodes", "3", "--concurrency", "1",
        "--out", str(out), "--no-progress", "--prefill", "",
    ]  # fmt: skip


def run_main(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> int:
    from rlmdistill.cli import main

    monkeypatch.setattr("sys.argv", ["rlmdistill", *argv])
    try:
        main()
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_unreachable_server_exits_2_names_it_and_writes_nothing(
    room: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "run"
    code = run_main(monkeypatch, collect_argv(room, DEAD, out, model="nope"))
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2
    assert "server http://127.0.0.1:9/v1 is not reachable" in err and "--root" in err
    assert not out.exists()  # no run.json, no episodes.jsonl, not even the folder


def test_wrong_model_on_a_live_server_lists_the_served_ids_then_the_fix_runs(
    room: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "run"
    with FakeOpenAIServer(Switch()) as server:
        code = run_main(monkeypatch, collect_argv(room, server.base_url, out, model="rooot"))
        err = " ".join(capsys.readouterr().err.split())
        assert code == 2
        assert f"server {server.base_url} does not serve model 'rooot'" in err
        assert "it serves: root, sub" in err
        assert not out.exists() and server.requests == []  # no chat request was sent
        assert run_main(monkeypatch, collect_argv(room, server.base_url, out)) == 0
    statuses = [s.status for s in parse_records(out / "episodes.jsonl", EpisodeSummary)]
    assert statuses == ["completed"] * 3


def test_outage_mid_run_exits_3_then_the_same_command_finishes(
    room: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The server loses the model after the preflight: the first episode is a failed attempt,
    the other two are not started, collect exits 3; once the server is back the same command
    finishes every episode exactly once."""
    out = tmp_path / "run"
    handler = Switch()
    with FakeOpenAIServer(handler) as server:
        handler.down = True
        code = run_main(monkeypatch, collect_argv(room, server.base_url, out))
        err = " ".join(capsys.readouterr().err.split())
        assert code == EXIT_INFRASTRUCTURE
        assert str(out) in err and "root model_not_found" in err and "2 not started" in err
        # the sampling probe's root and sub requests (a 404 there is left to the run), then
        # one root turn: a 404 is not retried in the request; nothing else started
        assert handler.calls == 2 + 1
        assert not (out / "episodes.jsonl").exists()
        [attempt] = parse_records(out / "attempts.jsonl", AttemptRecord)
        assert (attempt.attempt, attempt.final, attempt.cause, attempt.who) == (
            1, False, "model_not_found", "root",
        )  # fmt: skip
        from rlmdistill.analysis.summary import summarize_run

        summary = summarize_run(out)
        assert summary.attempts is not None
        assert (summary.attempts.n_unfinished, summary.attempts.n_final) == (1, 0)
        assert summary.attempts.by_cause == {
            f"root model_not_found (openai:root@{server.base_url})": 1
        }
        handler.down = False
        assert run_main(monkeypatch, collect_argv(room, server.base_url, out)) == 0
        res = CliRunner().invoke(__import__("rlmdistill.cli").cli.app, ["show", str(out)])
    ids = [s.episode_id for s in parse_records(out / "episodes.jsonl", EpisodeSummary)]
    assert len(ids) == 3 == len(set(ids))
    assert attempt.episode_id in ids
    assert "failed attempts" in res.output and "root model_not_found" in res.output


def fast(server: FakeOpenAIServer, model: str) -> OpenAIChatClient:
    return OpenAIChatClient(model, server.base_url, max_retries=0, timeout_s=5)


def test_max_attempts_finishes_an_episode_with_its_status(room: Path, tmp_path: Path) -> None:
    """Root always 404: each run records one failed attempt and starts nothing else; the
    second attempt of an episode (max_attempts=2) is final: it is finished as model_error."""
    out = tmp_path / "run"
    handler = Switch()
    handler.down = True
    runs = 0
    with FakeOpenAIServer(handler) as server:
        cfg = CollectConfig(
            rooms=[str(room)],
            root=f"openai:root@{server.base_url}",
            sub=f"openai:sub@{server.base_url}",
            episodes=2,
            concurrency=1,
            max_attempts=2,
        )
        while True:
            runs += 1
            res = collect(cfg, out, fast(server, "root"), fast(server, "sub"), progress=False)
            if not res.unfinished and not res.not_started and not res.failed_attempts:
                break
            if res.unfinished or res.not_started:
                with pytest.raises(UnfinishedEpisodes):
                    check_finished(res)
    # run 1: A attempt 1 (B not started); run 2: A attempt 2, final (B not started);
    # run 3: B attempt 1; run 4: B attempt 2, final; run 5: nothing left
    assert runs == 5 and handler.calls == 4
    attempts = list(parse_records(out / "attempts.jsonl", AttemptRecord))
    assert [(a.attempt, a.final) for a in attempts] == [(1, False), (2, True)] * 2
    summaries = list(parse_records(out / "episodes.jsonl", EpisodeSummary))
    assert [s.status for s in summaries] == ["model_error", "model_error"]
    assert {s.episode_id for s in summaries} == {a.episode_id for a in attempts}


def test_operational_fields_stay_out_of_the_episode_id() -> None:
    base = CollectConfig(rooms=[], root="local:x", sub="local:x")
    assert set(CollectConfig.model_fields) >= OPERATIONAL_FIELDS
    changed = base.model_copy(
        update={"max_attempts": 9, "concurrency": 32, "max_usd": 1.0, "requests_per_minute": 5.0}
    )
    assert changed.fingerprint() == base.fingerprint()
    assert base.model_copy(update={"seed": 1}).fingerprint() != base.fingerprint()


def test_a_run_json_written_before_attempts_existed_still_resumes(
    room: Path, tmp_path: Path
) -> None:
    old = json.loads((OLD_RUN / "run.json").read_text())
    assert "max_attempts" not in old["config"]
    assert DataRoom.load(room).room_hash == old["rooms"][0]["room_hash"]  # the same room
    run = tmp_path / "run"
    shutil.copytree(OLD_RUN, run)
    cfg = CollectConfig.model_validate(
        {**old["config"], "rooms": [str(room)], "max_attempts": 5, "concurrency": 2}
    )
    never_called = OpenAIChatClient("root", DEAD)  # every episode is done: no request
    res = collect(cfg, run, never_called, never_called, progress=False)
    assert (res.skipped, res.summaries, res.unfinished) == (2, [], ())
    assert (run / "episodes.jsonl").read_bytes() == (OLD_RUN / "episodes.jsonl").read_bytes()


def test_preflight_skips_local_specs_and_names_the_judge(tmp_path: Path) -> None:
    preflight({"--root": "local:anything", "--sub": None})  # nothing to reach
    with pytest.raises(ServerUnavailableError, match=r"needed by judge openai:j@"):
        preflight({"judge": f"openai:j@{DEAD}"})


def test_llm_judge_preflight_writes_nothing(tmp_path: Path) -> None:
    from rlmdistill.judge.main import JudgeConfig
    from rlmdistill.judge.main import run as judge_stage

    run = tmp_path / "run"
    shutil.copytree(OLD_RUN, run)
    with pytest.raises(ServerUnavailableError, match=r"127\.0\.0\.1:9"):
        judge_stage(JudgeConfig(run_dir=run, judge=f"openai:judge@{DEAD}"))
    assert not (run / "verdicts").exists()


def test_loop_stops_at_the_run_a_server_failure_left_unfinished(
    tmp_path: Path, tiny_llama_dir: Path
) -> None:
    """The served root loses its model after the preflight: the loop stops in its first
    collection (runs/eval-base), naming that run and the cause, before any later stage."""
    import yaml
    from test_loop import _experiment

    from rlmdistill.loop.config import load_experiment
    from rlmdistill.loop.run import run_loop

    handler = Switch()
    with FakeOpenAIServer(handler) as server:
        path = _experiment(tmp_path, server.base_url, tiny_llama_dir)
        data = yaml.safe_load(path.read_text())
        data.pop("train_root")
        data["serving"] = {"base_url": server.base_url, "model": "root"}
        path.write_text(yaml.safe_dump(data), encoding="utf-8")
        cfg = load_experiment(path)
        handler.down = True
        with pytest.raises(UnfinishedEpisodes) as info:
            run_loop(cfg, progress=False)
    assert "runs/eval-base" in str(info.value) and "root model_not_found" in str(info.value)
    assert not (cfg.workspace / "runs" / "r1-train").exists()
