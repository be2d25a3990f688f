"""The OpenAI-compatible path against a real vLLM server (CPU build), one server per session.

Slow: the server takes ~2.5 min to start on 2 shared cores and decodes ~4 tokens/s, so every
request here asks for a few tokens only. Skipped, saying why, when the vLLM virtualenv is
absent (``scripts/vllm_server.sh setup`` makes it), unless ``RLMDISTILL_REQUIRE_VLLM=1`` (CI),
which turns its absence into a failure. ``RLMDISTILL_VLLM_URL`` (+ ``RLMDISTILL_VLLM_MODEL``)
points the tests at a server already running SmolLM2-135M with ``--enable-lora
--enable-prefix-caching --enable-prompt-tokens-details`` instead of starting one.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from rlmdistill.models.base import (
    ContextExceededError,
    Message,
    Sampling,
    ServerRefusedError,
)
from rlmdistill.models.openai_client import OpenAIChatClient
from rlmdistill.models.preflight import ServerUnavailableError, preflight
from rlmdistill.testing.vllm_server import VLLMServer, venv_dir, venv_python

pytestmark = pytest.mark.slow

GREEDY = Sampling(temperature=0.0, top_p=1.0, max_tokens=12)
COUNT = [
    Message(role="system", content="You are a helpful assistant."),
    Message(role="user", content="Count from 1 to 10, separated by commas."),
]


class Served(NamedTuple):
    base_url: str
    model: str


@pytest.fixture(scope="session")
def vllm(smollm2_dir: Path) -> Iterator[Served]:
    """One vLLM server on SmolLM2-135M for the whole session (context 1,024 tokens)."""
    url = os.environ.get("RLMDISTILL_VLLM_URL")
    if url:
        yield Served(url.rstrip("/"), os.environ.get("RLMDISTILL_VLLM_MODEL", "smol"))
        return
    if venv_python() is None:
        why = (
            f"no vLLM virtualenv at {venv_dir()}: run `scripts/vllm_server.sh setup` "
            "(~3.4 GB, ~7.5 min) to run the real-server tests"
        )
        if os.environ.get("RLMDISTILL_REQUIRE_VLLM") == "1":
            pytest.fail(why + " (RLMDISTILL_REQUIRE_VLLM=1)")
        pytest.skip(why)
    server = VLLMServer(smollm2_dir, "smol", max_model_len=1024)
    server.start()
    print(f"vLLM ready in {server.startup_s:.0f} s at {server.base_url}")
    try:
        yield Served(server.base_url, "smol")
    finally:
        server.stop()


def client(vllm: Served, model: str | None = None, **kw: Any) -> OpenAIChatClient:
    return OpenAIChatClient(model or vllm.model, vllm.base_url, timeout_s=300, **kw)


def test_plain_chat_with_usage(vllm: Served) -> None:
    with client(vllm) as c:
        res = c.chat(COUNT, GREEDY)
    assert res.text.strip().startswith("1")  # SmolLM2 greedy: "1, 2, 3, 4, 5, 6"
    assert res.finish_reason in ("stop", "length") and res.attempts == 1
    assert 0 < res.usage.completion_tokens <= GREEDY.max_tokens
    assert res.usage.prompt_tokens > 0
    assert isinstance(res.usage.cached_tokens, int)  # --enable-prompt-tokens-details


def test_async_path_matches_the_blocking_one_and_runs_a_batch(vllm: Served) -> None:
    """The path every sub-call to an ``openai:`` server takes (``achat`` over
    ``models/aio_http.py``, on one event loop): greedy gives the blocking path's text, and 8
    requests in flight at once on one loop all come back with usage."""

    async def run(c: OpenAIChatClient) -> list[Any]:
        one = await c.achat(COUNT, GREEDY)
        batch = await asyncio.gather(*(c.achat(COUNT, GREEDY) for _ in range(8)))
        return [one, *batch]

    with client(vllm) as c:
        blocking = c.chat(COUNT, GREEDY)
        results = asyncio.run(run(c))
    assert blocking.text.strip().startswith("1")
    assert [r.text for r in results] == [blocking.text] * 9
    assert all(r.usage.completion_tokens == blocking.usage.completion_tokens for r in results)
    assert all(r.usage.prompt_tokens == blocking.usage.prompt_tokens > 0 for r in results)
    assert all(r.finish_reason == blocking.finish_reason for r in results)


def test_token_ids_from_the_real_server_match_the_tokenizer(
    vllm: Served, smollm2_tokenizer: Any
) -> None:
    """``return_token_ids`` on a real vLLM: the prompt ids are the chat template's render of
    the messages, and the completion ids decode to the reply's text; the same on the async
    path."""
    rendered = smollm2_tokenizer.apply_chat_template(
        [m.model_dump() for m in COUNT], add_generation_prompt=True, tokenize=True
    )
    if not isinstance(rendered, list):  # a BatchEncoding in recent transformers
        rendered = rendered["input_ids"]
    want_prompt = list(rendered)
    with client(vllm, token_ids=True) as c:
        res = c.chat(COUNT, GREEDY)
        ares = asyncio.run(c.achat(COUNT, GREEDY))
    for r in (res, ares):
        assert r.prompt_token_ids == want_prompt
        assert r.token_ids and len(r.token_ids) == r.usage.completion_tokens
        decoded = smollm2_tokenizer.decode(r.token_ids, skip_special_tokens=True)
        assert decoded == r.text
    assert ares.token_ids == res.token_ids  # greedy


def test_prefill_continues_and_is_not_echoed(vllm: Served) -> None:
    prefill = "1, 2, 3,"
    with client(vllm) as c:
        full = c.chat(COUNT, GREEDY.model_copy(update={"max_tokens": 16})).text
        cont = c.chat(COUNT, GREEDY.model_copy(update={"max_tokens": 6}), prefill=prefill).text
    assert not cont.lstrip().startswith("1, 2")  # nothing echoed
    assert cont.strip()  # a continuation came back
    joined = prefill + cont
    assert full.startswith(joined) or joined.startswith(full), (full, cont)


def test_stop_string_cuts_the_reply(vllm: Served) -> None:
    with client(vllm) as c:
        res = c.chat(COUNT, GREEDY.model_copy(update={"stop": ["4"], "max_tokens": 16}))
    assert "4" not in res.text and res.text.startswith("1") and res.finish_reason == "stop"


def test_cached_prompt_tokens_reported_on_a_repeated_prefix(vllm: Served) -> None:
    """The prefix cache hits whole blocks (128 tokens on this CPU build): a ~400-token prompt
    sent twice reports cached tokens the second time (--enable-prompt-tokens-details)."""
    long = [Message(role="user", content="Clause text. " * 130 + "Summarise.")]
    with client(vllm) as c:
        first = c.chat(long, GREEDY.model_copy(update={"max_tokens": 2})).usage
        second = c.chat(long, GREEDY.model_copy(update={"max_tokens": 2})).usage
    assert first.prompt_tokens == second.prompt_tokens > 256
    assert second.cached_tokens is not None and 128 <= second.cached_tokens <= second.prompt_tokens


def test_real_context_length_error_is_context_exceeded_without_retry(vllm: Served) -> None:
    too_long = [Message(role="user", content="word " * 1100)]  # > 1,024 tokens
    with client(vllm) as c, pytest.raises(ContextExceededError) as info:
        c.chat(too_long, GREEDY)
    assert info.value.attempts == 1 and "maximum context length" in str(info.value)


def test_unknown_model_id_fails_preflight_and_requests(vllm: Served) -> None:
    with pytest.raises(ServerUnavailableError, match=f"it serves: {vllm.model}"):
        preflight({"--root": f"openai:nope@{vllm.base_url}"})
    with client(vllm, "nope") as c, pytest.raises(ServerRefusedError) as info:
        c.chat(COUNT, GREEDY)
    assert (info.value.cause, info.value.attempts) == ("model_not_found", 1)


# ------------------------------------------------------------------------ runtime LoRA
PROBE = [
    {
        "role": "system",
        "content": "You are the root of a due-diligence agent. Write ```repl``` code.",
    },
    {"role": "user", "content": "List the documents."},
]


def train_adapter(base: Path, out: Path, reply: str, tokenizer: Any) -> Path:
    """``rlmdistill sft`` (the library call behind it) on rows teaching ``reply`` to PROBE."""
    from test_sft import fast_config, render_row, write_dataset

    from rlmdistill.sft.train import train

    rows = [
        render_row(tokenizer, [*PROBE, {"role": "assistant", "content": reply}], episode_id=f"e{i}")
        for i in range(4)
    ]
    data = write_dataset(out.parent / f"{out.name}-data", tokenizer, rows)
    train(fast_config(data, base, out, max_steps=6, lora_r=8), progress=False)
    return out


def probe_reply(vllm: Served, model: str) -> str:
    messages = [Message(role=m["role"], content=m["content"]) for m in PROBE]  # type: ignore[arg-type]
    with client(vllm, model) as c:
        return c.chat(messages, GREEDY).text


def test_runtime_lora_changes_greedy_output_and_a_retrained_adapter_replaces_it(
    vllm: Served, smollm2_dir: Path, smollm2_tokenizer: Any, tmp_path: Path
) -> None:
    """An adapter ``sft`` trained on the same base loads through loop/serving.py and changes
    the greedy reply; loading a re-trained adapter under the loaded name serves the new one
    (vllm#31326: a second load answers 400 "already loaded" and keeps the old weights, so
    load_lora_adapter unloads first)."""
    import urllib3

    from rlmdistill.loop.serving import ServingConfig, load_lora_adapter

    serving = ServingConfig(base_url=vllm.base_url, model=vllm.model)
    v1 = train_adapter(smollm2_dir, tmp_path / "v1", "```repl\nprint(list_documents())\n```",
                       smollm2_tokenizer)  # fmt: skip
    v2 = train_adapter(smollm2_dir, tmp_path / "v2", "FINAL(nothing to list)", smollm2_tokenizer)
    base = probe_reply(vllm, vllm.model)
    assert load_lora_adapter(serving, "r1", v1) == f"openai:r1@{vllm.base_url}"
    preflight({"tuned root": f"openai:r1@{vllm.base_url}"})  # the adapter is a model id now
    tuned_v1 = probe_reply(vllm, "r1")
    assert tuned_v1 != base, (base, tuned_v1)
    # the stale behaviour this guards against: a plain second load is refused
    again = urllib3.request(
        "POST", vllm.base_url + "/load_lora_adapter",
        json={"lora_name": "r1", "lora_path": str(v2)}, timeout=300, retries=False,
    )  # fmt: skip
    assert again.status == 400 and "already" in again.data.decode().lower()
    assert probe_reply(vllm, "r1") == tuned_v1  # still v1
    load_lora_adapter(serving, "r1", v2)  # unload + load
    load_lora_adapter(serving, "r2-check", v2)  # v2 under a fresh name, for reference
    tuned_v2 = probe_reply(vllm, "r1")
    assert tuned_v2 == probe_reply(vllm, "r2-check") and tuned_v2 != tuned_v1, (tuned_v1, tuned_v2)
