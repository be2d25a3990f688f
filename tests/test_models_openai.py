"""OpenAIChatClient against the scripted loopback server (real HTTP), incl. case T4."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest
import urllib3

from rlmdistill.models.base import (
    ChatResult,
    ContextExceededError,
    FatalModelError,
    Message,
    RetryableModelError,
    Sampling,
    ServerRefusedError,
)
from rlmdistill.models.openai_client import OpenAIChatClient
from rlmdistill.testing.fake_openai import (
    FakeOpenAIServer,
    FakeReply,
    ScriptedHandler,
    echo_handler,
    fail_first,
    fail_if,
)

GREEDY = Sampling(temperature=0.0, max_tokens=64)


def user(text: str) -> list[Message]:
    return [Message(role="system", content="be brief"), Message(role="user", content=text)]


def fast_client(server: FakeOpenAIServer, model: str = "fake", **kw: object) -> OpenAIChatClient:
    opts: dict[str, object] = {
        "timeout_s": 5.0,
        "max_retries": 4,
        "backoff_initial_s": 0.01,
        "backoff_max_s": 0.05,
    }
    opts.update(kw)
    return OpenAIChatClient(model, server.base_url, api_key="test-key", **opts)  # type: ignore[arg-type]


def test_plain_completion_usage_and_request_body() -> None:
    def handler(req: dict) -> FakeReply:
        return FakeReply(text="The answer is 42.", cached_tokens=8)

    with FakeOpenAIServer(handler) as server, fast_client(server) as client:
        s = Sampling(temperature=0.3, top_p=0.9, max_tokens=50, seed=7, stop=["END"])
        result = client.chat(user("What is six times seven?"), s)
        (body,) = server.requests
    assert result.text == "The answer is 42."
    assert result.finish_reason == "stop"
    assert result.attempts == 1
    assert result.model == "fake"
    # fake counts max(1, chars // 4) per message + 4 per message
    assert result.usage.prompt_tokens == (8 // 4 + 4) + (len("What is six times seven?") // 4 + 4)
    assert result.usage.completion_tokens == len("The answer is 42.") // 4
    assert result.usage.cached_tokens == 8
    assert result.latency_s > 0
    assert body["model"] == "fake"
    assert body["max_tokens"] == 50 and body["seed"] == 7 and body["stop"] == ["END"]
    assert body["temperature"] == 0.3 and body["top_p"] == 0.9
    assert "continue_final_message" not in body
    assert client.model_id == f"openai:fake@{server.base_url}"


@pytest.mark.parametrize("echo", [False, True])
def test_prefill_continue_final_message(echo: bool) -> None:
    handler = ScriptedHandler(["```repl\nprint(len(context))\n```"], root_model="root")
    with (
        FakeOpenAIServer(handler, echo_prefill=echo) as server,
        fast_client(server, model="root") as client,
    ):
        result = client.chat(user("Start."), GREEDY, prefill="```repl\n")
        (body,) = server.requests
    assert result.text == "print(len(context))\n```"
    assert body["messages"][-1] == {"role": "assistant", "content": "```repl\n"}
    assert body["continue_final_message"] is True
    assert body["add_generation_prompt"] is False


def test_prefill_mode_none_is_fatal_and_sends_nothing() -> None:
    with FakeOpenAIServer() as server, fast_client(server, prefill_mode="none") as client:
        with pytest.raises(FatalModelError, match="prefill"):
            client.chat(user("x"), GREEDY, prefill="```repl\n")
        assert server.requests == []


def test_429_burst_then_success_records_attempts_case_t4() -> None:
    with (
        FakeOpenAIServer(fail_first(3, 429, lambda r: "finally")) as server,
        fast_client(server, max_retries=4) as client,
    ):
        result = client.chat(user("hi"), GREEDY)
        assert result.text == "finally"
        assert result.attempts == 4
        assert len(server.requests) == 4


def test_5xx_forever_is_retryable_after_bounded_attempts_case_t4() -> None:
    with (
        FakeOpenAIServer(lambda r: FakeReply.error(503, "overloaded")) as server,
        fast_client(server, max_retries=2) as client,
    ):
        with pytest.raises(RetryableModelError) as info:
            client.chat(user("hi"), GREEDY)
        assert info.value.attempts == 3
        assert len(server.requests) == 3
        assert info.value.cause == "http_503"


def test_retry_after_is_honoured_up_to_the_cap() -> None:
    handler = fail_first(1, 429, echo_handler)

    def with_header(req: dict) -> FakeReply | str:
        out = handler(req)
        if isinstance(out, FakeReply):
            out.headers["Retry-After"] = "0.3"
        return out

    with FakeOpenAIServer(with_header) as server, fast_client(server, backoff_max_s=0.5) as c:
        t0 = time.perf_counter()
        result = c.chat(user("hello"), GREEDY)
    assert result.attempts == 2
    assert time.perf_counter() - t0 >= 0.3  # waited at least Retry-After


def test_400_context_length_is_context_exceeded_without_retry_case_t4() -> None:
    with (
        FakeOpenAIServer(lambda r: FakeReply.context_exceeded(4096, 5000)) as server,
        fast_client(server) as client,
    ):
        with pytest.raises(ContextExceededError) as info:
            client.chat(user("long history"), GREEDY)
        assert info.value.kind == "context_exceeded"
        assert info.value.attempts == 1
        assert len(server.requests) == 1


def test_server_side_context_window_emulation_case_t4() -> None:
    with FakeOpenAIServer(echo_handler, context_window=100) as server, fast_client(server) as c:
        assert c.chat(user("short"), Sampling(max_tokens=50)).text == "short"
        with pytest.raises(ContextExceededError):
            c.chat(user("word " * 200), Sampling(max_tokens=50))


@pytest.mark.parametrize(
    ("status", "message", "error", "cause"),
    [
        (400, "bad temperature", FatalModelError, "http_400"),
        (401, "invalid key", ServerRefusedError, "auth"),
        (403, "forbidden", ServerRefusedError, "auth"),
        (404, "no model", ServerRefusedError, "model_not_found"),
    ],
)
def test_other_4xx_are_not_retried(
    status: int, message: str, error: type[Exception], cause: str
) -> None:
    """400 is the request's fault (fatal); 401/403/404 the server's set-up (an infrastructure
    failure the collector retries on the next run); none is retried within the request."""
    with (
        FakeOpenAIServer(lambda r: FakeReply.error(status, message)) as server,
        fast_client(server) as client,
    ):
        with pytest.raises(error) as info:
            client.chat(user("x"), GREEDY)
        assert message in str(info.value)
        assert info.value.cause == cause  # type: ignore[attr-defined]
        assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("body", "cause"),
    [
        ("this is not json", "non_json"),
        ('{"id": "x", "object": "chat.completion", "choices": [], "model": "m"}', "no_choices"),
    ],
)
def test_malformed_response_is_retried_then_retryable(body: str, cause: str) -> None:
    with (
        FakeOpenAIServer(lambda r: FakeReply(raw_body=body)) as server,
        fast_client(server, max_retries=2) as client,
        pytest.raises(RetryableModelError) as info,
    ):
        client.chat(user("x"), GREEDY)
    assert (info.value.attempts, info.value.cause, len(server.requests)) == (3, cause, 3)


def test_request_that_never_answers_times_out_case_t4() -> None:
    with (
        FakeOpenAIServer(lambda r: FakeReply.hang(30)) as server,
        fast_client(server, timeout_s=0.3, max_retries=1) as client,
    ):
        t0 = time.perf_counter()
        with pytest.raises(RetryableModelError) as info:
            client.chat(user("x"), GREEDY)
        elapsed = time.perf_counter() - t0
    assert info.value.attempts == 2
    assert elapsed >= 0.6  # at least timeout * attempts
    assert "Timeout" in str(info.value)
    assert info.value.cause == "timeout"


def test_connection_refused_is_retryable() -> None:
    server = FakeOpenAIServer()
    url = server.base_url
    server.close()
    client = OpenAIChatClient("m", url, timeout_s=1, max_retries=1, backoff_initial_s=0.01)
    with pytest.raises(RetryableModelError) as info:
        client.chat(user("x"), GREEDY)
    assert info.value.attempts == 2
    assert info.value.cause == "connection_refused"
    client.close()


def test_context_window_clamps_max_tokens_and_refuses_negative_case_t4() -> None:
    with FakeOpenAIServer() as server, fast_client(server, context_window=100) as client:
        client.chat(user("a" * 150), Sampling(max_tokens=500))
        (body,) = server.requests
        # prompt estimate: (8 + 150) // 3 + 4 * 2 = 60 tokens -> 40 left
        assert body["max_tokens"] == 40
        with pytest.raises(ContextExceededError) as info:
            client.chat(user("a" * 400), Sampling(max_tokens=10))
        assert info.value.attempts == 0
        assert len(server.requests) == 1  # nothing was sent


def test_chat_batch_one_failure_fails_only_that_prompt_case_t4() -> None:
    handler = fail_if(
        lambda r: "BAD" in r["messages"][-1]["content"],
        FakeReply.error(400, "invalid prompt"),
        fail_if(
            lambda r: "HUGE" in r["messages"][-1]["content"],
            FakeReply.context_exceeded(),
            echo_handler,
        ),
    )
    prompts = [f"doc {k}" for k in range(6)] + ["BAD one", "HUGE one"]
    # concurrency by what the server saw, not by a time bound: every reply is held 5 s by
    # the server (an asyncio sleep; its handlers must not block), so a concurrent client has
    # all 8 requests in flight at once and a serial one never more than 1

    def held(req: dict) -> FakeReply:
        out = handler(req)
        reply = FakeReply(text=out) if isinstance(out, str) else out
        return dataclasses.replace(reply, delay_s=5.0)

    with (
        FakeOpenAIServer(held) as server,
        fast_client(server, max_concurrency=8, timeout_s=60.0) as client,
    ):
        results = client.chat_batch([user(p) for p in prompts], GREEDY)
        assert server.max_in_flight == len(prompts) == len(server.requests)
    assert [r.text for r in results[:6] if isinstance(r, ChatResult)] == prompts[:6]
    assert isinstance(results[6], FatalModelError)
    assert isinstance(results[7], ContextExceededError)


def test_logprobs_are_filled_when_requested() -> None:
    with FakeOpenAIServer(lambda r: "abcdefgh") as server, fast_client(server, logprobs=True) as c:
        result = c.chat(user("x"), GREEDY)
        assert server.requests[0]["logprobs"] is True
    assert result.logprobs == [-0.25, -0.25]


def test_max_tokens_and_stop_are_honoured_by_the_fake() -> None:
    with FakeOpenAIServer(lambda r: "x" * 400 + "STOP tail") as server, fast_client(server) as c:
        long = c.chat(user("x"), Sampling(max_tokens=10))
        stopped = c.chat(user("x"), Sampling(max_tokens=500, stop=["STOP"]))
    assert long.finish_reason == "length" and long.usage.completion_tokens == 10
    assert stopped.text == "x" * 400 and stopped.finish_reason == "stop"


def test_scripted_handler_walks_script_per_conversation_concurrently() -> None:
    script: list[str | FakeReply] = ["turn-0", "turn-1", "turn-2"]
    handler = ScriptedHandler(script, lambda prompt: f"sub saw {prompt}")
    with FakeOpenAIServer(handler, latency_s=0.05) as server:
        root = fast_client(server, model="root")
        sub = fast_client(server, model="sub")
        seen: dict[int, list[str]] = {}

        def episode(k: int) -> None:
            history = user(f"episode {k}")
            texts = []
            for _ in range(3):
                text = root.chat(history, GREEDY).text
                texts.append(text)
                history = [
                    *history,
                    Message(role="assistant", content=text),
                    Message(role="user", content="ok"),
                ]
            seen[k] = texts

        threads = [threading.Thread(target=episode, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sub.chat(user("clause?"), GREEDY).text == "sub saw clause?"
        with pytest.raises(FatalModelError, match="exhausted"):
            root.chat(
                [*user("e"), *[Message(role="assistant", content="a")] * 3],
                GREEDY,
            )
        models = urllib3.request("GET", server.base_url + "/models").json()
        root.close()
        sub.close()
    assert all(v == ["turn-0", "turn-1", "turn-2"] for v in seen.values()) and len(seen) == 4
    assert [m["id"] for m in models["data"]] == ["root", "sub"]
