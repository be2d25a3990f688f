"""The Ray executor's settings without a cluster: operational (out of episode ids), a clear
error naming the extra when Ray is missing, node selection from ``ray.nodes()`` entries, and a
room shipped to a node checked by its content hash."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from rlmdistill.collect.config import CollectConfig, RayOptions, episode_id
from rlmdistill.collect.ray_executor import (
    RAY_EXTRA,
    RayUnavailable,
    RoomMismatch,
    ShippedRoom,
    eligible_nodes,
    import_ray,
)
from rlmdistill.rooms import DataRoom
from rlmdistill.testing.fake_openai import FakeOpenAIServer, ScriptedHandler


def _cfg(**extra: object) -> CollectConfig:
    return CollectConfig.model_validate(
        {"rooms": ["/r"], "root": "openai:root@http://127.0.0.1:9/v1", "sub": "local:x", **extra}
    )


def test_executor_and_ray_options_leave_episode_ids_unchanged() -> None:
    base = _cfg()
    ray = _cfg(
        executor="ray",
        ray={
            "address": "ray://head:10001",
            "episodes_per_node": 16,
            "slots_resource": "rlm_episodes",
            "node_resources": {"collector": 1},
            "rooms": "shared_fs",
            "max_reschedules": 5,
        },
    )
    assert ray.fingerprint() == base.fingerprint()
    assert episode_id(ray, "h" * 16, "t", 3) == episode_id(base, "h" * 16, "t", 3)
    # a config written before these fields existed (an older run.json) loads with defaults
    old = base.model_dump(mode="json")
    del old["executor"], old["ray"]
    loaded = CollectConfig.model_validate(old)
    assert loaded.executor == "thread" and loaded.ray == RayOptions()
    assert loaded.fingerprint() == base.fingerprint()
    # an episode-defining field still changes ids (the check can fail)
    assert _cfg(seed=1).fingerprint() != base.fingerprint()


def test_unknown_ray_option_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="episodes_per_nod"):
        _cfg(executor="ray", ray={"episodes_per_nod": 2})
    with pytest.raises(ValueError, match="executor"):
        _cfg(executor="dask")


def test_missing_ray_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(RayUnavailable) as info:
        import_ray()
    assert RAY_EXTRA in str(info.value) and "rlmdistill[ray]" in str(info.value)
    assert isinstance(info.value, ValueError)  # the CLI prints it and exits 2


def test_cli_executor_ray_without_ray_exits_2_and_writes_nothing(
    cuad_room3: Path, tmp_path: Path
) -> None:
    """``collect --executor ray`` where Ray cannot be imported: exit 2, the extra named, and
    not even ``run.json`` written (the same --out works once Ray is installed)."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "ray.py").write_text("raise ImportError('No module named ray (test shim)')\n")
    env = {
        **os.environ,
        "RLMDISTILL_API_KEY": "x",
        "PYTHONPATH": os.pathsep.join([str(shim), os.environ.get("PYTHONPATH", "")]),
    }
    out = tmp_path / "run"
    with FakeOpenAIServer(ScriptedHandler(["FINAL(x)"])) as server:
        proc = subprocess.run(
            [sys.executable, "-m", "rlmdistill.cli", "collect", "--room", str(cuad_room3),
             "--root", f"openai:root@{server.base_url}", "--sub", f"openai:sub@{server.base_url}",
             "--episodes", "1", "--out", str(out), "--no-progress", "--prefill", "",
             "--executor", "ray", "--ray-address", "127.0.0.1:1"],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert server.requests == []
    assert proc.returncode == 2, proc.stderr
    assert "rlmdistill[ray]" in proc.stderr.replace("\n", "")
    assert not out.exists()


def _node(node_id: str, alive: bool = True, **resources: float) -> dict[str, object]:
    return {
        "NodeID": node_id,
        "Alive": alive,
        "NodeManagerAddress": "127.0.0.1",
        "Resources": {"CPU": 1.0, f"node:{node_id}": 1.0, **resources},
    }


def test_eligible_nodes_follow_resources_and_caps() -> None:
    nodes = [
        _node("a" * 56, slots=2.0, collector=1.0),
        _node("b" * 56, slots=3.0),
        _node("c" * 56, collector=1.0),
        _node("d" * 56, alive=False, slots=4.0, collector=1.0),
    ]
    caps = {n[0][0]: n[2] for n in eligible_nodes(nodes, RayOptions(episodes_per_node=5))}
    assert caps == {"a": 5, "b": 5, "c": 5}  # dead node d left out
    by_slots = eligible_nodes(nodes, RayOptions(slots_resource="slots"))
    assert [(n[0][0], n[2]) for n in by_slots] == [("a", 2), ("b", 3)]  # c has no slots
    both = eligible_nodes(
        nodes, RayOptions(slots_resource="slots", node_resources={"collector": 1})
    )
    assert [(n[0][0], n[2]) for n in both] == [("a", 2)]
    assert eligible_nodes(nodes, RayOptions(node_resources={"gpu_judge": 1})) == []
    label = by_slots[0][1]
    assert label == f"127.0.0.1/{'a' * 8} [collector, slots]"


def test_shipped_room_rebuilds_the_same_room_and_catches_a_wrong_copy(cuad_room3: Path) -> None:
    room = DataRoom.load(cuad_room3)
    shipped = ShippedRoom.of(room)
    again = shipped.load()
    assert again.room_hash == room.room_hash
    assert again.texts() == room.texts()
    assert [d.folder for d in again.documents] == [d.folder for d in room.documents]
    assert again.task is not None and room.task is not None and again.task.id == room.task.id
    assert (again.task.title, again.task.instructions) == (room.task.title, room.task.instructions)
    # what nodes get holds no rubric criterion and no gold evidence of one
    assert room.task.criteria and again.task.criteria == []
    # (gold spans are document text, which nodes need; the criteria naming them are not)
    blob = pickle.dumps(shipped)
    assert not any(c.id.encode() in blob for c in room.task.criteria)
    assert not any(c.match_criteria.encode() in blob for c in room.task.criteria)
    doc_id, folder, text, enc, rep = shipped.documents[0]
    bad = ShippedRoom(
        shipped.room_id,
        shipped.room_hash,
        shipped.path,
        shipped.task,
        [(doc_id, folder, text + " (edited)", enc, rep), *shipped.documents[1:]],
        shipped.skipped,
    )
    with pytest.raises(RoomMismatch, match=room.room_hash):
        bad.load()


def test_ray_options_round_trip_through_run_json_shape() -> None:
    cfg = _cfg(executor="ray", ray={"slots_resource": "slots"})
    again = CollectConfig.model_validate(json.loads(cfg.model_dump_json()))
    assert again == cfg


def test_loop_passes_the_executor_to_every_collect_stage(tmp_path: Path) -> None:
    from rlmdistill.loop.config import ExperimentConfig

    exp = ExperimentConfig.model_validate(
        {
            "name": "x",
            "workspace": str(tmp_path),
            "train_rooms": ["/a"],
            "holdout_rooms": ["/b"],
            "base": "local:smollm2-135m",
            "sub": "local:smollm2-135m",
            "executor": "ray",
            "ray": {"address": "auto", "episodes_per_node": 8},
            "collect_train": {"episodes": 2},
            "collect_eval": {"executor": "thread", "ray": {"episodes_per_node": 2}},
        }
    )
    assert exp.collect_train == {
        "episodes": 2,
        "executor": "ray",
        "ray": {"address": "auto", "episodes_per_node": 8},
    }
    assert exp.collect_eval["executor"] == "thread"  # the section's own value wins
    assert exp.collect_eval["ray"] == {"address": "auto", "episodes_per_node": 2}
    cfgs = [
        CollectConfig.model_validate({**section, "rooms": [], "root": exp.base, "sub": exp.sub})
        for section in (exp.collect_train, {"episodes": 2})
    ]
    assert cfgs[0].ray.episodes_per_node == 8
    assert cfgs[0].fingerprint() == cfgs[1].fingerprint()  # same episodes with or without Ray


def _free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_cli_ray_address_with_no_cluster_exits_2_and_writes_nothing(
    cuad_room3: Path, tmp_path: Path
) -> None:
    """``collect --executor ray --ray-address X`` with nothing at X: exit 2 with the address
    named, before run.json (Ray's own connection retries ran after it was written)."""
    port = _free_port()
    out = tmp_path / "run"
    env = {**os.environ, "RLMDISTILL_API_KEY": "x"}
    env.pop("RAY_ADDRESS", None)
    with FakeOpenAIServer(ScriptedHandler(["FINAL(x)"])) as server:
        proc = subprocess.run(
            [sys.executable, "-m", "rlmdistill.cli", "collect", "--room", str(cuad_room3),
             "--root", f"openai:root@{server.base_url}", "--sub", f"openai:sub@{server.base_url}",
             "--episodes", "1", "--out", str(out), "--no-progress", "--prefill", "",
             "--executor", "ray", "--ray-address", f"127.0.0.1:{port}"],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert server.requests == []
    assert proc.returncode == 2, proc.stderr
    assert f"127.0.0.1:{port}" in proc.stderr.replace("\n", "")
    assert not out.exists()


def test_ray_address_check_reads_every_address_form() -> None:
    import socket

    from rlmdistill.cluster.ray_cluster import (
        RayClusterUnreachable,
        _host_port,
        check_address,
    )

    assert _host_port("10.0.0.5:6379") == ("10.0.0.5", 6379)
    assert _host_port("ray://head") == ("head", 10001)
    assert _host_port("ray://head:12345") == ("head", 12345)
    assert _host_port("[::1]:6379") == ("::1", 6379)
    assert _host_port("local") is None and _host_port("auto") is None
    with pytest.raises(RayClusterUnreachable, match="no port"):
        _host_port("head")
    port = _free_port()
    with pytest.raises(RayClusterUnreachable, match=f"127.0.0.1:{port}"):
        check_address(f"ray://127.0.0.1:{port}", timeout_s=2.0)
    with socket.socket() as listener:  # something answers: the check passes
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        check_address(f"127.0.0.1:{listener.getsockname()[1]}", timeout_s=2.0)
