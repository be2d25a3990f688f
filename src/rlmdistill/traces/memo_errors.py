"""Sub-call error text in a memo: the one reading of it, shared by collect, filter and ``show``.

When a sub-call fails, ``llm_query`` hands the root's code the text
``[llm_query error (<kind>): <message>]`` (:func:`sub_call_error_text`) in place of an answer.
A root that pastes answers into its memo pastes that text too; such a memo must never become
training data (the filter's ``sub_call_error_text`` rule), and ``show`` counts such episodes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rlmdistill.traces.schema import EpisodeSummary

__all__ = [
    "SUB_CALL_ERROR_PREFIX",
    "count_sub_call_error_texts",
    "memo_sub_call_errors",
    "sub_call_error_text",
]

SUB_CALL_ERROR_PREFIX = "[llm_query error ("
"""How every sub-call error text the harness hands the root starts (see
:func:`sub_call_error_text`). Not part of the root's prompts: changing it changes no
episode id, but :func:`count_sub_call_error_texts` must keep recognising older texts."""

_ERROR_MARKER = re.compile(r"\[llm_query error \(([a-z_]+)\): ")


def sub_call_error_text(kind: str, error: str) -> str:
    """The text ``llm_query`` returns to the root's code in place of an answer when the
    sub-call failed: ``[llm_query error (<kind>): <message>]`` (``kind``: the error's
    ``ModelError.kind``, ``prompt_too_large``, a subagent's status, ...)."""
    return f"{SUB_CALL_ERROR_PREFIX}{kind}): {error}]"


def count_sub_call_error_texts(memo: str | None, kinds: Iterable[str] | None = None) -> int:
    """How many sub-call error texts (:func:`sub_call_error_text`) a memo carries, counted by
    their marker ``[llm_query error (<kind>): `` (a root often pastes only the start of an
    answer, so the marker, not the whole text, is what is looked for).

    ``kinds``: the error kinds of the episode's failed sub-calls, as the episode recorded
    them; only markers of those kinds count, so a memo can only be charged with errors the
    harness really handed back. ``None`` (a summary written before the episode counted
    them): any kind counts. 0 for no memo."""
    if not memo or SUB_CALL_ERROR_PREFIX not in memo:
        return 0
    allowed = None if kinds is None else set(kinds)
    return sum(1 for m in _ERROR_MARKER.finditer(memo) if allowed is None or m.group(1) in allowed)


def memo_sub_call_errors(summary: EpisodeSummary) -> int:
    """Sub-call error texts the episode's memo carries: the count the collector recorded
    (:attr:`EpisodeSummary.memo_sub_call_errors`), or, for a summary written before it,
    the markers ``[llm_query error (<kind>): `` found in the memo of an episode that had a
    failed sub-call (:func:`count_sub_call_error_texts`)."""
    if summary.memo_sub_call_errors is not None:
        return summary.memo_sub_call_errors
    if summary.n_sub_call_errors == 0:
        return 0
    return count_sub_call_error_texts(summary.memo)
