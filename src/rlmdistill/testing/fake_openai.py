"""A scripted OpenAI-compatible chat server on loopback, for tests and benchmarks.

:class:`FakeOpenAIServer` is a real HTTP server (an asyncio event loop in a background thread,
HTTP/1.1 parsed by httptools) serving ``POST /v1/chat/completions`` and ``GET /v1/models``. Every request
body is passed to a *handler* ``(request_json) -> FakeReply | str`` that decides the reply: text
(a normal completion with usage), an HTTP error (429, 500, 400 "maximum context length", ...),
a delay (to test timeouts), or a malformed body. Ready-made handlers:

- :class:`ScriptedHandler`: the root model gets scripted replies in order per conversation,
  the sub model a function of its prompt;
- :func:`fail_first`, :func:`fail_if`: wrap a handler to inject bursts of errors;
- :class:`FaultInjector`: wrap a handler to fail a share of requests at random (seeded,
  reproducible per request) with every fault of the ``docs/serving.md`` table, logging each.

The server honours ``continue_final_message`` (the reply is what follows the prefill; the
prefill is not echoed unless ``echo_prefill``), ``stop`` strings and ``max_tokens``, and a fixed
``latency_s`` per request (for benchmarks). Usage is counted with an optional tokenizer (a
``str -> int`` callable or an object with ``encode``), else ``max(1, chars // 4)``.

Example::

    handler = ScriptedHandler(["```repl\\nprint(1)\\n```", "FINAL(done)"], lambda p: "ok")
    with FakeOpenAIServer(handler) as server:
        client = OpenAIChatClient("root", server.base_url)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import itertools
import json
import re
import socket
import struct
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httptools

from rlmdistill.models import wire_json

Handler = Callable[[dict[str, Any]], "FakeReply | str"]
"""A function from the request JSON to the reply (a plain ``str`` means ``FakeReply(text=...)``)."""


@dataclass
class FakeReply:
    """What the fake server answers to one request.

    Exactly one of: ``text`` (a completion), ``status`` >= 400 with ``error_message``, or
    ``raw_body`` (sent verbatim with ``status``, to test malformed responses). ``delay_s`` is
    slept before answering (in addition to the server's ``latency_s``).
    """

    text: str | None = None
    status: int = 200
    error_message: str | None = None
    error_type: str | None = None
    delay_s: float = 0.0
    raw_body: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    finish_reason: str | None = None
    """Override the computed finish reason (``stop``/``length``)."""
    cached_tokens: int | None = None
    """Reported as ``usage.prompt_tokens_details.cached_tokens`` when set."""
    reasoning: str | None = None
    """Reasoning returned apart from the content (a vLLM ``--reasoning-parser`` server)."""
    reasoning_field: str = "reasoning_content"
    """Message field the reasoning goes in: ``reasoning_content`` or ``reasoning``."""
    token_ids: list[int] | None = None
    """Completion ids to return instead of the tokenizer's encoding (non-canonical ids)."""
    null_content: bool = False
    """Send ``"content": null`` instead of the text."""
    reset: bool = False
    """Reset the TCP connection instead of answering (RST: ``SO_LINGER`` 0, then close)."""

    @classmethod
    def error(cls, status: int, message: str, *, retry_after: float | None = None) -> FakeReply:
        """An OpenAI-style error body ``{"error": {"message": ...}}`` with HTTP ``status``."""
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
        return cls(status=status, error_message=message, headers=headers)

    @classmethod
    def context_exceeded(cls, limit: int = 4096, requested: int = 5000) -> FakeReply:
        """The HTTP 400 vLLM sends when the prompt does not fit."""
        return cls.error(
            400,
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{requested} tokens in the messages, Please reduce the length of the messages.",
        )

    @classmethod
    def context_exceeded_top_level(cls, limit: int = 2048, requested: int = 2100) -> FakeReply:
        """Older vLLM: HTTP 400 with a top-level ``{"object": "error", "message": ...}``."""
        body = {
            "object": "error",
            "message": f"This model's maximum context length is {limit} tokens. However, you "
            f"requested {requested} tokens ({requested - 200} in the messages, 200 in the "
            "completion). Please reduce the length of the messages or completion.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
        return cls(status=400, raw_body=json.dumps(body))

    @classmethod
    def context_exceeded_input_tokens(cls, requested: int = 2100) -> FakeReply:
        """Nested ``{"error": {"message": "...your request has M input tokens..."}}``."""
        return cls.error(
            400,
            f"Requested input length exceeds the context: your request has {requested} input "
            "tokens. Please reduce the length of the input messages.",
        )

    @classmethod
    def context_exceeded_characters(cls, chars: int = 9000, output: int = 200) -> FakeReply:
        """vllm#33418: the check on characters before tokenising, blamed on output tokens."""
        return cls.error(
            400,
            f"You requested {output} output tokens and your prompt contains {chars} characters "
            f"(more than {4 * (2048 - output)} characters, the upper bound for {2048 - output} "
            "input tokens). Please reduce the length of the input prompt.",
        )

    @classmethod
    def hang(cls, seconds: float = 3600.0) -> FakeReply:
        """Never answer (within ``seconds``): the client must time out."""
        return cls(text="", delay_s=seconds)


def _default_count(text: str) -> int:
    return max(1, len(text) // 4) if text else 0


def prefill_of(request: dict[str, Any]) -> str | None:
    """The reply prefill of a request: the final assistant message under
    ``continue_final_message``, else ``None``."""
    messages = request.get("messages") or []
    if (
        request.get("continue_final_message")
        and messages
        and messages[-1].get("role") == "assistant"
    ):
        return str(messages[-1].get("content") or "")
    return None


def conversation_turn(request: dict[str, Any]) -> tuple[str, int]:
    """``(first user message, number of completed assistant turns)`` of a request.

    A trailing assistant message that is a prefill does not count as a completed turn.
    """
    messages = list(request.get("messages") or [])
    if prefill_of(request) is not None:
        messages = messages[:-1]
    first_user = next((str(m.get("content", "")) for m in messages if m.get("role") == "user"), "")
    n_assistant = sum(1 for m in messages if m.get("role") == "assistant")
    return first_user, n_assistant


def last_user_message(request: dict[str, Any]) -> str:
    """Content of the last user message of a request ('' if none)."""
    for m in reversed(request.get("messages") or []):
        if m.get("role") == "user":
            return str(m.get("content", ""))
    return ""


class ScriptedHandler:
    """Root requests get scripted replies; sub requests get ``sub_reply(prompt)``.

    Requests are told apart by their ``model`` field. A root reply is chosen by the number of
    completed assistant turns in the request (``root_replies[n]``), so each conversation walks
    the script in order no matter how many episodes run concurrently, and a retried request
    gets the same reply. When a prefill is sent and the scripted reply starts with it, only the
    rest is returned (scripts can be written as full replies).

    Args:
        root_replies: replies of the root, turn by turn (``str`` or :class:`FakeReply`).
        sub_reply: reply of the sub model given the last user message of the sub-call.
        root_model / sub_model: model names that route requests.
        on_exhausted: ``error`` answers HTTP 400 once the script runs out (a fatal error for
            the client); ``repeat_last`` repeats the last reply.
    """

    def __init__(
        self,
        root_replies: list[str | FakeReply],
        sub_reply: Callable[[str], str | FakeReply] = lambda prompt: "ok",
        *,
        root_model: str = "root",
        sub_model: str = "sub",
        on_exhausted: str = "error",
    ) -> None:
        if not root_replies:
            raise ValueError("root_replies must not be empty")
        self.root_replies = list(root_replies)
        self.sub_reply = sub_reply
        self.root_model = root_model
        self.sub_model = sub_model
        self.on_exhausted = on_exhausted
        self.models = [root_model, sub_model]

    def __call__(self, request: dict[str, Any]) -> FakeReply | str:
        model = request.get("model")
        if model == self.sub_model and model != self.root_model:
            return self.sub_reply(last_user_message(request))
        if model != self.root_model:
            return FakeReply.error(404, f"The model `{model}` does not exist.")
        _, turn = conversation_turn(request)
        if turn >= len(self.root_replies):
            if self.on_exhausted != "repeat_last":
                return FakeReply.error(
                    400, f"ScriptedHandler: script of {len(self.root_replies)} replies exhausted"
                )
            turn = len(self.root_replies) - 1
        reply = self.root_replies[turn]
        prefill = prefill_of(request)
        if isinstance(reply, str) and prefill and reply.startswith(prefill):
            reply = reply[len(prefill) :]
        return reply


def fail_first(n: int, status: int, handler: Handler, *, message: str | None = None) -> Handler:
    """Answer the first ``n`` requests (counted across threads) with HTTP ``status``, then
    delegate to ``handler``. The wrapper's ``.calls`` attribute counts requests seen."""
    lock = threading.Lock()
    seen = [0]

    def wrapped(request: dict[str, Any]) -> FakeReply | str:
        with lock:
            seen[0] += 1
            k = seen[0]
        if k <= n:
            return FakeReply.error(status, message or f"injected HTTP {status} ({k}/{n})")
        return handler(request)

    return wrapped


def fail_if(
    predicate: Callable[[dict[str, Any]], bool],
    reply: FakeReply,
    handler: Handler,
) -> Handler:
    """Answer ``reply`` to requests where ``predicate(request)`` holds, else delegate."""

    def wrapped(request: dict[str, Any]) -> FakeReply | str:
        return reply if predicate(request) else handler(request)

    return wrapped


FAULT_KINDS: dict[str, FakeReply] = {
    "http_429_retry_after": FakeReply.error(429, "rate limited", retry_after=0.01),
    "http_429": FakeReply.error(429, "rate limited"),
    "http_500": FakeReply.error(500, "internal error"),
    "http_502": FakeReply(status=502, raw_body="<html><h1>502 Bad Gateway</h1></html>"),
    "http_503": FakeReply.error(503, "overloaded"),
    "timeout": FakeReply.hang(2.0),
    "connection_reset": FakeReply(reset=True),
    "non_json": FakeReply(raw_body="<html>upstream glitch</html>"),
    "no_choices": FakeReply(
        raw_body='{"id": "x", "object": "chat.completion", "model": "m", "choices": []}'
    ),
    "empty_reply": FakeReply(text="", null_content=True),
    "reasoning_only": FakeReply(text="", reasoning="Let me think about the contract..."),
    "context_top_level": FakeReply.context_exceeded_top_level(),
    "context_input_tokens": FakeReply.context_exceeded_input_tokens(),
    "context_characters": FakeReply.context_exceeded_characters(),
    "finish_abort": FakeReply(text="```repl\nnotes = search(", finish_reason="abort"),
    "unsupported_parameter": FakeReply.error(
        400,
        "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
        "'max_completion_tokens' instead.",
    ),
}
"""One reply per fault of the ``docs/serving.md`` table (the timeout hangs 2 s: use a client
timeout below that). ``finish_abort``: HTTP 200 with half a reply and ``finish_reason:
"abort"`` (vLLM and SGLang end a preempted or cancelled request so, vllm#57082);
``unsupported_parameter``: a hosted API's HTTP 400 for a sampling parameter it does not
take."""

UNSUPPORTED_PARAMETER = (
    "Unsupported parameter: '{name}' is not supported with this model. Use "
    "'max_completion_tokens' instead."
)
"""A hosted API's HTTP 400 text for a request field it refuses (OpenAI's wording)."""
UNSUPPORTED_VALUE = (
    "Unsupported value: '{name}' does not support {value!r} with this model. Only the "
    "default (1) value is supported."
)
"""A hosted API's HTTP 400 text for a sampling value it refuses (OpenAI's wording)."""


def refuse_parameter(
    name: str,
    handler: Handler,
    *,
    models: list[str] | None = None,
    unless: Any = None,
) -> Handler:
    """Answer HTTP 400 to every request (of ``models``, default all) that carries the field
    ``name``, as a hosted API that does not take it does; with ``unless`` set, only when the
    field's value differs from it ("Unsupported value", e.g. ``temperature`` other than 1).
    Other requests go to ``handler``."""

    def wrapped(request: dict[str, Any]) -> FakeReply | str:
        if (models is None or request.get("model") in models) and name in request:
            value = request[name]
            if unless is None:
                return FakeReply.error(400, UNSUPPORTED_PARAMETER.format(name=name))
            if value != unless:
                return FakeReply.error(400, UNSUPPORTED_VALUE.format(name=name, value=value))
        return handler(request)

    wrapped.models = list(getattr(handler, "models", None) or [])  # type: ignore[attr-defined]
    return wrapped


_LOOPBACK_PORT = re.compile(r"127\.0\.0\.1:\d+")


@dataclass
class InjectedFault:
    """One request seen by :class:`FaultInjector`: what it got."""

    model: str
    seed: int | None
    body_sha: str
    """sha256 (16 hex) of the request JSON (sorted keys): equal for a retried request."""
    occurrence: int
    """0 for the first request with this body, 1 for the next (a retry, or a later run's)."""
    fault: str | None
    """Key of :data:`FAULT_KINDS`, or ``None`` when the request was passed to the handler."""


class FaultInjector:
    """Fail ``rate`` of the requests at random with the faults of :data:`FAULT_KINDS`.

    The draw is a hash of (``seed``, request body with loopback ports masked, how often this
    body was seen), so it depends neither on thread timing nor on the server's port: a retried request gets a fresh draw, and a run repeated
    against a new injector with the same seed sees the same faults. Every request is logged in
    :attr:`log` (cleared with :meth:`new_run`).
    """

    def __init__(
        self,
        handler: Handler,
        rate: float = 0.2,
        *,
        seed: int = 0,
        kinds: list[str] | None = None,
    ) -> None:
        self.handler = handler
        self.rate = rate
        self.seed = seed
        self.kinds = list(kinds or FAULT_KINDS)
        self.models = list(getattr(handler, "models", None) or ["fake"])
        self.log: list[InjectedFault] = []
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()

    def new_run(self) -> None:
        """Forget the log (not the occurrence counts) before the next run."""
        with self._lock:
            self.log = []

    def __call__(self, request: dict[str, Any]) -> FakeReply | str:
        text = _LOOPBACK_PORT.sub("127.0.0.1:PORT", json.dumps(request, sort_keys=True))
        body_sha = hashlib.sha256(text.encode()).hexdigest()[:16]
        with self._lock:
            k = self._seen.get(body_sha, 0)
            self._seen[body_sha] = k + 1
        draw = hashlib.sha256(f"{self.seed}:{body_sha}:{k}".encode()).digest()
        u = int.from_bytes(draw[:8], "big") / 2**64
        fault = self.kinds[int.from_bytes(draw[8:16], "big") % len(self.kinds)]
        chosen = fault if u < self.rate else None
        entry = InjectedFault(
            model=str(request.get("model")),
            seed=request.get("seed"),
            body_sha=body_sha,
            occurrence=k,
            fault=chosen,
        )
        with self._lock:
            self.log.append(entry)
        if chosen is None:
            return self.handler(request)
        reply = FAULT_KINDS[chosen]
        return FakeReply(**{**reply.__dict__, "headers": dict(reply.headers)})


def echo_handler(request: dict[str, Any]) -> str:
    """Reply with the last user message (handy default)."""
    return last_user_message(request)


class FakeOpenAIServer:
    """OpenAI-compatible chat server on ``127.0.0.1`` in a background thread.

    One asyncio event loop serves every connection (httptools parses HTTP/1.1, keep-alive), so
    thousands of concurrent requests with a fixed latency cost no thread each; handlers run
    on that loop and must not block. :meth:`kill` resets every connection at once, as a
    crashed server would.

    Use as a context manager or call :meth:`close`. Attributes: :attr:`base_url`
    (``http://127.0.0.1:PORT/v1``), :attr:`requests` (copy of every chat request body received,
    in arrival order), :attr:`max_in_flight` (peak concurrent chat requests).

    Args:
        handler: ``(request_json) -> FakeReply | str``.
        latency_s: fixed delay before every chat reply, in seconds.
        tokenizer: ``str -> int`` token counter or an object with ``encode`` (e.g. a HF
            tokenizer) for usage; default ``max(1, chars // 4)``. A HF tokenizer with a chat
            template also answers ``return_token_ids`` (vLLM) with prompt and completion ids.
        context_window: when set, requests whose counted prompt plus ``max_tokens`` exceed it
            get the vLLM HTTP 400 "maximum context length" error before the handler runs.
        echo_prefill: return prefill + reply (as some servers do) instead of the reply alone.
        models: ids listed by ``GET /v1/models`` (default: ``handler.models`` or ``["fake"]``).
        port: TCP port on 127.0.0.1 (0: a free one, see :attr:`port`); several servers run
            side by side on their own ports (replicas behind one spec).
        reasoning_parser: answer as vLLM behind ``--reasoning-parser deepseek_r1`` does (and
            the ``qwen3`` parser of templates whose generation prompt opens ``<think>``): the generated text up to ``</think>`` goes to the message's
            ``reasoning_field``, the rest to ``content``; a text without ``</think>`` is all
            reasoning, with ``content: null``. That includes the continuation of a prefilled
            reply (``continue_final_message``): the parser sees only the generated text
            (vllm PR #38749, #17349, #19839).
        reasoning_field: ``reasoning_content`` (older vLLM) or ``reasoning`` (newer).

    Raises ``OSError`` when ``port`` is taken.
    """

    def __init__(
        self,
        handler: Handler = echo_handler,
        latency_s: float = 0.0,
        *,
        tokenizer: Any = None,
        context_window: int | None = None,
        echo_prefill: bool = False,
        models: list[str] | None = None,
        port: int = 0,
        reasoning_parser: bool = False,
        reasoning_field: str = "reasoning",
    ) -> None:
        self.handler = handler
        self.reasoning_parser = reasoning_parser
        self.reasoning_field = reasoning_field
        self.latency_s = latency_s
        self.context_window = context_window
        self.echo_prefill = echo_prefill
        self.models = models or list(getattr(handler, "models", None) or ["fake"])
        self.loaded_adapters: dict[str, str] = {}
        """LoRA adapters loaded through ``POST /v1/load_lora_adapter`` (name -> path); loading
        a loaded name again answers vLLM's HTTP 400 "already been loaded" and changes nothing;
        ``POST /v1/unload_lora_adapter`` removes one."""
        self.adapter_loads: list[tuple[str, str]] = []
        """Every successful load, in order (name, path)."""
        self._count = self._make_counter(tokenizer)
        self.tokenizer = tokenizer
        self._ids = itertools.count()
        self._id_prefix = uuid.uuid4().hex[:6]  # ids differ between servers, as a real one's
        self._lock = threading.Lock()
        self._requests: list[dict[str, Any]] = []
        self._in_flight = 0
        self.max_in_flight = 0
        self._closed = False
        self._connections: set[_Connection] = set()
        self._loop = asyncio.new_event_loop()
        self._stopping = False
        started: Future[int] = Future()

        async def start() -> None:
            try:
                self._server = await self._loop.create_server(
                    lambda: _Connection(self), "127.0.0.1", port, backlog=4096, reuse_address=True
                )
            except OSError as exc:
                started.set_exception(exc)
                return
            started.set_result(self._server.sockets[0].getsockname()[1])

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(start())
            if started.exception() is None:
                self._loop.run_forever()
            self._loop.close()

        self._thread = threading.Thread(target=run, name="fake-openai", daemon=True)
        self._thread.start()
        self.port = started.result()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    @staticmethod
    def _make_counter(tokenizer: Any) -> Callable[[str], int]:
        if tokenizer is None:
            return _default_count
        if hasattr(tokenizer, "encode"):
            return lambda text: len(tokenizer.encode(text, add_special_tokens=False))
        if callable(tokenizer):
            return lambda text: int(tokenizer(text))
        raise TypeError("tokenizer must be a str->int callable or have .encode")

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Copy of the chat request bodies received so far (thread-safe)."""
        with self._lock:
            return list(self._requests)

    def close(self) -> None:
        """Stop serving: stop accepting, answer delayed replies with 503, let the answers
        being sent go out, close every connection, and join the server thread. Idempotent."""
        self._shutdown(abort=False)

    def kill(self) -> None:
        """Die as a crashed server process would: stop accepting and reset every open
        connection at once (requests in flight get no answer). Idempotent."""
        self._shutdown(abort=True)

    def _shutdown(self, abort: bool) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True

        async def stop() -> None:
            self._server.close()
            if abort:
                for conn in list(self._connections):
                    conn.abort()
                return
            self._stopping = True
            for conn in list(self._connections):
                conn.answer_now()  # delayed replies become 503s
            await asyncio.sleep(0.05)  # the 503s go out
            for conn in list(self._connections):
                conn.close()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def __enter__(self) -> FakeOpenAIServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reply building ---------------------------------------------------------------

    def _prompt_tokens(self, request: dict[str, Any]) -> int:
        messages = request.get("messages") or []
        return sum(self._count(str(m.get("content") or "")) + 4 for m in messages)

    def _completion(self, request: dict[str, Any], reply: FakeReply) -> dict[str, Any]:
        text = reply.text or ""
        finish = "stop"
        stops = request.get("stop") or []
        if isinstance(stops, str):
            stops = [stops]
        cut = min((i for s in stops if s and (i := text.find(s)) >= 0), default=-1)
        if cut >= 0:
            text = text[:cut]
        max_tokens = request.get("max_tokens") or request.get("max_completion_tokens")
        if isinstance(max_tokens, int) and self._count(text) > max_tokens:
            lo, hi = 0, len(text)  # longest prefix that fits max_tokens
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if self._count(text[:mid]) <= max_tokens:
                    lo = mid
                else:
                    hi = mid - 1
            text = text[:lo]
            finish = "length"
        completion_tokens = self._count(text)
        prefill = prefill_of(request)
        if self.echo_prefill and prefill:
            text = prefill + text
        prompt_tokens = self._prompt_tokens(request)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if reply.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if reply.null_content:
            message["content"] = None
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "finish_reason": reply.finish_reason or finish,
            "logprobs": None,
        }
        if reply.reasoning is not None:
            choice["message"][reply.reasoning_field] = reply.reasoning
        elif self.reasoning_parser and not reply.null_content:
            head, sep, tail = text.partition("</think>")
            if sep:  # the parser splits at the end of the block
                thought = head.lstrip().removeprefix("<think>").strip("\n")
                message["content"] = tail.lstrip("\n")
            else:  # no </think> in the generated text: all of it is reasoning
                thought = text
                message["content"] = None
            if thought:
                message[self.reasoning_field] = thought
        ids = self._token_ids(request, reply, text)
        if ids is not None:
            prompt_ids, choice["token_ids"] = ids
            choice["logprobs"] = {
                "content": [
                    {"token": f"token_id:{t}", "logprob": -0.5, "top_logprobs": []}
                    for t in choice["token_ids"]
                ]
            }
            completion = {"prompt_token_ids": prompt_ids}
        elif request.get("logprobs"):
            pieces = [text[i : i + 4] for i in range(0, len(text), 4)]
            choice["logprobs"] = {
                "content": [
                    {"token": p, "logprob": -0.25, "bytes": list(p.encode()), "top_logprobs": []}
                    for p in pieces
                ]
            }
        return {
            "id": f"chatcmpl-{self._id_prefix}{next(self._ids):06x}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model", "fake"),
            "choices": [choice],
            "usage": usage,
            **(completion if ids is not None else {}),
        }

    def _token_ids(
        self, request: dict[str, Any], reply: FakeReply, text: str
    ) -> tuple[list[int], list[int]] | None:
        """vLLM ``return_token_ids``: ``(prompt ids, completion ids)`` with the server's
        tokenizer (needs one with a chat template), else ``None``. The prompt is the chat
        template render (``continue_final_message`` for a prefill); the completion is
        ``<think>\nR\n</think>\n\n`` + text when there is reasoning, then the eos id."""
        tok = self.tokenizer
        if not request.get("return_token_ids") or getattr(tok, "chat_template", None) is None:
            return None
        cont = prefill_of(request) is not None
        rendered = tok.apply_chat_template(
            request.get("messages") or [],
            tokenize=False,
            add_generation_prompt=not cont,
            continue_final_message=cont,
        )
        prompt = list(tok(rendered, add_special_tokens=False)["input_ids"])
        if reply.token_ids is not None:
            return prompt, list(reply.token_ids)
        produced = f"<think>\n{reply.reasoning}\n</think>\n\n{text}" if reply.reasoning else text
        ids = list(tok(produced, add_special_tokens=False)["input_ids"])
        return prompt, ids + ([tok.eos_token_id] if tok.eos_token_id is not None else [])

    def _prepare(
        self, request: dict[str, Any], arrived: float
    ) -> tuple[FakeReply | tuple[int, dict[str, str], str], float]:
        """The handler's reply (or an error answer at once) and how long to wait before
        sending it: ``latency_s + delay_s`` after ``arrived`` (``time.monotonic()`` when the
        request's head was read), so the server's own parsing and handler time is part of its
        latency instead of adding to it."""
        if request.get("stream"):
            return _error(400, "streaming is not supported by the fake server"), 0.0
        if self.context_window is not None:
            requested = self._prompt_tokens(request) + int(request.get("max_tokens") or 0)
            if requested > self.context_window:
                reply = FakeReply.context_exceeded(self.context_window, requested)
                return _error(400, reply.error_message or ""), 0.0
        try:
            out = self.handler(request)
        except Exception as exc:  # a broken handler is a 500, visible to the test
            return _error(500, f"handler raised {type(exc).__name__}: {exc}"), 0.0
        reply = FakeReply(text=out) if isinstance(out, str) else out
        return reply, arrived + self.latency_s + reply.delay_s - time.monotonic()

    def _finish(
        self, request: dict[str, Any], reply: FakeReply
    ) -> tuple[int, dict[str, str], str | bytes]:
        """Status, headers and body of ``reply`` (status 0: reset the connection)."""
        if reply.reset:
            return 0, {}, ""
        if reply.raw_body is not None:
            return reply.status, dict(reply.headers), reply.raw_body
        if reply.status >= 400:
            status, headers, body = _error(
                reply.status, reply.error_message or "error", reply.error_type
            )
            return status, {**headers, **reply.headers}, body
        return 200, dict(reply.headers), wire_json.dumps(self._completion(request, reply))

    def _chat(
        self, raw: bytes, arrived: float
    ) -> tuple[tuple[int, dict[str, str], str | bytes], float, bool]:
        """The answer to one chat request, the seconds to wait before sending it, and whether
        it is counted in flight (until :meth:`_done`).

        The answer is built at once and only its write waits: the wait is the latency, and a
        burst of replies due together costs only their writes (on a 2-core machine the
        benchmarks' server shares the cores with the harness it stands in front of)."""
        try:
            request = wire_json.loads(raw or b"{}")
            if not isinstance(request, dict):
                raise ValueError("body is not a JSON object")
        except ValueError as exc:
            return _error(400, f"invalid JSON body: {exc}"), 0.0, False
        with self._lock:
            self._requests.append(request)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        prepared, wait = self._prepare(request, arrived)
        if isinstance(prepared, tuple):
            return prepared, 0.0, True
        return self._finish(request, prepared), wait, True

    def _done(self) -> None:
        """One chat request answered, or its connection lost."""
        with self._lock:
            self._in_flight -= 1

    # -- HTTP ---------------------------------------------------------------------------
    def _route(
        self, method: str, path: str, raw: bytes
    ) -> tuple[int, dict[str, str], bytes | str] | None:
        """The answer to a request other than a chat completion (``None`` for a chat)."""
        path = path.split("?", 1)[0].rstrip("/")
        if method == "GET":
            if path == "/v1/models":
                data = [{"id": m, "object": "model", "owned_by": "fake"} for m in self.models]
                return 200, {}, json.dumps({"object": "list", "data": data})
            return _error(404, f"no route {path}")
        if path == "/v1/load_lora_adapter":
            return self._load_lora(raw)
        if path == "/v1/unload_lora_adapter":
            return self._unload_lora(raw)
        if path != "/v1/chat/completions":
            return _error(404, f"no route {path}")
        return None

    def _load_lora(self, raw: bytes) -> tuple[int, dict[str, str], str]:
        """vLLM's runtime LoRA loading: ``{"lora_name", "lora_path"}``; the name becomes a
        model id. 400 when a field is missing or the path has no ``adapter_config.json`` (as
        vLLM does), and vLLM's "already been loaded" for a loaded name."""
        try:
            body = json.loads(raw or b"{}")
            name, path = body["lora_name"], body["lora_path"]
        except (ValueError, KeyError, TypeError) as exc:
            return _error(400, f"bad load_lora_adapter body: {exc}")
        if not (Path(path) / "adapter_config.json").exists():
            return _error(400, f"no adapter_config.json under {path}")
        with self._lock:
            already = name in self.loaded_adapters
            if not already:
                self.loaded_adapters[name] = path
                self.adapter_loads.append((name, path))
                if name not in self.models:
                    self.models.append(name)
        if already:  # vLLM's answer; it keeps serving the old weights (vllm#31326)
            return _error(
                400,
                f"The lora adapter '{name}' has already been loaded. If you want to load the "
                "adapter in place, set 'load_inplace' to True.",
            )
        return 200, {"Content-Type": "text/plain"}, "ok"

    def _unload_lora(self, raw: bytes) -> tuple[int, dict[str, str], str]:
        """vLLM's ``POST /v1/unload_lora_adapter {"lora_name"}``; 404 if not loaded."""
        try:
            name = json.loads(raw or b"{}")["lora_name"]
        except (ValueError, KeyError, TypeError) as exc:
            return _error(400, f"bad unload_lora_adapter body: {exc}")
        with self._lock:
            found = self.loaded_adapters.pop(name, None) is not None
            if found and name in self.models:
                self.models.remove(name)
        if not found:
            return _error(404, f"The lora adapter '{name}' cannot be found.")
        return 200, {}, json.dumps({"ok": True})


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found"}
_REASONS.update({429: "Too Many Requests", 500: "Internal Server Error"})
_REASONS.update({502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"})


class _Connection(asyncio.Protocol):
    """One keep-alive connection: its requests answered one after another, in order.

    A protocol of callbacks, not a coroutine per connection: a request is parsed, answered and
    its write scheduled with one timer (``loop.call_later``), with no task, future or stream
    between them (fewer event-loop steps per request than a ``StreamReader`` loop; the server
    shares the cores with the harness it stands in front of in the benchmarks)."""

    def __init__(self, server: FakeOpenAIServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.incoming = _Requests()
        self.parser = httptools.HttpRequestParser(self.incoming)
        self.incoming.parser = self.parser
        self.busy = False  # a request of this connection waits for its answer's due time
        self.timer: asyncio.TimerHandle | None = None
        self.chat = False  # the request waiting is a chat completion (counted in flight)
        self.keep_alive = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        with contextlib.suppress(OSError):  # TCP_NODELAY: no 40 ms delayed-ACK stalls
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server._connections.discard(self)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.chat:
            self.chat = False
            self.server._done()

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.abort()  # a client that spoke bad HTTP: drop the connection
            return
        self._next()

    def _next(self) -> None:
        """Answer the next whole request received, if none is waiting."""
        if self.busy or not self.incoming.done or self.transport is None:
            return
        method, target, body, arrived, self.keep_alive = self.incoming.done.popleft()
        other = self.server._route(method, target, body)
        if other is not None:
            self._send(other)
            return
        answer, wait, self.chat = self.server._chat(body, arrived)
        if wait > 0 and self.server._stopping:
            answer, wait = _error(503, "server shutting down"), 0.0
        if wait <= 0:
            self._send(answer)
            return
        self.busy = True
        self.timer = asyncio.get_running_loop().call_later(wait, self._due, answer)

    def _due(self, answer: tuple[int, dict[str, str], str | bytes]) -> None:
        self.timer = None
        self._send(answer)

    def answer_now(self) -> None:
        """The server is closing: a reply still waiting for its due time is a 503 now."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
            self._send(_error(503, "server shutting down"))

    def _send(self, answer: tuple[int, dict[str, str], str | bytes]) -> None:
        self.busy = False
        if self.chat:
            self.chat = False
            self.server._done()
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        status, headers, payload = answer
        if status == 0:  # FakeReply.reset: RST instead of an answer
            self.abort()
            return
        data = payload.encode("utf-8") if isinstance(payload, str) else payload
        out_headers = {"Content-Type": "application/json", **headers}
        out_headers["Content-Length"] = str(len(data))
        if not self.keep_alive:
            out_headers["Connection"] = "close"
        head = f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in out_headers.items()
        )
        transport.write(head.encode("latin-1") + b"\r\n" + data)
        if not self.keep_alive:
            transport.close()  # after the buffered answer is written
            return
        self._next()

    def abort(self) -> None:
        """Reset the connection (RST): as a crashed server, or ``FakeReply.reset``."""
        if self.transport is not None:
            sock = self.transport.get_extra_info("socket")
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.transport.abort()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class _Requests:
    """``httptools`` callbacks of one connection: whole requests, in order, as
    ``(method, target, body, arrived, keep_alive)``; ``arrived`` is ``time.monotonic()`` when
    the request's head was read."""

    def __init__(self) -> None:
        self.parser: Any = None
        self.done: deque[tuple[str, str, bytes, float, bool]] = deque()
        self._url = bytearray()
        self._body = bytearray()
        self._arrived = 0.0

    def on_message_begin(self) -> None:
        self._url, self._body = bytearray(), bytearray()

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_headers_complete(self) -> None:
        self._arrived = time.monotonic()

    def on_body(self, body: bytes) -> None:
        self._body += body

    def on_message_complete(self) -> None:
        method = self.parser.get_method().decode("latin-1")
        keep = bool(self.parser.should_keep_alive())
        self.done.append(
            (method, self._url.decode("latin-1"), bytes(self._body), self._arrived, keep)
        )


def _error(
    status: int, message: str, error_type: str | None = None
) -> tuple[int, dict[str, str], str]:
    kind = error_type or ("invalid_request_error" if status < 500 else "server_error")
    body = {"error": {"message": message, "type": kind, "param": None, "code": status}}
    return status, {}, json.dumps(body)


def main(argv: list[str] | None = None) -> None:
    """``python -m rlmdistill.testing.fake_openai --port P [--latency S] [--script FILE]``:
    serve until killed (for replicas in their own processes). ``--script`` is a JSON file
    ``{"root": [reply, ...], "root_model": "root", "sub_model": "sub"}`` for a
    :class:`ScriptedHandler` whose sub model answers ``answer to <prompt>``; without it every
    request is answered with its last user message."""
    ap = argparse.ArgumentParser(description="scripted OpenAI-compatible server on 127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--latency", type=float, default=0.0)
    ap.add_argument("--script", type=Path)
    args = ap.parse_args(argv)
    handler: Handler = echo_handler
    if args.script is not None:
        spec = json.loads(args.script.read_text(encoding="utf-8"))
        handler = ScriptedHandler(
            list(spec["root"]),
            lambda prompt: "answer to " + prompt,
            root_model=spec.get("root_model", "root"),
            sub_model=spec.get("sub_model", "sub"),
        )
    server = FakeOpenAIServer(handler, latency_s=args.latency, port=args.port)
    print(server.base_url, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
