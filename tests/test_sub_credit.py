"""Credit for sub-calls (issue 43): every field on a hand-built episode, hand-computed.

The memo below has three findings (bullets) under two headings; the rubric passes C1
(about alpha.txt, by its evidence) and C3 (about gamma.txt, by its LAB sources) and fails
C2 (beta.txt). Run counts are 8-word runs: an answer of n distinct words has n - 7.
"""

from __future__ import annotations

from typing import Any

import pytest

from rlmdistill.rooms.task import Criterion, Evidence, Task
from rlmdistill.traces.schema import SubCallRecord, Verdict
from rlmdistill.traces.sub_credit import (
    USED_SHARE,
    Finding,
    credit_parts,
    criterion_documents,
    memo_findings,
    passed_documents,
    sub_call_credit,
    word_runs,
)

MEMO = """# Review memo

## alpha.txt
- Termination: the alpha agreement lets either party terminate on ninety days written notice to the other.

## beta.txt
- Assignment: beta may not assign the contract without prior written consent of the licensor.
- gamma.txt: notice period is ten days.
"""

TASK = Task(
    id="t",
    title="Review",
    instructions="Review the room.",
    criteria=[
        Criterion(
            id="C1",
            title="termination",
            match_criteria="x",
            evidence=Evidence(documents=["alpha.txt"]),
        ),
        Criterion(
            id="C2",
            title="assignment",
            match_criteria="x",
            evidence=Evidence(documents=["beta.txt"]),
        ),
        Criterion(id="C3", title="notice", match_criteria="x", sources=["gamma.txt"]),
        Criterion(id="C4", title="no document", match_criteria="x"),
    ],
)


def _verdict(criterion: str, label: str) -> Verdict:
    return Verdict(
        episode_id="e",
        grader="reference",
        grader_version="ref-v4",
        criterion_id=criterion,
        verdict=label,  # type: ignore[arg-type]
        reason="",
    )


VERDICTS = [
    _verdict("C1", "PASS"),
    _verdict("C2", "FAIL"),
    _verdict("C3", "PASS"),
    _verdict("C4", "PASS"),
    _verdict("C9", "PASS"),  # not in the rubric: ignored
]


def _call(call_id: int, response: str | None, **kw: Any) -> SubCallRecord:
    return SubCallRecord(
        episode_id="e",
        call_id=call_id,
        turn=0,
        block=0,
        batch_id=call_id,
        batch_size=1,
        prompt=f"prompt {call_id}",
        response=response,
        **kw,
    )


CALLS = [
    # 15 words, 8 runs, all in the alpha bullet: used; C1 passed -> supports
    _call(
        0,
        "The alpha agreement lets either party terminate on ninety days written notice to the other.",
    ),
    # 13 words, 6 runs, all in the beta bullet: used; C2 failed -> does not support
    _call(1, "Beta may not assign the contract without prior written consent of the licensor."),
    # failed call
    _call(2, None, error="[retryable] server down", error_kind="retryable"),
    # 11 words, 4 runs, none in the memo
    _call(3, "Gamma has an uncapped indemnity for third party intellectual property claims."),
    # 2 words: no run; "ten days" is a run of the memo's words, in the gamma bullet (C3)
    _call(4, "Ten days."),
    # 12 words, 5 runs, only the first ("beta may not ... prior") in the memo: 1/5 < 0.5
    _call(5, "Beta may not assign the contract without prior approval from the board"),
    # 13 words, 6 runs, the first 4 in the alpha bullet: 4/6 >= 0.5, reaches alpha -> C1
    _call(6, "either party terminate on ninety days written notice to the other party promptly"),
    # a subagent (depth 2 mode) whose answer is call 0's
    _call(
        7,
        "The alpha agreement lets either party terminate on ninety days written notice to the other.",
        subagent=True,
    ),
    # made by a subagent's code; its answer reached the memo through the subagent
    _call(
        8,
        "beta may not assign the contract without prior written consent",
        depth=2,
        parent_call_id=7,
    ),
]


def test_word_runs_counts_distinct_eight_word_runs() -> None:
    assert len(word_runs("one two three four five six seven")) == 0
    assert word_runs("One two three four five six seven eight.") == {
        ("one", "two", "three", "four", "five", "six", "seven", "eight")
    }
    assert len(word_runs("a b c d e f g h i j")) == 3
    assert len(word_runs("a a a a a a a a a a")) == 1  # three equal runs, one distinct


def test_memo_findings_cuts_items_and_keeps_headings() -> None:
    assert memo_findings(MEMO) == [
        Finding(
            "- Termination: the alpha agreement lets either party terminate on ninety days "
            "written notice to the other.",
            "# Review memo\n## alpha.txt",
        ),
        Finding(
            "- Assignment: beta may not assign the contract without prior written consent of "
            "the licensor.",
            "# Review memo\n## beta.txt",
        ),
        Finding("- gamma.txt: notice period is ten days.", "# Review memo\n## beta.txt"),
    ]
    text = "- item one\n  wrapped line\n\n  indented paragraph\n  - sub item\n\nNew paragraph\nwrapped\n**Bold**\n1. numbered"
    assert memo_findings(text) == [
        Finding("- item one\n  wrapped line\n  indented paragraph\n  - sub item", ""),
        Finding("New paragraph\nwrapped", ""),
        Finding("1. numbered", "**Bold**"),
    ]
    assert memo_findings("") == []


def test_finding_cites_by_heading_or_text() -> None:
    alpha, beta, gamma = memo_findings(MEMO)
    assert alpha.cites("alpha.txt") and not alpha.cites("beta.txt")
    assert gamma.cites("gamma.txt") and gamma.cites("beta.txt")  # its heading names beta
    assert not beta.cites("gamma.txt")


def test_criterion_documents_and_passed_documents() -> None:
    c1, _c2, c3, c4 = TASK.criteria
    assert criterion_documents(c1) == ["alpha.txt"]
    assert criterion_documents(c3) == ["gamma.txt"]
    assert criterion_documents(c4) == []
    assert passed_documents(VERDICTS, TASK) == {"alpha.txt": ["C1"], "gamma.txt": ["C3"]}


def test_sub_call_credit_every_field() -> None:
    assert USED_SHARE == 0.5
    got = {
        c.call_id: (
            c.depth,
            c.subagent,
            c.error,
            c.answer_runs,
            c.runs_in_memo,
            c.used_in_memo,
            c.supports_pass,
            c.supported_criteria,
        )
        for c in sub_call_credit(CALLS, MEMO, VERDICTS, TASK)
    }
    assert got == {
        0: (1, False, False, 8, 8, True, True, ("C1",)),
        1: (1, False, False, 6, 6, True, False, ()),
        2: (1, False, True, 0, 0, False, False, ()),
        3: (1, False, False, 4, 0, False, False, ()),
        4: (1, False, False, 0, 0, True, True, ("C3",)),
        5: (1, False, False, 5, 1, False, False, ()),
        6: (1, False, False, 6, 4, True, True, ("C1",)),
        7: (1, True, False, 8, 8, True, True, ("C1",)),
        8: (2, False, False, 3, 3, True, False, ()),
    }
    shares = {c.call_id: c.memo_share for c in sub_call_credit(CALLS, MEMO, VERDICTS, TASK)}
    assert shares[0] == 1.0 and shares[4] == 1.0 and shares[5] == 0.2
    assert shares[6] == 4 / 6 and shares[2] == 0.0 and shares[3] == 0.0


def test_sub_call_credit_without_verdicts_or_memo() -> None:
    ungraded = sub_call_credit(CALLS, MEMO, None, TASK)
    assert [c.supports_pass for c in ungraded] == [None] * len(CALLS)
    assert [c.used_in_memo for c in ungraded] == [
        True,
        True,
        False,
        False,
        True,
        False,
        True,
        True,
        True,
    ]
    assert [c.supports_pass for c in sub_call_credit(CALLS, MEMO, VERDICTS, None)] == [None] * 9
    no_memo = sub_call_credit(CALLS, None, VERDICTS, TASK)
    assert not any(c.used_in_memo for c in no_memo)
    assert [c.supports_pass for c in no_memo] == [False] * 9
    # nothing passed: graded, so False (not None)
    failed = [_verdict("C1", "FAIL")]
    assert [c.supports_pass for c in sub_call_credit(CALLS[:1], MEMO, failed, TASK)] == [False]


def test_credit_parts_with_the_callers_words_equal_those_cut_here() -> None:
    """The report hands over the words it has (an ASCII answer without "_" or "'" has the
    same ``word_tokens`` as the grader's ``words``); the credit is the same either way."""
    import random
    import string

    from rlmdistill.analysis.metrics import tokens_are_grader_words, word_tokens
    from rlmdistill.rooms.text import words

    rng = random.Random(0)
    alphabet = string.ascii_letters + string.digits + ' .,;:-()!?\n\t"/$%'
    for _ in range(5_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        assert tokens_are_grader_words(text) and words(text) == word_tokens(text), text
    assert words("don't x_y") != word_tokens("don't x_y")  # why the report checks for them
    assert not tokens_are_grader_words("don't x_y") and not tokens_are_grader_words("é")
    given = [words(c.response) if c.response and c.error is None else None for c in CALLS]
    here = credit_parts(CALLS, MEMO, VERDICTS, TASK)
    assert credit_parts(CALLS, MEMO, VERDICTS, TASK, given) == here
    assert [
        (c.answer_runs, c.runs_in_memo, c.used_in_memo, c.supported_criteria)
        for c in sub_call_credit(CALLS, MEMO, VERDICTS, TASK)
    ] == here
    assert any(p[2] for p in here) and any(p[3] for p in here)  # not a vacuous comparison
    with pytest.raises(ValueError, match="1 answer word lists for"):
        credit_parts(CALLS, MEMO, VERDICTS, TASK, [None])
