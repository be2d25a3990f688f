"""Several servers behind one spec (issue 17, part 2): parsing, the fingerprint, load split,
per-episode affinity, failover, the preflight of every replica."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest

from rlmdistill.collect.config import CollectConfig, EpisodeLimits, episode_id
from rlmdistill.collect.runner import collect
from rlmdistill.models.base import Message, RetryableModelError, Sampling
from rlmdistill.models.openai_client import OpenAIChatClient
from rlmdistill.models.preflight import ServerUnavailableError, preflight
from rlmdistill.models.replicas import MAX_COOLDOWN_S, ReplicaClient, affinity
from rlmdistill.models.spec import identity, open_client, parse_spec, with_servers
from rlmdistill.rooms import DataRoom
from rlmdistill.testing.fake_openai import FakeOpenAIServer, ScriptedHandler
from rlmdistill.testing.rooms import write_clause_room
from rlmdistill.traces.schema import EpisodeSummary
from rlmdistill.traces.store import parse_records

DEAD = "http://127.0.0.1:9/v1"  # discard port: connection refused
TODAY = Path(__file__).with_name("data") / "run_0aba44b_openai"
"""run.json + episodes.jsonl written by main at 0aba44b (before replicas existed): 2 episodes
of a 2-document clause room, root openai:root@http://127.0.0.1:40399/v1."""

BATCH = "```repl\nanswers = llm_query_batched(['q %d' % i for i in range(16)])\nprint(len(answers))\n```"
MEMO = "```repl\nFINAL_VAR('memo: ' + ' | '.join(answers[:2]))\n```"


# ----------------------------------------------------------------------------- the spec
def test_a_spec_lists_replicas_and_keeps_its_first_as_identity() -> None:
    s = parse_spec("openai:m@http://a:1/v1/,http://b:2/v1+key_env=K")
    assert s.base_urls == ["http://a:1/v1", "http://b:2/v1"]
    assert str(s) == "openai:m@http://a:1/v1,http://b:2/v1+key_env=K"
    assert parse_spec(str(s)) == s
    assert identity("openai:m@http://a:1/v1,http://b:2/v1+key_env=K") == (
        "openai:m@http://a:1/v1+key_env=K"
    )
    assert identity("openai:m@http://a:1/v1/") == "openai:m@http://a:1/v1/"  # untouched
    assert identity("local:x") == "local:x"
    with pytest.raises(ValueError, match="listed twice"):
        parse_spec("openai:m@http://a/v1,http://a/v1")
    with pytest.raises(ValueError, match="not an http"):
        parse_spec("openai:m@http://a/v1,b:2/v1")
    with pytest.raises(ValueError, match="credentials"):
        parse_spec("openai:m@http://a/v1,http://u:p@b/v1")


def test_servers_list_adds_replicas_to_the_specs_it_names() -> None:
    servers = ["http://a/v1", "http://b/v1"]
    assert with_servers("openai:m@http://a/v1", servers) == "openai:m@http://a/v1,http://b/v1"
    assert with_servers("openai:m@http://b/v1/", servers) == "openai:m@http://b/v1,http://a/v1"
    assert with_servers("openai:m@http://c/v1", servers) == "openai:m@http://c/v1"
    assert with_servers("local:x", servers) == "local:x"


def test_replicas_and_servers_stay_out_of_the_episode_id() -> None:
    one = CollectConfig(rooms=[], root="openai:r@http://a/v1", sub="openai:s@http://a/v1")
    many = one.model_copy(
        update={
            "root": "openai:r@http://a/v1,http://b/v1",
            "sub": "openai:s@http://a/v1,http://b/v1,http://c/v1",
            "servers": ["http://a/v1", "http://b/v1"],
        }
    )
    assert many.fingerprint() == one.fingerprint()
    assert episode_id(many, "h", "t", 0) == episode_id(one, "h", "t", 0)
    other = one.model_copy(update={"root": "openai:r@http://b/v1,http://a/v1"})
    assert other.fingerprint() != one.fingerprint()  # the first URL is the identity


def test_a_run_json_written_by_todays_code_resumes_with_replicas(tmp_path: Path) -> None:
    old = json.loads((TODAY / "run.json").read_text())
    room = write_clause_room(tmp_path / "room", n_documents=2, repeats=5)
    assert DataRoom.load(room).room_hash == old["rooms"][0]["room_hash"]  # the same room
    run = tmp_path / "run"
    shutil.copytree(TODAY, run)
    url = old["config"]["root"].split("@", 1)[1]
    cfg = CollectConfig.model_validate(
        {
            **old["config"],
            "rooms": [str(room)],
            "root": f"openai:root@{url},{DEAD}",
            "sub": f"openai:sub@{url},{DEAD}",
            "servers": [url, DEAD],
            "concurrency": 8,
        }
    )
    done = [s.episode_id for s in parse_records(TODAY / "episodes.jsonl", EpisodeSummary)]
    room_hash = old["rooms"][0]["room_hash"]
    task = json.loads((TODAY / "episodes.jsonl").read_text().splitlines()[0])["task_id"]
    assert sorted(episode_id(cfg, room_hash, task, k) for k in range(2)) == sorted(done)
    never_called = OpenAIChatClient("root", DEAD)  # every episode is done: no request
    res = collect(cfg, run, never_called, never_called, progress=False)
    assert (res.skipped, res.summaries, res.unfinished) == (2, [], ())
    assert (run / "episodes.jsonl").read_bytes() == (TODAY / "episodes.jsonl").read_bytes()
    assert json.loads((run / "run.json").read_text()) == old  # kept as it was


# ----------------------------------------------------------------------------- the client
def test_a_dead_replica_fails_over_at_once_and_leaves_the_rotation() -> None:
    with FakeOpenAIServer(ScriptedHandler(["x"], lambda p: "up " + p)) as server:
        client = open_client(f"openai:sub@{DEAD},{server.base_url}", max_retries=0)
        assert isinstance(client, ReplicaClient)
        assert client.model_id == f"openai:sub@{DEAD}"
        msgs = [Message(role="user", content="q")]
        outs = [client.chat(msgs, Sampling(max_tokens=4)) for _ in range(4)]
        client.close()
    assert [o.text for o in outs] == ["up q"] * 4
    assert client.served == [0, 4]
    # at most the first request tried the dead one (2 attempts); it then stayed out
    assert client.failovers == 1 and outs[0].attempts <= 2 and outs[-1].attempts == 1


def test_thousands_of_failures_in_a_row_keep_a_bounded_cool_down() -> None:
    """bench_concurrency's kill: every request in flight on the killed server fails at once;
    the doubling cool-down once overflowed a float (OverflowError -> 'fatal' sub-calls)."""
    client = ReplicaClient([OpenAIChatClient("m", DEAD, retry_transport=False) for _ in range(2)])
    for _ in range(2000):
        client.outstanding[1] += 1
        assert client._done(1, RetryableModelError("reset", cause="connection_reset"))
    assert 0 < client._down_until[1] - time.monotonic() <= MAX_COOLDOWN_S
    client.close()


def test_every_replica_down_raises_after_the_bounded_attempts() -> None:
    client = open_client(f"openai:sub@{DEAD},http://127.0.0.1:7/v1", max_retries=0)
    with pytest.raises(RetryableModelError) as info:
        client.chat([Message(role="user", content="q")], Sampling(max_tokens=4))
    client.close()
    assert info.value.attempts == 2 and info.value.cause == "connection_refused"


def test_affinity_pins_a_key_to_one_replica_and_load_goes_to_the_least_busy() -> None:
    handler = ScriptedHandler(["x"], lambda p: "ok")
    with FakeOpenAIServer(handler) as a, FakeOpenAIServer(handler) as b:
        client = open_client(f"openai:sub@{a.base_url},{b.base_url}")
        msgs = [Message(role="user", content="q")]
        with affinity("episode-1"):
            for _ in range(6):
                client.chat(msgs, Sampling(max_tokens=4))
        pinned = client.served[:]
        for _ in range(6):  # no key, one at a time: both idle, so round robin
            client.chat(msgs, Sampling(max_tokens=4))
        client.close()
    assert sorted(pinned) == [0, 6]
    assert [client.served[i] - pinned[i] for i in range(2)] == [3, 3]


def test_preflight_checks_every_replica() -> None:
    with FakeOpenAIServer(models=["m"]) as up:
        preflight({"--root": f"openai:m@{up.base_url}"})
        with pytest.raises(ServerUnavailableError, match=r"127\.0\.0\.1:9.*needed by --root"):
            preflight({"--root": f"openai:m@{up.base_url},{DEAD}"})


# ----------------------------------------------------------------------------- runs
def _config(room: Path, root: str, sub: str, episodes: int) -> CollectConfig:
    return CollectConfig(
        rooms=[str(room)],
        root=root,
        sub=sub,
        episodes=episodes,
        concurrency=episodes,
        sub_concurrency=16,
        limits=EpisodeLimits(max_turns=3),
        sandbox="audit",
    )


def _episode_of(request: dict) -> int:
    """The episode seed of a root request (turn t is sent with seed + 1,000,003 t)."""
    turn = sum(1 for m in request["messages"] if m["role"] == "assistant")
    return (request["seed"] - 1_000_003 * turn) % 2**31


def test_two_replicas_split_the_load_and_keep_each_episodes_root_turns_together(
    tmp_path: Path,
) -> None:
    room = write_clause_room(tmp_path / "room", n_documents=3, repeats=20)
    handler = ScriptedHandler([BATCH, MEMO], lambda p: "answer " + p)
    with (
        FakeOpenAIServer(handler, latency_s=0.05) as a,
        FakeOpenAIServer(handler, latency_s=0.05) as b,
    ):
        both = f"{a.base_url},{b.base_url}"
        root, sub = open_client(f"openai:root@{both}"), open_client(f"openai:sub@{both}")
        cfg = _config(room, f"openai:root@{both}", f"openai:sub@{both}", 8)
        res = collect(cfg, tmp_path / "run", root, sub, progress=False)
        root.close()
        sub.close()
        seen = {"a": a.requests, "b": b.requests}
    assert [s.status for s in res.summaries] == ["completed"] * 8
    subs = {k: sum(r["model"] == "sub" for r in v) for k, v in seen.items()}
    assert subs["a"] + subs["b"] == 8 * 16
    assert min(subs.values()) >= 8 * 16 // 4  # both carry a real share
    where: dict[int, set[str]] = {}
    for k, reqs in seen.items():
        for r in reqs:
            if r["model"] == "root":
                where.setdefault(_episode_of(r), set()).add(k)
    assert len(where) == 8 and all(len(v) == 1 for v in where.values())  # affinity


def test_one_replica_killed_mid_run_and_the_run_completes(tmp_path: Path) -> None:
    room = write_clause_room(tmp_path / "room", n_documents=3, repeats=20)
    inner = ScriptedHandler([BATCH, MEMO], lambda p: "answer " + p)
    hit = threading.Event()
    counts = [0]

    def on_b(request: dict):
        counts[0] += 1
        if counts[0] >= 10:
            hit.set()
        return inner(request)

    a = FakeOpenAIServer(inner, latency_s=0.2)
    b = FakeOpenAIServer(on_b, latency_s=0.2, models=inner.models)
    try:
        both = f"{a.base_url},{b.base_url}"
        root, sub = open_client(f"openai:root@{both}"), open_client(f"openai:sub@{both}")
        cfg = _config(room, f"openai:root@{both}", f"openai:sub@{both}", 6)
        out: list = []
        runner = threading.Thread(
            target=lambda: out.append(collect(cfg, tmp_path / "run", root, sub, progress=False))
        )
        runner.start()
        assert hit.wait(60)
        b.kill()  # requests in flight on b are reset; b refuses connections from now on
        runner.join(120)
        assert not runner.is_alive()
        root.close()
        sub.close()
    finally:
        a.close()
        b.close()
    (res,) = out
    assert [s.status for s in res.summaries] == ["completed"] * 6
    assert list(res.unfinished) == [] and res.not_started == 0
    assert sum(s.n_sub_call_errors for s in res.summaries) == 0
    assert sum(s.n_sub_calls for s in res.summaries) == 6 * 16
    assert sub.failovers + root.failovers >= 1
    assert counts[0] >= 10 and sub.served[0] > 0
