"""``examples/vllm_local.yaml`` agrees with the server it talks to and with the prompt it uses.

Its first run could not finish: the root's ``max_tokens`` (192) was below the length of the
worked example's second block, so no few-shot episode could reach ``FINAL_VAR(memo)``, and the
client's fixed 120 s timeout, not a token budget, decided when a slow reply ended.
"""

from __future__ import annotations

import inspect
from pathlib import Path

from rlmdistill.collect.main import build_config
from rlmdistill.harness.prompts import worked_example
from rlmdistill.loop.config import load_experiment
from rlmdistill.testing.tokenizers import qwen25_tokenizer_dir
from rlmdistill.testing.vllm_server import VLLMServer

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "vllm_local.yaml"

SLOWEST_TOKENS_PER_S = 3.0
"""The slowest single-request decode rate measured for this server (Qwen2.5-Coder-0.5B on
the one core vLLM binds, machine shared: shared/RECIPES.md)."""


def sections() -> dict[str, dict]:  # type: ignore[type-arg]
    cfg = load_experiment(EXAMPLE)
    return {"collect_train": cfg.collect_train, "collect_eval": cfg.collect_eval}


def test_the_example_serves_the_base_id_then_loads_the_adapter() -> None:
    cfg = load_experiment(EXAMPLE)
    assert cfg.serving is not None and cfg.serving.load_adapters
    assert cfg.base_root() == "openai:qwen@http://127.0.0.1:8011/v1"  # the served base id
    assert cfg.sub == cfg.base_root()
    assert cfg.base == "local:qwen2.5-coder-0.5b"  # SFT trains on the weights the server serves
    max_rank = inspect.signature(VLLMServer).parameters["max_lora_rank"].default
    assert cfg.sft["lora_r"] <= max_rank  # else the server refuses to load the adapter


def test_the_root_cap_fits_the_worked_example_block() -> None:
    """Both arms: a root that copies the example's program (the few-shot training arm; the
    tuned arm after context distillation) must be able to write all of it in one reply."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(qwen25_tokenizer_dir())
    program = worked_example()[3].content
    assert "FINAL_VAR(memo)" in program
    n = len(tok.encode(program))
    assert n == 361  # counted with the Qwen2.5 tokenizer (prompt rlm-dd-v4)
    for name, settings in sections().items():
        cfg = build_config(None, {**settings, "root": "openai:qwen@http://127.0.0.1:8011/v1",
                                  "sub": "openai:qwen@http://127.0.0.1:8011/v1"})  # fmt: skip
        assert cfg.root_sampling.max_tokens >= n + 32, name  # room for longer document ids


def test_the_request_timeout_is_a_safety_net_not_a_budget() -> None:
    """The longest reply the example allows, at the slowest measured rate, ends by its token
    cap well before the per-request timeout."""
    for name, settings in sections().items():
        cfg = build_config(None, {**settings, "root": "openai:qwen@http://127.0.0.1:8011/v1",
                                  "sub": "openai:qwen@http://127.0.0.1:8011/v1"})  # fmt: skip
        assert cfg.request_timeout_s is not None, name
        longest_s = cfg.root_sampling.max_tokens / SLOWEST_TOKENS_PER_S * cfg.concurrency
        assert cfg.request_timeout_s >= 2 * longest_s, name
