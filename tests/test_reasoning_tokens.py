"""Reasoning roots and token-exact traces (issue 14).

Real tokenizer: Qwen2.5's, out of the packaged Qwen2.5-Coder GGUF
(:func:`rlmdistill.testing.tokenizers.qwen25_tokenizer_dir`), with TRL's real Qwen3 and
GLM-4.5 templates (``qwen3.jinja``, ``glm4moe.jinja`` and their ``*_training`` variants). The
GLM tokenizer is that Qwen2.5 tokenizer with GLM's special tokens added (as
``test_export_masks.py`` does for SmolLM2).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import trl
from datasets import load_from_disk

from rlmdistill.export import ExportOptions, export_dataset
from rlmdistill.export.masks import ReasoningTemplateError, first_difference
from rlmdistill.models.base import ChatResult, Message, Sampling, Usage
from rlmdistill.models.openai_client import OpenAIChatClient
from rlmdistill.models.reasoning import response_extras, split_inline_reasoning
from rlmdistill.testing.fake_openai import FakeOpenAIServer, FakeReply, ScriptedHandler
from rlmdistill.testing.tokenizers import qwen25_tokenizer_dir
from rlmdistill.testing.trajectory_runs import synthetic_episode, write_trajectory_run
from rlmdistill.traces.rebuild import root_requests
from rlmdistill.traces.runs import EpisodeRef, load_trajectory
from rlmdistill.traces.schema import SCHEMA_VERSION, TurnRecord
from rlmdistill.traces.store import append_records, dumps_record
from rlmdistill.traces.tokens import TokenTrail, ids_sha256, prompt_ids

TRL_TEMPLATES = Path(trl.__file__).parent / "chat_templates"
GLM_TOKENS = [
    "[gMASK]",
    "<sop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
]

# The reasoning trajectory used below: turn 0 reasoned in a separate field, turn 1 inline,
# turn 2 in a separate field again; no prefill (a reasoning root thinks first).
R = ["I will count the documents first.", "Three documents; read the first.", "Done: hand back."]
ANSWERS = [
    "```repl\nprint(len(list_documents()))\n```",
    "```repl\nprint(llm_query('Quote: ' + read(list_documents()[0]['id'], 0, 200)))\n```",
    "```repl\nFINAL_VAR(memo)\n```",
]
COMPLETIONS = [ANSWERS[0], f"<think>\n{R[1]}\n</think>\n\n{ANSWERS[1]}", ANSWERS[2]]
OBS = ["REPL output (block 0):\n```\n3\n```", "REPL output (block 0):\n```\nAGREEMENT\n```", None]


@pytest.fixture(scope="module")
def qwen_dir() -> Path:
    return qwen25_tokenizer_dir()


@pytest.fixture(scope="module")
def glm_dir(qwen_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import AutoTokenizer

    out = tmp_path_factory.mktemp("glm45-on-qwen25")
    tok = AutoTokenizer.from_pretrained(qwen_dir)
    tok.add_special_tokens({"additional_special_tokens": GLM_TOKENS})
    tok.save_pretrained(out)
    return out


def _reasoning_run(root: Path) -> EpisodeRef:
    """A run with one 3-turn reasoning episode (see R / COMPLETIONS above)."""
    write_trajectory_run(root, 1, n_turns=1)  # run.json + episodes.jsonl of a synthetic run
    recs = synthetic_episode(
        "synth-0",
        "reason",
        n_turns=3,
        few_shot=False,
        prefill=None,
        replies=COMPLETIONS,
        observations=OBS,
    )
    for rec in recs:
        if isinstance(rec, TurnRecord):
            if rec.turn in (0, 2):
                rec.reasoning, rec.reasoning_source = R[rec.turn], "field"
            else:
                rec.reasoning, rec.reasoning_source = R[1], "inline"
    append_records(root / "trajectories" / "reason.jsonl", recs)
    return EpisodeRef(root, "reason")


def _rows(out: Path) -> list[dict[str, Any]]:
    return list(load_from_disk(str(out)))


def _tok(directory: Path, template: str) -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(directory)
    tok.chat_template = (TRL_TEMPLATES / template).read_text()
    return tok


def _ids(tok: Any, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False)["input_ids"])


# ------------------------------------------------------------------------- reasoning extraction
def test_split_inline_reasoning_cases() -> None:
    assert split_inline_reasoning("<think>\nplan\n</think>\n\nanswer") == ("plan", "answer")
    # the generation prompt opened the block (GLM-4.5, Qwen3-thinking-2507): only the closer
    assert split_inline_reasoning("plan</think>answer") == ("plan", "answer")
    assert split_inline_reasoning("no reasoning here") == (None, "no reasoning here")
    # a </think> quoted after an answer that opened no block at the start is left alone
    text = "print('<think>x</think>')"
    assert split_inline_reasoning(text) == (None, text)


def test_response_extras_reads_both_reasoning_fields_and_token_id_strings() -> None:
    choice = {
        "message": {"content": "A", "reasoning": "R"},
        "logprobs": {"content": [{"token": "token_id:11", "logprob": -0.5}]},
    }
    got = response_extras({"prompt_token_ids": [1, 2]}, choice)
    assert got == ("R", [1, 2], [11], [-0.5])
    choice = {"message": {"content": "A", "reasoning_content": "R2"}, "token_ids": [7, 8]}
    assert response_extras({}, choice) == ("R2", None, [7, 8], None)
    # malformed parts are absent, never guessed
    assert response_extras({"prompt_token_ids": ["x"]}, {"message": {}}) == (None,) * 4


def test_token_trail_stores_prompt_deltas_and_rebuilds_them() -> None:
    """Prompt ids are stored as the part after the previous prompt + completion (hand-made
    ids: turn 1's prompt repeats turn 0's prompt and completion, then adds [9, 9])."""
    trail = TokenTrail()

    def res(prompt: list[int], ids: list[int]) -> ChatResult:
        return ChatResult(
            text="",
            usage=Usage(),
            latency_s=0,
            model="local:x",
            token_ids=ids,
            prompt_token_ids=prompt,
            logprobs=[-1.0] * len(ids),
        )

    t0 = trail.record(res([1, 2, 3], [4, 5]))
    t1 = trail.record(res([1, 2, 3, 4, 5, 9, 9], [6]))
    t2 = trail.record(res([1, 2, 3, 7], [8]))  # the template dropped turn 1's reply
    assert (t0.prompt_reused, t0.prompt_new_ids) == (0, [1, 2, 3])
    assert (t1.prompt_reused, t1.prompt_new_ids) == (5, [9, 9])
    assert (t2.prompt_reused, t2.prompt_new_ids) == (3, [7])
    assert t1.prompt_sha256 == ids_sha256([1, 2, 3, 4, 5, 9, 9]) and t0.source == "generation"
    turns = [
        TurnRecord(
            episode_id="e",
            turn=k,
            started_at="2025-01-01T00:00:00Z",
            n_messages_before=1,
            prompt_sha256="x",
            completion="",
            usage=Usage(),
            latency_s=0,
            tokens=tr,
        )
        for k, tr in enumerate([t0, t1, t2])
    ]
    assert prompt_ids(turns) == [[1, 2, 3], [1, 2, 3, 4, 5, 9, 9], [1, 2, 3, 7]]
    turns[1].tokens.prompt_new_ids = [9, 8]  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="episode e turn 1: rebuilt prompt ids do not match"):
        prompt_ids(turns)


# ------------------------------------------------------------------- export under each policy
def _qwen3_produced(tok: Any, reasoning: str | None, answer: str) -> list[int]:
    """What a Qwen3 root generates after ``<|im_start|>assistant\\n``: its think block (empty
    when the reasoning is dropped), the answer, then ``<|im_end|>``."""
    return _ids(tok, f"<think>\n{reasoning or ''}\n</think>\n\n{answer}<|im_end|>")


def _glm_produced(tok: Any, reasoning: str | None, answer: str) -> list[int]:
    """What a GLM-4.5 root generates after ``<|assistant|>``, closed by ``<|user|>``."""
    return _ids(tok, f"\n<think>{reasoning or ''}</think>\n{answer}<|user|>")


@pytest.mark.parametrize(
    ("template", "family"), [("qwen3.jinja", "qwen"), ("glm4moe.jinja", "glm")]
)
@pytest.mark.parametrize("policy", ["all", "last", "drop"])
def test_turn_mode_supervises_exactly_what_the_root_saw_and_produced(
    template: str, family: str, policy: str, qwen_dir: Path, glm_dir: Path, tmp_path: Path
) -> None:
    """Each turn's example == ids of the prompt the root was sent (the collected messages,
    rendered by the same inference template, inline reasoning still in the history) + ids of
    what it generated (reasoning kept, or an empty think block under ``drop``); exactly the
    generated part is supervised. Both reasoning sources (field: turns 0 and 2; inline: 1)."""
    directory = qwen_dir if family == "qwen" else glm_dir
    ref = _reasoning_run(tmp_path / "run")
    opts = ExportOptions(
        tokenizer=str(directory),
        chat_template=str(TRL_TEMPLATES / template),
        mode="turn",
        reasoning=policy,
    )
    report = export_dataset([ref], tmp_path / "ds", opts)
    assert report.n_examples == 3 and report.dropped == {}
    assert report.reasoning_policy == policy and report.n_reasoning_turns == 3
    assert report.n_reasoning_kept == (0 if policy == "drop" else 3)
    tok = _tok(directory, template)
    traj = load_trajectory(ref.run_dir, "reason")
    requests = root_requests(traj.start, traj.turns)
    produce = _qwen3_produced if family == "qwen" else _glm_produced
    for row in sorted(_rows(tmp_path / "ds"), key=lambda r: r["turn"]):
        t = row["turn"]
        sent = [m.model_dump() for m in requests[t]]  # as the collector sent them
        seen = _ids(tok, tok.apply_chat_template(sent, tokenize=False, add_generation_prompt=True))
        produced = produce(tok, None if policy == "drop" else R[t], ANSWERS[t])
        assert row["input_ids"] == seen + produced
        assert row["assistant_masks"] == [0] * len(seen) + [1] * len(produced)
    card = (tmp_path / "ds" / "README.md").read_text()
    assert f"reasoning policy: **{policy}**" in card
    assert json.loads((tmp_path / "ds" / "export.json").read_text())["reasoning_policy"] == policy


def _supervised_texts(tok: Any, row: dict[str, Any]) -> list[str]:
    """Decoded runs of supervised tokens of a row, in order."""
    spans: list[list[int]] = []
    for i, m in enumerate(row["assistant_masks"]):
        if m and (i == 0 or not row["assistant_masks"][i - 1]):
            spans.append([])
        if m:
            spans[-1].append(row["input_ids"][i])
    return [tok.decode(s) for s in spans]


def test_trajectory_mode_keeps_every_turns_reasoning_with_qwen3_training(
    qwen_dir: Path, tmp_path: Path
) -> None:
    """reasoning='all' with TRL's qwen3_training.jinja: every supervised reply decodes to its
    think block + answer; the card states the approximation. Qwen3's inference template
    (which drops earlier reasoning) is refused for 'all' in trajectory mode, naming the fix."""
    ref = _reasoning_run(tmp_path / "run")
    template = TRL_TEMPLATES / "qwen3_training.jinja"
    opts = ExportOptions(tokenizer=str(qwen_dir), chat_template=str(template), reasoning="all")
    report = export_dataset([ref], tmp_path / "ds", opts)
    assert report.n_examples == 1 and report.n_reasoning_kept == 3
    (row,) = _rows(tmp_path / "ds")
    want = [f"<think>\n{r}\n</think>\n\n{a}<|im_end|>" for r, a in zip(R, ANSWERS, strict=True)]
    assert _supervised_texts(_tok(qwen_dir, "qwen3_training.jinja"), row) == want
    card = (tmp_path / "ds" / "README.md").read_text()
    assert "approximation: in trajectory mode with reasoning kept in every turn" in card
    with pytest.raises(ReasoningTemplateError, match=re.escape("qwen3_training.jinja")):
        export_dataset(
            [ref],
            tmp_path / "ds2",
            opts.model_copy(update={"chat_template": str(TRL_TEMPLATES / "qwen3.jinja")}),
        )


def test_glm45_training_template_keeps_the_last_turns_reasoning_only(
    glm_dir: Path, tmp_path: Path
) -> None:
    """TRL's glm4moe_training.jinja renders reasoning only after the last user message (like
    the inference template), so reasoning='all' in trajectory mode is refused rather than
    silently dropped; 'last' supervises earlier replies with GLM's empty think block and the
    last one with its reasoning; closers are ``<|user|>`` (rendered by the template)."""
    ref = _reasoning_run(tmp_path / "run")
    template = TRL_TEMPLATES / "glm4moe_training.jinja"
    opts = ExportOptions(tokenizer=str(glm_dir), chat_template=str(template), reasoning="all")
    with pytest.raises(ReasoningTemplateError, match="keeps the reasoning of earlier turns"):
        export_dataset([ref], tmp_path / "ds", opts)
    report = export_dataset([ref], tmp_path / "ds", opts.model_copy(update={"reasoning": "last"}))
    assert report.n_examples == 1 and report.n_reasoning_kept == 1
    (row,) = _rows(tmp_path / "ds")
    want = [f"\n<think></think>\n{a}<|user|>" for a in ANSWERS[:2]]
    want.append(f"\n<think>{R[2]}</think>\n{ANSWERS[2]}<|user|>")
    assert _supervised_texts(_tok(glm_dir, "glm4moe_training.jinja"), row) == want
    assert "approximation" not in (tmp_path / "ds" / "README.md").read_text()


def test_a_template_that_ignores_reasoning_is_refused_unless_dropped(
    qwen_dir: Path, tmp_path: Path
) -> None:
    ref = _reasoning_run(tmp_path / "run")
    opts = ExportOptions(tokenizer=str(qwen_dir), mode="turn")  # Qwen2.5's own template
    with pytest.raises(ReasoningTemplateError, match="ignores reasoning_content"):
        export_dataset([ref], tmp_path / "ds", opts)
    report = export_dataset([ref], tmp_path / "ds", opts.model_copy(update={"reasoning": "drop"}))
    assert report.n_examples == 3 and report.n_reasoning_kept == 0


def test_template_mismatch_names_the_first_differing_characters(
    qwen_dir: Path, tmp_path: Path
) -> None:
    """A template that rewrites assistant text (newlines -> spaces) drops the example as
    template_mismatch, and the detail shows where expected and rendered text part."""
    template = tmp_path / "rewrite.jinja"
    template.write_text(
        "{% for m in messages %}<|im_start|>{{ m.role }}\n"
        "{% if m.role == 'assistant' %}{{ m.content | replace('\\n', ' ') }}"
        "{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    run = tmp_path / "run"
    write_trajectory_run(run, 1, n_turns=1)
    for eid, reply in [("good", "ab cd"), ("bad", "ab\ncd")]:
        recs = synthetic_episode(
            "synth-0", eid, n_turns=1, few_shot=False, prefill=None, replies=[reply]
        )
        append_records(run / "trajectories" / f"{eid}.jsonl", recs)
    opts = ExportOptions(tokenizer=str(qwen_dir), chat_template=str(template), mode="turn")
    refs = [EpisodeRef(run, "good"), EpisodeRef(run, "bad")]
    report = export_dataset(refs, tmp_path / "ds", opts)
    assert report.n_examples == 1 and report.dropped == {"template_mismatch": 1}
    (item,) = report.dropped_items
    assert (item.episode_id, item.turn) == ("bad", 0)
    # "ab\ncd" is rendered "ab cd": they part at char 2
    assert "at char 2: expected '\\ncd' rendered ' cd<|im_end|>" in item.detail
    assert first_difference("abc", "abc") == "equal"


# ------------------------------------------------------------------------ schema version N-1
def test_traces_from_schema_version_1_still_load_and_export(qwen_dir: Path, tmp_path: Path) -> None:
    """A trajectory written before this change (schema_version 1, no reasoning/tokens fields)
    loads as version 1 with those fields empty, and exports as before."""
    assert SCHEMA_VERSION == 2
    run = tmp_path / "run"
    write_trajectory_run(run, 1, n_turns=2)
    path = next((run / "trajectories").glob("*.jsonl"))
    v1 = []
    for line in path.read_text().splitlines():
        obj = json.loads(line)
        obj["schema_version"] = 1
        for key in ("reasoning", "reasoning_source", "tokens"):
            obj.pop(key, None)
        v1.append(json.dumps(obj))
    path.write_text("\n".join(v1) + "\n")
    assert '"tokens"' not in path.read_text()
    traj = load_trajectory(run, path.stem)
    assert [t.schema_version for t in traj.turns] == [1, 1]
    assert all(t.tokens is None and t.reasoning is None for t in traj.turns)
    assert traj.start.schema_version == 1
    report = export_dataset(
        [EpisodeRef(run, path.stem)],
        tmp_path / "ds",
        ExportOptions(tokenizer=str(qwen_dir), default_system="allow"),
    )
    assert report.n_examples == 1 and report.n_reasoning_turns == 0
    # a record written now carries the new version
    assert (
        json.loads(dumps_record(traj.turns[0].model_copy(update={"schema_version": 2})))[
            "schema_version"
        ]
        == 2
    )


# ----------------------------------------------------------- recorded ids: OpenAI back end
def _reasoning_script() -> ScriptedHandler:
    return ScriptedHandler(
        [
            FakeReply(text=ANSWERS[0], reasoning=R[0]),
            FakeReply(text=COMPLETIONS[1]),  # inline
            FakeReply(
                text="```repl\nFINAL('# Memo\\nAll read.')\n```",
                reasoning=R[2],
                reasoning_field="reasoning",
            ),
        ],
        lambda prompt: "The agreement may not be assigned.",
    )


def _collect_fake(
    room: Path, out: Path, tok: Any, handler: Any, token_ids: bool = True, setting: str = "root"
) -> tuple[Path, str]:
    from rlmdistill.collect.config import CollectConfig, EpisodeLimits
    from rlmdistill.collect.runner import collect

    with FakeOpenAIServer(handler, tokenizer=tok) as server:
        root = OpenAIChatClient(
            "root", server.base_url, api_key="x", max_retries=0, token_ids=token_ids
        )
        sub = OpenAIChatClient(
            "sub", server.base_url, api_key="x", max_retries=0, token_ids=setting == "all"
        )
        cfg = CollectConfig(
            rooms=[str(room)],
            root=f"openai:root@{server.base_url}",
            sub=f"openai:sub@{server.base_url}",
            episodes=1,
            limits=EpisodeLimits(max_turns=3),
            token_ids=setting,
        )
        (s,) = collect(cfg, out, root, sub, progress=False).summaries
        requests = server.requests
    assert all(
        r.get("return_token_ids") is (True if token_ids else None)
        for r in requests
        if r["model"] == "root"
    )
    return out, s.episode_id


def test_openai_back_end_records_reasoning_and_ids_that_round_trip(
    qwen_dir: Path, cuad_room3: Path, tmp_path: Path
) -> None:
    """vLLM-style server (loopback fake with the Qwen2.5 tokenizer + qwen3 template):
    reasoning is filed from either field name and inline; completion ids decode to what the
    server generated; prompt ids rebuild from the deltas; exporting from the recorded ids
    equals the re-render for every turn (0 mismatches)."""
    tok = _tok(qwen_dir, "qwen3.jinja")
    run, eid = _collect_fake(cuad_room3, tmp_path / "run", tok, _reasoning_script())
    traj = load_trajectory(run, eid)
    assert traj.end is not None and traj.end.status == "completed"
    t0, t1, t2 = traj.turns
    assert (t0.reasoning, t0.reasoning_source) == (R[0], "field")
    assert (t1.reasoning, t1.reasoning_source) == (R[1], "inline")
    assert (t2.reasoning, t2.reasoning_source) == (R[2], "field")
    assert t1.completion == COMPLETIONS[1]  # the completion itself is kept as generated
    for t in traj.turns:
        assert t.tokens is not None and t.tokens.source == "server"
        ids = t.tokens.completion_ids or []
        assert ids[-1] == tok.convert_tokens_to_ids("<|im_end|>")
        generated = (
            f"<think>\n{t.reasoning}\n</think>\n\n{t.completion}"
            if (t.reasoning_source == "field")
            else t.completion
        )
        assert tok.decode(ids[:-1]) == generated
        assert t.tokens.logprobs == [-0.5] * len(ids)
    rebuilt = prompt_ids(traj.turns)
    sent = root_requests(traj.start, traj.turns)
    for ids, msgs in zip(rebuilt, sent, strict=True):
        render = tok.apply_chat_template(
            [m.model_dump() for m in msgs], tokenize=False, add_generation_prompt=True
        )
        assert ids == _ids(tok, render)
    # turn 1 reuses turn 0's prompt (up to the assistant header) and stores only the rest
    assert t1.tokens.prompt_reused == t0.tokens.prompt_n  # type: ignore[union-attr]
    assert len(t1.tokens.prompt_new_ids) < t1.tokens.prompt_n  # type: ignore[union-attr,operator,arg-type]
    opts = ExportOptions(
        tokenizer=str(qwen_dir),
        chat_template=str(TRL_TEMPLATES / "qwen3.jinja"),
        mode="turn",
        from_ids=True,
    )
    report = export_dataset([EpisodeRef(run, eid)], tmp_path / "ds", opts)
    assert report.n_examples == 3 and report.n_ids_matched == 3 and report.ids_mismatches == {}
    for row in _rows(tmp_path / "ds"):
        t = traj.turns[row["turn"]]
        assert row["input_ids"] == rebuilt[t.turn] + t.tokens.completion_ids  # type: ignore[union-attr,operator]


def test_from_ids_counts_and_explains_a_retokenisation_mismatch(
    qwen_dir: Path, cuad_room3: Path, tmp_path: Path
) -> None:
    """A server whose ids for turn 0 are not the canonical tokenisation ('print' sent as
    'pr' + 'int'): the row keeps the ids as produced, and the report counts one
    completion_ids_differ naming the first differing token."""
    tok = _tok(qwen_dir, "qwen3.jinja")
    answer = ANSWERS[0]
    canonical = _ids(tok, f"<think>\n{R[0]}\n</think>\n\n{answer}")
    head = _ids(tok, f"<think>\n{R[0]}\n</think>\n\n```repl\n")
    odd = head + _ids(tok, "pr") + _ids(tok, "int") + canonical[len(head) + 1 :]
    assert tok.decode(odd) == tok.decode(canonical) and odd != canonical
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    handler = _reasoning_script()
    handler.root_replies[0] = FakeReply(text=answer, reasoning=R[0], token_ids=[*odd, eos])
    run, eid = _collect_fake(cuad_room3, tmp_path / "run", tok, handler)
    opts = ExportOptions(
        tokenizer=str(qwen_dir),
        chat_template=str(TRL_TEMPLATES / "qwen3.jinja"),
        mode="turn",
        from_ids=True,
    )
    report = export_dataset([EpisodeRef(run, eid)], tmp_path / "ds", opts)
    assert report.n_examples == 3 and report.n_ids_matched == 2
    assert report.ids_mismatches == {"completion_ids_differ": 1}
    (item,) = report.ids_mismatch_items
    assert item.turn == 0 and "first differing token" in item.detail
    assert (
        "recorded tokens ['pr', 'int'," in item.detail
        and "re-render tokens ['print'," in item.detail
    )
    row = next(r for r in _rows(tmp_path / "ds") if r["turn"] == 0)
    assert row["input_ids"][-len(odd) - 1 :] == [*odd, eos]


def test_no_ids_from_the_server_is_recorded_as_not_available(
    qwen_dir: Path, cuad_room3: Path, tmp_path: Path
) -> None:
    tok = _tok(qwen_dir, "qwen3.jinja")
    run, eid = _collect_fake(cuad_room3, tmp_path / "run", tok, _reasoning_script(), False)
    traj = load_trajectory(run, eid)
    for t in traj.turns:
        assert t.tokens is not None and t.tokens.source == "unavailable"
        assert "return_token_ids" in (t.tokens.unavailable or "")
    opts = ExportOptions(
        tokenizer=str(qwen_dir),
        chat_template=str(TRL_TEMPLATES / "qwen3.jinja"),
        mode="turn",
        from_ids=True,
    )
    with pytest.raises(Exception, match="no_token_ids"):
        export_dataset([EpisodeRef(run, eid)], tmp_path / "ds", opts)


def test_a_server_refusing_the_token_fields_is_asked_again_without_them() -> None:
    """OpenAI's API answers 400 to unknown fields: the client retries once without them and
    stops asking (the result then carries no ids)."""
    seen: list[dict[str, Any]] = []

    def handler(req: dict[str, Any]) -> FakeReply | str:
        seen.append(req)
        if "return_token_ids" in req:
            return FakeReply.error(400, "Unrecognized request argument supplied: return_token_ids")
        return "ok"

    with FakeOpenAIServer(handler) as server:
        client = OpenAIChatClient("m", server.base_url, api_key="x", max_retries=0, token_ids=True)
        msgs = [Message(role="user", content="hi")]
        assert client.chat(msgs, Sampling()).text == "ok"
        assert client.chat(msgs, Sampling()).token_ids is None
    assert ["return_token_ids" in r for r in seen] == [True, False, False]


def test_token_ids_setting_is_operational(cuad_room3: Path) -> None:
    """CollectConfig.token_ids never changes episode ids (a resumed run keeps them)."""
    from rlmdistill.collect.config import CollectConfig

    a = CollectConfig(rooms=[str(cuad_room3)], root="openai:r@http://x", sub="openai:s@http://x")
    b = a.model_copy(update={"token_ids": "off"})
    assert a.fingerprint() == b.fingerprint()
    # a run.json written before the field existed validates (the field defaults)
    old = a.model_dump(mode="json")
    old.pop("token_ids")
    assert CollectConfig.model_validate(old).fingerprint() == a.fingerprint()


# -------------------------------------------------------------- recorded ids: local back end
@pytest.mark.slow
def test_local_back_end_records_ids_and_logprobs_that_round_trip(
    smollm2_dir: Path, cuad_room3: Path, tmp_path: Path
) -> None:
    """In-process SmolLM2: completion ids decode to the text, one logprob per id (<= 0),
    prompt ids == the tokenised render the model was given; a collected episode's ids
    rebuild, and exporting from them matches the re-render or counts why not."""
    from rlmdistill.collect.config import CollectConfig, EpisodeLimits
    from rlmdistill.collect.runner import collect
    from rlmdistill.models.local import LocalChatClient

    with LocalChatClient(smollm2_dir, dtype="float32") as client:
        msgs = [Message(role="system", content="Be brief."), Message(role="user", content="Hi")]
        res = client.chat(msgs, Sampling(temperature=0.0, max_tokens=12))
        ids = res.token_ids or []
        assert res.logprobs is not None and len(res.logprobs) == len(ids) > 0
        assert all(lp <= 0 for lp in res.logprobs)
        text_ids = ids[:-1] if res.finish_reason == "stop" else ids
        assert client.tokenizer.decode(text_ids, skip_special_tokens=True) == res.text
        assert res.prompt_token_ids == client.encode(client.render(msgs))
        # greedy: every chosen token is the model's most likely one, so its logprob is the max
        assert max(res.logprobs) <= 0 and min(res.logprobs) > -30
        cfg = CollectConfig(
            rooms=[str(cuad_room3)],
            root="local:smollm2-135m",
            sub="local:smollm2-135m",
            episodes=1,
            concurrency=1,
            few_shot=True,
            prefill="```repl\n",
            root_sampling=Sampling(temperature=0.0, max_tokens=48),
            sub_sampling=Sampling(temperature=0.0, max_tokens=16),
            limits=EpisodeLimits(max_turns=2),
        )
        (s,) = collect(cfg, tmp_path / "run", client, client, progress=False).summaries
    traj = load_trajectory(tmp_path / "run", s.episode_id)
    rebuilt = prompt_ids(traj.turns)
    sent = root_requests(traj.start, traj.turns)
    for t, ids_t, msgs_t in zip(traj.turns, rebuilt, sent, strict=True):
        assert t.tokens is not None and t.tokens.source == "generation"
        assert ids_t == client.encode(client.render(msgs_t, cfg.prefill))
        comp = t.tokens.completion_ids or []
        body = comp[:-1] if comp and comp[-1] in client.eos_ids else comp
        assert client.tokenizer.decode(body, skip_special_tokens=True) == t.completion
    opts = ExportOptions(tokenizer=str(smollm2_dir), mode="turn", from_ids=True)
    report = export_dataset([EpisodeRef(tmp_path / "run", s.episode_id)], tmp_path / "ds", opts)
    assert report.n_ids_matched + sum(report.ids_mismatches.values()) == report.n_examples
    assert all("first differing token" in d.detail for d in report.ids_mismatch_items)


def test_trace_viewer_shows_reasoning_folded_and_the_token_line(
    qwen_dir: Path, cuad_room3: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dashboard's trace page: each turn's reasoning sits in a folded expander naming its
    source; the answer is shown without it; a caption gives the recorded ids."""
    from streamlit.testing.v1 import AppTest

    import rlmdistill.dashboard.app as app_module
    from rlmdistill.dashboard.data import ENV_WORKSPACE

    tok = _tok(qwen_dir, "qwen3.jinja")
    run, eid = _collect_fake(cuad_room3, tmp_path / "runs" / "r", tok, _reasoning_script())
    monkeypatch.setenv(ENV_WORKSPACE, str(tmp_path))
    at = AppTest.from_file(str(Path(app_module.__file__)), default_timeout=30)
    at.query_params["page"] = "trace"
    at.query_params["run"] = "r"
    at.query_params["episode"] = eid
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    labels = [e.label for e in at.expander]
    assert f"Reasoning ({len(R[0])} chars, separate field)" in labels
    assert f"Reasoning ({len(R[1])} chars, inline <think>)" in labels
    codes = [c.value for c in at.code]
    assert R[1] in codes and ANSWERS[1] in codes and COMPLETIONS[1] not in codes
    traj = load_trajectory(run, eid)
    t0 = traj.turns[0].tokens
    assert t0 is not None
    want = f"token ids (server): prompt {t0.prompt_n:,} ({t0.prompt_n:,} new) completion "
    assert any(c.value.startswith(want) for c in at.caption)


def test_sub_call_ids_behind_the_option_and_a_run_resumes_with_it_changed(
    qwen_dir: Path, cuad_room3: Path, tmp_path: Path
) -> None:
    """token_ids='all' also traces sub-call ids (off by default: 'root'); the setting is
    operational, so the run.json written with it resumes under another setting."""
    from rlmdistill.collect.config import CollectConfig
    from rlmdistill.collect.runner import collect
    from rlmdistill.traces.runs import load_manifest, load_summaries

    tok = _tok(qwen_dir, "qwen3.jinja")
    run, eid = _collect_fake(cuad_room3, tmp_path / "all", tok, _reasoning_script(), True, "all")
    calls = load_trajectory(run, eid).sub_calls
    assert calls and all(c.tokens is not None and c.tokens.completion_ids for c in calls)
    c = calls[0]
    assert tok.decode(c.tokens.completion_ids[:-1]) == c.response  # type: ignore[union-attr,index]
    run2, eid2 = _collect_fake(cuad_room3, tmp_path / "root", tok, _reasoning_script())
    assert all(c.tokens is None for c in load_trajectory(run2, eid2).sub_calls)  # default
    cfg = CollectConfig.model_validate(load_manifest(run).config.model_dump())
    assert cfg.token_ids == "all"
    with FakeOpenAIServer(_reasoning_script(), tokenizer=tok) as server:
        client = OpenAIChatClient("root", server.base_url, api_key="x", max_retries=0)
        again = collect(
            cfg.model_copy(update={"token_ids": "off"}), run, client, client, progress=False
        )
    assert (again.skipped, again.summaries) == (1, [])
    assert [s.episode_id for s in load_summaries(run)] == [eid]
