"""Reasoning text and token ids out of a chat-completions response (reasoning roots).

Reasoning models (Qwen3, GLM-4.5+) think before they answer. A server returns that text in
one of two ways:

- **separately**: vLLM/SGLang with ``--reasoning-parser`` put it in the message's
  ``reasoning_content`` field (older vLLM, DeepSeek API) or ``reasoning`` (newer vLLM,
  OpenRouter); ``content`` then holds only the answer;
- **inline**: the content itself starts with ``<think>...</think>`` (no parser; or templates
  whose generation prompt already opens ``<think>``, so only ``...</think>`` comes back).

A parser that continues a prefilled reply (``continue_final_message``) sees no ``</think>``
and returns the whole continuation as reasoning, ``content: null``: :func:`opens_think_block`
tells the OpenAI client when that field is the reply.

Token ids: vLLM >= 0.10.2 returns ``prompt_token_ids`` (top level) and ``choices[i].token_ids``
when the request has ``"return_token_ids": true`` (vLLM ``ChatCompletionRequest``); older
servers give completion ids only through ``"return_tokens_as_token_ids": true`` with
``"logprobs": true``, as ``"token_id:1234"`` strings in ``logprobs.content[i].token``. Both are
read here; a server that returns neither gives ``None`` (recorded as "not available").
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = [
    "THINK_CLOSE",
    "THINK_OPEN",
    "TOKEN_REQUEST_PARAMS",
    "ResponseExtras",
    "opens_think_block",
    "reasoning_field",
    "response_extras",
    "split_inline_reasoning",
    "token_id_options",
    "token_params_refused",
]

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

REASONING_FIELDS = ("reasoning_content", "reasoning")
"""Message fields a server may return the reasoning in, in the order they are read."""

TOKEN_REQUEST_PARAMS: dict[str, Any] = {
    "logprobs": True,
    "return_token_ids": True,
    "return_tokens_as_token_ids": True,
}
"""Request fields asking an OpenAI-compatible server for token ids and logprobs (vLLM names;
other servers ignore unknown fields or refuse them, see :func:`token_params_refused`)."""


def split_inline_reasoning(text: str) -> tuple[str | None, str]:
    """``(reasoning, answer)`` of a reply that may hold its reasoning inline.

    ``"<think>\\nR\\n</think>\\n\\nA"`` gives ``("R", "A")`` (the newlines around ``R`` and
    before ``A`` are stripped, as Qwen3's and GLM-4.5's templates do); ``"R</think>A"`` (the
    generation prompt opened the block) gives ``("R", "A")``; text without ``</think>`` gives
    ``(None, text)``. Only a block at the start counts (leading whitespace allowed), so a
    ``</think>`` quoted later in an answer is left alone.
    """
    close = text.find(THINK_CLOSE)
    if close < 0:
        return None, text
    head = text[:close]
    stripped = head.lstrip()
    if stripped.startswith(THINK_OPEN):
        head = stripped[len(THINK_OPEN) :]
    elif THINK_OPEN in head:  # an opening tag after other text: not a leading block
        return None, text
    return head.strip("\n"), text[close + len(THINK_CLOSE) :].lstrip("\n")


def opens_think_block(prefill: str) -> bool:
    """True when a reply prefill leaves a ``<think>`` block open (its last ``<think>`` has no
    ``</think>`` after it): the continuation then starts inside the reasoning.

    Why it matters: behind ``--reasoning-parser``, vLLM parses only the generated text of a
    ``continue_final_message`` request, and a parser that finds no ``</think>`` there returns
    all of it as reasoning with ``content: null`` (vllm#17349, #19839; Qwen3#1297). For a
    prefill that opens no block (``"```repl\n"``) that "reasoning" is the continuation of
    the answer; for one that does, it is real reasoning."""
    start = prefill.rfind(THINK_OPEN)
    return start >= 0 and THINK_CLOSE not in prefill[start:]


def reasoning_field(message: dict[str, Any]) -> str | None:
    """The separately returned reasoning of a response message (``reasoning_content`` or
    ``reasoning``), or ``None`` when there is none or it is empty/not text."""
    for name in REASONING_FIELDS:
        value = message.get(name)
        if isinstance(value, str) and value:
            return value
    return None


class ResponseExtras(NamedTuple):
    """What a response carries besides text and usage (all ``None`` when absent)."""

    reasoning: str | None
    prompt_token_ids: list[int] | None
    token_ids: list[int] | None
    logprobs: list[float] | None


def _int_list(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return [int(v) for v in value]
    return None


def response_extras(response: dict[str, Any], choice: dict[str, Any]) -> ResponseExtras:
    """Reasoning, prompt ids, completion ids and per-token logprobs of one response choice.

    Completion ids come from ``choice["token_ids"]`` (vLLM ``return_token_ids``), else from
    ``"token_id:N"`` strings in the logprobs (``return_tokens_as_token_ids``). Logprobs are
    ``logprobs.content[i].logprob`` (one per generated token). A malformed part is treated as
    absent, never guessed.
    """
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    reasoning = reasoning_field(message or {})
    prompt_ids = _int_list(response.get("prompt_token_ids"))
    ids = _int_list(choice.get("token_ids"))
    logprobs: list[float] | None = None
    lp = choice.get("logprobs")
    content = lp.get("content") if isinstance(lp, dict) else None
    if isinstance(content, list) and content:
        try:
            logprobs = [float(t["logprob"]) for t in content]
        except (KeyError, TypeError, ValueError):
            logprobs = None
        if ids is None:
            tokens = [t.get("token") if isinstance(t, dict) else None for t in content]
            if all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
                try:
                    ids = [int(str(t)[len("token_id:") :]) for t in tokens]
                except ValueError:
                    ids = None
    return ResponseExtras(reasoning, prompt_ids, ids, logprobs)


def token_id_options(spec: str, wanted: bool) -> dict[str, Any]:
    """Client options that ask for token ids: ``{"token_ids": True}`` for an ``openai:`` spec
    when ``wanted`` (the in-process back end always has them), else ``{}``."""
    return {"token_ids": True} if wanted and spec.strip().startswith("openai:") else {}


def token_params_refused(status: int, message: str) -> bool:
    """True when an HTTP error says the server does not accept the token-id request fields
    (e.g. OpenAI's 400 "Unrecognized request argument supplied: return_token_ids")."""
    low = message.lower()
    return status in (400, 422) and any(
        name in low for name in ("return_token_ids", "return_tokens_as_token_ids", "logprobs")
    )
