"""Per-run API limits: spend cap stops requests, rate limit spaces them, cost arithmetic."""

import threading
import time

import pytest

from rlmdistill.models import Message, Sampling, Usage
from rlmdistill.models.limits import (
    DEFAULT_PRICES,
    LimitedClient,
    ModelPrice,
    PriceTable,
    RunLimits,
    SpendCapExceeded,
)
from rlmdistill.models.openai_client import OpenAIChatClient
from rlmdistill.testing.fake_openai import FakeOpenAIServer, FakeReply, ScriptedHandler

MSGS = [Message(role="user", content="hi")]
SAMPLING = Sampling(temperature=0.0, max_tokens=64)


def table(**price):
    return PriceTable(version="test-1", prices=[ModelPrice(pattern="openai:root@*", **price)])


def test_cost_with_cached_tokens_is_hand_checked():
    prices = table(input=2.0, cached_input=0.5, output=8.0)
    usage = Usage(prompt_tokens=1000, cached_tokens=400, completion_tokens=200)
    # 600 uncached * $2/M + 400 cached * $0.5/M + 200 out * $8/M = (1200 + 200 + 1600) / 1e6
    assert prices.cost_usd("openai:root@http://x/v1", usage) == pytest.approx(0.003)
    # no cached price: cached tokens cost the input price
    no_cache = table(input=2.0, output=8.0)
    assert no_cache.cost_usd("openai:root@http://x/v1", usage) == pytest.approx(0.0036)
    # cached tokens beyond the prompt are clamped (they are a subset of it)
    odd = Usage(prompt_tokens=100, cached_tokens=500, completion_tokens=0)
    assert prices.cost_usd("openai:root@u", odd) == pytest.approx(100 * 0.5 / 1e6)
    assert prices.cost_usd("openai:other@u", usage) is None
    assert DEFAULT_PRICES.cost_usd("local:qwen", usage) == 0.0


def test_cost_of_a_real_response_with_cached_tokens():
    handler = ScriptedHandler([FakeReply(text="abcdefgh", cached_tokens=2)])
    with FakeOpenAIServer(handler) as server:
        limits = RunLimits(
            max_usd=None,
            requests_per_minute=None,
            prices=table(input=3.0, cached_input=1.0, output=5.0),
        )
        client = LimitedClient(OpenAIChatClient("root", server.base_url), limits)
        result = client.chat(MSGS, SAMPLING)
        client.close()
    u = result.usage
    assert (u.prompt_tokens, u.cached_tokens, u.completion_tokens) == (5, 2, 2)
    assert limits.spent_usd == pytest.approx((3 * 3.0 + 2 * 1.0 + 2 * 5.0) / 1e6)
    assert limits.n_requests == 1


def test_spend_cap_stops_requests_after_the_one_that_crosses_it():
    # $1 per completion token; every reply is 2 tokens = $2; cap $3
    handler = ScriptedHandler(["abcdefgh"], on_exhausted="repeat_last")
    with FakeOpenAIServer(handler) as server:
        limits = RunLimits(
            max_usd=3.0, requests_per_minute=None, prices=table(input=0.0, output=1_000_000.0)
        )
        client = LimitedClient(OpenAIChatClient("root", server.base_url, max_retries=0), limits)
        client.chat(MSGS, SAMPLING)
        assert limits.spent_usd == pytest.approx(2.0)
        client.chat(MSGS, SAMPLING)  # starts under the cap, crosses it, completes
        assert limits.spent_usd == pytest.approx(4.0)
        with pytest.raises(SpendCapExceeded, match="spend cap reached") as info:
            client.chat(MSGS, SAMPLING)
        assert info.value.kind == "budget_exceeded"
        out = client.chat_batch([MSGS, MSGS], SAMPLING)
        assert all(isinstance(r, SpendCapExceeded) for r in out)
        assert len(server.requests) == 2  # nothing after the cap reached the server
        assert limits.n_requests == 2
        client.close()


def test_unenforceable_cap_is_refused_at_construction():
    limits = RunLimits(max_usd=1.0, requests_per_minute=None, prices=table(input=1, output=1))
    inner = OpenAIChatClient("unknown-model", "http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match="cannot be enforced"):
        LimitedClient(inner, limits)
    with pytest.raises(ValueError, match="cannot be enforced"):
        LimitedClient(inner, RunLimits(max_usd=1.0, requests_per_minute=None, prices=None))
    # without a cap an unpriced model is fine (counted, not charged)
    LimitedClient(inner, RunLimits(max_usd=None, requests_per_minute=None, prices=None)).close()


def test_rate_limit_spaces_requests_across_threads():
    with FakeOpenAIServer(ScriptedHandler(["ok"], on_exhausted="repeat_last")) as server:
        limits = RunLimits(max_usd=None, requests_per_minute=600, prices=None)
        client = LimitedClient(OpenAIChatClient("root", server.base_url), limits)
        t0 = time.monotonic()
        threads = [
            threading.Thread(target=client.chat_batch, args=([MSGS] * 5, SAMPLING))
            for _ in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - t0
        client.close()
    assert len(server.requests) == 10
    assert limits.n_requests == 10
    assert limits.n_unpriced == 10
    assert elapsed >= 0.85  # 10 evenly spaced starts at 0.1 s each: >= 0.9 s
    assert elapsed < 5


def test_bad_limits_are_rejected():
    with pytest.raises(ValueError):
        RunLimits(max_usd=-1, requests_per_minute=None, prices=None)
    with pytest.raises(ValueError):
        RunLimits(max_usd=None, requests_per_minute=0, prices=None)
