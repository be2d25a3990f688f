"""Filter rules (config loading, validation) and the safe ``where`` expression language."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from rlmdistill.filter.expr import ExpressionError, compile_expression
from rlmdistill.filter.fields import EPISODE_FIELDS, episode_fields
from rlmdistill.filter.rules import REASON_ORDER, FilterRuleError, FilterRules
from rlmdistill.models.base import Usage
from rlmdistill.traces.schema import Coverage, EpisodeSummary, RoomInfo, TokenUsage
from rlmdistill.traces.scores import PassRates

DOCS = Path(__file__).resolve().parents[1] / "docs" / "filter.md"


def _summary(**overrides: object) -> EpisodeSummary:
    t0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    data: dict[str, object] = {
        "episode_id": "ep1",
        "run_id": "run1",
        "sample_index": 3,
        "room": RoomInfo(
            room_id="cuad10",
            room_hash="abc",
            path="/rooms/cuad10",
            n_documents=10,
            n_chars=50_000,
            folders={"A": 4, "B": 6},
        ),
        "task_id": "task-1",
        "root_model": "root",
        "sub_model": "sub",
        "seed": 7,
        "status": "completed",
        "n_turns": 4,
        "n_sub_calls": 12,
        "n_sub_call_errors": 1,
        "tokens": TokenUsage(
            root=Usage(prompt_tokens=900, cached_tokens=100, completion_tokens=300),
            sub=Usage(prompt_tokens=5000, completion_tokens=700),
        ),
        "wall_time_s": 42.5,
        "memo": "# memo",
        "memo_chars": 6,
        "memo_sha256": "f" * 64,
        "cited_documents": ["a.txt", "b.txt"],
        "coverage": Coverage(method="shingle-v1", overall=0.35),
        "started_at": t0,
        "ended_at": t0,
    }
    data.update(overrides)
    return EpisodeSummary.model_validate(data)


SCORES = PassRates(
    pass_rate=0.5,
    graded_pass_rate=0.6,
    weighted_pass_rate=0.55,
    n_criteria=4,
    n_pass=2,
    n_fail=1,
    n_ungradable=1,
    n_missing=0,
)


def test_defaults():
    rules = FilterRules()
    assert rules.required_status == ["completed"]
    assert rules.require_memo is True
    assert rules.dedup == ["memo"]
    assert rules.rank_by == ["pass_rate", "coverage"]
    assert rules.quantile_method == "linear"
    assert not rules.needs_pass_rate()
    assert REASON_ORDER[0] == "status" and REASON_ORDER[-1] == "top_k"


def test_every_field_has_help_text():
    for name, info in FilterRules.model_fields.items():
        assert info.description, f"FilterRules.{name} has no help text"


def test_load_yaml_and_json_files(tmp_path):
    y = tmp_path / "rules.yaml"
    y.write_text(
        "min_pass_rate_quantile: 0.75\ntop_k_per_room: 2\nwhere:\n  - n_sub_calls >= 2\n"
        "required_status: [completed, no_memo]\n",
        encoding="utf-8",
    )
    rules = FilterRules.load(y)
    assert rules.min_pass_rate_quantile == 0.75
    assert rules.top_k_per_room == 2
    assert rules.where == ["n_sub_calls >= 2"]
    assert rules.required_status == ["completed", "no_memo"]
    assert rules.needs_pass_rate()
    j = tmp_path / "rules.json"
    j.write_text('{"min_coverage": 0.3, "dedup": []}', encoding="utf-8")
    rules = FilterRules.load(j)
    assert rules.min_coverage == 0.3 and rules.dedup == [] and rules.needs_coverage()
    empty = tmp_path / "empty.yaml"
    empty.write_text("", encoding="utf-8")
    assert FilterRules.load(empty) == FilterRules()
    # the one config-file reader (cliconfig): TOML too; any other suffix is YAML, as before
    t = tmp_path / "rules.toml"
    t.write_text('min_pass_rate = 0.5\nwhere = ["n_sub_calls >= 1"]\n', encoding="utf-8")
    assert FilterRules.load(t) == FilterRules(min_pass_rate=0.5, where=["n_sub_calls >= 1"])
    odd = tmp_path / "keep.rules"
    odd.write_text("top_k_per_room: 3\n", encoding="utf-8")
    assert FilterRules.load(odd) == FilterRules(top_k_per_room=3)
    broken = tmp_path / "broken.toml"
    broken.write_text("min_pass_rate = \n", encoding="utf-8")
    with pytest.raises(FilterRuleError, match=r"broken\.toml: cannot parse"):
        FilterRules.load(broken)


def test_bad_files_name_file_and_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("min_pass_rate: 1.5\nbogus: 1\n", encoding="utf-8")
    with pytest.raises(FilterRuleError, match=r"bad\.yaml.*min_pass_rate.*bogus"):
        FilterRules.load(bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n", encoding="utf-8")
    with pytest.raises(FilterRuleError, match=r"filter rules: .*list\.yaml: expected a mapping"):
        FilterRules.load(listy)
    with pytest.raises(FilterRuleError, match=r"missing\.yaml: cannot read"):
        FilterRules.load(tmp_path / "missing.yaml")
    with pytest.raises(FilterRuleError, match=r"min_turns \(5\) > max_turns \(2\)"):
        FilterRules.from_dict({"min_turns": 5, "max_turns": 2})
    with pytest.raises(FilterRuleError, match="status"):
        FilterRules.from_dict({"required_status": ["finished"]})
    with pytest.raises(FilterRuleError, match="repeated"):
        FilterRules.from_dict({"rank_by": ["coverage", "coverage"]})


def test_overrides_append_where_and_revalidate():
    rules = FilterRules(where=["n_turns >= 2"], min_pass_rate=0.2)
    out = rules.with_overrides(where=["depth == 1"], min_pass_rate=None, top_k_per_room=3)
    assert out.where == ["n_turns >= 2", "depth == 1"]
    assert out.min_pass_rate == 0.2 and out.top_k_per_room == 3
    with pytest.raises(FilterRuleError, match=r"command-line overrides.*top_k_per_room"):
        rules.with_overrides(top_k_per_room=0)


def test_episode_fields_flatten_summary_and_match_catalogue():
    values = episode_fields(_summary(), SCORES)
    assert set(values) == set(EPISODE_FIELDS)
    assert values["root_prompt_tokens"] == 900
    assert values["root_cached_tokens"] == 100
    assert values["sub_completion_tokens"] == 700
    assert values["room_docs"] == 10 and values["room_folders"] == 2
    assert values["coverage"] == 0.35 and values["coverage_method"] == "shingle-v1"
    assert values["cited_share"] == pytest.approx(0.2)
    assert values["has_memo"] is True and values["graded"] is True
    assert values["pass_rate"] == 0.5 and values["n_ungradable"] == 1
    ungraded = episode_fields(_summary(coverage=None, memo=None, memo_chars=0), None)
    assert ungraded["coverage"] is None and ungraded["graded"] is False
    assert ungraded["has_memo"] is False and ungraded["pass_rate"] is None


def test_docs_list_every_field():
    text = DOCS.read_text(encoding="utf-8")
    missing = [name for name in EPISODE_FIELDS if f"`{name}`" not in text]
    assert missing == []


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("n_sub_calls >= 12 and depth == 1", True),
        ("n_sub_calls > 12", False),
        ("status in ('completed', 'timeout')", True),
        ("startswith(room_id, 'cuad') and not endswith(room_id, 'x')", True),
        ("lower(root_model) == 'root'", True),
        ("root_prompt_tokens + sub_prompt_tokens > 5000", True),
        ("pass_rate >= 0.5 if graded else False", True),
        ("abs(coverage - 0.35) < 1e-9", True),
        ("len(task_id) == 6 and min(n_turns, 2) == 2", True),
        ("n_pass / n_criteria == 0.5", True),
    ],
)
def test_expressions_evaluate(expr, expected):
    values = episode_fields(_summary(), SCORES)
    assert compile_expression(expr, EPISODE_FIELDS).evaluate(values) is expected


def test_none_field_is_not_met_but_other_errors_raise():
    values = episode_fields(_summary(coverage=None), None)
    assert compile_expression("coverage > 0.3", EPISODE_FIELDS).evaluate(values) is None
    assert compile_expression("pass_rate is None", EPISODE_FIELDS).evaluate(values) is True
    with pytest.raises(ExpressionError, match=r"'status > 1' failed on episode ep9"):
        compile_expression("status > 1", EPISODE_FIELDS).evaluate(values, episode="ep9")
    with pytest.raises(ExpressionError, match="ZeroDivisionError"):
        compile_expression("n_turns / 0 > 1", EPISODE_FIELDS).evaluate(values)
    with pytest.raises(ExpressionError, match="NumberTooHigh"):
        compile_expression("10 ** 10 ** 10 > 1", EPISODE_FIELDS).evaluate(values)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("__import__('os')", r"calling '__import__' is not allowed"),
        ("().__class__", r"Attribute is not allowed"),
        ("().__class__.__bases__[0].__subclasses__()", r"Attribute is not allowed"),
        ("room_id.upper() == 'X'", r"Attribute is not allowed"),
        ("status[0] == 'c'", r"Subscript is not allowed"),
        ("[x for x in (1, 2)]", r"ListComp is not allowed"),
        ("(lambda: 1)()", r"Lambda is not allowed"),
        ("(n := 3) > 1", r"NamedExpr is not allowed"),
        ("open('/etc/passwd')", r"calling 'open' is not allowed"),
        ("eval('1')", r"calling 'eval' is not allowed"),
        ("__builtins__", r"unknown name '__builtins__'"),
        ("min(*[1, 2])", r"Starred is not allowed"),
        ("round(coverage, ndigits=2) > 0", r"keyword is not allowed"),
        ("min", r"function 'min' must be called"),
        ("n_turns >", r"is not valid"),
        ("", r"is empty"),
        ("import os", r"is not valid"),
    ],
)
def test_unsafe_or_invalid_expressions_are_refused(expr, message):
    with pytest.raises(ExpressionError, match=message) as info:
        compile_expression(expr, EPISODE_FIELDS)
    assert repr(expr) in str(info.value)


def test_unknown_name_lists_available_fields():
    with pytest.raises(ExpressionError) as info:
        compile_expression("n_subcalls > 2", EPISODE_FIELDS)
    msg = str(info.value)
    assert "unknown name 'n_subcalls'" in msg
    assert "n_sub_calls" in msg and "root_prompt_tokens" in msg and "startswith" in msg


def test_rules_refuse_unsafe_where_naming_the_expression():
    with pytest.raises(FilterRuleError, match=r"where.*\"__import__\('os'\)\""):
        FilterRules.from_dict({"where": ["__import__('os')"]})
    rules = FilterRules(where=["n_pass >= 2"])
    assert rules.needs_pass_rate()
    assert [e.names for e in rules.expressions()] == [frozenset({"n_pass"})]
