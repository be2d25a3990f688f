"""Token ids and assistant masks from one full render, with real tokenizers and templates.

ChatML: the real SmolLM2 tokenizer and Qwen2.5-Coder's (slow: pulled into
``$RLMDISTILL_HOME`` on first use). GLM-4: the
real GLM-4 chat template shipped in the ``trl`` wheel on a copy of the SmolLM2 tokenizer
given GLM's special tokens. Cases S1, S2, S3, S7 (each test names its case).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trl

from rlmdistill.export import (
    DefaultSystemPromptError,
    EmptyExportError,
    ExportOptions,
    TemplateError,
    encode_conversation,
    export_dataset,
    load_tokenizer,
    probe_template,
)
from rlmdistill.testing.trajectory_runs import write_trajectory_run
from rlmdistill.traces.runs import EpisodeRef

TRL_TEMPLATES = Path(trl.__file__).parent / "chat_templates"
GLM_TOKENS = [
    "[gMASK]",
    "<sop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    "<|endoftext|>",
]


@pytest.fixture(scope="module")
def glm_dir(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tokenizer directory with the real GLM-4 template (trl's ``glm4moe.jinja``) on a
    copy of the SmolLM2 tokenizer with GLM's special tokens added; GLM-4 stops on
    ``<|user|>``/``<|observation|>``/``<|endoftext|>`` (its generation_config)."""
    from transformers import AutoTokenizer

    out = tmp_path_factory.mktemp("glm4-tokenizer")
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    tok.add_special_tokens({"additional_special_tokens": GLM_TOKENS})
    tok.chat_template = (TRL_TEMPLATES / "glm4moe.jinja").read_text()
    tok.eos_token = "<|endoftext|>"
    tok.save_pretrained(out)
    return out


def _tok(path: Path) -> tuple[Any, Any]:
    tok, directory = load_tokenizer(str(path))
    return tok, probe_template(tok, directory)


def _runs(mask: list[int]) -> list[tuple[int, int]]:
    """Contiguous runs of 1s as [start, end) token index pairs."""
    out, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            out.append((start, i))
            start = None
    return out


CONV = [
    {"role": "system", "content": "You are the lead reviewer."},
    {"role": "user", "content": "Review the room."},
    {"role": "assistant", "content": "```repl\nprint(len(room))\n```"},
    {"role": "user", "content": "REPL output (block 0):\n```\n3\n```"},
    {"role": "assistant", "content": "```repl\nFINAL_VAR(memo)\n```"},
]


def test_chatml_smollm2_masks_content_and_im_end_case_s1_s3(smollm2_dir: Path) -> None:
    """Cases S1 + S3: the SmolLM2 ChatML template has no {% generation %} block; the mask
    still covers exactly each assistant content and its <|im_end|>."""
    tok, info = _tok(smollm2_dir)
    assert not info.generation_markers
    assert tok.convert_ids_to_tokens(info.closer_id) == "<|im_end|>"
    s1 = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "ok"},
    ]
    enc = encode_conversation(tok, info, s1, [False, False, True])
    assert [tok.decode(enc.input_ids[a:b]) for a, b in _runs(enc.assistant_masks)] == [
        "ok<|im_end|>"
    ]
    enc = encode_conversation(tok, info, CONV, [False, False, True, False, True])
    decoded = [tok.decode(enc.input_ids[a:b]) for a, b in _runs(enc.assistant_masks)]
    assert decoded == [CONV[2]["content"] + "<|im_end|>", CONV[4]["content"] + "<|im_end|>"]
    assert not enc.appended_closer


def test_ids_equal_one_full_render_case_s7(smollm2_dir: Path) -> None:
    """Case S7: [system, user, assistant, user, assistant]: training ids are those of one
    full render (apply_chat_template(tokenize=True)), not a concatenation of turns."""
    tok, info = _tok(smollm2_dir)
    enc = encode_conversation(tok, info, CONV, [False, False, True, False, True])
    full = tok.apply_chat_template(CONV, tokenize=True)
    assert enc.input_ids == list(full["input_ids"])
    assert enc.text == tok.apply_chat_template(CONV, tokenize=False)


def test_default_system_prompt_never_injected_silently_case_s7(smollm2_dir: Path) -> None:
    """Case S7: SmolLM2 (like Qwen) injects a default system prompt when there is none:
    refused unless allowed explicitly."""
    tok, info = _tok(smollm2_dir)
    assert info.default_system is not None and "SmolLM" in info.default_system
    conv = CONV[1:]
    with pytest.raises(DefaultSystemPromptError, match="default system prompt"):
        encode_conversation(tok, info, conv, [False, True, False, True], where="episode E")
    enc = encode_conversation(tok, info, conv, [False, True, False, True], default_system="allow")
    assert "SmolLM" in enc.text


@pytest.mark.slow
def test_qwen25_chatml_masks_and_default_system_case_s1_s3_s7(qwen05_dir: Path) -> None:
    """Cases S1/S3/S7 with the real Qwen2.5 tokenizer: masks cover content + <|im_end|>, ids
    equal one full render, "You are Qwen..." is detected and refused."""
    tok, info = _tok(qwen05_dir)
    assert info.default_system is not None and "Qwen" in info.default_system
    enc = encode_conversation(tok, info, CONV, [False, False, True, False, True])
    assert enc.input_ids == list(tok.apply_chat_template(CONV, tokenize=True)["input_ids"])
    decoded = [tok.decode(enc.input_ids[a:b]) for a, b in _runs(enc.assistant_masks)]
    assert decoded == [CONV[2]["content"] + "<|im_end|>", CONV[4]["content"] + "<|im_end|>"]
    with pytest.raises(DefaultSystemPromptError, match="Qwen"):
        encode_conversation(tok, info, CONV[1:], [False, True, False, True])


@pytest.mark.slow
def test_offset_masks_agree_with_generation_markers_case_s1(qwen05_dir: Path) -> None:
    """Case S1: TRL's Qwen2.5 training template has {% generation %} blocks; the offset
    masks (which do not need them) match transformers' return_assistant_tokens_mask."""
    tok, directory = load_tokenizer(str(qwen05_dir), TRL_TEMPLATES / "qwen2_5_training.jinja")
    info = probe_template(tok, directory)
    assert info.generation_markers
    enc = encode_conversation(tok, info, CONV, [False, False, True, False, True])
    ref = tok.apply_chat_template(
        CONV, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    assert enc.input_ids == list(ref["input_ids"])
    theirs = list(ref["assistant_masks"])
    # TRL's block also covers the newline after the role name and after <|im_end|>: the
    # masks agree on every other token (content and <|im_end|>)
    diff = [i for i, (a, b) in enumerate(zip(enc.assistant_masks, theirs, strict=True)) if a != b]
    assert diff and all(theirs[i] == 1 and tok.decode([enc.input_ids[i]]) == "\n" for i in diff)


def test_glm4_closing_role_marker_supervised_case_s3(glm_dir: Path) -> None:
    """Case S3: GLM-4 closes an assistant turn with the next role marker (<|user|>, or
    <|observation|> after tool calls); that token is supervised, and for the last turn (the
    template renders nothing after it) it is appended and supervised."""
    tok, info = _tok(glm_dir)
    assert tok.convert_ids_to_tokens(info.closer_id) == "<|user|>"
    assert tok.convert_ids_to_tokens(info.tool_closer_id) == "<|observation|>"
    assert info.default_system is None  # GLM-4 injects no default system prompt
    enc = encode_conversation(tok, info, CONV, [False, False, True, False, True])
    assert enc.appended_closer
    assert enc.input_ids[:-1] == list(tok.apply_chat_template(CONV, tokenize=True)["input_ids"])
    decoded = [tok.decode(enc.input_ids[a:b]) for a, b in _runs(enc.assistant_masks)]
    assert decoded == [
        "\n<think></think>\n" + CONV[2]["content"] + "<|user|>",
        "\n<think></think>\n" + CONV[4]["content"] + "<|user|>",
    ]
    # tool calls: the call text is supervised up to and including <|observation|>
    tools_conv = [
        CONV[0],
        CONV[1],
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c0",
                    "type": "function",
                    "function": {"name": "repl", "arguments": {"code": "print(1)"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c0", "content": "1"},
        {"role": "assistant", "content": "Done."},
    ]
    from rlmdistill.export import REPL_TOOL

    enc = encode_conversation(
        tok, info, tools_conv, [False, False, True, False, True], tools=[REPL_TOOL]
    )
    decoded = [tok.decode(enc.input_ids[a:b]) for a, b in _runs(enc.assistant_masks)]
    assert decoded[0].startswith("\n<think></think>\n<tool_call>repl")
    assert decoded[0].endswith("</tool_call><|observation|>")
    assert decoded[1] == "\n<think></think>\nDone.<|user|>"


def test_glm4_strips_content_and_masks_follow(glm_dir: Path) -> None:
    """GLM-4 renders assistant content stripped: the mask still covers it exactly."""
    tok, info = _tok(glm_dir)
    conv = [CONV[0], CONV[1], {"role": "assistant", "content": "  ok\n\n"}]
    enc = encode_conversation(tok, info, conv, [False, False, True])
    ((a, b),) = _runs(enc.assistant_masks)
    assert tok.decode(enc.input_ids[a:b]) == "\n<think></think>\nok<|user|>"


def test_unsupervised_prefill_and_zero_mask_refused_case_s1(smollm2_dir: Path) -> None:
    tok, info = _tok(smollm2_dir)
    conv = [CONV[0], CONV[1], {"role": "assistant", "content": "```repl\nx = 1\n```"}]
    enc = encode_conversation(tok, info, conv, [False, False, True], prefill_chars=[0, 0, 8])
    ((a, b),) = _runs(enc.assistant_masks)
    assert tok.decode(enc.input_ids[a:b]) == "x = 1\n```<|im_end|>"
    with pytest.raises(TemplateError, match="no assistant message is supervised"):
        encode_conversation(tok, info, conv, [False, False, False])


def test_truncation_never_leaves_zero_supervised_tokens_case_s2(
    smollm2_dir: Path, tmp_path: Path
) -> None:
    """Case S2: [user "x " * 5000, assistant "42"] with max_length=64 is dropped and counted
    (both length policies), never kept with an all-zero mask."""
    from rlmdistill.testing.trajectory_runs import synthetic_episode
    from rlmdistill.traces.store import append_records

    run = tmp_path / "run"
    write_trajectory_run(run, 1, n_turns=2, few_shot=False)
    recs = synthetic_episode(
        "synth-0", "s2", n_turns=1, few_shot=False, prefill=None, replies=["42"]
    )
    start = recs[0]
    start.initial_messages = [
        start.initial_messages[0],  # type: ignore[union-attr]
        start.initial_messages[-1].model_copy(  # type: ignore[union-attr]
            update={"content": "x " * 5000}
        ),
    ]
    from rlmdistill.traces.rebuild import messages_sha256

    recs[1].prompt_sha256 = messages_sha256(start.initial_messages)  # type: ignore[union-attr]
    append_records(run / "trajectories" / "s2.jsonl", recs)
    ok_id = next((run / "trajectories").glob("[!s]*.jsonl")).stem
    for policy in ("drop", "keep_start"):
        report = export_dataset(
            [EpisodeRef(run, "s2"), EpisodeRef(run, ok_id)],
            tmp_path / policy,
            ExportOptions(tokenizer=str(smollm2_dir), max_length=1500, truncation=policy),
        )
        assert report.dropped == {"too_long": 1}
        assert report.n_examples == 1 and report.supervised.min is not None
        assert report.supervised.min > 0


def test_keep_start_drops_leading_turns_and_counts_them(smollm2_dir: Path, tmp_path: Path) -> None:
    """keep_start keeps system + task and the last turn, drops the earliest turns (counted)."""
    import datasets

    run = tmp_path / "run"
    write_trajectory_run(run, 1, n_turns=6, few_shot=False, obs_chars=2000)
    refs = [EpisodeRef(run, p.stem) for p in (run / "trajectories").glob("*.jsonl")]
    full = export_dataset(refs, tmp_path / "full", ExportOptions(tokenizer=str(smollm2_dir)))
    assert full.tokens.max is not None
    limit = full.tokens.max - 200
    report = export_dataset(
        refs,
        tmp_path / "cut",
        ExportOptions(tokenizer=str(smollm2_dir), max_length=limit, truncation="keep_start"),
    )
    assert report.n_truncated == 1 and report.n_turns_dropped >= 1
    row = datasets.load_from_disk(str(tmp_path / "cut"))[0]
    fullrow = datasets.load_from_disk(str(tmp_path / "full"))[0]
    assert row["n_tokens"] <= limit
    assert row["messages"][:2] == fullrow["messages"][:2]  # system + task kept
    assert row["messages"][-1] == fullrow["messages"][-1]  # last reply kept whole
    assert sum(row["assistant_masks"]) < sum(fullrow["assistant_masks"])  # dropped turns
    with pytest.raises(EmptyExportError, match="too_long"):  # policy "drop": nothing fits
        export_dataset(
            refs, tmp_path / "drop", ExportOptions(tokenizer=str(smollm2_dir), max_length=limit)
        )


def test_export_with_glm4_template_end_to_end(glm_dir: Path, tmp_path: Path) -> None:
    """A whole export under the GLM-4 template: every example's last supervised token is the
    appended <|user|> closer and every assistant turn's mask ends on a closer."""
    import datasets
    from transformers import AutoTokenizer

    run = tmp_path / "run"
    write_trajectory_run(run, 2, n_turns=3)
    refs = [EpisodeRef(run, p.stem) for p in sorted((run / "trajectories").glob("*.jsonl"))]
    report = export_dataset(refs, tmp_path / "ds", ExportOptions(tokenizer=str(glm_dir)))
    assert report.n_examples == 2 and report.n_appended_closers == 2
    tok = AutoTokenizer.from_pretrained(glm_dir)
    user = tok.convert_tokens_to_ids("<|user|>")
    for row in datasets.load_from_disk(str(tmp_path / "ds")):
        runs = _runs(row["assistant_masks"])
        assert len(runs) == 3  # three root turns, worked example unsupervised
        assert all(row["input_ids"][b - 1] == user for _, b in runs)


# ------------------------------------------------------------ batched = unbatched, exactly
TOOL_CALL = {
    "id": "call_0_0",
    "type": "function",
    "function": {"name": "repl", "arguments": {"code": "print(len(docs))  # ∑ 東京"}},
}
VARIED: list[tuple[list[dict[str, Any]], list[bool], dict[str, Any]]] = [
    (CONV, [False, False, True, False, True], {}),
    (CONV, [False, False, False, False, True], {"trim_tail": True}),
    (
        [
            {"role": "system", "content": "Réviseur — 審査 🚀"},
            {"role": "user", "content": "e\u0301 \u200b naïve\r\nline 🇫🇷"},
            {"role": "assistant", "content": "```repl\nprint('東京 🚀 e\u0301')\n```"},
            {"role": "user", "content": "REPL output (block 0):\n```\n東京 🚀\n```"},
            {"role": "assistant", "content": "Ünïcödé memo: ok 👍🏽"},
        ],
        [False, False, True, False, True],
        {},
    ),
    (  # leading/trailing whitespace (GLM-4 renders it stripped)
        [CONV[0], CONV[1], {"role": "assistant", "content": "  \n```repl\nx = 1\n```\n  "}],
        [False, False, True],
        {},
    ),
    ([CONV[0], CONV[1], {"role": "assistant", "content": ""}], [False, False, True], {}),
    (  # unsupervised prefill
        [CONV[0], CONV[1], {"role": "assistant", "content": "```repl\nx = 1\n```"}],
        [False, False, True],
        {"prefill_chars": [0, 0, 8]},
    ),
    (  # a long history, supervised in part
        [
            CONV[0],
            CONV[1],
            *[
                m
                for k in range(12)
                for m in (
                    {"role": "assistant", "content": f"```repl\nprint({k} * 'clause ')\n```"},
                    {"role": "user", "content": f"REPL output (block 0):\n{'clause ' * 40 * k}"},
                )
            ],
            {"role": "assistant", "content": "FINAL_VAR(memo)"},
        ],
        [False, False, *([True, False] * 6), *([False, False] * 6), True],
        {},
    ),
    (CONV[1:], [False, True, False, True], {}),  # no system prompt: refused (S7)
    (CONV, [False] * 5, {}),  # nothing supervised
    (CONV, [False, True, False, False, True], {}),  # a user message supervised
]
TOOLS_VARIED: list[tuple[list[dict[str, Any]], list[bool], dict[str, Any]]] = [
    (
        [
            CONV[0],
            CONV[1],
            {"role": "assistant", "content": "Counting.", "tool_calls": [TOOL_CALL]},
            {"role": "tool", "tool_call_id": "call_0_0", "content": "3 ∑"},
            {"role": "assistant", "content": "Done 👍"},
        ],
        [False, False, True, False, True],
        {},
    ),
    (
        [
            CONV[0],
            CONV[1],
            {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
        ],
        [False, False, True],
        {"trim_tail": True},
    ),
]


def _outcome(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    """``fn(*args, **kwargs)``'s ids and masks as bytes (int32/int8, as the dataset stores
    them), appended flag and text; or the error's type and message."""
    import numpy as np

    try:
        enc = fn(*args, **kwargs)
    except Exception as exc:
        return (type(exc), str(exc))
    return (
        np.asarray(enc.input_ids, dtype=np.int32).tobytes(),
        np.asarray(enc.assistant_masks, dtype=np.int8).tobytes(),
        enc.appended_closer,
        enc.text,
    )


def _given(result: Any) -> Any:
    """A batched result as a call would give it (an exception is raised)."""
    if isinstance(result, Exception):
        raise result
    return result


def _check_batched_equals_unbatched(tok: Any, info: Any, cases: list, tools: Any = None) -> None:
    from rlmdistill.export.masks import (
        ConversationInput,
        _masked,
        _render_checked,
        encode_conversations,
        tokenize_batch,
    )

    inputs = [
        ConversationInput(m, s, tools, kw.get("prefill_chars"), f"c{i}", kw.get("trim_tail", False))
        for i, (m, s, kw) in enumerate(cases)
    ]
    one_by_one = [
        _outcome(
            encode_conversation,
            tok,
            info,
            c.messages,
            c.supervised,
            tools=c.tools,
            prefill_chars=c.prefill_chars,
            where=c.where,
            trim_tail=c.trim_tail,
        )
        for c in inputs
    ]
    extra = ["REPL output (block 0): 東京", "<|im_start|>assistant\n```repl\n"]
    batched, extra_tokens = encode_conversations(tok, info, inputs, extra_texts=extra)
    assert [_outcome(_given, r) for r in batched] == one_by_one
    assert sum(isinstance(r, Exception) for r in batched) >= 2  # the failure cases failed
    for text, got in zip(extra, extra_tokens, strict=True):
        assert got.ids == list(tok(text, add_special_tokens=False)["input_ids"])
    # the vectorised offsets -> mask conversion equals the token loop it replaced
    n_ok = 0
    for c in inputs:
        try:
            text = _render_checked(tok, info, c, "refuse")
        except Exception:
            continue
        (tokens,) = tokenize_batch(tok, [text])
        scalar = _outcome(_masked, tok, info, c, text, tokens, vectorised=False)
        assert _outcome(_masked, tok, info, c, text, tokens) == scalar
        n_ok += isinstance(scalar[0], bytes)
    assert n_ok >= 2  # the comparison covered real encodings, not only errors


def test_batched_encoding_equals_unbatched_chatml_case_s1_s3_s7(smollm2_dir: Path) -> None:
    """One tokenizer call for many conversations gives, for each, byte for byte the ids and
    masks (or the error) of one call per conversation, and the vectorised mask equals the
    token loop; on varied conversations (unicode, whitespace, empty reply, prefill, a long
    history, the failure cases)."""
    tok, info = _tok(smollm2_dir)
    _check_batched_equals_unbatched(tok, info, VARIED)


def test_batched_encoding_equals_unbatched_tool_calls(smollm2_dir: Path) -> None:
    from rlmdistill.export import REPL_TOOL

    tok, directory = load_tokenizer(str(smollm2_dir), TRL_TEMPLATES / "qwen2_5.jinja")
    info = probe_template(tok, directory)
    _check_batched_equals_unbatched(tok, info, TOOLS_VARIED + VARIED, tools=[REPL_TOOL])


def test_batched_encoding_equals_unbatched_glm4_case_s3(glm_dir: Path) -> None:
    """GLM-4: stripped content and the appended closer come out the same batched."""
    tok, info = _tok(glm_dir)
    _check_batched_equals_unbatched(tok, info, VARIED)


def test_tokenizer_loaded_once_per_files_and_template(smollm2_dir: Path, tmp_path: Path) -> None:
    """load_tokenizer caches by directory, files' sha256 and template: the same object comes
    back; an edited file, another template or a caller's change to the shared one loads it
    afresh; cache=False always loads."""
    import json
    import shutil

    from rlmdistill.export.masks import clear_tokenizer_cache

    d = tmp_path / "tok"
    shutil.copytree(smollm2_dir, d, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    a, _ = load_tokenizer(str(d))
    assert load_tokenizer(str(d))[0] is a
    qwen = (TRL_TEMPLATES / "qwen2_5.jinja").read_text()
    b, _ = load_tokenizer(str(d), TRL_TEMPLATES / "qwen2_5.jinja")
    assert b is not a and b.chat_template == qwen and a.chat_template != qwen
    assert load_tokenizer(str(d), TRL_TEMPLATES / "qwen2_5.jinja")[0] is b
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["model_max_length"] = 1234
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    c, _ = load_tokenizer(str(d))
    assert c is not a and c.model_max_length == 1234
    original = c.chat_template
    c.chat_template = "{{ 'changed by a caller' }}"
    e, _ = load_tokenizer(str(d))
    assert e is not c and e.chat_template == original
    assert load_tokenizer(str(d), cache=False)[0] is not e
    clear_tokenizer_cache()
    assert load_tokenizer(str(d))[0] is not e


def test_tokenize_batch_equals_the_tokenizer_call(smollm2_dir: Path, glm_dir: Path) -> None:
    """The direct call of the Rust tokenizer gives exactly the ids and offsets of
    ``tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)``; a backend
    left in another state (truncation on) is not called directly, and still gives those."""
    from rlmdistill.export.masks import _backend_as_called, tokenize_batch

    for directory in (smollm2_dir, glm_dir):
        tok, _ = _tok(directory)
        texts = [
            tok.apply_chat_template(CONV, tokenize=False),
            tok.apply_chat_template(VARIED[2][0], tokenize=False),
            "",
            "東京 🚀 e\u0301\r\n\t  x",
            "<|im_start|>user\nhi<|im_end|><|user|>",
        ]
        assert _backend_as_called(tok) is not None
        for text, got in zip(texts, tokenize_batch(tok, texts), strict=True):
            ref = tok(text, add_special_tokens=False, return_offsets_mapping=True)
            assert got.ids == list(ref["input_ids"])
            assert [tuple(o) for o in got.offsets] == [tuple(o) for o in ref["offset_mapping"]]
    tok, _ = load_tokenizer(str(smollm2_dir), cache=False)
    tok.backend_tokenizer.enable_truncation(8)
    assert _backend_as_called(tok) is None
    text = "clause " * 50
    (got,) = tokenize_batch(tok, [text])
    assert got.ids == list(tok(text, add_special_tokens=False)["input_ids"])
    assert len(got.ids) > 8


def test_window_masks_equal_the_token_loop_on_random_offsets() -> None:
    """The windowed mask equals the token-by-token loop on random tokens and spans, with
    offsets in order (as tokenizers give them), with zero-width tokens, and out of order
    (where its binary searches must fall back to walking the window)."""
    import random

    from rlmdistill.export.masks import (
        ConversationInput,
        TemplateInfo,
        Tokens,
        _mask_scalar,
        _mask_windows,
        _Span,
    )

    rng = random.Random(19)
    info = TemplateInfo("0" * 64, "<a>", frozenset({7, 9}), 7, 9, None, False)
    n_out_of_order = 0
    for case in range(600):
        n = rng.randint(0, 60)
        starts = sorted(rng.randint(0, 300) for _ in range(n))
        offsets = [(s, s + rng.choice([0, 1, 1, 2, 5])) for s in starts]
        if case % 3 == 0 and n > 3:  # out of order
            i, j = rng.sample(range(n), 2)
            offsets[i], offsets[j] = offsets[j], offsets[i]
            n_out_of_order += offsets != sorted(offsets)
        ids = [rng.choice([1, 2, 3, 7, 9]) for _ in range(n)]
        n_msgs = rng.randint(1, 4)
        conv = ConversationInput([{"role": "assistant"}] * n_msgs, [True] * n_msgs)
        spans = []
        for m in range(n_msgs):
            a, b = sorted(rng.randint(0, 320) for _ in range(2))
            spans.append(_Span(m, a, rng.randint(a, b), b + rng.randint(0, 20), 7))
        got = _outcome_pair(_mask_windows, info, conv, spans, 330, Tokens(ids, offsets))
        want = _outcome_pair(_mask_scalar, info, conv, spans, 330, Tokens(ids, offsets))
        assert got == want, (case, ids, offsets, spans)
    assert n_out_of_order > 100


def _outcome_pair(fn: Any, *args: Any) -> Any:
    info, conv, spans, n_chars, tokens = args
    try:
        return fn(info, conv, iter(spans), n_chars, tokens)
    except Exception as exc:
        return (type(exc), str(exc))
