"""Served rollouts for online RL (issue 41 item 2): the adapter is loaded into an
OpenAI-compatible server as a new version every sync_every steps, rollouts record their
version and the server's logprobs, stale rollouts are masked, and TRL's truncated importance
sampling weights come from the server's logprobs. The server is the project's fake OpenAI
server (it records LoRA loads and answers vLLM's return_token_ids with logprob -0.5 per id)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest

from rlmdistill.rl.config import RLConfig, build_config
from rlmdistill.rl.served import truncated_is_weights
from rlmdistill.testing.fake_openai import FakeOpenAIServer
from rlmdistill.traces.runs import load_manifest, load_summaries, load_trajectory

TEST_REWARD = "rlmdistill.testing.rl_rewards:distinct_root_tokens"
TINY_COLLECT = {
    "limits": {"max_turns": 2},
    "root_sampling": {"max_tokens": 24},
    "sub_sampling": {"max_tokens": 8, "temperature": 0.0},
    "few_shot": False,
    "prefill": "```repl\n",
}
SERVER_LOGPROB = -0.5  # the fake server's logprob of every returned token id


def test_truncated_importance_weights_by_hand() -> None:
    """Two rollouts, three tokens each; trainer minus server logprob d per token, masked.

    Row 0: d = [ln 4, ln 0.5, (masked) 9] -> token weights [4, 0.5, 1]: truncated at cap 2 ->
    [2, 0.5, 1]; masked (0 above the cap) -> [0, 0.5, 1]. Sequence weight exp(ln 4 + ln 0.5)
    = 2: truncated at cap 1.5 -> 1.5, masked -> 0; at cap 3 both keep 2.
    Row 1: d = [0, 0, 0] -> every weight 1."""
    trainer = [[math.log(4) - 1.0, math.log(0.5) - 1.0, 8.0], [-2.0, -3.0, -0.1]]
    server = [[-1.0, -1.0, -1.0], [-2.0, -3.0, -0.1]]
    mask = [[1, 1, 0], [1, 1, 1]]
    weights = lambda **kw: [  # noqa: E731 - flattened: approx compares flat lists
        w for row in truncated_is_weights(trainer, server, mask, **kw) for w in row
    ]
    assert weights(cap=2.0) == pytest.approx([2.0, 0.5, 1.0, 1.0, 1.0, 1.0])
    assert weights(cap=2.0, mode="token_mask") == pytest.approx([0.0, 0.5, 1.0, 1.0, 1.0, 1.0])
    assert weights(cap=1.5, mode="sequence_truncate") == pytest.approx([1.5, 1.0])
    assert weights(cap=1.5, mode="sequence_mask") == pytest.approx([0.0, 1.0])
    assert weights(cap=3.0, mode="sequence_mask") == pytest.approx([2.0, 1.0])
    with pytest.raises(ValueError, match="row 0"):
        truncated_is_weights([[0.0]], [[0.0, 1.0]], [[1]], cap=2.0)


def test_served_config_checks_and_in_process_dump_unchanged(tmp_path: Path) -> None:
    """served needs a server that loads adapters; serving without served is refused;
    prefetch with max_staleness 0 would mask every batch. An in-process config dumps without
    the served fields (rl.json and the loop's RL fingerprint as before them)."""
    base = {"rooms": ["a"], "out": "o"}
    serving = {"base_url": "http://127.0.0.1:1/v1", "model": "m"}
    with pytest.raises(ValueError, match="needs serving"):
        build_config(None, {**base, "rollouts": "served"})
    with pytest.raises(ValueError, match="only with rollouts: served"):
        build_config(None, {**base, "serving": serving})
    with pytest.raises(ValueError, match="load_adapters: false"):
        build_config(
            None, {**base, "rollouts": "served", "serving": {**serving, "load_adapters": False}}
        )
    with pytest.raises(ValueError, match="max_staleness 0 with prefetch"):
        build_config(None, {**base, "rollouts": "served", "serving": serving, "max_staleness": 0})
    plain = build_config(None, base)
    assert not {"rollouts", "serving", "sync_every", "is_cap"} & set(plain.model_dump())
    served = build_config(None, {**base, "rollouts": "served", "serving": serving, "is_cap": 3})
    dumped = json.loads(served.model_dump_json())
    assert dumped["rollouts"] == "served" and dumped["is_cap"] == 3.0
    assert RLConfig.model_validate(dumped) == served


def _handler() -> Any:
    counter = itertools.count()

    def handle(request: dict[str, Any]) -> str:  # a different program each call
        n = next(counter)
        return f"x = {7 ** (n % 5)}\nprint(x)\n```"

    return handle


def _capture_trl(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every generation batch TRL scored: its sampling logprobs, its own logprobs, the masks
    and the importance weights, as lists."""
    import trl

    seen: list[dict[str, Any]] = []
    original = trl.GRPOTrainer._generate_and_score_completions

    def wrapped(self: Any, inputs: Any) -> Any:
        out = original(self, inputs)
        seen.append(
            {
                k: out[k].tolist()
                for k in (
                    "sampling_per_token_logps",
                    "old_per_token_logps",
                    "importance_sampling_ratio",
                    "completion_mask",
                    "tool_mask",
                )
                if k in out
            }
        )
        return out

    monkeypatch.setattr(trl.GRPOTrainer, "_generate_and_score_completions", wrapped)
    return seen


def _served_run(
    tmp_path: Path,
    cuad_room3: Path,
    tiny_llama_dir: Path,
    server: FakeOpenAIServer,
    **kw: Any,
) -> tuple[Path, list[dict[str, Any]]]:
    from rlmdistill.rl import run

    out = tmp_path / "grpo"
    cfg = build_config(
        None,
        {
            "rooms": [str(cuad_room3)],
            "out": str(out),
            "base": str(tiny_llama_dir),
            "sub": f"openai:sub@{server.base_url}",
            "num_generations": 2,  # TRL's logprob pass over the 49k vocabulary is the cost here
            "reward": TEST_REWARD,
            "collect": TINY_COLLECT,
            "max_steps": 3,
            "learning_rate": 1e-2,
            "beta": 0.0,  # no reference pass: faster on 2 cores, nothing here needs the KL
            "save_steps": 10,  # no checkpoint (resume is test_rl.py's)
            "rollouts": "served",
            "serving": {"base_url": server.base_url, "model": "base"},
            **kw,
        },
    )
    res = run(cfg, progress=False)
    assert res.global_step == 3
    lines = [json.loads(x) for x in (out / "rl_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [1, 2, 3]
    return out, lines


def test_served_rollouts_load_each_version_and_weight_by_server_logprobs(
    tmp_path: Path, cuad_room3: Path, tiny_llama_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """3 GRPO steps, sync_every 1, prefetch one step ahead, against the fake server.

    Step s trains weights version s-1. Step 1 has no prefetch: generated by v0 (staleness 0);
    step 2's rollouts were prefetched during step 1 by v0 (weights v1: staleness 1); step 3's
    during step 2 by v1 (staleness 1). The server loads grpo-v0, -v1, -v2 in that order; v0 is
    unloaded when v1 is loaded, v1 when v2 is, v2 when the run ends. Every rollout's root
    requests name its version. TRL's sampling logprobs are the server's (-0.5 on every
    generated id, 0 elsewhere) and its importance weights are min(exp(trainer - server), 2)
    on generated ids (truncated IS, is_cap 2)."""
    from transformers import AutoTokenizer

    seen = _capture_trl(monkeypatch)
    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    with FakeOpenAIServer(_handler(), tokenizer=tok) as server:
        out, lines = _served_run(tmp_path, cuad_room3, tiny_llama_dir, server)
        assert [name for name, _ in server.adapter_loads] == ["grpo-v0", "grpo-v1", "grpo-v2"]
        assert server.adapter_loads[0][1] == str((out / "served" / "grpo-v0").resolve())
        assert server.loaded_adapters == {}  # all unloaded at the end
        root_models = [r["model"] for r in server.requests if r["model"] != "sub"]
    assert [r["policy_version"] for r in lines] == [0, 0, 1]
    assert [r["staleness"] for r in lines] == [0.0, 1.0, 1.0]
    assert [r["stale_token_share"] for r in lines] == [0.0, 0.0, 0.0]
    assert [r["prefetch"] for r in lines] == ["none", "hit", "hit"]
    assert [r["turns_out_of_loss"] for r in lines] == [0, 0, 0]  # canonical ids: whole episodes
    assert set(root_models) == {"grpo-v0", "grpo-v1"}  # v2 generated nothing (last step)
    for r, version in zip(lines, [0, 0, 1], strict=True):
        run_dir = Path(r["run_dir"])
        policy = json.loads((run_dir / "policy.json").read_text())
        assert policy == {"version": version, "model": f"grpo-v{version}"}
        assert f"grpo-v{version}@" in (load_manifest(run_dir).config.root or "")
        for s in load_summaries(run_dir):
            for t in load_trajectory(run_dir, s.episode_id).turns:
                assert t.tokens is not None and set(t.tokens.logprobs or []) == {SERVER_LOGPROB}
    assert not (out / "served").exists() or not any((out / "served").iterdir())

    assert len(seen) == 3
    for batch in seen:
        gen = [
            [c * m for c, m in zip(cm, tm, strict=True)]
            for cm, tm in zip(batch["completion_mask"], batch["tool_mask"], strict=True)
        ]
        assert sum(map(sum, gen)) > 0
        for lps, mask in zip(batch["sampling_per_token_logps"], gen, strict=True):
            assert [lp for lp, m in zip(lps, mask, strict=True) if m] == [SERVER_LOGPROB] * sum(
                mask
            )
        expected = truncated_is_weights(
            batch["old_per_token_logps"], batch["sampling_per_token_logps"], gen, cap=2.0
        )
        for got, want, mask in zip(batch["importance_sampling_ratio"], expected, gen, strict=True):
            assert [g for g, m in zip(got, mask, strict=True) if m] == pytest.approx(
                [w for w, m in zip(want, mask, strict=True) if m], rel=1e-5
            )
            # a random tiny model gives its ids far less than e^-0.5: weights well under the cap
            assert all(0 < w < 2.0 for w, m in zip(want, mask, strict=True) if m)
    for r in lines:  # TRL's logged mean weight is the mean over generated ids
        assert 0 < r["trl"]["sampling/importance_sampling_ratio/mean"] < 2.0


def test_served_rollouts_too_stale_are_masked(
    tmp_path: Path, cuad_room3: Path, tiny_llama_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sync_every 2, max_staleness 1, prefetch: v0 is loaded at step 1 and v2 at step 3 only.
    Step 1: v0, staleness 0; step 2 (prefetched during step 1 by v0, weights v1): 1; step 3
    (prefetched during step 2 by v0, the newest loaded; weights v2): 2 > 1, so every token of
    step 3 is masked (stale_token_share 1, TRL's loss mask all 0)."""
    from transformers import AutoTokenizer

    seen = _capture_trl(monkeypatch)
    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    with FakeOpenAIServer(_handler(), tokenizer=tok) as server:
        _, lines = _served_run(tmp_path, cuad_room3, tiny_llama_dir, server, sync_every=2)
        assert [name for name, _ in server.adapter_loads] == ["grpo-v0", "grpo-v2"]
    assert [r["policy_version"] for r in lines] == [0, 0, 0]
    assert [r["staleness"] for r in lines] == [0.0, 1.0, 2.0]
    assert [r["stale_token_share"] for r in lines] == [0.0, 0.0, 1.0]
    generated = [  # TRL's loss mask: completion mask x tool mask (padding has tool mask 1)
        [
            sum(c * t for c, t in zip(cm, tm, strict=True))
            for cm, tm in zip(b["completion_mask"], b["tool_mask"], strict=True)
        ]
        for b in seen
    ]
    assert all(n > 0 for n in generated[1]) and generated[2] == [0, 0]


class _StubPolicy:
    """Stands in for the trainer's peft model: ``save_pretrained`` writes an adapter folder."""

    def save_pretrained(self, path: str) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "adapter_config.json").write_text("{}")


def test_prefetch_miss_generates_fresh_and_close_unloads(
    tmp_path: Path, cuad_room3: Path, tiny_llama_dir: Path
) -> None:
    """ServedRollout called as TRL would, with a stub trainer (max_steps 3). Step 1 (weights
    v0): loads v0, generates now, prefetches step 2 for the same prompts. Step 2 asks for 3
    rollouts instead of 2: a miss; the prefetched folder moves to rollouts-unused/, v1 is
    loaded (v0 unloaded) and generates step 2 now (staleness 0). Step 3 takes the prefetch
    made by v1 (a hit, staleness 1) and prefetches nothing (last step). close() unloads v2;
    a close whose server is gone warns instead of raising."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from rlmdistill.rl.served import ServedRollout
    from rlmdistill.rooms import DataRoom

    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    room = DataRoom.load(cuad_room3)
    key = str(room.path)
    trainer = SimpleNamespace(
        state=SimpleNamespace(global_step=0),
        accelerator=SimpleNamespace(unwrap_model=lambda m: m, num_processes=1),
        model=_StubPolicy(),
        args=SimpleNamespace(max_steps=3),
    )
    with FakeOpenAIServer(_handler(), tokenizer=tok) as server:
        from rlmdistill.models.spec import open_client

        cfg = build_config(
            None,
            {
                "rooms": [str(cuad_room3)],
                "out": str(tmp_path / "grpo"),
                "base": str(tiny_llama_dir),
                "sub": f"openai:sub@{server.base_url}",
                "reward": TEST_REWARD,
                "collect": TINY_COLLECT,
                "rollouts": "served",
                "serving": {"base_url": server.base_url, "model": "base"},
            },
        )
        sub = open_client(cfg.sub_spec)
        rollout = ServedRollout(cfg, {key: room}, sub, tok)
        outs = []
        for step, n in enumerate([2, 3, 3]):
            trainer.state.global_step = step
            outs.append(rollout([key] * n, trainer))
        assert [len(o["completion_ids"]) for o in outs] == [2, 3, 3]
        assert [o["rlm_policy_version"][0] for o in outs] == [0, 1, 1]
        rollout.close()
        assert [name for name, _ in server.adapter_loads] == ["grpo-v0", "grpo-v1", "grpo-v2"]
        assert server.loaded_adapters == {}
        assert rollout.unloads == ["grpo-v0", "grpo-v1", "grpo-v2"]

        late = ServedRollout(cfg, {key: room}, sub, tok)
        late.publish(_StubPolicy(), 5)
        sub.close()
    recs = rollout.history
    assert [r["prefetch"] for r in recs] == ["none", "miss", "hit"]
    assert [r["staleness"] for r in recs] == [0.0, 0.0, 1.0]
    assert (rollout.prefetch_hits, rollout.prefetch_misses) == (1, 1)
    unused = tmp_path / "grpo" / "rollouts-unused" / "step-000002-1"
    assert json.loads((unused / "policy.json").read_text()) == {"version": 0, "model": "grpo-v0"}
    assert len(load_summaries(unused)) == 2
    step2 = tmp_path / "grpo" / "rollouts" / "step-000002"
    assert json.loads((step2 / "policy.json").read_text())["version"] == 1
    assert len(load_summaries(step2)) == 3
    with pytest.warns(RuntimeWarning, match="grpo-v5"):
        late.close()  # the server is gone: a warning, not an error hiding the run's own
