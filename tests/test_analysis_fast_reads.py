"""Fast read paths of the report give what the general paths give: trajectory lines decoded
with ``pydantic_core.from_json`` (``traces.store.read_clean_jsonl``) equal ``read_jsonl``'s
records, or hand over to it; ASCII word tokens skip NFKC; a whole answer found in the memo
reaches it."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest

from rlmdistill.analysis.metrics import _WORD, answer_reaches_memo, word_tokens
from rlmdistill.traces.store import read_clean_jsonl, read_jsonl

RECORDS = [
    {"record_type": "episode_start", "episode_id": "e1", "n": 12345678901234567890123},
    {"record_type": "turn", "x": 0.1, "y": -2.5e-300, "s": 'caf\u00e9 \u2603 "q" \\ \n'},
    {"record_type": "sub_call", "sources": [{"doc_id": "d", "start": 0}], "none": None},
]


def _write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def test_clean_file_gives_read_jsonl_records(tmp_path: Path) -> None:
    lines = [json.dumps(r) for r in RECORDS] + [json.dumps(r, ensure_ascii=False) for r in RECORDS]
    path = _write(tmp_path, "\n".join(lines[:3]) + "\n\n" + "\n".join(lines[3:]) + "\n")
    got = read_clean_jsonl(path)
    assert got == read_jsonl(path).records == RECORDS + RECORDS


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1}\n{"b": 2',  # torn last line, no newline
        '{"a": 1}\n{"b": \n{"record_type": "torn_tail"}\n',  # torn line closed by a marker
        '{"a": 1}\n[1, 2]\n',  # not an object
        '{"a": 1}\n{"b": }\n',  # corrupt line in the middle
        b'{"a": "\xff"}\n',  # not UTF-8
    ],
)
def test_unusual_files_hand_over_to_read_jsonl(tmp_path: Path, text: str | bytes) -> None:
    assert read_clean_jsonl(_write(tmp_path, text)) is None


def test_missing_file_hands_over(tmp_path: Path) -> None:
    assert read_clean_jsonl(tmp_path / "none.jsonl") is None


@pytest.mark.parametrize(
    "text",
    ["The Agreement MAY not be assigned_2", "a-b c\td\n", "", "ﬁnancial Straße Ⅻ", "x\u00e9"],
)
def test_word_tokens_equal_nfkc_casefold(text: str) -> None:
    assert word_tokens(text) == _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def test_answer_reach_whole_answer_and_windows() -> None:
    memo = word_tokens("w0 w1 w2 w3 w4 w5 w6 w7 w8 w9 end")
    ngrams = {tuple(memo[i : i + 8]) for i in range(len(memo) - 7)}
    joined = f" {' '.join(memo)} "
    assert answer_reaches_memo(memo[1:10], ngrams, joined, 8)  # whole answer in the memo
    assert answer_reaches_memo(["zz", *memo[0:8]], ngrams, joined, 8)  # one 8-word run
    assert not answer_reaches_memo(["zz", *memo[0:7], "zz"], ngrams, joined, 8)  # 7 words only
    assert answer_reaches_memo(memo[2:5], ngrams, joined, 8)  # short answer inside
    assert not answer_reaches_memo(["w1", "w3"], ngrams, joined, 8)


@pytest.mark.parametrize(
    "line",
    [
        '{"a": "\\ud83d\\ude00"}',  # a surrogate pair
        '{"a": 1, "a": 2}',  # a repeated key: the last one counts in both
        '{"a": NaN, "b": 1e400, "c": -0.0}',
        '{"a": 1.0000000000000000001, "b": 12345678901234567890}',
    ],
)
def test_edge_values_decode_as_json_loads(tmp_path: Path, line: str) -> None:
    path = _write(tmp_path, line + "\n")
    got = read_clean_jsonl(path)
    assert got is not None
    assert repr(got) == repr(read_jsonl(path).records) == repr([json.loads(line)])


def test_lone_surrogate_hands_over(tmp_path: Path) -> None:
    # json.loads keeps a lone surrogate, from_json refuses it: read_jsonl reads such a file
    assert read_clean_jsonl(_write(tmp_path, '{"a": "\\ud800"}\n')) is None
