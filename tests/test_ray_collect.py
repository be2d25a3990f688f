"""``collect --executor ray`` on a real multi-node Ray cluster on this machine (loopback only).

The cluster is ``ray.cluster_utils.Cluster`` (recipe: ``shared/RECIPES.md``): a head node and
a second node with distinct custom resources (``slots`` = each node's episode cap), each
started with its own room cache so a snapshot on a node is really that node's copy; a third
node joins for the node-loss test and is removed while it runs episodes. Episodes run against
the loopback fake server. Shown here:

- episodes land on more than one node, and each gives what the thread executor gives;
- a run started by the thread executor is finished by Ray and the other way round (the thread
  executor finds a Ray run complete);
- a node removed mid-run loses no episode and duplicates none (its episodes are rerun
  elsewhere, and the message says which);
- a spend cap set for the run stops the whole cluster, not each node separately.

Needs the ``ray`` extra; skipped without it unless ``RLMDISTILL_REQUIRE_RAY=1`` (CI).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rlmdistill.collect.config import CollectConfig, EpisodeLimits, RayOptions
from rlmdistill.collect.executor import CollectResult
from rlmdistill.collect.ray_executor import PLACEMENT_FILE, Placement
from rlmdistill.collect.runner import collect
from rlmdistill.models.openai_client import OpenAIChatClient
from rlmdistill.rooms import DataRoom
from rlmdistill.testing.fake_openai import FakeOpenAIServer, ScriptedHandler, last_user_message
from rlmdistill.traces.schema import EpisodeEnd, EpisodeSummary, TrajectoryRecord, TurnRecord
from rlmdistill.traces.store import parse_records, read_jsonl

pytestmark = pytest.mark.slow

# read by Ray when it is imported: with it, every Ray address of this process and of the nodes
# it starts is loopback (without it Ray binds the machine's external interface)
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
try:
    import ray
    from ray.cluster_utils import Cluster
except ImportError:  # pragma: no cover - depends on the extra
    if os.environ.get("RLMDISTILL_REQUIRE_RAY") == "1":
        raise
    pytest.skip("needs the ray extra: pip install 'rlmdistill[ray]'", allow_module_level=True)

EXPLORE = "```repl\ndocs = list_documents()\nprint(len(docs))\n```"
DELEGATE = (
    "```repl\nanswers = llm_query_batched(['Contract ' + d['id'] for d in docs])\n"
    "memo = '\\n'.join(d['id'] + ': ' + a for d, a in zip(docs, answers))\nFINAL_VAR(memo)\n```"
)
OBJECT_STORE = 80 * 1024 * 1024  # bytes per node: the machine is shared, keep Ray small
RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # with it, every Ray address stays on loopback
    "RAY_USAGE_STATS_ENABLED": "0",
    "RLMDISTILL_API_KEY": "x",
}
FAST_HEALTH_CHECK = {  # a removed node is declared dead in ~2 s, not Ray's default ~30 s
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 4,
}


@contextlib.contextmanager
def _env(**values: str) -> Iterator[None]:
    """Set environment variables for the processes a node starts now (they inherit them)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@dataclass
class Nodes:
    cluster: Any
    caches: dict[str, Path]
    """Room cache of each node by its custom resource name (head, b, c)."""
    base: Path

    def node_of(self, node_id: str) -> str:
        """The custom resource name (head, b, c) of a node id."""
        for node in ray.nodes():
            if node["NodeID"] == node_id:
                names = set(node["Resources"]) & set(self.caches)
                return names.pop()
        raise KeyError(node_id)

    def add(self, name: str, slots: int, **env: str) -> Any:
        cache = self.base / f"cache-{name}"
        self.caches[name] = cache
        home = str(self.base / "home")
        with _env(RLMDISTILL_ROOM_CACHE=str(cache), RLMDISTILL_HOME=home, **env):
            node = self.cluster.add_node(
                num_cpus=1, resources={"slots": slots, name: 1}, object_store_memory=OBJECT_STORE
            )
        self.cluster.wait_for_nodes()
        return node


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    """Head (1 slot, resource ``head``) + node b (2 slots, resource ``b``), loopback only."""
    base = tmp_path_factory.mktemp("ray-nodes")
    caches = {"head": base / "cache-head"}
    with (
        _env(**RAY_ENV),
        _env(RLMDISTILL_ROOM_CACHE=str(caches["head"]), RLMDISTILL_HOME=str(base / "home")),
    ):
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 1,
                "resources": {"slots": 1, "head": 1},
                "object_store_memory": OBJECT_STORE,
                "include_dashboard": False,
                "_system_config": FAST_HEALTH_CHECK,
            },
        )
    with _env(**RAY_ENV):
        out = Nodes(cluster, caches, base)
        out.add("b", 2)
        ray.init(address=cluster.address)
        for node in ray.nodes():
            assert node["NodeManagerAddress"] == "127.0.0.1", node  # loopback only
        try:
            yield out
        finally:
            ray.shutdown()
            cluster.shutdown()


def _config(room: Path, url: str, episodes: int, **extra: Any) -> CollectConfig:
    data: dict[str, Any] = {
        "rooms": [str(room)],
        "root": f"openai:root@{url}",
        "sub": f"openai:sub@{url}",
        "episodes": episodes,
        "concurrency": 16,
        "prefill": None,
        "limits": EpisodeLimits(max_turns=3),
        "executor": "ray",
        "ray": RayOptions(slots_resource="slots"),
        **extra,
    }
    return CollectConfig.model_validate(data)


def _run(cfg: CollectConfig, out: Path, url: str, **changes: Any) -> CollectResult:
    """Collect as the CLI does (driver-side clients), with ``changes`` to the config."""
    mk = lambda m: OpenAIChatClient(m, url, api_key="x", max_retries=0)  # noqa: E731
    with mk("root") as root, mk("sub") as sub:
        return collect(cfg.model_copy(update=changes), out, root, sub, progress=False)


def _summaries(run: Path) -> list[EpisodeSummary]:
    assert read_jsonl(run / "episodes.jsonl").torn_tail is None
    return list(parse_records(run / "episodes.jsonl", EpisodeSummary))


def _placements(run: Path) -> list[Placement]:
    return list(parse_records(run / PLACEMENT_FILE, Placement))


def _trajectory(run: Path, eid: str) -> list[Any]:
    from pydantic import TypeAdapter

    return list(parse_records(run / "trajectories" / f"{eid}.jsonl", TypeAdapter(TrajectoryRecord)))


def _turns(records: list[Any]) -> list[tuple[str, str]]:
    return [(r.completion, r.prompt_sha256) for r in records if isinstance(r, TurnRecord)]


def _handler() -> ScriptedHandler:
    return ScriptedHandler([EXPLORE, DELEGATE], lambda p: "clause of " + p[:40])


def test_episodes_spread_over_nodes_and_match_the_thread_executor(
    nodes: Nodes, cuad_room3: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = DataRoom.load(cuad_room3).snapshot_key
    with FakeOpenAIServer(_handler(), latency_s=0.3) as server:
        cfg = _config(cuad_room3, server.base_url, episodes=6)
        res = _run(cfg, tmp_path / "ray", server.base_url)
        _run(cfg, tmp_path / "local", server.base_url, executor="thread")
        again = _run(cfg, tmp_path / "ray", server.base_url, executor="thread")
    assert len(res.summaries) == 6 and res.skipped == 0 and not res.unfinished
    ray_eps = {s.episode_id: s for s in _summaries(tmp_path / "ray")}
    assert len(ray_eps) == 6 and len(_summaries(tmp_path / "ray")) == 6
    # episodes landed on more than one node; each node that ran one has its own snapshot
    placed = {p.episode_id: nodes.node_of(p.node_id) for p in _placements(tmp_path / "ray")}
    assert set(placed) == set(ray_eps)
    assert set(placed.values()) == {"head", "b"}
    for name in set(placed.values()):
        assert (nodes.caches[name] / f"{key}.snapshot.json").is_file(), name
        assert (nodes.caches[name] / f"{key}.snapshot.bin").is_file(), name
    # same episodes as the thread executor, field by field and turn by turn
    local_eps = {s.episode_id: s for s in _summaries(tmp_path / "local")}
    assert set(local_eps) == set(ray_eps)
    for eid, s in ray_eps.items():
        t = local_eps[eid]
        assert s.status == t.status == "completed"
        assert (s.n_turns, s.n_sub_calls, s.memo, s.seed) == (
            t.n_turns,
            t.n_sub_calls,
            t.memo,
            t.seed,
        )
        assert s.coverage == t.coverage and s.cited_documents == t.cited_documents
        ray_traj, local_traj = (
            _trajectory(tmp_path / "ray", eid),
            _trajectory(tmp_path / "local", eid),
        )
        assert _turns(ray_traj) == _turns(local_traj) and len(_turns(ray_traj)) == 2
        assert isinstance(ray_traj[-1], EpisodeEnd)
    # the thread executor finds the Ray run complete
    assert again.skipped == 6 and again.summaries == []
    err = capsys.readouterr().err
    assert "ray: episodes per node:" in err


def test_run_started_by_threads_is_finished_by_ray(
    nodes: Nodes, cuad_room3: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    with FakeOpenAIServer(_handler(), latency_s=0.2) as server:
        cfg = _config(cuad_room3, server.base_url, episodes=4)
        first = _run(cfg, out, server.base_url, executor="thread")
        assert len(first.summaries) == 4
        ids = [s.episode_id for s in _summaries(out)]
        manifest = json.loads((out / "run.json").read_text())
        assert manifest["config"]["executor"] == "thread"
        # as if the thread run had been killed after two episodes: keep their lines only
        lines = (out / "episodes.jsonl").read_text().splitlines(keepends=True)
        (out / "episodes.jsonl").write_text("".join(lines[:2]))
        rest = _run(cfg, out, server.base_url)  # executor ray, same run.json
    assert rest.skipped == 2 and len(rest.summaries) == 2
    final = [s.episode_id for s in _summaries(out)]
    assert sorted(final) == sorted(ids) and len(set(final)) == 4
    assert {p.episode_id for p in _placements(out)} == set(ids[2:])
    assert json.loads((out / "run.json").read_text())["config_hash"] == manifest["config_hash"]


def test_nodes_open_the_specs_the_driver_opens_not_the_recorded_ones(
    nodes: Nodes, cuad_room3: Path, tmp_path: Path
) -> None:
    """The loop records a tuned root's adapter relative to its workspace and opens it by its
    absolute path (``open_specs``); nodes must open what the driver opens. Here the recorded
    specs name a port nothing listens on: episodes complete only if the nodes use the map,
    and the trajectories still record the specs of the config."""
    out = tmp_path / "run"
    with FakeOpenAIServer(_handler(), latency_s=0.0) as server:
        recorded = "http://127.0.0.1:9/v1"  # discard port: connection refused
        cfg = _config(cuad_room3, recorded, episodes=2)
        real = {
            cfg.root: f"openai:root@{server.base_url}",
            cfg.sub: f"openai:sub@{server.base_url}",
        }
        mk = lambda m: OpenAIChatClient(m, server.base_url, api_key="x", max_retries=0)  # noqa: E731
        with mk("root") as root, mk("sub") as sub:
            res = collect(cfg, out, root, sub, progress=False, open_specs=real)
        assert len(server.requests) > 0
    assert [s.status for s in res.summaries] == ["completed", "completed"]
    assert {s.root_model for s in _summaries(out)} == {cfg.root}


def test_spend_cap_stops_the_whole_cluster(nodes: Nodes, cuad_room3: Path, tmp_path: Path) -> None:
    """$1 per completion token; cap $200. One limiter for the cluster: spend ends within
    [cap, cap + one in-flight request per running episode]. A limiter per node would let each
    of the two nodes spend its own $200 (>= $400).

    ``concurrency: 2`` keeps exactly one episode in flight on each node the whole run (the
    spread rule: the first goes to b, 2 free slots; the second to head, a tie on free slots
    broken by fewer running; a freed slot is refilled on its own node). So both nodes run
    episodes after the cap is reached, whatever the machine's timing: with one slot per node
    free, the 2-slot node cannot drain the refused episodes alone (CI once saw that race with
    ``concurrency: 16``)."""
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"version": "test", "prices": [
        {"pattern": "openai:*", "input": 0, "output": 1_000_000}]}))  # fmt: skip
    cap = 200.0
    out = tmp_path / "run"
    with FakeOpenAIServer(
        ScriptedHandler([EXPLORE, DELEGATE], lambda p: "ok"), latency_s=0.1
    ) as server:
        cfg = _config(
            cuad_room3, server.base_url, episodes=16, concurrency=2, max_usd=cap,
            prices=str(prices),
        )  # fmt: skip
        res = _run(cfg, out, server.base_url)
        n_requests = len(server.requests)
    summaries = _summaries(out)
    assert len(summaries) == 16 and len({s.episode_id for s in summaries}) == 16
    spent = sum(s.tokens.root.completion_tokens + s.tokens.sub.completion_tokens for s in summaries)
    per_episode = len(EXPLORE) // 4 + len(DELEGATE) // 4 + 3  # uncapped: 16 x this
    assert 16 * per_episode > 2 * cap + 100  # uncapped, each node alone would pass its own cap
    in_flight = 2  # episodes running at once (one per node)
    assert cap <= spent <= cap + in_flight * (len(DELEGATE) // 4), spent
    capped = [s for s in summaries if s.status == "budget_exceeded"]
    assert capped and len(capped) < 16
    placements = _placements(out)
    placed = {p.episode_id: nodes.node_of(p.node_id) for p in placements}
    assert {placed[s.episode_id] for s in capped} == {"head", "b"}  # the cap reached both nodes
    # once an episode was refused, nothing dispatched later completed, on either node
    first_refusal = min(
        p.committed_at for p in placements if p.episode_id in {s.episode_id for s in capped}
    )
    status = {s.episode_id: s.status for s in summaries}
    later = [p for p in placements if p.dispatched_at > first_refusal]
    assert later and all(status[p.episode_id] == "budget_exceeded" for p in later)
    completed = [s for s in summaries if s.status == "completed"]
    assert n_requests < 16 * 5  # refused requests never reached the server
    assert res.unfinished == [] and len(completed) + len(capped) <= 16


def test_request_rate_holds_for_the_whole_cluster(
    nodes: Nodes, cuad_room3: Path, tmp_path: Path
) -> None:
    """300 requests per minute for the run: requests start at least 0.2 s apart across both
    nodes, so n requests span >= (n - 1) x 0.2 s (a limiter per node would allow about half).
    Only a lower bound on time is asserted (a busy machine can only make it slower)."""
    arrivals: list[float] = []
    scripted = _handler()

    def handler(request: dict[str, Any]) -> Any:
        arrivals.append(time.monotonic())
        return scripted(request)

    handler.models = ["root", "sub"]  # type: ignore[attr-defined]
    with FakeOpenAIServer(handler) as server:
        cfg = _config(cuad_room3, server.base_url, episodes=4, requests_per_minute=300)
        res = _run(cfg, tmp_path / "run", server.base_url)
    assert len(res.summaries) == 4 and all(s.status == "completed" for s in res.summaries)
    placed = {nodes.node_of(p.node_id) for p in _placements(tmp_path / "run")}
    assert placed == {"head", "b"}
    n = len(arrivals)
    assert n == 4 * 5  # 2 root turns + 3 sub-calls per episode
    # the first request may start at once; each later one waits for its 0.2 s slot (a little
    # slack for the clock of the server's thread vs the limiter's)
    assert max(arrivals) - min(arrivals) >= (n - 1) * 0.2 - 0.1, (n, max(arrivals) - min(arrivals))


def test_server_failure_on_ray_records_attempts_stops_and_resumes(
    nodes: Nodes, cuad_room3: Path, tmp_path: Path
) -> None:
    """The fail-fast guarantee of a local run, on the cluster: a root server that refuses
    (HTTP 401) cuts the running episodes short (attempts.jsonl, written by the driver), no
    further episode starts, and the same command finishes the run once the server is back."""
    from rlmdistill.collect.attempts import UnfinishedEpisodes
    from rlmdistill.collect.main import check_finished
    from rlmdistill.testing.fake_openai import FakeReply
    from rlmdistill.traces.schema import AttemptRecord

    down = {"root": True}
    scripted = _handler()

    def handler(request: dict[str, Any]) -> Any:
        if down["root"] and request.get("model") == "root":
            return FakeReply.error(401, "invalid key")
        return scripted(request)

    handler.models = ["root", "sub"]  # type: ignore[attr-defined]
    out = tmp_path / "run"
    with FakeOpenAIServer(handler, latency_s=0.2) as server:
        cfg = _config(cuad_room3, server.base_url, episodes=6)
        first = _run(cfg, out, server.base_url)
        with pytest.raises(UnfinishedEpisodes, match="3 not started"):
            check_finished(first)
        attempts = list(parse_records(out / "attempts.jsonl", AttemptRecord))
        assert len(attempts) == 3 and len(first.unfinished) == 3 and first.not_started == 3
        assert {a.cause for a in attempts} == {"auth"} and not any(a.final for a in attempts)
        assert not (out / "episodes.jsonl").exists() or _summaries(out) == []
        down["root"] = False
        second = _run(cfg, out, server.base_url)
    check_finished(second)
    summaries = _summaries(out)
    assert len(summaries) == 6 and len({s.episode_id for s in summaries}) == 6
    assert all(s.status == "completed" for s in summaries)
    assert {a.episode_id for a in attempts} <= {s.episode_id for s in summaries}
    assert len(list(parse_records(out / "attempts.jsonl", AttemptRecord))) == 3


def test_cli_collect_joins_the_cluster_by_address(
    nodes: Nodes, cuad_room3: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    with FakeOpenAIServer(_handler(), latency_s=0.2) as server:
        url = server.base_url
        proc = subprocess.run(
            [sys.executable, "-m", "rlmdistill.cli", "collect", "--room", str(cuad_room3),
             "--root", f"openai:root@{url}", "--sub", f"openai:sub@{url}", "--episodes", "3",
             "--out", str(out), "--no-progress", "--prefill", "", "--executor", "ray",
             "--ray-address", nodes.cluster.address, "--ray-episodes-per-node", "1"],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert len({s.episode_id for s in _summaries(out)}) == 3
    used = {nodes.node_of(p.node_id) for p in _placements(out)}
    assert used == {"head", "b"}  # 1 episode per node at a time: both nodes took some
    assert "ray: episodes per node:" in proc.stderr
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["config"]["executor"] == "ray"
    assert manifest["config"]["ray"]["address"] == nodes.cluster.address


def test_node_without_a_sandbox_stops_the_run_before_any_episode(
    nodes: Nodes, cuad_room3: Path, tmp_path: Path
) -> None:
    node_d = nodes.add("d", 1, RLMDISTILL_BWRAP="/nonexistent/bwrap")
    try:
        d_id = node_d.node_id
        with FakeOpenAIServer(_handler()) as server:
            cfg = _config(cuad_room3, server.base_url, episodes=4)
            with pytest.raises(ValueError) as info:
                _run(cfg, tmp_path / "run", server.base_url)
            assert server.requests == []  # no episode started anywhere
        msg = str(info.value)
        assert f"node 127.0.0.1/{d_id[:8]} [d, slots] cannot run episodes" in msg
        assert "SandboxUnavailable" in msg and "/nonexistent/bwrap" in msg
        assert not (tmp_path / "run" / "episodes.jsonl").exists()
    finally:
        nodes.cluster.remove_node(node_d)


def _judge_reply(request: dict[str, Any]) -> str:
    """PASS for criteria whose id sorts first of its pair, FAIL otherwise (deterministic)."""
    match = re.search(r'for these \d+ ids: ((?:"[^"]*"(?:, )?)+)', last_user_message(request))
    assert match
    ids = json.loads("[" + match.group(1) + "]")
    verdicts = [{"id": c, "verdict": "PASS" if i % 2 == 0 else "FAIL", "reason": f"r {c}"}
                for i, c in enumerate(ids)]  # fmt: skip
    return json.dumps({"verdicts": verdicts})


def test_llm_judge_requests_spread_over_nodes_give_the_same_verdicts(
    nodes: Nodes, cuad_room3: Path, tmp_path: Path
) -> None:
    from rlmdistill.judge.main import JudgeConfig, run
    from rlmdistill.judge.run import load_verdicts

    with FakeOpenAIServer(_handler(), latency_s=0.0) as server:
        cfg = _config(cuad_room3, server.base_url, episodes=3)
        _run(cfg, tmp_path / "a", server.base_url, executor="thread")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    judge = FakeOpenAIServer(_judge_reply, latency_s=0.2, models=["judge"])
    with judge:
        spec = f"openai:judge@{judge.base_url}"
        spread = run(JudgeConfig(run_dir=tmp_path / "a", judge=spec, criteria_per_request=2,
                                 concurrency=1, executor="ray",
                                 ray=RayOptions(slots_resource="slots")))  # fmt: skip
        n_spread = len(judge.requests)
        local = run(JudgeConfig(run_dir=tmp_path / "b", judge=spec, criteria_per_request=2,
                                concurrency=1))  # fmt: skip
        n_local = len(judge.requests) - n_spread
    got = [
        (v.episode_id, v.criterion_id, v.verdict, v.reason)
        for v in load_verdicts(tmp_path / "a", spread.grader_id)
    ]
    want = [
        (v.episode_id, v.criterion_id, v.verdict, v.reason)
        for v in load_verdicts(tmp_path / "b", local.grader_id)
    ]
    assert sorted(got) == sorted(want) and len(got) > 0
    assert {v for *_, v, _ in got} >= {"PASS"}
    assert n_spread == n_local > 0  # each criterion batch asked once either way
    assert spread.stats is not None and spread.stats.requests == n_spread
    assert spread.requests_per_node is not None and len(spread.requests_per_node) == 2
    assert sum(spread.requests_per_node.values()) == n_spread
    # the usage log is the driver's, in the run folder, one line per request
    usage = (
        (tmp_path / "a" / "verdicts" / f"{spread.grader_id}.usage.jsonl").read_text().splitlines()
    )
    assert len(usage) == n_spread


def test_node_that_joins_mid_run_gets_episodes(
    nodes: Nodes, cuad_room3: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rlmdistill.collect.ray_executor as ray_executor

    monkeypatch.setattr(ray_executor, "NODE_POLL_S", 1.0)
    out = tmp_path / "run"
    result: dict[str, Any] = {}
    with FakeOpenAIServer(_handler(), latency_s=1.5) as server:
        cfg = _config(cuad_room3, server.base_url, episodes=12)
        worker = threading.Thread(target=lambda: result.update(res=_run(cfg, out, server.base_url)))
        worker.start()
        deadline = time.monotonic() + 240
        while len(server.requests) < 3 and time.monotonic() < deadline and worker.is_alive():
            time.sleep(0.05)  # the run has started on head and b
        node_e = nodes.add("e", 2)
        try:
            worker.join(timeout=600)
            assert not worker.is_alive()
        finally:
            nodes.cluster.remove_node(node_e)
    assert len(result["res"].summaries) == 12
    placed = [p.node_id for p in _placements(out)]
    assert len(set(placed)) == 3 and placed.count(node_e.node_id) >= 1  # e took episodes
    assert len({s.episode_id for s in _summaries(out)}) == 12


def test_node_removed_mid_run_loses_nothing_and_duplicates_nothing(
    nodes: Nodes, cuad_room3: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node_c = nodes.add("c", 2)
    out = tmp_path / "run"
    result: dict[str, Any] = {}
    with FakeOpenAIServer(_handler(), latency_s=2.0) as server:
        cfg = _config(cuad_room3, server.base_url, episodes=8)

        def run() -> None:
            try:
                result["res"] = _run(cfg, out, server.base_url)
            except BaseException as exc:  # re-raised in the test thread
                result["exc"] = exc

        worker = threading.Thread(target=run)
        worker.start()
        # every slot busy: head 1 + b 2 + c 2 first root requests in flight
        deadline = time.monotonic() + 240
        while len(server.requests) < 5 and time.monotonic() < deadline and worker.is_alive():
            time.sleep(0.05)
        assert len(server.requests) >= 5, "episodes never started on all nodes"
        c_id = node_c.node_id
        nodes.cluster.remove_node(node_c)
        worker.join(timeout=600)
        assert not worker.is_alive()
    if "exc" in result:
        raise result["exc"]
    res: CollectResult = result["res"]
    summaries = _summaries(out)
    ids = [s.episode_id for s in summaries]
    assert len(ids) == 8 and len(set(ids)) == 8  # none lost, none twice
    assert all(s.status == "completed" for s in summaries)
    assert res.not_started == 0 and len(res.summaries) == 8
    placements = _placements(out)
    assert sorted(p.episode_id for p in placements) == sorted(ids)
    assert all(p.node_id != c_id for p in placements)  # nothing committed from the lost node
    rescheduled = {p.episode_id for p in placements if p.rescheduled > 0}
    assert len(rescheduled) == 2  # the two c was running
    err = capsys.readouterr().err
    lost_lines = [line for line in err.splitlines() if f"/{c_id[:8]} [c, slots] lost (" in line]
    assert len(lost_lines) == 1, err
    assert "rescheduled 2 episode(s)" in lost_lines[0]
    assert all(eid in lost_lines[0] for eid in rescheduled)
    totals = [line for line in err.splitlines() if line.startswith("ray: episodes per node:")]
    assert len(totals) == 1 and "[c, slots]: 0 done (2 failed, lost)" in totals[0]
    for eid in ids:  # every trajectory whole, ending with its EpisodeEnd
        assert isinstance(_trajectory(out, eid)[-1], EpisodeEnd)
