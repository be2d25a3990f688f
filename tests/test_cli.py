"""The console script end to end over the fake server: collect -> judge -> show."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from rlmdistill.cli import app, build_config
from rlmdistill.testing.fake_openai import FakeOpenAIServer, ScriptedHandler
from rlmdistill.traces.schema import Verdict
from rlmdistill.traces.store import parse_records

GOOD = """```repl
docs = list_documents()
hits = [search(d['id'].split('/')[-1][:0] + 'assign', doc_id=d['id'], window=300, max_hits=1) for d in docs]
answers = llm_query_batched(['Contract ' + d['id'] + ':\\n' + (h[0]['text'] if h else '') for d, h in zip(docs, hits)])
memo = '\\n\\n'.join('## ' + d['id'] + '\\nAnti-assignment: ' + a for d, a in zip(docs, answers))
FINAL_VAR(memo)
```"""


def quote_back(prompt: str) -> str:
    """A sub model that quotes the excerpt it was given (as a good reader would)."""
    return "The contract says: " + prompt.split(":\n", 1)[-1][:600]


def test_collect_judge_show_through_the_cli(cuad_room3, tmp_path, monkeypatch):
    monkeypatch.setenv("RLMDISTILL_API_KEY", "sk-test-not-logged")
    runner = CliRunner()
    run = tmp_path / "runs" / "cli"
    with FakeOpenAIServer(ScriptedHandler([GOOD], quote_back)) as server:
        args = [
            "collect",
            "--room",
            str(cuad_room3),
            "--root",
            f"openai:root@{server.base_url}",
            "--sub",
            f"openai:sub@{server.base_url}",
            "--episodes",
            "2",
            "--concurrency",
            "2",
            "--out",
            str(run),
            "--no-progress",
        ]
        res = runner.invoke(app, args)
        assert res.exit_code == 0, res.output
    assert "sk-test-not-logged" not in (run / "run.json").read_text()
    for traj in (run / "trajectories").iterdir():
        assert "sk-test-not-logged" not in traj.read_text()
    res = runner.invoke(app, ["judge", str(run)])
    assert res.exit_code == 0, res.output
    verdicts = list(parse_records(run / "verdicts" / "reference.jsonl", Verdict))
    n_criteria = len(json.loads((cuad_room3 / "task.json").read_text())["criteria"])
    assert len(verdicts) == 2 * n_criteria
    # re-judging the same memos appends nothing
    assert runner.invoke(app, ["judge", str(run)]).exit_code == 0
    assert len(list(parse_records(run / "verdicts" / "reference.jsonl", Verdict))) == 2 * n_criteria
    res = runner.invoke(app, ["show", str(run), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert summary["n_episodes"] == 2 and summary["status_counts"] == {"completed": 2}
    assert summary["memo_with_citation"] == 2
    (grader,) = summary["graders"]
    n_pass = sum(v.verdict == "PASS" for v in verdicts)
    assert grader["pass_rate"]["mean"] == n_pass / (2 * n_criteria)
    # quoting the text around "assign" passes only assignment-related criteria
    passed = {v.criterion_id for v in verdicts if v.verdict == "PASS"}
    assert passed and all("assignment" in cid for cid in passed)
    res = runner.invoke(app, ["show", str(run)])
    assert res.exit_code == 0 and "episodes by status" in res.output


def test_config_file_then_flags_override(tmp_path, cuad_room3):
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(
        f"rooms: [{cuad_room3}]\nroot: local:qwen2.5-coder-0.5b\nsub: local:smollm2-135m\nepisodes: 3\n"
        "limits: {max_turns: 2}\n"
    )
    cfg = build_config(cfg_file, {"episodes": 5, "rooms": []})
    assert cfg.episodes == 5 and cfg.limits.max_turns == 2
    # embedded-model recommendation fills the root's few-shot and prefill
    assert cfg.few_shot is True and cfg.prefill == "```repl\n"
    cfg = build_config(cfg_file, {"few_shot": False, "prefill": ""})
    assert cfg.few_shot is False and cfg.prefill is None


def test_user_errors_exit_2_with_one_clear_line(monkeypatch, capsys, tmp_path, cuad_room3):
    import pytest

    from rlmdistill.cli import main

    cases = [
        (
            [
                "collect",
                "--room",
                "/nonexistent",
                "--root",
                "local:x",
                "--sub",
                "local:x",
                "--out",
                str(tmp_path / "r"),
            ],
            "/nonexistent: data room folder not found",
        ),
        (
            [
                "collect",
                "--room",
                str(cuad_room3),
                "--root",
                "bogus",
                "--sub",
                "local:x",
                "--out",
                str(tmp_path / "r"),
            ],
            "bad model spec 'bogus'",
        ),
        (["show", str(tmp_path / "nothing")], "a run directory?"),
        (["judge", str(tmp_path / "nothing")], "a run directory?"),
    ]
    for argv, expected in cases:
        monkeypatch.setattr("sys.argv", ["rlmdistill", *argv])
        with pytest.raises(SystemExit) as info:
            main()
        assert info.value.code == 2
        err = " ".join(capsys.readouterr().err.split())
        assert expected in err and "Traceback" not in err


def test_spend_cap_ends_episodes_with_budget_exceeded(cuad_room3, tmp_path, monkeypatch):
    monkeypatch.setenv("RLMDISTILL_API_KEY", "x")
    prices = tmp_path / "prices.yaml"
    # $1 per prompt token: the first root request (> 1,000 tokens) crosses a $10 cap
    prices.write_text(
        "version: test\nprices:\n  - {pattern: 'openai:*', input: 1000000, output: 0}\n"
    )
    run = tmp_path / "runs" / "capped"
    explore = "```repl\nprint(len(list_documents()))\n```"
    with FakeOpenAIServer(ScriptedHandler([explore, GOOD], quote_back)) as server:
        cfg_file = tmp_path / "c.yaml"
        cfg_file.write_text(f"max_usd: 10\nprices: {prices}\nlimits: {{max_turns: 3}}\n")
        res = CliRunner().invoke(
            app,
            [
                "collect",
                "--room",
                str(cuad_room3),
                "--root",
                f"openai:root@{server.base_url}",
                "--sub",
                f"openai:sub@{server.base_url}",
                "--episodes",
                "1",
                "--out",
                str(run),
                "--no-progress",
                "--config",
                str(cfg_file),
            ],
        )
        assert res.exit_code == 0, res.output
        n_requests = len(server.requests)
    (line,) = [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines()]
    assert line["status"] == "budget_exceeded"
    assert "spend cap" in line["status_detail"].lower() or "usd" in line["status_detail"].lower()
    # the preflight's sampling probe (one tiny request per role, before the run), then the
    # root's first request, which crossed the cap; nothing was sent after
    assert n_requests == 2 + 1


def test_models_list_fits_80_columns_and_keeps_the_notes_whole(tmp_path, monkeypatch):
    from rlmdistill.models.pull import MANIFEST_NAME
    from rlmdistill.models.registry import EMBEDDED_MODELS

    monkeypatch.setenv("RLMDISTILL_HOME", str(tmp_path))
    smol = EMBEDDED_MODELS["smollm2-135m"]
    pulled = tmp_path / "models" / smol.name  # a converted checkpoint as `models pull` leaves it
    pulled.mkdir(parents=True)
    (pulled / MANIFEST_NAME).write_text(json.dumps({"sha256": smol.sha256, "dtype": "float32"}))
    (pulled / "config.json").write_text("{}")
    (pulled / "model.safetensors").write_bytes(b"")
    res = CliRunner().invoke(app, ["models", "list"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    rows = {line.split()[1]: line for line in lines if line.startswith("│")}
    assert rows.keys() == EMBEDDED_MODELS.keys()  # names whole, one row each
    assert "98 MB" in rows[smol.name] and "8,192" in rows[smol.name]
    assert "yes (float32)" in rows[smol.name] and "'```repl\\n'" in rows[smol.name]
    assert all(rows[name].rstrip(" │").endswith("no") for name in rows if name != smol.name)
    text = " ".join(res.output.split())  # notes are wrapped, never cut
    assert all(f"{m.name}: {m.notes}" in text for m in EMBEDDED_MODELS.values())
    short = CliRunner().invoke(app, ["models", "list", "--no-notes"], env={"COLUMNS": "80"})
    assert short.exit_code == 0 and smol.notes[:20] not in short.output
    assert short.output.splitlines() == lines[: len(short.output.splitlines())]


def test_collect_lists_room_notes_and_strict_refuses_a_corrupt_pdf(cuad_room3, tmp_path):
    """Issue #25 items 1-2 in the collect log: a Latin-1 document and a corrupt PDF in a room
    are named (decoded as cp1252; skipped with the reason) and episodes run on the rest;
    ``--strict`` stops before any episode, naming the PDF."""
    import shutil

    from rlmdistill.rooms import RoomError

    room = tmp_path / "room"
    shutil.copytree(cuad_room3, room)
    (room / "documents" / "Misc").mkdir()
    (room / "documents" / "Misc" / "cafe.txt").write_bytes("Le Café paie.\n".encode("latin-1"))
    (room / "documents" / "Misc" / "broken.pdf").write_bytes(b"%PDF-1.4\ncut short")
    runner = CliRunner()
    with FakeOpenAIServer(ScriptedHandler([GOOD], quote_back)) as server:
        args = ["collect", "--room", str(room), "--root", f"openai:root@{server.base_url}",
                "--sub", f"openai:sub@{server.base_url}", "--episodes", "1", "--no-progress"]  # fmt: skip
        res = runner.invoke(app, [*args, "--out", str(tmp_path / "runs" / "a")])
        assert res.exit_code == 0, res.output
        assert "room room: decoded as cp1252 (not UTF-8): Misc/cafe.txt" in res.output
        assert "room room: skipped Misc/broken.pdf: cannot extract text" in res.output
        strict = runner.invoke(app, [*args, "--out", str(tmp_path / "runs" / "b"), "--strict"])
    assert isinstance(strict.exception, RoomError) and "broken.pdf" in str(strict.exception)
    assert not (tmp_path / "runs" / "b" / "episodes.jsonl").exists()
    (line,) = (tmp_path / "runs" / "a" / "episodes.jsonl").read_text().splitlines()
    assert json.loads(line)["room"]["n_documents"] == 4  # 3 contracts + cafe.txt, not the PDF
