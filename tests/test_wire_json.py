"""wire_json decodes and encodes as the standard library's json does, msgspec or not."""

from __future__ import annotations

import json
import math

import pytest

from rlmdistill.models import wire_json

BODIES = [
    {"model": "sub", "messages": [{"role": "user", "content": "question 12"}], "seed": 3},
    {"temperature": 0.7, "top_p": 0.95, "max_tokens": 100, "stop": ["```\n"], "x": None},
    {"text": "é ü 中文 🙂", "nested": [[1, 2.5, -3e-7, 1e20], {"k": True, "n": False}]},
    {"big": 2**70, "empty": {}, "list": [], "s": 'quote " backslash \\ newline \n tab \t'},
]


@pytest.mark.parametrize("body", BODIES)
def test_a_body_round_trips_to_what_json_reads(body: dict) -> None:
    out = wire_json.dumps(body)
    assert isinstance(out, bytes)
    assert json.loads(out) == body
    assert wire_json.loads(out) == body
    assert wire_json.loads(json.dumps(body).encode()) == body  # json's ASCII escapes too


def test_what_msgspec_refuses_is_read_as_json_reads_it() -> None:
    assert math.isnan(wire_json.loads(b'{"a": NaN}')["a"])
    assert wire_json.loads(b'{"a": -Infinity}')["a"] == float("-inf")
    assert wire_json.loads(b'"\\udc80"') == "\udc80"  # a lone surrogate escape
    assert wire_json.loads(json.dumps({"a": 1}).encode("utf-16")) == {"a": 1}


def test_malformed_json_raises_jsons_value_error() -> None:
    with pytest.raises(json.JSONDecodeError, match="Expecting property name"):
        wire_json.loads(b"{x")
    with pytest.raises(ValueError):
        wire_json.loads(b"")


def test_non_finite_floats_are_written_as_json_writes_them() -> None:
    assert wire_json.dumps({"a": float("nan"), "b": None}) == b'{"a":NaN,"b":null}'
    assert wire_json.dumps([float("inf")]) == b"[Infinity]"
    assert wire_json.dumps({"b": None, "c": [1.0]}) == b'{"b":null,"c":[1.0]}'


def test_encoding_refuses_what_json_then_utf8_refuses() -> None:
    with pytest.raises(UnicodeEncodeError):
        wire_json.dumps({"content": "a\udc80b"})
    with pytest.raises(TypeError):
        wire_json.dumps({"x": object()})
