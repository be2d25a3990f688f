"""The model-client seam: chat messages in, text + token usage + latency out.

Every back end (OpenAI-compatible HTTP, in-process ``transformers``) implements
:class:`ModelClient`. Errors are classified so the harness can give an episode an explicit
status (``tests/test_serving_faults.py``, the ``*_case_t4`` tests; the full table is
``docs/serving.md``):

- :class:`ContextExceededError`: the prompt does not fit; never retried, the episode ends
  ``context_exceeded``;
- :class:`InfrastructureError`: the serving infrastructure failed, not the model:
  :class:`RetryableModelError` (raised only after bounded retries are spent) and
  :class:`ServerRefusedError` (unknown model id, 401/403). The episode is not finished: the
  collector records a failed attempt and the next run retries it;
- :class:`FatalModelError`: the server answered and retrying will not help (bad request, a
  ``null`` content: :class:`EmptyReplyError`, a reasoning-only reply:
  :class:`ReasoningOnlyError`); the episode ends ``model_error``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["system", "user", "assistant", "tool"]


class Message(BaseModel):
    """One chat message. ``content`` is plain text (no multimodal parts)."""

    model_config = ConfigDict(extra="forbid")

    role: Role
    """Who speaks: system prompt, user (task or REPL output), assistant (the model)."""
    content: str
    """The text of the message."""


class Sampling(BaseModel):
    """Sampling settings of one request; recorded verbatim in every trace."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(0.7, ge=0.0, description="Softmax temperature; 0 = greedy.")
    top_p: float = Field(0.95, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    max_tokens: int = Field(512, ge=1, description="Most new tokens to generate.")
    seed: int | None = Field(None, description="Per-request seed where the back end honours it.")
    stop: list[str] = Field(
        default_factory=list, description="Stop strings (not included in the output)."
    )


class Usage(BaseModel):
    """Token counts of one request, as reported by the back end (tokens, not characters)."""

    model_config = ConfigDict(extra="forbid")

    prompt_tokens: int = 0
    """Input tokens, including any cached ones."""
    cached_tokens: int | None = 0
    """Input tokens served from a prefix cache (subset of ``prompt_tokens``). ``None`` when the
    server did not say (vLLM without ``--enable-prompt-tokens-details``, vllm#16162): unknown,
    never 0. A sum with an unknown part is unknown. The in-process back end reports the ids its
    continuous engine took from its prefix cache (0 with the static engine)."""
    completion_tokens: int = 0
    """Generated tokens."""

    def __add__(self, other: Usage) -> Usage:
        cached = (
            None
            if self.cached_tokens is None or other.cached_tokens is None
            else self.cached_tokens + other.cached_tokens
        )
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            cached_tokens=cached,
            completion_tokens=self.completion_tokens + other.completion_tokens,
        )


FinishReason = Literal[
    "stop", "length", "content_filter", "tool_calls", "abort", "error", "unknown"
]
"""Why a reply ended (the chat-completions ``finish_reason``): ``stop`` (end token or stop
string), ``length`` (``max_tokens`` cut it: the reply is truncated), ``content_filter`` and
``tool_calls`` (OpenAI's), ``abort`` / ``error`` (the server ended the request itself: vLLM's
and SGLang's ``abort`` for a preempted, cancelled or shut-down request; never returned by a
client, which raises a :class:`RetryableModelError` for them, see
:data:`SERVER_FINISH_REASONS`), ``unknown`` (the back end did not say, or said something
else)."""

SERVER_FINISH_REASONS: frozenset[str] = frozenset({"abort", "error"})
"""``finish_reason`` values that mean the server, not the model, ended the reply (vllm#57082,
sglang#6693): the partial text is no policy turn; the client retries the request and raises
:class:`RetryableModelError` (``cause="finish_abort"``/``"finish_error"``) when retries are
spent."""


class ChatResult(BaseModel):
    """What one chat request returned."""

    model_config = ConfigDict(extra="forbid")

    text: str
    """Generated text only (a reply prefill is *not* included)."""
    usage: Usage
    latency_s: float
    """Wall time of the request including retries, in seconds."""
    finish_reason: FinishReason = "unknown"
    model: str
    """Model id as the back end names it."""
    attempts: int = 1
    """1 + number of retries spent."""
    token_ids: list[int] | None = None
    """Generated token ids when the back end returns them."""
    logprobs: list[float] | None = None
    """Per generated token log-probabilities when the back end returns them."""
    reasoning: str | None = None
    """Reasoning the server returned apart from ``text`` (``reasoning_content``/``reasoning``);
    inline ``<think>`` text stays in ``text`` (see :mod:`rlmdistill.models.reasoning`)."""
    prompt_token_ids: list[int] | None = None
    """The exact prompt ids the model was given (prefill included) when the back end says."""
    text_from_reasoning: bool = False
    """True when ``text`` was read from the reasoning field: a reasoning-parser server that
    continued a prefilled reply returned the continuation as reasoning with ``content: null``
    (vLLM with ``--reasoning-parser`` and ``continue_final_message``; see
    ``docs/serving.md``)."""


class ModelError(Exception):
    """Base class of classified model errors. ``kind`` is stored in traces.

    ``cause`` names the fault more finely (``http_503``, ``timeout``, ``connection_reset``,
    ``model_not_found``, ...; the rows of the table in ``docs/serving.md``); it defaults to
    ``kind``. ``attempts`` is the number of HTTP attempts spent (0 = none was sent).
    """

    kind: str = "fatal"

    def __init__(self, message: str, *, attempts: int = 1, cause: str | None = None) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.cause = cause or self.kind


class ContextExceededError(ModelError):
    """The prompt (plus requested new tokens) does not fit the model's context window."""

    kind = "context_exceeded"


class InfrastructureError(ModelError):
    """The serving infrastructure failed (not the model): the episode is not finished.

    The collector records the episode as a failed attempt (``attempts.jsonl``) and a re-run
    retries it, up to ``CollectConfig.max_attempts``.
    """

    kind = "infrastructure"


class RetryableModelError(InfrastructureError):
    """Rate limit, 5xx, timeout, connection or malformed-response error that outlived the
    bounded retries (``cause`` names the last one)."""

    kind = "retryable"


class ServerRefusedError(InfrastructureError):
    """The server refused the request for a reason retrying now will not fix, but fixing the
    server will: unknown model id (HTTP 404, ``cause="model_not_found"``) or a refused key
    (HTTP 401/403, ``cause="auth"``)."""

    kind = "server_refused"


class FatalModelError(ModelError):
    """Any other error (bad request, refused prefill, closed client): retrying will not help."""

    kind = "fatal"


class EmptyReplyError(FatalModelError):
    """The server answered with ``"content": null`` and no reasoning: no reply at all
    (an empty string ``""`` is a reply, and is returned as one)."""

    kind = "empty_reply"


class ReasoningOnlyError(FatalModelError):
    """The reply has reasoning (``reasoning_content``/``reasoning``) but empty content: a
    thinking model spent ``max_tokens`` thinking (``finish_reason`` says ``length``) or never
    left its reasoning. Raise ``max_tokens`` or turn thinking off for the root.

    Not raised for a prefilled reply whose prefill opens no ``<think>`` block: there the
    reasoning field holds the continuation and becomes the text
    (:attr:`ChatResult.text_from_reasoning`)."""

    kind = "reasoning_only"


@runtime_checkable
class ModelClient(Protocol):
    """One model behind a chat interface.

    ``chat`` may be called from many threads at once; back ends that batch (the in-process
    one) gather concurrent calls into one forward pass.
    """

    model_id: str
    """Stable id recorded in traces (never contains secrets)."""

    def chat(
        self, messages: list[Message], sampling: Sampling, *, prefill: str | None = None
    ) -> ChatResult:
        """Complete ``messages``.

        ``prefill`` is text the assistant reply is forced to start with; the returned
        ``text`` excludes it. Raises a :class:`ModelError` subclass on failure.
        """
        ...

    def close(self) -> None:
        """Release connections / threads. Idempotent."""
        ...


def chat_concurrently(
    chat: Callable[..., ChatResult],
    model_id: str,
    batch: Sequence[list[Message]],
    sampling: Sampling,
    *,
    prefill: str | None = None,
    max_concurrency: int = 8,
    thread_name_prefix: str = "rlmd-chat",
) -> list[ChatResult | ModelError]:
    """Run ``chat(messages, sampling, prefill=...)`` for every conversation of ``batch`` at once.

    Up to ``max_concurrency`` threads. One entry per input, in input order: the
    :class:`ChatResult`, or that prompt's :class:`ModelError` alone; one failing prompt never
    fails the others. An unexpected exception becomes a :class:`FatalModelError`.
    """

    def one(messages: list[Message]) -> ChatResult | ModelError:
        try:
            return chat(messages, sampling, prefill=prefill)
        except ModelError as exc:
            return exc
        except Exception as exc:  # a bug must not kill the sibling prompts
            return FatalModelError(f"{model_id}: {type(exc).__name__}: {exc}")

    if not batch:
        return []
    workers = min(max_concurrency, len(batch))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=thread_name_prefix) as pool:
        return list(pool.map(one, batch))
