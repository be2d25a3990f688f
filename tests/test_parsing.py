"""Reading root replies: fenced code and the final answer (case R1)."""

from rlmdistill.traces.replies import balanced_argument, parse_reply, split_fences


def test_final_balanced_parentheses_case_r1():
    parsed = parse_reply("Done reviewing.\nFINAL(sum([1,(2)]))\n")
    assert parsed.final is not None
    assert parsed.final.kind == "text"
    assert parsed.final.value == "sum([1,(2)])"


def test_final_inside_code_fence_is_not_a_prose_answer_case_r1():
    reply = "```repl\nmemo = 'x'\nprint('FINAL(not this)')\n```\n"
    parsed = parse_reply(reply)
    assert parsed.final is None
    assert len(parsed.blocks) == 1
    assert "FINAL(not this)" in parsed.blocks[0].code


def test_final_var_name_is_returned_for_lookup_case_r1():
    parsed = parse_reply("```repl\nmemo = 'M'\n```\nFINAL_VAR(memo)")
    assert parsed.final == ("var", "memo")
    parsed = parse_reply("FINAL_VAR('memo')")
    assert parsed.final == ("var", "memo")


def test_final_with_apostrophe_falls_back_to_last_parenthesis():
    parsed = parse_reply("FINAL(The buyer's exposure (uncapped) is material)")
    assert parsed.final == ("text", "The buyer's exposure (uncapped) is material")


def test_fences_other_languages_not_executed_and_unclosed_block_kept():
    blocks, prose = split_fences(
        'intro\n```json\n{"a": 1}\n```\n```python\nx = 1\n```\n```repl\ny = 2'
    )
    assert [b.code for b in blocks] == ["x = 1", "y = 2"]
    assert [b.closed for b in blocks] == [True, False]
    assert prose == "intro"


def test_balanced_argument_ignores_quoted_parentheses():
    text = 'FINAL("a (b" + ")")'
    assert balanced_argument(text, text.index("(")) == '"a (b" + ")"'
    assert balanced_argument("FINAL(open", 5) is None
