"""Served rollouts against a real vLLM server (CPU build): ``rlmdistill rl`` with
``rollouts: served`` trains SmolLM2-135M for 2 GRPO steps while the server loads each adapter
version at run time and generates the rollouts.

Slow (server start ~2.5 min on 2 shared cores, ~4 tokens/s). Skipped, saying why, when the vLLM
virtualenv is absent (``scripts/vllm_server.sh setup``), unless ``RLMDISTILL_REQUIRE_VLLM=1``.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import pytest
import urllib3

from rlmdistill.rl.config import build_config
from rlmdistill.testing.vllm_server import VLLMServer, venv_dir, venv_python
from rlmdistill.traces.runs import load_summaries, load_trajectory

pytestmark = pytest.mark.slow


def test_served_grpo_against_real_vllm(tmp_path: Path, cuad_room3: Path, smollm2_dir: Path) -> None:
    """2 steps, K=2, sync_every 1, prefetch: the server loads grpo-v0 and grpo-v1 (v0 unloaded
    when v1 loads, v1 when the run ends: /v1/models lists neither afterwards); step 1's
    rollouts come from v0 (staleness 0), step 2's were prefetched during step 1 by v0
    (staleness 1); every root turn records vLLM's token ids and logprobs; TRL's importance
    weights are finite and positive (the mismatch figures are printed)."""
    if venv_python() is None:
        why = f"no vLLM virtualenv at {venv_dir()}: run `scripts/vllm_server.sh setup`"
        if os.environ.get("RLMDISTILL_REQUIRE_VLLM") == "1":
            pytest.fail(why + " (RLMDISTILL_REQUIRE_VLLM=1)")
        pytest.skip(why)
    from rlmdistill.rl import run

    server = VLLMServer(smollm2_dir, "smol", max_model_len=2048, max_lora_rank=8)
    server.start()
    print(f"vLLM ready in {server.startup_s:.0f} s at {server.base_url}")
    try:
        out = tmp_path / "grpo"
        cfg = build_config(
            None,
            {
                "rooms": [str(cuad_room3)],
                "out": str(out),
                "base": str(smollm2_dir),
                "sub": f"openai:smol@{server.base_url}",
                "num_generations": 2,
                "max_steps": 2,
                "beta": 0.0,
                "save_steps": 10,
                "reward": "rlmdistill.testing.rl_rewards:distinct_root_tokens",
                "collect": {
                    "limits": {"max_turns": 2},
                    "root_sampling": {"max_tokens": 16},
                    "sub_sampling": {"max_tokens": 8, "temperature": 0.0},
                    "few_shot": False,
                    "prefill": "```repl\n",
                    "request_timeout_s": 600,
                },
                "rollouts": "served",
                "serving": {"base_url": server.base_url, "model": "smol"},
            },
        )
        started = time.monotonic()
        res = run(cfg, progress=False)
        wall = time.monotonic() - started
        models = urllib3.request("GET", server.base_url + "/models", timeout=30).json()
    finally:
        server.stop()
    assert res.global_step == 2
    assert not [m["id"] for m in models["data"] if m["id"].startswith("grpo-v")]
    lines = [json.loads(x) for x in (out / "rl_log.jsonl").read_text().splitlines()]
    assert [r["policy_version"] for r in lines] == [0, 0]
    assert [r["staleness"] for r in lines] == [0.0, 1.0]
    assert [r["prefetch"] for r in lines] == ["none", "hit"]
    for r in lines:
        run_dir = Path(r["run_dir"])
        for s in load_summaries(run_dir):
            for t in load_trajectory(run_dir, s.episode_id).turns:
                assert t.tokens is not None and t.tokens.logprobs is not None
                assert len(t.tokens.logprobs) == len(t.tokens.completion_ids or [])
        assert r["generated_tokens"] > 0 and 0 <= r["turns_out_of_loss"] <= 2  # K=2, 2 turns
        trl = r["trl"]
        ratio = trl["sampling/importance_sampling_ratio/mean"]
        assert math.isfinite(ratio) and 0 < ratio <= 2.0
        print(
            f"step {r['step']}: rollouts {r['rollout_wall_s']} s, generated tokens "
            f"{r['generated_tokens']} ({r['turns_out_of_loss']} turns out of the loss: "
            "re-tokenised by the chat template), |trainer - server| logprob mean "
            f"{trl['sampling/sampling_logp_difference/mean']:.4f} max "
            f"{trl['sampling/sampling_logp_difference/max']:.4f}, IS weight min "
            f"{trl['sampling/importance_sampling_ratio/min']:.4f} mean {ratio:.4f} max "
            f"{trl['sampling/importance_sampling_ratio/max']:.4f}, step {trl.get('step_time')} s"
        )
    print(f"2 served GRPO steps in {wall:.0f} s")
