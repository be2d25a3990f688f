"""Online RL for the root (issue 23): the harness rollout_func's rows against the episodes it
wrote, token-exact multi-turn prompts, config checks, and (slow) 3 GRPO steps on CPU."""

from __future__ import annotations

import json
import statistics
from itertools import chain
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rlmdistill.rl.config import RLConfig, build_config
from rlmdistill.testing.rl_rewards import distinct_root_tokens, mean_root_logprob
from rlmdistill.traces.runs import load_summaries, load_trajectory
from rlmdistill.traces.tokens import prompt_ids

TEST_REWARD = "rlmdistill.testing.rl_rewards:distinct_root_tokens"
TINY_COLLECT = {
    "limits": {"max_turns": 2},
    "root_sampling": {"max_tokens": 12},
    "sub_sampling": {"max_tokens": 8, "temperature": 0.0},
    "few_shot": False,
    "prefill": "```repl\n",
}


def _config(room: Path, out: Path, base: Path, **kw: Any) -> RLConfig:
    return build_config(
        None,
        {
            "rooms": [str(room)],
            "out": str(out),
            "base": str(base),
            "sub": f"local:{base}",
            "num_generations": 3,
            "reward": TEST_REWARD,
            "collect": TINY_COLLECT,
            **kw,
        },
    )


def test_config_refuses_what_cannot_run(tmp_path: Path) -> None:
    """rooms_per_step above the room count makes TRL's sampler yield no batch; rl owns the
    collect fields that define a step; a reward must be built in or importable."""
    with pytest.raises(ValueError, match="rooms_per_step 2 > 1 room"):
        build_config(None, {"rooms": ["a"], "out": "o", "rooms_per_step": 2})
    with pytest.raises(ValueError, match="seed are set by rl"):
        build_config(None, {"rooms": ["a"], "out": "o", "collect": {"seed": 3}})
    with pytest.raises(ValueError, match="reward 'judge'"):
        build_config(None, {"rooms": ["a"], "out": "o", "reward": "judge"})
    cfg = build_config(None, {"rooms": ["a"], "out": "o"})
    assert cfg.sub_spec == "local:smollm2-135m" and cfg.reward == "pass_rate"


def test_test_rewards_by_hand() -> None:
    """Turns generating [5, 6, 5] and [7]: distinct {5, 6, 7} -> 3 / 10; their logprobs
    [-1, -3] and [-2] -> mean -2."""
    turn = lambda ids, lps: SimpleNamespace(  # noqa: E731
        tokens=SimpleNamespace(completion_ids=ids, logprobs=lps)
    )
    traj = SimpleNamespace(
        turns=[turn([5, 6, 5], [-1.0, -3.0]), turn([7], [-2.0]), SimpleNamespace(tokens=None)]
    )
    assert distinct_root_tokens(None, traj) == pytest.approx(0.3)  # type: ignore[arg-type]
    assert mean_root_logprob(None, traj) == pytest.approx(-2.0)  # type: ignore[arg-type]


def test_rollout_rows_match_the_episodes_it_wrote(
    tmp_path: Path, cuad_room3: Path, tiny_llama_dir: Path
) -> None:
    """One rollout_func call for a group of 3 on the 3-contract CUAD room, with a tiny random
    Llama (real SmolLM2 tokenizer) as the policy: one row per prompt, in prompt order; each row
    is its episode's root turns as one sequence (prompt = turn 0's exact prompt ids, mask 1
    exactly on the generated ids, logprobs 0.0 under mask 0); rewards are the configured reward
    of each episode; the episodes are a normal run folder under rollouts/step-000001."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlmdistill.models.local import LocalChatClient
    from rlmdistill.rl.rollout import HarnessRollout
    from rlmdistill.rooms import DataRoom

    cfg = _config(cuad_room3, tmp_path / "out", tiny_llama_dir)
    room = DataRoom.load(cfg.rooms[0])
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    model.train()
    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    trainer = SimpleNamespace(
        state=SimpleNamespace(global_step=0),
        accelerator=SimpleNamespace(unwrap_model=lambda m: m),
        model=model,
    )
    with LocalChatClient(tiny_llama_dir, dtype="float32") as sub:
        rollout = HarnessRollout(cfg, {str(room.path): room}, sub, tok)
        prompts = [str(room.path)] * 3
        out = rollout(prompts, trainer)
    assert model.training  # restored after sampling in eval mode

    run_dir = tmp_path / "out" / "rollouts" / "step-000001"
    summaries = sorted(load_summaries(run_dir), key=lambda s: s.sample_index)
    assert [s.sample_index for s in summaries] == [0, 1, 2]
    assert out["rlm_episode_id"] == [s.episode_id for s in summaries]
    n = len(prompts)
    for key in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "rlm_reward"):
        assert len(out[key]) == n, key
    multi_turn = 0
    for i, s in enumerate(summaries):
        traj = load_trajectory(run_dir, s.episode_id)
        turns = sorted(traj.turns, key=lambda t: t.turn)
        prompts_i = prompt_ids(turns)
        comp, mask, lps = out["completion_ids"][i], out["env_mask"][i], out["logprobs"][i]
        assert len(comp) == len(mask) == len(lps)
        assert out["prompt_ids"][i] == prompts_i[0]
        generated = [t.tokens.completion_ids for t in turns]
        assert [c for c, m in zip(comp, mask, strict=True) if m == 1] == list(chain(*generated))
        assert all(lp == 0.0 for lp, m in zip(lps, mask, strict=True) if m == 0)
        assert [lp for lp, m in zip(lps, mask, strict=True) if m == 1] == list(
            chain(*(t.tokens.logprobs for t in turns))
        )
        # the whole episode is the last prompt + its completion: token-exact across turns
        assert out["prompt_ids"][i] + comp == prompts_i[-1] + generated[-1]
        if len(turns) > 1:
            multi_turn += 1
            assert 0 in mask  # the REPL observation between turns is masked out
        assert out["rlm_reward"][i] == pytest.approx(distinct_root_tokens(s, traj))
    assert multi_turn >= 1  # max_turns 2 and no memo from a random model: a second turn ran
    rec = rollout.history[-1]
    assert rec["step"] == 1 and rec["groups"] == 1 and rec["episodes"] == 3
    assert rec["group_rewards"][room.room_id] == out["rlm_reward"]
    assert rec["zero_variance_groups"] == int(len(set(out["rlm_reward"])) == 1)


@pytest.mark.slow
def test_three_grpo_steps_on_cpu(tmp_path: Path, cuad_room3: Path, tiny_llama_dir: Path) -> None:
    """Acceptance: 3 GRPO steps on CPU (tiny random Llama with the real SmolLM2 tokenizer as
    the root, LoRA; a frozen copy as the sub; K=3 episodes of the CUAD room per step) with a
    reward that varies within groups: rewards and KL are logged per step to rl_log.jsonl,
    TRL's advantages are non-zero, the saved LoRA B matrices (initialised to 0) are not 0, and
    a resume from the last checkpoint with more steps continues at step 4."""
    from safetensors.torch import load_file

    from rlmdistill.rl import run
    from rlmdistill.rl.train import read_rl_manifest

    out = tmp_path / "adapter"
    cfg = _config(
        cuad_room3,
        out,
        tiny_llama_dir,
        max_steps=3,
        learning_rate=1e-2,
        reward="rlmdistill.testing.rl_rewards:mean_root_logprob",
    )
    res = run(cfg, progress=False)
    assert res.global_step == 3
    lines = [json.loads(x) for x in (out / "rl_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [1, 2, 3]
    for r in lines:
        rewards = r["group_rewards"]
        assert len(rewards) == 1 and len(next(iter(rewards.values()))) == 3
        assert r["reward_mean"] == pytest.approx(sum(next(iter(rewards.values()))) / 3)
        # TRL averages rewards in float32: about 7 significant digits
        assert r["trl"]["reward"] == pytest.approx(r["reward_mean"], rel=1e-5)
        assert r["kl"] is not None and "loss" in r
        assert len(r["advantages"]) == 3
    varied = [r for r in lines if r["zero_variance_groups"] == 0]
    assert varied, "no group with reward spread in 3 steps"
    assert any(abs(a) > 0 for r in varied for a in r["advantages"])
    for r in lines:  # TRL's group advantage: (r - mean) / (sample std + 1e-4), float32
        g = next(iter(r["group_rewards"].values()))
        mean, sd = statistics.fmean(g), statistics.stdev(g)
        expected = [(x - mean) / (sd + 1e-4) for x in g]
        assert r["advantages"] == pytest.approx(expected, rel=1e-3, abs=1e-3)
    weights = load_file(out / "adapter_model.safetensors")
    lora_b = [v for k, v in weights.items() if "lora_B" in k]
    assert lora_b and any(float(v.abs().max()) > 0 for v in lora_b)
    assert (out / "adapter_config.json").is_file()
    manifest = read_rl_manifest(out / "rl.json")
    assert manifest.status == "completed" and [s["step"] for s in manifest.steps] == [1, 2, 3]
    assert manifest.base_path == str(tiny_llama_dir.resolve())

    res2 = run(cfg.model_copy(update={"max_steps": 4}), resume=True, progress=False)
    assert res2.resumed_from is not None and res2.resumed_from.endswith("checkpoint-3")
    assert [r["step"] for r in res2.steps] == [4]
    manifest = read_rl_manifest(out / "rl.json")
    assert [s["step"] for s in manifest.steps] == [1, 2, 3, 4]
    assert len(manifest.resumed_from) == 1


def test_cli_bad_config_and_nothing_to_resume(
    tmp_path: Path, cuad_room3: Path, capsys: Any
) -> None:
    """`rlmdistill rl` exits 2 with one line for a config that cannot run and for --resume
    without a checkpoint (before any model loads)."""
    from rlmdistill.rl.cli import rl_main

    bad = tmp_path / "bad.yaml"
    bad.write_text(f"rooms: [{cuad_room3}]\nout: {tmp_path / 'o'}\nrooms_per_step: 2\n")
    assert rl_main(bad, progress=False) == 2
    assert "rooms_per_step 2 > 1 room" in capsys.readouterr().err
    good = tmp_path / "good.yaml"
    good.write_text(f"rooms: [{cuad_room3}]\nout: {tmp_path / 'o'}\n")
    assert rl_main(good, resume=True, progress=False) == 2
    assert "no checkpoint in" in capsys.readouterr().err


def test_dr_grpo_divides_by_the_episodes_generation_budget(tmp_path: Path) -> None:
    """TRL's ``dr_grpo`` loss divides by ``max_completion_length``; left at TRL's default (512)
    it has nothing to do with an episode. ``rl`` sets it to max_turns x max_tokens of the
    rollouts: 2 x 12 = 24 with TINY_COLLECT, 6 x 256 = 1536 with rl's defaults (collect's
    default max_turns 6, rl's default root max_tokens 256)."""
    from trl import GRPOConfig

    from rlmdistill.rl.rollout import HarnessRollout
    from rlmdistill.rl.train import grpo_arguments

    for collect, budget in ((TINY_COLLECT, 24), ({}, 1536)):
        cfg = build_config(
            None,
            {"rooms": [str(tmp_path)], "out": str(tmp_path / "o"), "loss_type": "dr_grpo",
             "collect": collect},
        )  # fmt: skip
        rollout = HarnessRollout(cfg, {}, None, None)  # type: ignore[arg-type]
        rc = rollout.collect_config([str(tmp_path)], 1, 0)
        kwargs = grpo_arguments(cfg, rc, tmp_path / "ckpt", progress=False, cpu=True)
        args = GRPOConfig(**kwargs)
        assert args.loss_type == "dr_grpo"
        assert args.max_completion_length == budget != 512
        assert args.num_generations == 4 and args.per_device_train_batch_size == 4
        assert args.temperature == 1.0 and args.top_p == 1.0  # rl's rollout sampling
