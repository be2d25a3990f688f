"""Model client for any OpenAI-compatible chat-completions server (vLLM, SGLang, llama.cpp, APIs).

Implements :class:`~rlmdistill.models.base.ModelClient` over ``urllib3`` (the connection
pool ``requests`` is built on), with bounded retries of our own (``tenacity``: exponential
backoff with full jitter, honouring ``Retry-After`` up to the backoff cap), so that every
:class:`~rlmdistill.models.base.ChatResult` records how many attempts it took. Why urllib3:
the 64 concurrent sub-calls of a batch are sent one after another under the GIL, so the
client's CPU per request is on the episode's critical path. Measured on the 2-core CI machine
(``benchmarks/bench_harness_overhead.py``): the ``openai`` SDK cost ~0.5 ms more per request
than ``httpx``, and ``httpx`` ~0.25 ms more than ``urllib3`` (64 fresh connections: send
spread 46 ms -> 32 ms). The wire format is the public chat-completions JSON, parsed here with
explicit checks. Every fault is classified (the table with its tests is ``docs/serving.md``;
the ``*_case_t4`` tests of ``tests/test_models_openai.py``):

- a context-length message (any of the texts vLLM versions send, top-level or nested, at any
  status but 408/409/429) -> ``ContextExceededError``, never retried;
- 408/409/429/5xx, timeouts, refused or reset connections and malformed answers (a body that
  is not JSON, empty ``choices``, a choice without a message) are retried here with backoff;
  once retries are spent -> ``RetryableModelError(attempts=n, cause=...)``;
- 404 (unknown model id) and 401/403 -> ``ServerRefusedError``, not retried here: the
  collector records the episode as a failed attempt and the next run retries it;
- HTTP 200 whose ``finish_reason`` says the server ended the request (``abort``,
  ``error``: vllm#57082, sglang#6693) is retried like a malformed answer (cause
  ``finish_abort``), never returned as a reply: its partial text is not the model's turn;
- ``"content": null`` -> ``EmptyReplyError``; empty content beside reasoning ->
  ``ReasoningOnlyError``, except for a prefilled reply (prefill opening no ``<think>``):
  a reasoning parser returns that continuation as reasoning with ``content: null``
  (vllm#17349), so the reasoning field is the text (``ChatResult.text_from_reasoning``);
  any other 4xx -> ``FatalModelError``.

Reply prefill uses the vLLM/SGLang ``continue_final_message`` extension: the prefill is sent as
a final assistant message with ``extra_body={"continue_final_message": True,
"add_generation_prompt": False}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, get_args

import urllib3
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
)

from rlmdistill.models import wire_json
from rlmdistill.models.aio_http import AsyncHTTP, TransportError
from rlmdistill.models.base import (
    SERVER_FINISH_REASONS,
    ChatResult,
    ContextExceededError,
    EmptyReplyError,
    FatalModelError,
    FinishReason,
    Message,
    ModelError,
    ReasoningOnlyError,
    RetryableModelError,
    Sampling,
    ServerRefusedError,
    Usage,
    chat_concurrently,
)
from rlmdistill.models.reasoning import (
    REASONING_FIELDS,
    TOKEN_REQUEST_PARAMS,
    opens_think_block,
    response_extras,
    token_params_refused,
)

PrefillMode = Literal["continue_final_message", "none"]
"""How a reply prefill is sent: vLLM/SGLang ``continue_final_message``, or not supported."""

DEFAULT_KEY_ENV = "RLMDISTILL_API_KEY"
"""Environment variable the API key is read from unless the spec names another."""

CONTEXT_ERROR_MARKERS: tuple[str, ...] = (
    "maximum context length",
    "context_length_exceeded",
    "context length",
    "too many tokens",
    "prompt is too long",
    "exceeds the context",
    "input is too long",
    "input tokens",
    "prompt contains",
    "too long to fit",
    "maximum input length",
)
"""Lower-case substrings of an error message that mean the prompt did not fit the context.

Texts seen from vLLM (tests in ``tests/test_serving_faults.py``): "This model's maximum context
length is N tokens. However, you requested M tokens ..." (top-level ``{"object": "error"}``
body of older versions), "... your request has M input tokens ..." (nested ``{"error": {}}``),
and "... you requested N output tokens and your prompt contains C characters ..." (vllm#33418).
"""

_FINISH_REASONS = frozenset(get_args(FinishReason)) - {"unknown"}
"""``finish_reason`` values kept as the server said them (anything else is ``unknown``)."""

_RETRYABLE_STATUS = frozenset({408, 409, 429})
_REFUSED_STATUS = {401: "auth", 403: "auth", 404: "model_not_found"}
"""HTTP statuses that mean the server refused this client or model: ``ServerRefusedError``."""


def is_context_error_message(message: str) -> bool:
    """True when an error message says the prompt exceeded the model's context window."""
    low = message.lower()
    return any(marker in low for marker in CONTEXT_ERROR_MARKERS)


_TRANSPORT_ERRORS = (
    urllib3.exceptions.TimeoutError,  # connect and read timeouts
    urllib3.exceptions.ProtocolError,  # connection reset / closed mid-answer
    urllib3.exceptions.NewConnectionError,  # refused, unreachable, name not resolved
)
"""Transport failures worth retrying (``urllib3`` raises them as such with ``retries=False``)."""


class _HTTPStatusError(Exception):
    """A non-2xx answer: status, the server's error message and the response headers."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str]) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.headers = headers

    @property
    def is_context_error(self) -> bool:
        """A context-length message (at any status but the rate-limit/conflict ones)."""
        return self.status not in _RETRYABLE_STATUS and is_context_error_message(self.message)


class _MalformedResponse(Exception):
    """A 2xx answer that is not a chat completion (``cause``: ``non_json`` or ``no_choices``)."""

    def __init__(self, cause: str, what: str) -> None:
        super().__init__(what)
        self.cause = cause


def _is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, _HTTPStatusError):
        if exc.is_context_error:
            return False
        return exc.status in _RETRYABLE_STATUS or exc.status >= 500
    return isinstance(exc, (*_TRANSPORT_ERRORS, _MalformedResponse, TransportError))


def fault_cause(exc: BaseException) -> str:
    """The cause name of a transport/HTTP/shape fault, as in the ``docs/serving.md`` table:
    ``http_<status>``, ``timeout``, ``connection_refused``, ``connection_reset``, ``non_json``,
    ``no_choices``, else the exception's class name."""
    if isinstance(exc, _HTTPStatusError):
        return f"http_{exc.status}"
    if isinstance(exc, (_MalformedResponse, TransportError)):
        return exc.cause
    if isinstance(exc, urllib3.exceptions.NewConnectionError):  # before TimeoutError: a
        return "connection_refused"  # subclass of ConnectTimeoutError in urllib3 2
    if isinstance(exc, urllib3.exceptions.TimeoutError):
        return "timeout"
    if isinstance(exc, urllib3.exceptions.ProtocolError):
        return "connection_reset"
    return type(exc).__name__


def _error_text(data: bytes, reason: str = "") -> str:
    """The message of an OpenAI-style error body (``{"error": {"message": ...}}``), else text."""
    text = data.decode("utf-8", "replace")
    try:
        body = json.loads(text)
    except ValueError:
        return text[:500] or reason
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])
        if isinstance(err, str):
            return err
        if isinstance(body.get("message"), str):
            return str(body["message"])
    return text[:500]


def _completion_json(
    status: int, headers: Mapping[str, str], data: bytes, reason: str = ""
) -> dict[str, Any]:
    """The JSON of a chat-completion answer; raises :class:`_HTTPStatusError` for a non-2xx
    status and :class:`_MalformedResponse` for a body that is not JSON or has no
    ``choices[0].message``."""
    if status >= 400:
        raise _HTTPStatusError(status, _error_text(data, reason), headers)
    try:
        out = wire_json.loads(data)
    except ValueError:
        raise _MalformedResponse("non_json", f"body is not JSON: {data[:300]!r}") from None
    if not isinstance(out, dict):
        raise _MalformedResponse("non_json", f"body is not a JSON object: {out!r:.300}")
    choices = out.get("choices")
    if not isinstance(choices, list) or not choices:
        raise _MalformedResponse("no_choices", f"no choices: {out!r:.300}")
    if not isinstance(choices[0], dict) or not isinstance(choices[0].get("message"), dict):
        raise _MalformedResponse("no_choices", f"choice without message: {out!r:.300}")
    finish = choices[0].get("finish_reason")
    if isinstance(finish, str) and finish in SERVER_FINISH_REASONS:  # the server ended it
        raise _MalformedResponse(
            f"finish_{finish}",
            f"HTTP 200 with finish_reason {finish!r}: the server ended the request itself "
            f"(partial text of {len(str(choices[0]['message'].get('content') or ''))} "
            "characters, not a reply)",
        )
    return out


def estimate_prompt_tokens(messages: Sequence[Message]) -> int:
    """Rough prompt size in tokens when no tokenizer is known: characters / 3 + 4 per message.

    Deliberately pessimistic (real BPE tokenizers average ~4 characters per token on English).
    """
    return sum(len(m.content) for m in messages) // 3 + 4 * len(messages)


class OpenAIChatClient:
    """Chat client for one model on an OpenAI-compatible server.

    Thread-safe: one ``urllib3`` pool manager (keep-alive connections, any number opened on
    demand, up to 256 kept idle per host) is shared by all threads.

    Args:
        model: model name the server knows (``model`` field of the request).
        base_url: server root including ``/v1``, e.g. ``http://127.0.0.1:8000/v1``.
        api_key: the key; ``None`` reads ``$key_env`` and falls back to ``"EMPTY"`` (what
            local vLLM/SGLang servers accept). Never part of :attr:`model_id`.
        key_env: environment variable holding the key (default ``RLMDISTILL_API_KEY``).
        timeout_s: timeout of each HTTP attempt in seconds (connect + read).
        max_retries: retries after the first attempt for retryable errors
            (so at most ``max_retries + 1`` attempts).
        backoff_initial_s / backoff_max_s: exponential backoff with full jitter: the wait
            before retry *k* is uniform in ``[0, min(backoff_max_s, backoff_initial_s * 2**k)]``;
            a ``Retry-After`` header raises it, never past ``backoff_max_s``.
        prefill_mode: ``continue_final_message`` (vLLM/SGLang) or ``none`` (a prefill then
            raises ``FatalModelError``).
        context_window: the model's context in tokens, if known; enables clamping
            ``max_tokens`` to ``context_window - estimated prompt tokens`` before sending.
        count_tokens: optional exact token counter (``str -> int``) for that clamping;
            default :func:`estimate_prompt_tokens`.
        logprobs: request per-token log-probabilities and fill ``ChatResult.logprobs``.
        token_ids: also ask for prompt and completion token ids (vLLM ``return_token_ids``,
            see :mod:`rlmdistill.models.reasoning`); a server that refuses the fields (HTTP
            400 naming them) is asked again without them, and never again by this client.
        max_concurrency: threads used by :meth:`chat_batch`.
        extra_body: extra JSON fields merged into every request (server extensions).
        retry_transport: retry refused/reset connections and timeouts here (default); with
            ``False`` they raise at once (``RetryableModelError``, 1 attempt) so that a
            :class:`~rlmdistill.models.replicas.ReplicaClient` can send the request to
            another replica instead. HTTP statuses are retried either way.
    """

    def __init__(
        self,
        model: str,
        base_url: str,
        api_key: str | None = None,
        *,
        key_env: str = DEFAULT_KEY_ENV,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        backoff_initial_s: float = 1.0,
        backoff_max_s: float = 30.0,
        prefill_mode: PrefillMode = "continue_final_message",
        context_window: int | None = None,
        count_tokens: Callable[[str], int] | None = None,
        logprobs: bool = False,
        token_ids: bool = False,
        max_concurrency: int = 8,
        extra_body: dict[str, Any] | None = None,
        retry_transport: bool = True,
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if timeout_s <= 0:
            raise ValueError("timeout_s must be > 0")
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.model_id = f"openai:{model}@{self.base_url}"
        self.key_env = key_env
        self.timeout_s = float(timeout_s)
        self.max_retries = max_retries
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.prefill_mode: PrefillMode = prefill_mode
        self.context_window = context_window
        self.count_tokens = count_tokens
        self.logprobs = logprobs or token_ids
        self.token_ids = token_ids
        self._logprobs_asked = logprobs
        self.max_concurrency = max(1, max_concurrency)
        self.extra_body = dict(extra_body or {})
        self.retry_transport = retry_transport
        key = api_key if api_key is not None else os.environ.get(key_env) or "EMPTY"
        self._url = self.base_url + "/chat/completions"
        self._headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self._aio: AsyncHTTP | None = None
        self._aio_loop: asyncio.AbstractEventLoop | None = None
        self._http = urllib3.PoolManager(
            num_pools=4,
            maxsize=256,
            block=False,  # never wait for a free connection: open one more
            headers=self._headers,
            timeout=urllib3.Timeout(connect=self.timeout_s, read=self.timeout_s),
            retries=False,  # retries are ours (tenacity), so attempts are counted
        )
        self._closed = False
        self._lock = threading.Lock()

    # -- request building -------------------------------------------------------------

    def _prompt_tokens(self, messages: Sequence[Message]) -> int:
        if self.count_tokens is None:
            return estimate_prompt_tokens(messages)
        return sum(self.count_tokens(m.content) for m in messages) + 4 * len(messages)

    def _max_tokens(self, messages: Sequence[Message], sampling: Sampling) -> int:
        if self.context_window is None:
            return sampling.max_tokens
        room = self.context_window - self._prompt_tokens(messages)
        if room <= 0:
            raise ContextExceededError(
                f"{self.model_id}: prompt of ~{self._prompt_tokens(messages)} tokens leaves "
                f"{room} of the {self.context_window}-token context for the reply",
                attempts=0,
            )
        return min(sampling.max_tokens, room)

    def _request(
        self, messages: list[Message], sampling: Sampling, prefill: str | None
    ) -> dict[str, Any]:
        wire: list[dict[str, str]] = [{"role": m.role, "content": m.content} for m in messages]
        extra: dict[str, Any] = dict(self.extra_body)
        if prefill:
            if self.prefill_mode == "none":
                raise FatalModelError(
                    f"{self.model_id}: a reply prefill was requested but prefill_mode='none'; "
                    "standard OpenAI chat APIs cannot force the start of a reply. Use a "
                    "vLLM/SGLang server (prefill_mode='continue_final_message') or drop the "
                    "prefill from the root settings.",
                    attempts=0,
                )
            wire.append({"role": "assistant", "content": prefill})
            extra.update({"continue_final_message": True, "add_generation_prompt": False})
        body: dict[str, Any] = {
            "model": self.model,
            "messages": wire,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": self._max_tokens(messages, sampling),
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if self.logprobs:
            body["logprobs"] = True
        if self.token_ids:
            body.update(TOKEN_REQUEST_PARAMS)
        body.update(extra)  # server extensions ride at the top level of the JSON body
        return body

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        """One HTTP attempt. Raises :class:`_HTTPStatusError` for a non-2xx answer,
        ``urllib3`` errors for timeouts/transport, :class:`_MalformedResponse` for a body that
        is not JSON or has no ``choices[0].message`` (all retried by :meth:`chat`)."""
        payload = wire_json.dumps(body)
        response = self._http.request("POST", self._url, body=payload)
        return _completion_json(
            response.status, response.headers, response.data, str(response.reason)
        )

    def _async_http(self) -> AsyncHTTP:
        """The event loop's connection pool (made on first use, on the running loop)."""
        if self._aio is None:
            self._aio = AsyncHTTP(self.base_url, self._headers, self.timeout_s)
            self._aio_loop = asyncio.get_running_loop()
        return self._aio

    async def aprewarm(self, n: int) -> int:
        """Open up to ``n`` keep-alive connections for :meth:`achat` ahead of a batch (on the
        loop :meth:`achat` runs on); returns how many were opened. See
        :meth:`~rlmdistill.models.aio_http.AsyncHTTP.prewarm`."""
        if self._closed:
            return 0
        return await self._async_http().prewarm(n)

    async def _apost(self, body: dict[str, Any]) -> dict[str, Any]:
        """:meth:`_post` on the event loop (``TransportError`` for transport faults)."""
        aio = self._async_http()
        payload = wire_json.dumps(body)
        status, headers, data = await aio.post("/chat/completions", payload)
        return _completion_json(status, headers, data)

    # -- retry machinery --------------------------------------------------------------

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        return self._backoff(state.attempt_number, exc)

    def _backoff(self, attempt: int, exc: BaseException | None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based): uniform in
        ``[0, min(backoff_max_s, backoff_initial_s * 2**(attempt - 1))]``, raised to a
        ``Retry-After`` header, never past ``backoff_max_s``."""
        cap = min(self.backoff_max_s, self.backoff_initial_s * (2 ** (attempt - 1)))
        wait = random.uniform(0.0, cap)
        if isinstance(exc, _HTTPStatusError):
            retry_after = exc.headers.get("retry-after")
            try:
                if retry_after is not None:
                    wait = max(wait, min(float(retry_after), self.backoff_max_s))
            except ValueError:
                pass
        return wait

    def _retry_here(self, exc: BaseException) -> bool:
        """Whether this client retries ``exc`` itself (see ``retry_transport``)."""
        if not _is_retryable(exc):
            return False
        return self.retry_transport or not isinstance(exc, (*_TRANSPORT_ERRORS, TransportError))

    def _classify(self, exc: BaseException, attempts: int) -> ModelError:
        """The :class:`ModelError` of the last failed attempt (rows of ``docs/serving.md``)."""
        if isinstance(exc, ModelError):
            exc.attempts = attempts
            return exc
        cause = fault_cause(exc)
        if isinstance(exc, _HTTPStatusError):
            text, status = exc.message, exc.status
            if exc.is_context_error:
                return ContextExceededError(
                    f"{self.model_id}: HTTP {status}: {text}", attempts=attempts
                )
            if _is_retryable(exc):
                return RetryableModelError(
                    f"{self.model_id}: HTTP {status} after {attempts} attempt(s): {text}",
                    attempts=attempts,
                    cause=cause,
                )
            if status in _REFUSED_STATUS:
                hint = (
                    "is the model id one the server lists at GET /v1/models?"
                    if status == 404
                    else f"is the API key in ${self.key_env} right?"
                )
                return ServerRefusedError(
                    f"{self.model_id}: HTTP {status}: {text} ({hint})",
                    attempts=attempts,
                    cause=_REFUSED_STATUS[status],
                )
            return FatalModelError(
                f"{self.model_id}: HTTP {status}: {text}", attempts=attempts, cause=cause
            )
        if _is_retryable(exc):
            return RetryableModelError(
                f"{self.model_id}: {cause} after {attempts} attempt(s) "
                f"(timeout {self.timeout_s}s): {type(exc).__name__}: {exc}",
                attempts=attempts,
                cause=cause,
            )
        return FatalModelError(f"{self.model_id}: {type(exc).__name__}: {exc}", attempts=attempts)

    # -- public API -------------------------------------------------------------------

    def chat(
        self, messages: list[Message], sampling: Sampling, *, prefill: str | None = None
    ) -> ChatResult:
        """Complete ``messages`` (see :meth:`ModelClient.chat`).

        Returns a :class:`ChatResult` whose ``latency_s`` covers all attempts and backoff.

        Raises:
            ContextExceededError: server said the context is exceeded, or the locally
                estimated prompt leaves no room (only with ``context_window``).
            RetryableModelError: 408/409/429/5xx, timeout, connection or malformed-response
                error on every attempt.
            ServerRefusedError: HTTP 404 (unknown model id) or 401/403.
            EmptyReplyError / ReasoningOnlyError: ``null`` content / reasoning only.
            FatalModelError: other HTTP errors, a prefill with ``prefill_mode='none'``, or a
                closed client.
        """
        if self._closed:
            raise FatalModelError(f"{self.model_id}: client is closed", attempts=0)
        body = self._request(messages, sampling, prefill)
        t0 = time.perf_counter()
        retrying = Retrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception(self._retry_here),
            reraise=True,
        )
        attempts = 0
        try:
            for attempt in retrying:
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    response = self._post(body)
        except Exception as exc:
            if (
                self.token_ids
                and isinstance(exc, _HTTPStatusError)
                and token_params_refused(exc.status, exc.message)
            ):
                self.token_ids, self.logprobs = False, self._logprobs_asked  # refused: stop
                return self.chat(messages, sampling, prefill=prefill)
            raise self._classify(exc, max(attempts, 1)) from exc
        return self._result(response, prefill, time.perf_counter() - t0, attempts)

    async def achat(
        self, messages: list[Message], sampling: Sampling, *, prefill: str | None = None
    ) -> ChatResult:
        """:meth:`chat` as a coroutine on an asyncio event loop (:mod:`rlmdistill.models.aio_http`
        instead of urllib3): same request, retries, classification and result.

        The collector's sub-call dispatch (:mod:`rlmdistill.harness.dispatch`) runs every
        sub-call of every episode this way on one event-loop thread. Always call it from the
        same loop (the connection pool belongs to it). Raises as :meth:`chat`.
        """
        if self._closed:
            raise FatalModelError(f"{self.model_id}: client is closed", attempts=0)
        body = self._request(messages, sampling, prefill)
        t0 = time.perf_counter()
        attempts = 0
        while True:  # the policy of chat()'s tenacity loop, without its ~0.1 ms per call
            attempts += 1
            try:
                response = await self._apost(body)
                break
            except Exception as exc:
                if attempts <= self.max_retries and self._retry_here(exc):
                    await asyncio.sleep(self._backoff(attempts, exc))
                    continue
                if (
                    self.token_ids
                    and isinstance(exc, _HTTPStatusError)
                    and token_params_refused(exc.status, exc.message)
                ):
                    self.token_ids, self.logprobs = False, self._logprobs_asked  # refused: stop
                    return await self.achat(messages, sampling, prefill=prefill)
                raise self._classify(exc, attempts) from exc
        return self._result(response, prefill, time.perf_counter() - t0, attempts)

    def _result(
        self, response: dict[str, Any], prefill: str | None, latency_s: float, attempts: int
    ) -> ChatResult:
        def malformed(what: str) -> FatalModelError:
            return FatalModelError(
                f"{self.model_id}: malformed response, {what}: {response!r:.300}",
                attempts=attempts,
            )

        choices = response.get("choices")
        if not isinstance(choices, list) or not choices:
            raise malformed("no choices")
        choice = choices[0]
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            raise malformed("choice without message")
        finish: FinishReason = "unknown"
        if choice.get("finish_reason") in _FINISH_REASONS:
            finish = choice["finish_reason"]
        content = message.get("content")
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        from_reasoning = (
            bool(prefill)
            and not content
            and isinstance(reasoning, str)
            and bool(reasoning)
            and not opens_think_block(prefill or "")
        )
        if from_reasoning:
            # a reasoning parser saw no </think> in the continuation of the prefilled reply
            # and returned all of it as reasoning (vllm#17349, #19839): it is the reply
            content = reasoning
            message = {k: v for k, v in message.items() if k not in REASONING_FIELDS}
            choice = {**choice, "message": message}
        if not content and isinstance(reasoning, str) and reasoning.strip():
            raise ReasoningOnlyError(
                f"{self.model_id}: the reply is reasoning only ({len(reasoning)} characters), "
                f"content {content!r}, finish_reason {choice.get('finish_reason')!r}: raise "
                "max_tokens or turn thinking off for this model",
                attempts=attempts,
            )
        if content is None:
            raise EmptyReplyError(
                f"{self.model_id}: the reply's content is null (finish_reason "
                f"{choice.get('finish_reason')!r}): no text was generated",
                attempts=attempts,
            )
        if not isinstance(content, str):
            raise malformed(f"content is {type(content).__name__}")
        text = content
        if prefill and text.startswith(prefill):
            text = text[len(prefill) :]
        usage = Usage(cached_tokens=None)
        raw_usage = response.get("usage")
        if isinstance(raw_usage, dict):
            details = raw_usage.get("prompt_tokens_details")
            cached = details.get("cached_tokens") if isinstance(details, dict) else None
            usage = Usage(
                prompt_tokens=int(raw_usage.get("prompt_tokens") or 0),
                completion_tokens=int(raw_usage.get("completion_tokens") or 0),
                # absent or null details: the server did not say (never 0, vllm#16162)
                cached_tokens=int(cached) if isinstance(cached, int | float) else None,
            )
        extras = response_extras(response, choice)
        return ChatResult(
            text=text,
            usage=usage,
            latency_s=latency_s,
            finish_reason=finish,
            model=response.get("model") or self.model,
            attempts=attempts,
            logprobs=extras.logprobs if self.logprobs else None,
            token_ids=extras.token_ids,
            prompt_token_ids=extras.prompt_token_ids,
            reasoning=extras.reasoning,
            text_from_reasoning=from_reasoning,
        )

    def chat_batch(
        self,
        batch: Sequence[list[Message]],
        sampling: Sampling,
        *,
        prefill: str | None = None,
    ) -> list[ChatResult | ModelError]:
        """Run ``chat`` for every conversation in ``batch`` concurrently.

        Uses up to ``max_concurrency`` threads. Returns one entry per input, in input order:
        the :class:`ChatResult`, or the classified :class:`ModelError` of that prompt alone
        (one failing prompt never fails the others).
        """

        return chat_concurrently(
            self.chat,
            self.model_id,
            batch,
            sampling,
            prefill=prefill,
            max_concurrency=self.max_concurrency,
            thread_name_prefix="rlmd-openai",
        )

    def close(self) -> None:
        """Close the HTTP connection pool. Idempotent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._http.clear()
                aio, loop = self._aio, self._aio_loop
                if aio is not None and loop is not None and loop.is_running():
                    fut = asyncio.run_coroutine_threadsafe(aio.aclose(), loop)
                    if asyncio._get_running_loop() is not loop:  # never wait on our own loop
                        with contextlib.suppress(Exception):
                            fut.result(5)

    def __enter__(self) -> OpenAIChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"OpenAIChatClient({self.model_id!r})"
