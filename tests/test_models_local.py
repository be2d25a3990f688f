"""LocalChatClient on the real SmolLM2-135M checkpoint: batching, greedy, prefill, limits.

The client tests run under both engines (static ``generate`` batches and continuous
batching); tests/test_models_continuous.py compares the two."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlmdistill.models.base import (
    ChatResult,
    ContextExceededError,
    FatalModelError,
    Message,
    Sampling,
)
from rlmdistill.models.local import MIN_NEW_TOKENS, LocalChatClient
from rlmdistill.models.spec import close_all, get_client

GREEDY = Sampling(temperature=0.0, max_tokens=24)


def user(text: str) -> list[Message]:
    return [Message(role="user", content=text)]


@pytest.fixture(scope="module", params=["static", "continuous"])
def client(smollm2_dir: Path, request: pytest.FixtureRequest) -> Iterator[LocalChatClient]:
    c = LocalChatClient(
        smollm2_dir, batch_wait_s=0.2, model_id="local:smollm2-135m", engine=request.param
    )
    assert c.engine == request.param
    yield c
    c.close()


def test_concurrent_chats_from_threads_are_batched(client: LocalChatClient) -> None:
    prompts = ["Name a fruit.", "Name a colour.", "Name an animal.", "Name a city."]
    results: dict[int, ChatResult] = {}
    barrier = threading.Barrier(len(prompts))

    def worker(k: int) -> None:
        barrier.wait()
        results[k] = client.chat(user(prompts[k]), GREEDY)

    before = client.generate_calls
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    calls = client.generate_calls - before
    assert len(results) == 4
    if client.engine == "static":  # continuous: one call per decode step
        assert calls < 4, f"{calls} generate calls for 4 concurrent requests"
    assert max(client.batch_sizes) >= 2
    assert all(r.text.strip() and r.model == "local:smollm2-135m" for r in results.values())


def test_greedy_is_deterministic(client: LocalChatClient) -> None:
    a = client.chat(user("Say something about contracts."), GREEDY)
    b = client.chat(user("Say something about contracts."), GREEDY)
    assert a.text == b.text
    assert a.token_ids == b.token_ids


def test_seeded_sampling_repeats_for_the_same_batch(client: LocalChatClient) -> None:
    s = Sampling(temperature=1.0, top_p=0.95, max_tokens=16, seed=1234)
    a = client.chat(user("Tell me a word."), s)
    b = client.chat(user("Tell me a word."), s)
    assert a.token_ids == b.token_ids


def test_prefill_is_in_the_prompt_but_not_in_the_output(client: LocalChatClient) -> None:
    messages = user("Write Python code that prints hello.")
    prefill = "```python\n"
    result = client.chat(messages, GREEDY, prefill=prefill)
    rendered = client.render(messages, prefill)
    assert rendered.endswith("<|im_start|>assistant\n" + prefill)
    assert result.usage.prompt_tokens == len(client.encode(rendered))
    assert not result.text.startswith("```")
    assert "print" in result.text  # the model continued the code block


def test_no_double_bos(client: LocalChatClient) -> None:
    ids = client.encode(client.render(user("hi")))
    bos = client.tokenizer.bos_token_id
    assert ids[:2] != [bos, bos]
    assert ids == client.tokenizer(client.render(user("hi")), add_special_tokens=False).input_ids


def test_usage_counts_equal_tokenizer_counts(client: LocalChatClient) -> None:
    messages = user("Explain what an indemnification clause is.")
    result = client.chat(messages, Sampling(temperature=0.0, max_tokens=20))
    assert result.usage.prompt_tokens == len(client.encode(client.render(messages)))
    assert result.token_ids is not None
    assert result.usage.completion_tokens == len(result.token_ids)
    assert result.usage.cached_tokens == 0
    assert result.finish_reason == "length"
    assert result.usage.completion_tokens == 20
    assert client.tokenizer.decode(result.token_ids, skip_special_tokens=True) == result.text


def test_stop_strings_cut_the_text_and_count_tokens(client: LocalChatClient) -> None:
    messages = user("List three fruits, one per line.")
    free = client.chat(messages, Sampling(temperature=0.0, max_tokens=40))
    assert "\n" in free.text
    stopped = client.chat(messages, Sampling(temperature=0.0, max_tokens=40, stop=["\n"]))
    assert stopped.finish_reason == "stop"
    assert "\n" not in stopped.text
    assert free.text.startswith(stopped.text)
    assert stopped.token_ids is not None
    # the token that completed the stop string is counted, nothing after it
    decoded = client.tokenizer.decode(stopped.token_ids, skip_special_tokens=True)
    assert "\n" in decoded and "\n" not in client.tokenizer.decode(stopped.token_ids[:-1])
    assert stopped.usage.completion_tokens == len(stopped.token_ids)


def test_huge_prompt_is_context_exceeded_case_t4(client: LocalChatClient) -> None:
    huge = user("lorem ipsum " * 6000)  # > 8192 tokens
    with pytest.raises(ContextExceededError) as info:
        client.chat(huge, GREEDY)
    assert info.value.kind == "context_exceeded"
    results = client.chat_batch([user("Name a fruit."), huge, user("Name a colour.")], GREEDY)
    assert isinstance(results[0], ChatResult) and isinstance(results[2], ChatResult)
    assert isinstance(results[1], ContextExceededError)


def test_max_tokens_is_clamped_to_fit_the_context(smollm2_dir: Path) -> None:
    messages = user("Name a fruit.")
    with LocalChatClient(smollm2_dir, context_window=64) as small:
        n_prompt = len(small.encode(small.render(messages)))
        assert n_prompt + MIN_NEW_TOKENS <= 64
        result = small.chat(messages, Sampling(temperature=0.0, max_tokens=500))
        assert result.usage.completion_tokens <= 64 - n_prompt
        with pytest.raises(ContextExceededError):
            small.chat(user("word " * 50), Sampling(max_tokens=500))


def test_closed_client_is_fatal_and_close_is_idempotent(smollm2_dir: Path) -> None:
    c = LocalChatClient(smollm2_dir)
    c.close()
    c.close()
    with pytest.raises(FatalModelError, match="closed"):
        c.chat(user("x"), GREEDY)


def test_lora_adapter_loads_on_top(smollm2_dir: Path, tmp_path: Path) -> None:
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    from rlmdistill.compat import library_warning_filter

    base = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    with library_warning_filter():  # peft reads a deprecated transformers property
        peft_model = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    peft_model.save_pretrained(tmp_path / "adapter")  # B = 0: same outputs as the base
    with (
        LocalChatClient(smollm2_dir, dtype="float32") as plain,
        LocalChatClient(smollm2_dir, dtype="float32", adapter=tmp_path / "adapter") as tuned,
    ):
        assert "+adapter=" in tuned.model_id
        assert tuned.adapter_merged and not isinstance(tuned.model, PeftModel)
        msgs = user("Name a fruit.")
        assert tuned.chat(msgs, GREEDY).text == plain.chat(msgs, GREEDY).text


def test_a_merged_adapter_generates_what_the_unmerged_one_does(
    smollm2_dir: Path, tmp_path: Path
) -> None:
    """An adapter that changes the model (B != 0): merged into the weights (the default) and
    kept as a LoRA path give the same greedy reply and logprobs within float32 rounding, and
    both differ from the base."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    from rlmdistill.compat import library_warning_filter

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    with library_warning_filter():
        peft_model = get_peft_model(
            base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"])
        )
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.2)
    peft_model.save_pretrained(tmp_path / "adapter")
    sampling = Sampling(temperature=0.0, max_tokens=16)
    msgs = user("Name a fruit.")
    with LocalChatClient(smollm2_dir, dtype="float32", engine="static") as plain:
        base_reply = plain.chat(msgs, sampling)
    replies = {}
    for merge in (True, False):
        with LocalChatClient(
            smollm2_dir,
            dtype="float32",
            adapter=tmp_path / "adapter",
            merge_adapter=merge,
            engine="static",
        ) as tuned:
            assert tuned.adapter_merged is merge
            assert isinstance(tuned.model, PeftModel) is not merge
            replies[merge] = tuned.chat(msgs, sampling)
    merged, unmerged = replies[True], replies[False]
    assert merged.token_ids == unmerged.token_ids
    assert merged.logprobs is not None and unmerged.logprobs is not None
    assert base_reply.logprobs is not None
    assert merged.logprobs == pytest.approx(unmerged.logprobs, abs=1e-3)
    n = min(len(merged.logprobs), len(base_reply.logprobs))
    shift = max(
        abs(a - b) for a, b in zip(merged.logprobs[:n], base_reply.logprobs[:n], strict=True)
    )
    assert merged.token_ids != base_reply.token_ids or shift > 0.05


def test_int8_quantises_every_linear_but_lora_and_keeps_an_adapter_exact(
    smollm2_dir: Path, tmp_path: Path
) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rlmdistill.compat import library_warning_filter
    from rlmdistill.models.local import quantize_int8

    base = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    n_linear = sum(type(m) is torch.nn.Linear for m in base.modules())
    with library_warning_filter():
        peft_model = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    n_lora = sum("lora_" in n and type(m) is torch.nn.Linear for n, m in peft_model.named_modules())
    assert n_lora == 2 * 2 * base.config.num_hidden_layers  # A and B of q and v per layer
    assert quantize_int8(peft_model) == n_linear
    assert sum(type(m) is torch.nn.Linear for m in peft_model.modules()) == n_lora
    with pytest.raises(ValueError, match="float32"):
        quantize_int8(AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.bfloat16))

    # a client with int8 weights: float32 activations, answers, and an adapter with B = 0
    # gives the int8 base's own greedy reply (the LoRA path stays exact)
    with library_warning_filter():
        saved = get_peft_model(
            AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32),
            LoraConfig(r=4, target_modules=["q_proj", "v_proj"]),
        )
    saved.save_pretrained(tmp_path / "adapter")
    with (
        LocalChatClient(smollm2_dir, quantize="int8") as plain,
        LocalChatClient(smollm2_dir, quantize="int8", adapter=tmp_path / "adapter") as tuned,
    ):
        assert (plain.dtype, plain.quantize) == ("float32", "int8")
        assert "int8" in plain.dtype_reason
        msgs = user("Name a fruit.")
        reply = plain.chat(msgs, GREEDY)
        assert reply.text.strip() and reply.usage.completion_tokens > 0
        assert tuned.chat(msgs, GREEDY).text == reply.text
    with pytest.raises(ValueError, match="quantize=int8"):
        LocalChatClient(smollm2_dir, quantize="int8", dtype="bfloat16")


def test_same_local_spec_shares_one_loaded_model(smollm2_dir: Path) -> None:
    try:
        root = get_client("local:smollm2-135m")
        sub = get_client("local:smollm2-135m")
        assert root is sub
        assert root.model_id == "local:smollm2-135m"
    finally:
        close_all()
