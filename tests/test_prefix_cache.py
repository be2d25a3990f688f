"""The continuous engine's prefix cache (rlmdistill.models.continuous.PrefixCache): which kept
row a prompt reuses, what is evicted and when, and, on the real SmolLM2-135M in float32, that a
root's second turn prefilled on the first turn's keys and values gives the reply and logprobs
of a prefill from scratch while prefilling only its new ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlmdistill.models.base import Message, Sampling
from rlmdistill.models.continuous import PrefixCache
from rlmdistill.models.local import PREFIX_CACHE_ENV, LocalChatClient, prefix_cache_bytes


def _layers(n: int, layers: int = 2, fill: float = 0.0) -> list[tuple[object, object]]:
    """Keys and values of ``n`` positions: ``[1, 2 heads, n, 4]`` float32 (32 bytes a
    position and tensor), position p holding ``fill + p``."""
    import torch

    pos = torch.arange(n, dtype=torch.float32).view(1, 1, n, 1).expand(1, 2, n, 4) + fill
    return [(pos.clone(), pos.clone()) for _ in range(layers)]


BYTES_PER_ID = 2 * 2 * 2 * 4 * 4
"""Bytes a position costs in :func:`_layers`: 2 layers x (keys, values) x 2 heads x 4 x 4."""


def test_lookup_takes_the_longest_shared_prefix_and_leaves_the_last_id_to_run() -> None:
    cache = PrefixCache(max_bytes=10**6, min_tokens=4)
    a = list(range(100, 120))  # 20 ids
    b = list(range(100, 110)) + list(range(500, 510))  # shares 10 with a
    cache.add(a, _layers(20, fill=0.0))
    cache.add(b, _layers(20, fill=1000.0))
    assert len(cache) == 2 and cache.nbytes == 40 * BYTES_PER_ID

    n, layers = cache.lookup([*b[:11], 3])  # type: ignore[misc]  # the newer row first
    assert n == 11 and float(layers[0][0][0, 0, 10, 0]) == 1010.0
    n, layers = cache.lookup([*a[:15], 7, 8])  # type: ignore[misc]
    assert n == 15
    assert [tuple(k.shape) for k, _ in layers] == [(1, 2, 15, 4)] * 2
    assert float(layers[0][0][0, 0, 14, 0]) == 14.0  # row a's numbers, not b's

    n, layers = cache.lookup([*b[:12], 1])  # type: ignore[misc]
    assert n == 12 and float(layers[1][1][0, 1, 11, 3]) == 1011.0

    # the whole kept row is the prompt: its last id still runs (for its logits)
    n, _ = cache.lookup(a)  # type: ignore[misc]
    assert n == 19
    # shares 3 ids, fewer than min_tokens; an empty cache misses too
    assert cache.lookup([100, 101, 102, 0, 0, 0]) is None
    assert PrefixCache(10**6).lookup(a) is None
    assert (cache.hits, cache.misses) == (4, 1)


def test_add_drops_the_rows_it_extends_and_evicts_the_least_recently_used() -> None:
    cache = PrefixCache(max_bytes=50 * BYTES_PER_ID, min_tokens=4)
    turn1 = list(range(10))
    cache.add(turn1, _layers(10))
    turn2 = turn1 + list(range(50, 60))  # the next turn of the same conversation
    cache.add(turn2, _layers(20))
    assert len(cache) == 1 and cache.nbytes == 20 * BYTES_PER_ID  # turn 1 held nothing more

    other = list(range(200, 220))
    cache.add(other, _layers(20))
    assert cache.lookup([*turn2, 1]) is not None  # turn 2 is now the most recently used
    third = list(range(300, 320))
    cache.add(third, _layers(20))  # 60 > 50 positions: the least recently used goes
    assert len(cache) == 2 and cache.nbytes == 40 * BYTES_PER_ID
    assert cache.lookup([*other, 1]) is None
    assert cache.lookup([*turn2, 1]) is not None and cache.lookup([*third, 1]) is not None

    # a row larger than the whole cache, or shorter than min_tokens, is not kept
    cache.add(list(range(1000, 1060)), _layers(60))
    cache.add([1, 2, 3], _layers(3))
    assert len(cache) == 2 and cache.nbytes == 40 * BYTES_PER_ID
    # max_bytes 0 keeps nothing
    off = PrefixCache(0)
    off.add(turn2, _layers(20))
    assert len(off) == 0


def test_bad_rows_and_settings_are_refused() -> None:
    cache = PrefixCache(10**6)
    with pytest.raises(ValueError, match="5 ids but keys/values of length 6"):
        cache.add([1, 2, 3, 4, 5], _layers(6))
    with pytest.raises(ValueError, match="max_bytes must be >= 0"):
        PrefixCache(-1)
    with pytest.raises(ValueError, match="min_tokens must be >= 1"):
        PrefixCache(10, min_tokens=0)


def test_reused_keys_and_values_are_never_written() -> None:
    """The model appends to the cache it is given (DynamicCache.update concatenates): the
    kept tensors stay as they were."""
    import torch
    from transformers import DynamicCache

    cache = PrefixCache(10**6, min_tokens=2)
    cache.add(list(range(8)), _layers(8))
    before = [(k.clone(), v.clone()) for k, v in _layers(8)]
    n, layers = cache.lookup([*list(range(6)), 99])  # type: ignore[misc]
    dc = DynamicCache(ddp_cache_data=layers)
    dc.update(torch.full((1, 2, 1, 4), -1.0), torch.full((1, 2, 1, 4), -1.0), 0)
    assert n == 6 and dc.get_seq_length() == 7
    kept = cache.lookup([*list(range(8)), 1])
    assert kept is not None
    for (k, v), (k0, v0) in zip(kept[1], before, strict=True):
        assert torch.equal(k, k0[:, :, :8]) and torch.equal(v, v0[:, :, :8])


def test_the_size_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PREFIX_CACHE_ENV, raising=False)
    assert prefix_cache_bytes() == 512 * 2**20
    assert prefix_cache_bytes(0) == 0 and prefix_cache_bytes(1.5) == 3 * 2**19
    monkeypatch.setenv(PREFIX_CACHE_ENV, "64")
    assert prefix_cache_bytes() == 64 * 2**20
    assert prefix_cache_bytes(2) == 2 * 2**20  # the argument wins over the environment
    monkeypatch.setenv(PREFIX_CACHE_ENV, "lots")
    with pytest.raises(ValueError, match=r"\$RLMDISTILL_PREFIX_CACHE_MB: .*got 'lots'"):
        prefix_cache_bytes()
    with pytest.raises(ValueError, match=r"prefix_cache_mb: .*got -1"):
        prefix_cache_bytes(-1)


SYSTEM = (
    "You are the root of a recursive language model. You plan a due-diligence review of a "
    "data room in Python, in a REPL. Each turn, write one ```repl block. The variable "
    "`context` holds the documents; call llm_query(prompt) to have a sub-model read one. "
    "When you are done, call FINAL(memo) with a memo that cites its documents."
)


def test_a_second_turn_reuses_the_first_and_replies_as_from_scratch(smollm2_dir: Path) -> None:
    import torch

    greedy = Sampling(temperature=0.0, top_p=1.0, max_tokens=24)
    first = [
        Message(role="system", content=SYSTEM),
        Message(role="user", content="The room has 3 contracts. Start the review."),
    ]
    results = {}
    for mb in (0.0, 64.0):
        with LocalChatClient(
            smollm2_dir, dtype="float32", engine="continuous", prefix_cache_mb=mb
        ) as c:
            r1 = c.chat(first, greedy)
            second = [
                *first,
                Message(role="assistant", content=r1.text),
                Message(role="user", content="REPL output: 3 documents. Go on."),
            ]
            r2 = c.chat(second, greedy)
            results[mb] = (r1, r2, c.batcher.prefill_tokens, c.batcher.reused_tokens)
            model = c.model
            if mb:  # each logprob = one unbatched pass over prompt + reply, from scratch
                ids = torch.tensor([r2.prompt_token_ids + r2.token_ids])  # type: ignore[operator]
                with torch.inference_mode():
                    logp = torch.log_softmax(model(ids).logits.float(), dim=-1)[0]
                n = len(r2.prompt_token_ids or [])
                ref = [logp[n - 1 + i, t].item() for i, t in enumerate(r2.token_ids or [])]
                assert r2.logprobs == pytest.approx(ref, abs=1e-4)
    (a1, a2, a_prefill, a_reused), (b1, b2, b_prefill, b_reused) = results[0.0], results[64.0]
    assert b1.token_ids == a1.token_ids and b2.token_ids == a2.token_ids and b2.text == a2.text
    assert a_reused == 0 and a2.usage.cached_tokens == 0
    # the second prompt continues the first prompt (and most of its reply): those ids came
    # from the cache, reported as cached tokens; every other prompt id was prefilled once
    p1, p2 = a1.usage.prompt_tokens, a2.usage.prompt_tokens
    assert b2.usage.cached_tokens == b_reused and p1 <= b_reused < p2
    assert b1.usage.cached_tokens == 0
    assert a_prefill == p1 + p2 and b_prefill == p1 + p2 - b_reused
    assert b2.prompt_token_ids[:b_reused] == (b1.prompt_token_ids + b1.token_ids)[:b_reused]  # type: ignore[operator,index]
