"""A run as an Inspect eval log: written by inspect_ai's writer, read back by its reader with
the same messages and scores; ``inspect view`` serves it headless."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

pytest.importorskip("inspect_ai")

from inspect_ai.log import read_eval_log, resolve_sample_attachments

from rlmdistill.export.inspect_log import export_inspect
from rlmdistill.export.interop_cli import register
from rlmdistill.traces.layout import trajectory_path
from rlmdistill.traces.rebuild import assistant_message, root_requests
from rlmdistill.traces.replies import split_fences
from rlmdistill.traces.runs import load_summaries, load_trajectory
from rlmdistill.traces.scores import run_scores


def _seen(run: Path, episode_id: str) -> list[tuple[str, str]]:
    """(role, content) of the whole conversation the root saw: its last request + last reply."""
    traj = load_trajectory(run, episode_id)
    msgs = [(m.role, m.content) for m in root_requests(traj.start, traj.turns)[-1]]
    return [*msgs, ("assistant", assistant_message(traj.turns[-1]).content)]


def _mixed_verdicts(run: Path) -> dict[str, list[str]]:
    """Rewrite the reference verdicts of ``run``: criterion ``i`` of episode ``k`` gets
    PASS, FAIL or UNGRADABLE by ``(i + k) % 3``, the last criterion none (MISSING); returns
    the labels per episode in rubric order."""
    path = run / "verdicts" / "reference.jsonl"
    records = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    order = {s.episode_id: k for k, s in enumerate(load_summaries(run))}
    labels: dict[str, list[str]] = {}
    kept = []
    for rec in records:
        mine = labels.setdefault(rec["episode_id"], [])
        k, i = order[rec["episode_id"]], len(mine)
        rec["verdict"] = ("PASS", "FAIL", "UNGRADABLE")[(i + k) % 3]
        mine.append(rec["verdict"])
        kept.append(rec)
    for eid, mine in labels.items():  # drop each episode's last verdict: MISSING
        last = max(j for j, rec in enumerate(kept) if rec["episode_id"] == eid)
        kept.pop(last)
        mine[-1] = "MISSING"
    path.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
    return labels


def test_round_trip_messages_scores_and_metadata(collected_run: Path, tmp_path: Path) -> None:
    """Our run -> Inspect log (inspect_ai's writer) -> read_eval_log: one sample per episode,
    the messages the root saw, each grader's pass rate and per-criterion labels (mixed
    PASS / FAIL / UNGRADABLE / MISSING, hand-set), coverage, sub-calls and status."""
    run = tmp_path / "run"
    shutil.copytree(collected_run, run)
    labels = _mixed_verdicts(run)
    r = export_inspect(run, tmp_path / "logs")
    log = read_eval_log(str(r.path))
    summaries = load_summaries(run)
    scores = run_scores(run, "reference").scores
    assert log.status == "success"
    assert log.samples is not None
    assert len(log.samples) == len(summaries) == r.n_samples == 2
    by_id = {s.id: s for s in log.samples}  # inspect orders samples its own way
    assert sorted(by_id) == sorted(s.episode_id for s in summaries)
    for summary in summaries:
        sample = by_id[summary.episode_id]
        eid = summary.episode_id
        assert [(m.role, m.text) for m in sample.messages] == _seen(run, eid)
        assert sample.output.completion == summary.memo
        expected = scores[eid]
        assert expected.labels == labels[eid]  # the hand-set labels, in rubric order
        n_pass = labels[eid].count("PASS")
        assert 0 < n_pass < len(labels[eid])
        got = sample.scores["reference"]
        assert got.value == pytest.approx(n_pass / len(labels[eid]))
        assert got.metadata["labels"] == dict(zip(expected.criterion_ids, labels[eid], strict=True))
        assert (got.metadata["n_pass"], got.metadata["n_missing"]) == (n_pass, 1)
        assert got.metadata["n_ungradable"] == labels[eid].count("UNGRADABLE")
        mapping = {"PASS": "C", "FAIL": "I", "UNGRADABLE": "N", "MISSING": "N"}
        assert sample.scores["reference_criteria"].value == {
            c: mapping[lab] for c, lab in zip(expected.criterion_ids, labels[eid], strict=True)
        }
        assert summary.coverage is not None
        assert sample.metadata["coverage"]["overall"] == summary.coverage.overall
        assert sample.metadata["status"] == summary.status == "completed"
        traj = load_trajectory(run, eid)
        task = traj.start.initial_messages[-1]
        assert task.role == "user" and sample.input == task.content
        assert [t.split(": ", 1)[0] for t in sample.target] == expected.criterion_ids
        assert len(sample.metadata["sub_calls"]) == summary.n_sub_calls == len(traj.sub_calls)
        assert [c["call_id"] for c in sample.metadata["sub_calls"]] == [
            c.call_id for c in traj.sub_calls
        ]
        assert [c["usage"] for c in sample.metadata["sub_calls"]] == [
            c.usage.model_dump(mode="json") for c in traj.sub_calls
        ]
        # the texts the sub model saw and sent ride in model events (the transcript view);
        # inspect_ai's writer stores long texts once, as attachments its reader resolves
        resolved = resolve_sample_attachments(sample)
        events = [e for e in resolved.events if e.event == "model"]
        assert [(e.role, e.model) for e in events] == [("sub", summary.sub_model)] * len(
            traj.sub_calls
        )
        assert [e.input[0].text for e in events] == [c.prompt for c in traj.sub_calls]
        assert [e.output.completion for e in events] == [c.response for c in traj.sub_calls]
        assert [e.output.usage.output_tokens for e in events if e.output.usage] == [
            c.usage.completion_tokens for c in traj.sub_calls
        ]
        assert sample.model_usage[summary.root_model].input_tokens == (
            summary.tokens.root.prompt_tokens
        )
    (score,) = log.results.scores if log.results else []
    rates = [labels[s.episode_id].count("PASS") / len(labels[s.episode_id]) for s in summaries]
    assert score.metrics["mean"].value == pytest.approx(sum(rates) / len(rates))  # type: ignore[arg-type]


def test_tools_style_round_trip(collected_run: Path, tmp_path: Path) -> None:
    """--style tools: each repl block of a reply is a ``repl`` tool call with its code, each
    block's output a tool message answering that call (JSON format this time)."""
    r = export_inspect(collected_run, tmp_path, style="tools", fmt="json")
    log = read_eval_log(str(r.path))
    assert r.path.suffix == ".json" and log.samples is not None
    for sample in log.samples:
        traj = load_trajectory(collected_run, str(sample.id))
        calls = [c for m in sample.messages if m.role == "assistant" for c in m.tool_calls or []]
        codes = [b.code for t in traj.turns for b in split_fences(assistant_message(t).content)[0]]
        assert [c.arguments["code"] for c in calls] == codes and codes
        assert {c.function for c in calls} == {"repl"}
        tools = [m for m in sample.messages if m.role == "tool"]
        answered = [c.id for c in calls[: len(tools)]]
        assert [m.tool_call_id for m in tools] == answered
        assert all(m.text.startswith("REPL output (block") for m in tools)


def test_episode_without_trajectory_keeps_its_sample(collected_run: Path, tmp_path: Path) -> None:
    """A missing trajectory file: the sample is still written (scores, metadata), without
    messages, the reason in its metadata; the sample count still equals the episodes'."""
    run = tmp_path / "run"
    shutil.copytree(collected_run, run)
    gone = load_summaries(run)[0].episode_id
    trajectory_path(run, gone).unlink()
    r = export_inspect(run, tmp_path / "logs")
    assert r.n_samples == 2 and r.n_without_messages == 1
    log = read_eval_log(str(r.path))
    assert log.samples is not None
    by_id = {s.id: s for s in log.samples}
    assert by_id[gone].messages == []
    assert "no trajectory" in by_id[gone].metadata["messages_error"]
    assert "reference" in (by_id[gone].scores or {})
    other = next(s for s in log.samples if s.id != gone)
    assert other.messages and "messages_error" not in other.metadata


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def test_cli_writes_once_and_refuses_to_overwrite(collected_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "logs"
    args = ["export-inspect", str(collected_run), "--out", str(out)]
    first = CliRunner().invoke(_app(), args)
    assert first.exit_code == 0, first.output
    assert "2 samples ->" in first.output and "scores: reference" in first.output
    (path,) = out.iterdir()
    again = CliRunner().invoke(_app(), args)
    assert again.exit_code == 2 and "exists" in again.output
    assert CliRunner().invoke(_app(), [*args, "--overwrite"]).exit_code == 0
    assert list(out.iterdir()) == [path]
    bad = CliRunner().invoke(_app(), ["export-inspect", str(tmp_path / "nope"), "--out", str(out)])
    assert bad.exit_code == 2 and "run.json" in bad.output


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow  # ~5.5 s on the 2-core machine: the viewer's start-up
def test_inspect_view_lists_the_log(collected_run: Path, tmp_path: Path) -> None:
    """``inspect view`` served headless on 127.0.0.1 answers its log listing with HTTP 200 and
    lists our log; the log itself is served back with both samples."""
    r = export_inspect(collected_run, tmp_path / "logs")
    port = _free_port()
    inspect = Path(sys.executable).with_name("inspect")
    args = [str(inspect), "view", "start", "--log-dir", str(tmp_path / "logs")]
    args += ["--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(
        args,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        listing = None
        for _ in range(600):  # polls, not a timing bound: up to ~60 s on a busy machine
            if proc.poll() is not None:
                raise AssertionError(f"inspect view exited: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/logs", timeout=5) as resp:
                    assert resp.status == 200
                    listing = json.loads(resp.read())
                break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.1)
        assert listing is not None, "inspect view never answered"
        names = [Path(f["name"]).name for f in listing["files"]]
        assert names == [r.path.name]
        url = f"http://127.0.0.1:{port}/api/logs/{urllib.parse.quote(listing['files'][0]['name'])}"
        with urllib.request.urlopen(url, timeout=30) as resp:
            assert resp.status == 200
            served = json.loads(resp.read())
        assert len(served["samples"]) == 2
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_corrupt_verdict_file_is_named_and_nothing_written(
    collected_run: Path, tmp_path: Path
) -> None:
    """A verdict line that is not JSON in the middle of the file: exit 2 naming the file;
    no log is written."""
    run = tmp_path / "run"
    shutil.copytree(collected_run, run)
    verdicts = run / "verdicts" / "reference.jsonl"
    lines = verdicts.read_text(encoding="utf-8").splitlines(keepends=True)
    verdicts.write_text(lines[0] + "{not json\n" + "".join(lines[1:]), encoding="utf-8")
    out = tmp_path / "logs"
    result = CliRunner().invoke(_app(), ["export-inspect", str(run), "--out", str(out)])
    assert result.exit_code == 2
    assert "reference.jsonl" in result.output
    assert not out.exists()


def test_imported_rlm_run_round_trips(tmp_path: Path) -> None:
    """A run imported from a real ``rlms`` log (``tests/data/import``) exports like a
    collected one: every sample holds the messages its root saw, and its sub-calls (depth 1
    and the depth-2 calls of the second log) as model events with their prompts."""
    from rlmdistill.importers.rlm import import_rlm
    from rlmdistill.testing.rooms import write_clause_room

    data = Path(__file__).parent / "data" / "import"
    room = write_clause_room(tmp_path / "room", n_documents=3, repeats=60)
    for name in ("rlms-0.1.3-depth1.jsonl", "rlms-0.1.3-depth2.jsonl"):
        run = tmp_path / "runs" / name
        import_rlm([data / name], room, run, command=["test"])
        r = export_inspect(run, tmp_path / "logs" / name)
        log = read_eval_log(str(r.path))
        assert log.samples is not None and r.n_without_messages == 0
        assert len(log.samples) == len(load_summaries(run)) > 0
        depths = set()
        for sample in log.samples:
            eid = str(sample.id)
            assert [(m.role, m.text) for m in sample.messages] == _seen(run, eid)
            traj = load_trajectory(run, eid)
            events = [e for e in resolve_sample_attachments(sample).events if e.event == "model"]
            assert [e.input[0].text for e in events] == [c.prompt for c in traj.sub_calls]
            assert [e.metadata["depth"] for e in events if e.metadata] == [
                c.depth for c in traj.sub_calls
            ]
            depths |= {c.depth for c in traj.sub_calls}
        assert depths == ({1, 2} if "depth2" in name else {1})
