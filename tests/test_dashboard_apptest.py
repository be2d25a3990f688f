"""Dashboard pages under ``streamlit.testing.v1.AppTest``, on a workspace whose runs are made at
test time by the real collector against the loopback fake server (fixture ``collected_run``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

import rlmdistill.dashboard.app as app_module
from rlmdistill.dashboard.data import ENV_WORKSPACE, episode_verdicts, room_tasks, run_table
from rlmdistill.testing.scored_runs import (
    write_task_problem_run,
)
from rlmdistill.traces.runs import load_summaries, load_verdicts

APP = str(Path(app_module.__file__))


@pytest.fixture
def workspace(tmp_path: Path, collected_run: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workspace holding a copy of the collected run as ``runs/base``."""
    shutil.copytree(collected_run, tmp_path / "runs" / "base")
    monkeypatch.setenv(ENV_WORKSPACE, str(tmp_path))
    return tmp_path


def _open(page: str, **params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=30)
    at.query_params["page"] = page
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_runs_page_lists_run_with_episode_count(workspace: Path) -> None:
    at = _open("runs")
    df = at.dataframe[0].value
    assert list(df["run"]) == ["base"]
    assert df["episodes"].iloc[0] == "2/2"
    assert df["status"].iloc[0] == "completed 2"


def test_run_table_scores_rooms_with_their_task_and_rereads_an_edited_task(
    tmp_path: Path,
) -> None:
    run = write_task_problem_run(tmp_path / "runs" / "r", n_criteria=4)
    rooms = tmp_path / "runs" / "rooms"
    changed = {**json.loads((rooms / "changed" / "task.json").read_text()), "id": "task-changed"}
    rates = run_table(run).set_index("episode_id")["pass_rate:reference"]
    assert rates["e-ok"] == 0.25
    assert all(pd.isna(rates[e]) for e in ("e-gone", "e-broken", "e-changed"))
    assert sorted(t.id for t in room_tasks(run).values()) == ["task-ok"]
    # the room's task is put back: the cached table is stale by its stamp and re-read
    (rooms / "changed" / "task.json").write_text(json.dumps(changed), encoding="utf-8")
    assert sorted(t.id for t in room_tasks(run).values()) == ["task-changed", "task-ok"]
    rates = run_table(run).set_index("episode_id")["pass_rate:reference"]
    assert (rates["e-ok"], rates["e-changed"]) == (0.25, 0.25)


def test_trace_verdicts_use_the_task_of_the_episodes_room_only_when_it_ran_it(
    tmp_path: Path,
) -> None:
    run = write_task_problem_run(tmp_path / "runs" / "r", n_criteria=3)
    ok = episode_verdicts(run, "e-ok")
    assert list(ok["title"]) == ["criterion 0", "criterion 1", "criterion 2"]
    assert list(ok["verdict"]) == ["PASS", "FAIL", "FAIL"]
    for eid in ("e-changed", "e-gone"):  # another task now / no task: no titles from it
        rows = episode_verdicts(run, eid)
        assert list(rows["criterion_id"]) == ["c0", "c1", "c2"]
        assert list(rows["title"]) == ["", "", ""]


ROOT_D2 = [
    "```repl\ndocs = list_documents()[:2]\n"
    "answers = llm_query_batched(['Find the assignment clause.\\n' + read(d['id'], 0, 3000)"
    " for d in docs])\nprint(answers)\n```",
    "```repl\nmemo = '\\n'.join(d['id'] + ': ' + a for d, a in zip(docs, answers))\n"
    "FINAL_VAR(memo)\n```",
]
SUBAGENT = [
    "```repl\nprint(len(context))\nq = llm_query('Summarise: ' + context[:200])\n```",
    "```repl\nFINAL('subagent saw ' + str(len(context)) + ' chars; ' + q)\n```",
]


def _depth2_handler(req: dict):  # type: ignore[no-untyped-def]
    from rlmdistill.harness.prompts import SUBAGENT_SYSTEM_PROMPT
    from rlmdistill.testing.fake_openai import conversation_turn

    msgs = req["messages"]
    if req["model"] == "root":
        return ROOT_D2[min(conversation_turn(req)[1], 1)]
    if msgs[0]["role"] == "system" and msgs[0]["content"] == SUBAGENT_SYSTEM_PROMPT:
        return SUBAGENT[min(conversation_turn(req)[1], 1)]
    return "leaf answer"


@pytest.fixture(scope="module")
def depth2_run(tmp_path_factory: pytest.TempPathFactory, cuad_room3: Path) -> Path:
    """A second real run (depth 2, 2 episodes, same room) made by the collector against the
    fake server and graded by the reference grader."""
    from rlmdistill.collect.config import CollectConfig, EpisodeLimits
    from rlmdistill.collect.runner import collect
    from rlmdistill.judge.reference import ReferenceGrader
    from rlmdistill.judge.run import judge_run
    from rlmdistill.models.openai_client import OpenAIChatClient
    from rlmdistill.testing.fake_openai import FakeOpenAIServer

    out = tmp_path_factory.mktemp("runs") / "deep"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RLMDISTILL_ROOM_CACHE", str(tmp_path_factory.getbasetemp() / "room-cache"))
        with FakeOpenAIServer(_depth2_handler) as server:
            mk = lambda m: OpenAIChatClient(m, server.base_url, api_key="x", max_retries=0)  # noqa: E731
            cfg = CollectConfig(
                rooms=[str(cuad_room3)],
                root=f"openai:root@{server.base_url}",
                sub=f"openai:sub@{server.base_url}",
                episodes=2,
                depth=2,
                limits=EpisodeLimits(max_turns=3),
            )
            collect(cfg, out, mk("root"), mk("sub"), progress=False)
        judge_run(out, ReferenceGrader())
    return out


@pytest.fixture
def workspace2(workspace: Path, depth2_run: Path) -> Path:
    """The workspace with a second run, ``runs/deep`` (depth 2)."""
    shutil.copytree(depth2_run, workspace / "runs" / "deep")
    return workspace


def _texts(at: AppTest) -> str:
    parts = (
        [m.value for m in at.markdown] + [c.value for c in at.code] + [c.value for c in at.caption]
    )
    return "\n".join(str(p) for p in parts)


def test_trace_viewer_shows_turns_subcalls_verdicts_and_coverage(workspace: Path) -> None:
    run = workspace / "runs" / "base"
    s = load_summaries(run)[1]
    at = _open("trace", run="base", episode=s.episode_id)
    assert at.selectbox(key="trace_episode:base").value == s.episode_id
    text = _texts(at)
    assert "#### Turn 0" in text and "#### Turn 1" in text
    assert "FINAL_VAR(memo)" in text  # the second root completion
    # sub-calls are grouped under the block that made them: 3 in turn 0 block 0
    assert any(e.label == "3 sub-call(s) made by block 0" for e in at.expander)
    # every verdict's reason is shown next to its criterion
    verdicts = [v for v in load_verdicts(run, "reference") if v.episode_id == s.episode_id]
    assert verdicts
    for v in verdicts:
        assert v.reason in text and v.criterion_id in text
    # the coverage map holds the summary's per-document figures
    docs = next(d.value for d in at.dataframe if "document" in d.value.columns)
    assert dict(zip(docs["document"], docs["coverage"], strict=True)) == s.coverage.per_document
    assert [m.value for m in at.metric if m.label == "sub-calls"] == ["3"]


def test_trace_search_finds_message_text_across_the_run(workspace: Path) -> None:
    at = _open("trace", run="base")
    at.text_input(key="search:base").set_value("assignment clause").run()
    assert not at.exception
    hits = at.dataframe[0].value
    # both episodes' turn-0 completions and their 3 sub-call prompts each contain the phrase
    assert set(hits["where"]) >= {"completion", "sub_call[0].prompt"}
    assert hits["episode_id"].nunique() == 2
    assert (hits["where"] == "completion").sum() == 2


def test_compare_page_shift_table_over_two_runs(workspace2: Path) -> None:
    """The live table is the report's comparison (means of room means; one room here)."""
    from rlmdistill.dashboard.tables import COMPARISON_COLUMNS

    at = _open("compare")
    assert at.multiselect(key="compare_runs").value == ["base", "deep"]
    table = next(
        d.value for d in at.dataframe if list(d.value.columns) == COMPARISON_COLUMNS
    ).set_index("metric")
    assert set(table["comparison"]) == {"deep vs base"}
    assert table.loc["n_sub_calls", "A"] == 3.0
    assert table.loc["n_sub_calls", "B"] == 4.0
    assert table.loc["n_sub_calls", "B - A"] == 1.0
    assert table.loc["n_sub_calls", "rooms paired"] == 1
    assert table.loc["has_memo", "episodes A"] == 2


def test_ablations_page_depth_table(workspace2: Path) -> None:
    """Depth 1 (base) vs depth 2 (deep) on their one room, from the report's section: the
    room means are the runs' mean pass rates; no grid (one root and sub at each depth)."""
    from rlmdistill.dashboard.tables import DEPTH_COLUMNS, DEPTH_SUMMARY_COLUMNS

    at = _open("ablations")
    dt = next(d.value for d in at.dataframe if list(d.value.columns) == DEPTH_COLUMNS)
    assert list(dt["room"]) == ["cuad3"]
    base, deep = (run_table(workspace2 / "runs" / n) for n in ("base", "deep"))
    want = (base["pass_rate:reference"].mean(), deep["pass_rate:reference"].mean())
    assert (dt["depth 1"].iloc[0], dt["depth 2"].iloc[0]) == pytest.approx(want)
    assert dt["change"].iloc[0] == pytest.approx(want[1] - want[0])
    summary = next(d.value for d in at.dataframe if list(d.value.columns) == DEPTH_SUMMARY_COLUMNS)
    assert (summary["depth 1 episodes"].iloc[0], summary["depth 2 episodes"].iloc[0]) == (2, 2)
    assert any("No grid" in c.value for c in at.caption)


def _sft_json(status: str = "completed", **fields: object) -> str:
    """A complete ``sft.json`` (every field of rlmdistill.traces.artefacts.SFTManifest)."""
    import json

    data: dict[str, object] = {
        "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:01:00Z",
        "status": status, "config": {"base": "smollm2-135m"}, "base_path": "/models/x",
        "dataset_path": "d", "export_sha256": "0" * 64, "tokenizer_check": {}, "n_rows": 3,
        "n_examples": 3, "dropped": {}, "n_tokens": 30, "n_supervised": 10, "device": "cpu",
        "precision": "float32", "world_size": 1, "seed": 0, "versions": {},
        "git_commit": None, "git_dirty": None,
    }  # fmt: skip
    return json.dumps({**data, **fields})


def _write_adapter(ws: Path, name: str, losses: list[float], status: str = "completed") -> Path:
    """An adapter folder shaped as the SFT contract says: ``sft.json`` + ``train_log.jsonl``."""
    import json

    folder = ws / "adapters" / name
    folder.mkdir(parents=True)
    (folder / "sft.json").write_text(_sft_json(status))
    lines = [
        {
            "step": i + 1,
            "epoch": (i + 1) / len(losses),
            "loss": loss,
            "learning_rate": 1e-4,
            "grad_norm": None,
            "tokens_seen": 100 * (i + 1),
            "tokens_per_s": 50.0,
            "time": "2026-01-01T00:00:00Z",
        }
        for i, loss in enumerate(losses)
    ]
    (folder / "train_log.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return folder


def test_sft_page_lists_adapters_with_last_loss(workspace: Path) -> None:
    _write_adapter(workspace, "a1", [2.5, 2.0, 1.25])
    at = _open("sft")
    table = next(d.value for d in at.dataframe if "adapter" in d.value.columns)
    row = table.set_index("adapter").loc["a1"]
    assert row["status"] == "completed" and row["log steps"] == 3 and row["last loss"] == 1.25
    assert row["base"] == "smollm2-135m"
    metrics = {m.label: m.value for m in at.metric}
    assert (
        metrics["step"] == "3" and metrics["loss"] == "1.2500" and metrics["tokens seen"] == "300"
    )


@pytest.mark.slow  # the job imports torch/transformers in a subprocess: ~15-20 s on 2 cores
def test_sft_page_starts_a_cli_job_and_shows_its_failure(
    workspace: Path, smollm2_dir: Path
) -> None:
    """The job is a real ``rlmdistill sft`` subprocess; on a dataset folder without an export
    it must fail with a clear message, and the page must show the state and the log. The base
    model is pulled first (``smollm2_dir``): the job's failure must be the dataset's, whatever
    ran before."""
    import time

    from rlmdistill.dashboard import jobs

    (workspace / "datasets" / "empty").mkdir(parents=True)
    at = _open("sft")
    at.text_input(key="sft_name").set_value("try1")
    at.button[0].click().run()
    assert not at.exception
    (job,) = jobs.list_jobs(workspace)
    assert job.out_dir == "adapters/try1"
    assert job.command[1:3] == ["-m", "rlmdistill.sft"]
    deadline = time.monotonic() + 60
    while jobs.job_state(job)[0] == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    state, rc = jobs.job_state(job)
    assert (state, rc) == ("failed", 2), jobs.read_log(job)
    assert "empty" in jobs.read_log(job)
    at.run()
    assert any("`failed` (exit status 2)" in m.value for m in at.markdown)


def test_filter_preview_counts_kept_and_dropped_by_reason(workspace: Path) -> None:
    """The two episodes of the collected run wrote the same memo: the default rules keep one
    and drop the other as a duplicate; turning de-duplication off keeps both."""
    from rlmdistill.filter import FilterRules, select_episodes

    run = workspace / "runs" / "base"
    want = select_episodes([run], FilterRules())
    assert (want.n_kept, len(want.decisions)) == (1, 2)
    at = _open("filter")
    metrics = {m.label: m.value for m in at.metric}
    assert (metrics["episodes"], metrics["kept"], metrics["dropped"]) == ("2", "1", "1")
    reasons = at.dataframe[0].value
    assert dict(zip(reasons["reason"], reasons["episodes"], strict=True)) == {"duplicate": 1}
    at.checkbox(key="f_dedup").uncheck().run()
    assert not at.exception
    assert {m.label: m.value for m in at.metric}["kept"] == "2"
    # an absolute pass-rate threshold above every episode's pass rate drops both by pass_rate
    at.checkbox(key="f_min_pr_on").check().run()
    at.slider(key="f_min_pr").set_value(1.0).run()
    pr = [d.pass_rate for d in want.decisions]
    assert all(p is not None and p < 1.0 for p in pr), pr
    reasons = at.dataframe[0].value
    assert dict(zip(reasons["reason"], reasons["episodes"], strict=True)) == {"pass_rate": 2}


def test_filter_bad_expression_is_an_error_message(workspace: Path) -> None:
    at = _open("filter")
    at.text_area(key="f_where").set_value("no_such_field > 1").run()
    assert not at.exception
    assert at.error and "no_such_field" in at.error[0].value


def test_filter_export_writes_the_same_dataset_as_the_cli_command(
    workspace: Path, smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    import datasets
    from typer.testing import CliRunner

    from rlmdistill.cli import app

    at = _open("filter")
    at.text_input(key="f_name").set_value("ds1")
    at.text_input(key="f_tok").set_value(str(smollm2_dir))
    at.number_input(key="f_maxlen").set_value(4096)
    at.button[0].click().run()
    assert not at.exception
    assert not at.error, at.error[0].value
    assert at.success and "1 of 2 episodes kept" in at.success[0].value
    got = datasets.load_from_disk(str(workspace / "datasets" / "ds1"))
    ref_dir = tmp_path_factory.mktemp("ref") / "ds"
    args = ["filter", str(workspace / "runs" / "base"), "--out", str(ref_dir)]
    args += ["--tokenizer", str(smollm2_dir), "--max-length", "4096"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    ref = datasets.load_from_disk(str(ref_dir))
    assert len(got) == len(ref) == 1
    assert got["input_ids"] == ref["input_ids"]
    assert got["assistant_masks"] == ref["assistant_masks"]
    assert got["episode_id"] == ref["episode_id"]


def test_cli_register_runs_streamlit_on_the_app_with_the_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import typer
    from typer.testing import CliRunner

    from rlmdistill.dashboard import cli

    calls: list[tuple[list[str], dict[str, str]]] = []
    monkeypatch.setattr(cli, "run_child", lambda cmd, env: calls.append((cmd, env)) or 0)
    app = typer.Typer()
    cli.register(app)
    app.command("noop")(lambda: None)  # keep `dashboard` a named sub-command
    res = CliRunner().invoke(app, ["dashboard", "--workspace", str(tmp_path), "--port", "8599"])
    assert res.exit_code == 0, res.output
    ((cmd, env),) = calls
    assert cmd[1:5] == ["-m", "streamlit", "run", str(cli.APP_PATH)]
    assert cmd[cmd.index("--server.port") + 1] == "8599"
    assert cmd[-3:] == ["--", "--workspace", str(tmp_path.resolve())]
    assert env[ENV_WORKSPACE] == str(tmp_path.resolve())
    res = CliRunner().invoke(app, ["dashboard", "--workspace", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "is not a folder" in res.output


def test_workspace_from_script_args_beats_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlmdistill.dashboard.data import workspace_from_env

    monkeypatch.setenv(ENV_WORKSPACE, "/somewhere/else")
    assert workspace_from_env(["--workspace", str(tmp_path)]).runs == tmp_path.resolve() / "runs"
    assert workspace_from_env([]).root == Path("/somewhere/else")


def test_compare_builds_analysis_report_and_shows_its_shift_table(workspace2: Path) -> None:
    """The Build button writes the report with the analysis stage's ``run``; the
    table shown is that report's comparison rows (means with intervals, paired differences)."""
    from rlmdistill.analysis.compare import Report

    at = _open("compare")
    at.text_input(key="compare_report_name").set_value("r1")
    at.button[0].click().run()
    assert not at.exception
    assert not at.error, at.error[0].value
    report = Report.model_validate_json((workspace2 / "reports" / "r1" / "report.json").read_text())
    assert [a.label for a in report.arms][:2] == ["base", "deep"]
    # the saved report's table comes after the live one (which reads no trajectories)
    shown = [d.value for d in at.dataframe if "B - A" in d.value.columns][-1]
    rows = report.comparisons[0].rows
    assert list(shown["metric"]) == [r.metric for r in rows]
    assert set(shown["comparison"]) == {"deep vs base"}
    assert list(shown["episodes A"]) == [r.n_episodes_a for r in rows]
    # the figures of the report are shown as images
    assert len(at.get("image")) == len(list((workspace2 / "reports" / "r1").rglob("*.png"))) > 0


def test_ablations_page_shows_depth_ablation_of_a_report(workspace2: Path) -> None:
    from rlmdistill.analysis.main import ReportConfig, run

    report = run(
        ReportConfig(
            runs=[workspace2 / "runs" / "base", workspace2 / "runs" / "deep"],
            out=workspace2 / "reports" / "r2",
        )
    )
    assert report.depth_ablations, "the analysis stage pairs a depth-1 and a depth-2 arm"
    at = _open("ablations")
    d = report.depth_ablations[0]
    assert any(f"**{d.depth2_arm} vs {d.depth1_arm}**" in m.value for m in at.markdown)
    frames = [x.value for x in at.dataframe]
    depth = next(f for f in frames if {"depth 1 arm", "room"} <= set(f.columns))
    assert list(depth["room"]) == sorted(d.depth1_room_means)


def test_runs_page_shows_lineage_from_the_loop_file(workspace: Path) -> None:
    from rlmdistill.traces.lineage import LineageRecord, record

    record(
        workspace,
        LineageRecord(
            artefact="adapters/a1",
            kind="adapter",
            stage="sft",
            inputs=["datasets/d0"],
            fingerprint="f1",
        ),
    )
    record(
        workspace,
        LineageRecord(
            artefact="runs/base",
            kind="run",
            stage="collect-eval",
            inputs=["adapters/a1"],
            fingerprint="f2",
        ),
    )
    record(
        workspace,
        LineageRecord(
            artefact="datasets/d1",
            kind="dataset",
            stage="filter",
            inputs=["runs/base"],
            fingerprint="f3",
        ),
    )
    at = _open("runs")
    line = next(m.value for m in at.markdown if m.value.startswith("**Lineage**"))
    assert line == "**Lineage** — made from: `adapters/a1` · used by: `datasets/d1`"
    tree = next(c.value for c in at.code if "datasets/d1" in c.value)
    assert "<- runs/base" in tree and "<- adapters/a1" in tree
