"""Episode fields: the flat view of one episode that filter rules and ``where`` expressions see.

One :class:`~rlmdistill.traces.schema.EpisodeSummary` plus its scores (the
:class:`~rlmdistill.traces.scores.PassRates` of one grader's verdicts of its current memo, from
:func:`rlmdistill.traces.scores.score_episodes`) flattened into ``{name: value}``. Only summaries and verdicts are read,
never trajectories, so building the fields of 10,000 episodes takes well under a second.
:data:`EPISODE_FIELDS` is the catalogue (name -> meaning) shown in error messages and in
``docs/filter.md``.

``rlmdistill filter --target sub`` evaluates ``where`` expressions per sub-call instead, over
:data:`SUB_TARGET_FIELDS`: the episode's fields plus the sub-call's
(:data:`SUB_CALL_FIELDS`, :func:`sub_call_fields`; credit from
:mod:`rlmdistill.traces.sub_credit`).
"""

from __future__ import annotations

from typing import Any

from rlmdistill.traces.labels import NO_LABELS, EpisodeLabels
from rlmdistill.traces.memo_errors import memo_sub_call_errors
from rlmdistill.traces.schema import EpisodeSummary, SubCallRecord
from rlmdistill.traces.scores import PassRates
from rlmdistill.traces.sub_credit import SubCallCredit

__all__ = [
    "EPISODE_FIELDS",
    "SCORE_FIELDS",
    "SUB_CALL_FIELDS",
    "SUB_SCORE_FIELDS",
    "SUB_TARGET_FIELDS",
    "episode_fields",
    "sub_call_fields",
]


EPISODE_FIELDS: dict[str, str] = {
    "episode_id": "stable episode id (str)",
    "run_id": "id of the run the episode belongs to (str)",
    "sample_index": "sample index of the episode within its room (int)",
    "room_id": "data room folder name (str)",
    "room_hash": "content hash of the data room (str)",
    "room_docs": "documents in the data room (int)",
    "room_chars": "characters of extracted document text in the room (int)",
    "room_tokens": "room tokens under the root tokenizer (int or None when unknown)",
    "room_folders": "top-level category folders in the room (int)",
    "task_id": "task id (str)",
    "root_model": "root model id (str)",
    "sub_model": "sub-call model id (str)",
    "depth": "1: plain sub-calls, 2: subagents (int)",
    "seed": "episode seed (int)",
    "status": "episode status: completed, no_memo, timeout, ... (str)",
    "n_turns": "root turns (int)",
    "n_sub_calls": "sub-calls made (int)",
    "n_sub_call_errors": "sub-calls that failed (int)",
    "n_sub_batches": "llm_query_batched batches (int)",
    "memo_sub_call_errors": "sub-call error texts ([llm_query error (kind): ...]) the memo "
    "carries (int; such episodes are never kept)",
    "truncated_turns": "root turns cut by max_tokens (finish_reason length) (int or None "
    "when the run predates finish reasons)",
    "root_prompt_tokens": "prompt tokens of all root requests (int)",
    "root_cached_tokens": "cached prompt tokens of root requests (int; None: not reported)",
    "root_completion_tokens": "completion tokens of the root (int)",
    "sub_prompt_tokens": "prompt tokens of all sub-calls (int)",
    "sub_cached_tokens": "cached prompt tokens of sub-calls (int; None: not reported)",
    "sub_completion_tokens": "completion tokens of sub-calls (int)",
    "wall_time_s": "episode wall time in seconds (float)",
    "has_memo": "a non-empty memo was handed back (bool)",
    "memo_chars": "memo length in characters (int)",
    "n_cited_documents": "room documents the memo names (int)",
    "cited_share": "n_cited_documents / room_docs (float)",
    "coverage": "share of the room's characters that reached any model, in [0, 1] "
    "(float or None when not measured)",
    "coverage_method": "coverage probe id, e.g. shingle-v1 (str or None)",
    "graded": "the chosen grader has verdicts for this episode's memo (bool)",
    "pass_rate": "passed / all rubric criteria; ungradable and missing count as failed "
    "(float or None when not graded)",
    "graded_pass_rate": "passed / (passed + failed) (float or None)",
    "weighted_pass_rate": "weight of passed criteria / total weight (float or None)",
    "n_criteria": "criteria of the room's task (int or None when not graded)",
    "n_pass": "criteria graded PASS (int or None)",
    "n_fail": "criteria graded FAIL (int or None)",
    "n_ungradable": "criteria graded UNGRADABLE (int or None)",
    "n_missing": "criteria without a verdict (int or None)",
    "human_reviewed": "a person labelled this memo keep or reject (bool; labels.jsonl)",
    "human_keep": "a person's latest label of this memo is keep and nobody's is reject (bool)",
    "human_reject": "some person's latest label of this memo is reject (bool)",
    "human_tags": "reason tags of people's latest labels of this memo, episode and criteria "
    "(tuple of str; e.g. 'wrong amount' in human_tags)",
    "label_stale": "a person labelled an older memo of this episode and not this one (bool)",
}
"""Every field a ``where`` expression may name, with its meaning and type."""

SCORE_FIELDS = (
    "pass_rate",
    "graded_pass_rate",
    "weighted_pass_rate",
    "graded",
    "n_criteria",
    "n_pass",
    "n_fail",
    "n_ungradable",
    "n_missing",
)
"""Fields that need a grader's verdicts (naming one in a rule requires a grader)."""


def episode_fields(
    summary: EpisodeSummary, scores: PassRates | None, human: EpisodeLabels = NO_LABELS
) -> dict[str, Any]:
    """Flatten one episode into ``{field: value}`` with exactly the keys of
    :data:`EPISODE_FIELDS` (values are ``str``, ``int``, ``float``, ``bool``, a tuple of
    ``str`` or ``None``).

    ``scores`` is ``None`` when the chosen grader has no verdict of the episode's memo (or
    no grader is chosen): every score field is then ``None`` and ``graded`` is false.
    ``human``: people's labels of the episode (:func:`rlmdistill.traces.labels.episode_labels`;
    default none: every ``human_*`` field false or empty)."""
    room = summary.room
    root = summary.tokens.root
    sub = summary.tokens.sub
    cov = summary.coverage
    n_cited = len(summary.cited_documents)
    return {
        "episode_id": summary.episode_id,
        "run_id": summary.run_id,
        "sample_index": summary.sample_index,
        "room_id": room.room_id,
        "room_hash": room.room_hash,
        "room_docs": room.n_documents,
        "room_chars": room.n_chars,
        "room_tokens": room.n_tokens,
        "room_folders": len(room.folders),
        "task_id": summary.task_id,
        "root_model": summary.root_model,
        "sub_model": summary.sub_model,
        "depth": summary.depth,
        "seed": summary.seed,
        "status": summary.status,
        "n_turns": summary.n_turns,
        "n_sub_calls": summary.n_sub_calls,
        "n_sub_call_errors": summary.n_sub_call_errors,
        "n_sub_batches": summary.n_sub_batches,
        "memo_sub_call_errors": memo_sub_call_errors(summary),
        "truncated_turns": summary.n_truncated_turns,
        "root_prompt_tokens": root.prompt_tokens,
        "root_cached_tokens": root.cached_tokens,
        "root_completion_tokens": root.completion_tokens,
        "sub_prompt_tokens": sub.prompt_tokens,
        "sub_cached_tokens": sub.cached_tokens,
        "sub_completion_tokens": sub.completion_tokens,
        "wall_time_s": summary.wall_time_s,
        "has_memo": bool(summary.memo) or summary.memo_chars > 0,
        "memo_chars": summary.memo_chars,
        "n_cited_documents": n_cited,
        "cited_share": n_cited / max(1, room.n_documents),
        "coverage": cov.overall if cov is not None else None,
        "coverage_method": cov.method if cov is not None else None,
        "graded": scores is not None,
        **{name: getattr(scores, name, None) for name in _RATE_FIELDS},
        "human_reviewed": human.reviewed,
        "human_keep": human.keep,
        "human_reject": human.reject,
        "human_tags": human.tags,
        "label_stale": human.stale,
    }


SUB_CALL_FIELDS: dict[str, str] = {
    "call_id": "0-based index of the sub-call in its episode (int)",
    "call_depth": "1: made by the root's code, 2: made by a subagent's code (int)",
    "subagent": "the call ran a subagent, a multi-turn REPL (depth-2 episodes); its example "
    "is the subagent's whole trajectory (bool)",
    "error": "the sub-call failed and gave no answer (bool)",
    "error_kind": "kind of the failure, e.g. retryable, no_answer (str or None)",
    "prompt_chars": "characters of the sub-call's prompt (int)",
    "answer_chars": "characters of the answer (int; 0 when the call failed)",
    "call_truncated": "the answer was cut by max_tokens (finish_reason length) (bool)",
    "subagent_turns": "turns the subagent took (int; 0 for a plain completion)",
    "used_in_memo": "the answer's text reached the memo: >= 0.5 of its distinct 8-word runs "
    "are in it (bool; traces.sub_credit)",
    "memo_share": "share of the answer's distinct 8-word runs found in the memo, in [0, 1] (float)",
    "supports_pass": "the answer reached a memo finding that cites a document of a criterion "
    "the grader passed (bool or None when not graded)",
}
"""Sub-call fields a ``where`` expression may name with ``--target sub`` (besides every
episode field)."""

SUB_TARGET_FIELDS: dict[str, str] = {**EPISODE_FIELDS, **SUB_CALL_FIELDS}
"""Every field a ``where`` expression may name with ``--target sub``."""

SUB_SCORE_FIELDS = ("supports_pass",)
"""Sub-call fields that need a grader's verdicts."""


def sub_call_fields(
    record: SubCallRecord, credit: SubCallCredit, subagent_turns: int = 0
) -> dict[str, Any]:
    """The sub-call's own fields (exactly the keys of :data:`SUB_CALL_FIELDS`) from its
    trajectory record, its credit (:func:`rlmdistill.traces.sub_credit.sub_call_credit`)
    and, for a subagent, the number of its turns."""
    return {
        "call_id": record.call_id,
        "call_depth": record.depth,
        "subagent": record.subagent,
        "error": credit.error,
        "error_kind": record.error_kind,
        "prompt_chars": len(record.prompt),
        "answer_chars": len(record.response or "") if record.error is None else 0,
        "call_truncated": record.finish_reason == "length",
        "subagent_turns": subagent_turns,
        "used_in_memo": credit.used_in_memo,
        "memo_share": credit.memo_share,
        "supports_pass": credit.supports_pass,
    }


_RATE_FIELDS = (
    "pass_rate",
    "graded_pass_rate",
    "weighted_pass_rate",
    "n_criteria",
    "n_pass",
    "n_fail",
    "n_ungradable",
    "n_missing",
)
