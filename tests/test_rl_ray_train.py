"""GRPO under Ray Train (``rlmdistill rl --workers N``): the config's worker fields, the merge of
the ranks' rollout records, the driver's refusals (fast); and (slow, Ray) 2 workers on a
two-node loopback cluster: each rank rolls out its own rooms, rank 0's log merges them, the
workers end with equal weights and the adapter is saved.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

# the two-node loopback cluster of the SFT tests (a head and a node, 1 CPU each); importing
# that module also sets Ray's loopback-only switch before Ray is imported
from test_rl import TINY_COLLECT
from test_sft_ray_train import cluster, needs_ray  # noqa: F401

from rlmdistill.rl.config import build_config
from rlmdistill.rl.rollout import merge_rank_records, rank_record_path


def _record(step: int, room: str, rewards: list[float], **kw: Any) -> dict[str, Any]:
    zero = int(len(set(rewards)) == 1)
    return {
        "step": step,
        "run_dir": f"/o/rollouts/step-{step:06d}-rank{kw.pop('rank', 0)}",
        "episodes": len(rewards),
        "groups": 1,
        "zero_variance_groups": zero,
        "reward_mean": sum(rewards) / len(rewards),
        "reward_std": 0.0,
        "group_rewards": {room: rewards},
        "statuses": {"no_memo": len(rewards)},
        "generated_tokens": 10,
        "completion_tokens": 30,
        "turns_out_of_loss": 0,
        "sub_calls_per_rollout": kw.pop("sub_calls", 1.0),
        "staleness": 0.0,
        "stale_token_share": 0.0,
        "rollout_wall_s": kw.pop("wall", 1.0),
        **kw,
    }


def test_rank_records_merge_into_one_step_by_hand() -> None:
    """Rank 0: room a, rewards [0, 1]; rank 1: room b, [1, 1] (a zero-variance group), 3
    sub-calls per rollout against 1, 5 s of rollouts against 2: merged, 4 episodes, 2 groups,
    1 of zero variance, reward mean 0.75 and sample sd sqrt(0.25) = 0.5 over all four, 2
    sub-calls per rollout, the slowest rank's 5 s, statuses summed, rank 0's run folder first."""
    a = _record(3, "a", [0.0, 1.0], rank=0, wall=2.0, sub_calls=1.0)
    b = _record(3, "b", [1.0, 1.0], rank=1, wall=5.0, sub_calls=3.0)
    m = merge_rank_records([a, b])
    assert (m["episodes"], m["groups"], m["zero_variance_groups"]) == (4, 2, 1)
    assert m["reward_mean"] == pytest.approx(0.75)
    assert m["reward_std"] == pytest.approx(0.5)
    assert m["group_rewards"] == {"a": [0.0, 1.0], "b": [1.0, 1.0]}
    assert m["sub_calls_per_rollout"] == pytest.approx(2.0)
    assert m["rollout_wall_s"] == 5.0
    assert m["statuses"] == {"no_memo": 4}
    assert (m["generated_tokens"], m["completion_tokens"]) == (20, 60)
    assert m["run_dir"].endswith("rank0") and [d[-5:] for d in m["run_dirs"]] == ["rank0", "rank1"]
    assert m["ranks"] == 2 and m["step"] == 3
    with pytest.raises(ValueError, match="different steps"):
        merge_rank_records([a, _record(4, "b", [1.0])])
    with pytest.raises(ValueError, match="no rank record"):
        merge_rank_records([])
    assert rank_record_path(Path("/o"), 3, 1) == Path("/o/rollouts/step-000003-rank1.record.json")


def test_worker_fields_are_checked_and_left_out_of_a_one_process_dump() -> None:
    """Each worker draws its own rooms per step, so 2 workers need 2 rooms; served rollouts
    stay in one process; a one-process config dumps without the worker fields (rl.json and
    the loop's RL fingerprints as before), a 2-worker one with them."""
    with pytest.raises(ValueError, match=r"rooms_per_step 1 x workers 2 > 1 room"):
        build_config(None, {"rooms": ["a"], "out": "o", "workers": 2})
    with pytest.raises(ValueError, match="served trains in one process"):
        build_config(
            None,
            {
                "rooms": ["a", "b"],
                "out": "o",
                "workers": 2,
                "rollouts": "served",
                "serving": {"base_url": "http://127.0.0.1:1/v1", "model": "m"},
            },
        )
    one = build_config(None, {"rooms": ["a", "b"], "out": "o"})
    assert not one.uses_ray
    assert not {"workers", "ray_address", "gpus_per_worker", "max_failures"} & set(one.model_dump())
    two = build_config(None, {"rooms": ["a", "b"], "out": "o", "workers": 2})
    assert two.uses_ray and two.model_dump()["workers"] == 2


def test_an_occupied_output_folder_is_refused_before_ray_starts(
    tmp_path: Path, cuad_room3: Path
) -> None:
    from rlmdistill.rl.ray_train import train_ray
    from rlmdistill.rl.train import RLError

    out = tmp_path / "grpo"
    out.mkdir()
    (out / "rl.json").write_text("{}")
    cfg = build_config(
        None, {"rooms": [str(cuad_room3), str(cuad_room3)], "out": str(out), "workers": 2}
    )
    with pytest.raises(RLError, match="already holds an RL run"):
        train_ray(cfg)
    with pytest.raises(RLError, match="no checkpoint in"):
        train_ray(cfg, resume=True)


@pytest.mark.slow
@needs_ray
@pytest.mark.usefixtures("cluster")  # Ray is initialised: train_ray joins that cluster
def test_two_workers_roll_out_their_own_rooms_and_keep_equal_weights(
    tmp_path: Path, tiny_llama_dir: Path
) -> None:
    """2 Ray Train workers (gloo), 2 CUAD rooms, K = 2, 1 room per worker per step, 2 steps,
    a reward that varies within groups: each step has one step folder per rank, each holding
    its rank's 2 episodes of one room, and the two ranks' rooms differ; rank 0's rl_log.jsonl
    line of each step merges both (4 episodes, 2 groups, both rooms' rewards, the mean over
    the 4); the ranks end with equal weights (train_ray checks it) and rank 0 saved the
    adapter and a completed rl.json recording 2 workers."""
    from rlmdistill.rl.main import run
    from rlmdistill.rl.train import read_rl_manifest
    from rlmdistill.rooms.cuad import SAMPLE_SOURCE, build_cuad_room
    from rlmdistill.traces.runs import load_summaries

    rooms = []
    for seed in (0, 1):
        room = tmp_path / f"room{seed}"
        build_cuad_room(SAMPLE_SOURCE, room, 1, seed)
        rooms.append(str(room))
    out = tmp_path / "grpo"
    cfg = build_config(
        None,
        {
            "rooms": rooms,
            "out": str(out),
            "base": str(tiny_llama_dir),
            "sub": f"local:{tiny_llama_dir}",
            "num_generations": 2,
            "max_steps": 2,
            "beta": 0.0,
            "learning_rate": 1e-2,
            "save_steps": 1,
            "reward": "rlmdistill.testing.rl_rewards:mean_root_logprob",
            "collect": TINY_COLLECT,
            "workers": 2,
        },
    )
    res = run(cfg, progress=False)
    assert res.global_step == 2
    lines = [json.loads(x) for x in (out / "rl_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [1, 2]
    for r in lines:
        step = r["step"]
        assert (r["ranks"], r["episodes"], r["groups"]) == (2, 4, 2)
        seen = []
        for rank in (0, 1):
            run_dir = out / "rollouts" / f"step-{step:06d}-rank{rank}"
            summaries = load_summaries(run_dir)
            assert len(summaries) == 2 and len({s.room.path for s in summaries}) == 1
            seen.append(summaries[0].room.room_id)
            assert rank_record_path(out, step, rank).is_file()
        assert len(set(seen)) == 2, "both ranks rolled out the same room"
        assert sorted(r["group_rewards"]) == sorted(seen)
        rewards = [x for g in r["group_rewards"].values() for x in g]
        assert len(rewards) == 4
        assert r["reward_mean"] == pytest.approx(sum(rewards) / 4)
        # TRL's logged reward is the mean over every rank's rollouts (gathered), float32
        assert r["trl"]["reward"] == pytest.approx(r["reward_mean"], rel=1e-5)
    assert (out / "adapter_model.safetensors").is_file()
    manifest = read_rl_manifest(out / "rl.json")
    assert manifest.status == "completed" and manifest.config.workers == 2
    assert [s["step"] for s in manifest.steps] == [1, 2]
