"""Turn-mode prompt checks tokenise only the prompt's tail after its last special token
(``TurnPromptCutter``), and still give exactly the ids of the whole prompt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlmdistill.export import ExportOptions, export_dataset
from rlmdistill.export import dataset as export_dataset_module
from rlmdistill.export.masks import TurnPromptCutter, load_tokenizer, tokenize_batch
from rlmdistill.testing.trajectory_runs import synthetic_episode, write_trajectory_run
from rlmdistill.traces.runs import EpisodeRef
from rlmdistill.traces.store import append_records

PROMPT = (
    "<|im_start|>system\nYou are the root.<|im_end|>\n"
    "<|im_start|>user\nhello world, print(x) = 1<|im_end|>\n"
    "<|im_start|>assistant\nprint(x)<|im_end|>\n"
    "<|im_start|>user\nthe quick brown fox<|im_end|>\n"
    "<|im_start|>assistant\n"
)
# prefills and replies that merge with the header's newline, hold special-token text, or none
PREFILLS = ["", "\n", "\n\n", " ", "hello", "<|im_end|>", "x<|im_start|>", "\u00e9t\u00e9 "]
REPLIES = ["print(1)<|im_end|>", "\n\nprint(1)<|im_end|>", " world<|im_end|>\n", ""]


def _metaspace_first_tokenizer(single_word: bool = False) -> Any:
    """A small BPE tokenizer with a Metaspace pre-tokenizer that prepends its space mark to
    the start of the text only (``prepend_scheme: first``, as Llama/Mistral ones do)."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    corpus = [PROMPT, "hello world assistant user system print(1)", "\u00e9t\u00e9 fox"] * 20
    trainer = trainers.BpeTrainer(
        vocab_size=220, special_tokens=["<unk>", "<|im_start|>", "<|im_end|>"]
    )
    tok.train_from_iterator(corpus, trainer)
    if single_word:
        tok.add_tokens([AddedToken("fox", single_word=True)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")


def _cases(
    tokenizer: Any,
) -> tuple[TurnPromptCutter, list[tuple[str, str, list[int] | None, str]]]:
    """For every prefill x reply: (prompt, tail, ids from the cut, ids of the whole prompt)."""
    cutter = TurnPromptCutter(tokenizer)
    out = []
    for prefill in PREFILLS:
        for reply in REPLIES:
            prompt = PROMPT + prefill
            text = prompt + reply
            cut = cutter.cut(text, prompt)
            full, tail, whole = tokenize_batch(tokenizer, [text, cut.tail, prompt])
            out.append((prompt, cut.tail, cutter.prompt_ids(cut, full, tail.ids), str(whole.ids)))
    return cutter, out


@pytest.mark.parametrize("which", ["smollm2", "metaspace-first"])
def test_prompt_ids_from_the_cut_equal_the_whole_prompts_ids(which: str, smollm2_dir: Path) -> None:
    """Byte-level BPE (SmolLM2) and a Metaspace tokenizer that marks only the text's start:
    the cut is made (the tail is the last header + prefill) and its ids are exactly the
    whole prompt's, whatever the prefill and reply."""
    tokenizer = (
        load_tokenizer(str(smollm2_dir))[0] if which == "smollm2" else _metaspace_first_tokenizer()
    )
    cutter, cases = _cases(tokenizer)
    assert cutter.cut_ids["<|im_start|>"] == tokenizer.convert_tokens_to_ids("<|im_start|>")
    for prompt, tail, ids, whole in cases:
        assert ids is not None and str(ids) == whole
        last = max(prompt.rfind("<|im_start|>"), prompt.rfind("<|im_end|>"))
        assert tail == prompt[last:] and len(tail) <= len("<|im_start|>assistant\nx<|im_start|>")


def test_metaspace_first_needs_the_cut_token_in_the_tail() -> None:
    """Why the tail starts with the special token: tokenised alone, ``assistant`` would be
    the start of the text and get the space mark the whole prompt does not give it."""
    tokenizer = _metaspace_first_tokenizer()
    bare, whole = tokenize_batch(tokenizer, ["assistant\nhello", PROMPT + "hello"])
    assert tokenizer.convert_ids_to_tokens(bare.ids)[0] == "\u2581assistant"
    assert whole.ids[-len(bare.ids) :] != bare.ids


def test_no_cut_where_it_cannot_be_proved_exact(smollm2_dir: Path) -> None:
    """A single_word added token (the scan may drop its match), an example that does not
    start with the prompt, and tokens without the cut token at the cut: the whole prompt."""
    cutter = TurnPromptCutter(_metaspace_first_tokenizer(single_word=True))
    assert cutter.cut_ids == {}
    assert cutter.cut(PROMPT + "x", PROMPT).tail == PROMPT
    tokenizer = load_tokenizer(str(smollm2_dir))[0]
    cutter = TurnPromptCutter(tokenizer)
    assert cutter.cut("other" + PROMPT, PROMPT).tail == PROMPT
    cut = cutter.cut(PROMPT + "x", PROMPT)
    assert cut.token_id == tokenizer.convert_tokens_to_ids("<|im_start|>")
    full, tail = tokenize_batch(tokenizer, [PROMPT.replace("<|im_start|>", "<|im_end|>"), cut.tail])
    assert cutter.prompt_ids(cut, full, tail.ids) is None


def _run(tmp_path: Path, replies: dict[str, str]) -> list[EpisodeRef]:
    run = tmp_path / "run"
    write_trajectory_run(run, 1, n_turns=1)
    for eid, reply in replies.items():
        recs = synthetic_episode(
            "synth-0", eid, n_turns=1, few_shot=False, prefill=None, replies=[reply]
        )
        append_records(run / "trajectories" / f"{eid}.jsonl", recs)
    return [EpisodeRef(run, eid) for eid in replies]


def test_a_merge_across_the_reply_boundary_is_caught(smollm2_dir: Path, tmp_path: Path) -> None:
    """A reply starting with newlines: tokenising the whole example merges the header's
    ``\\n`` with them, so the example's prompt ids are not the ones the model saw; the check
    from the prompt's tail drops it as template_mismatch and names the token."""
    refs = _run(tmp_path, {"good": "print(1)", "merged": "\n\nprint(1)"})
    opts = ExportOptions(tokenizer=str(smollm2_dir), mode="turn")
    report = export_dataset(refs, tmp_path / "ds", opts)
    assert report.n_examples == 1 and report.dropped == {"template_mismatch": 1}
    (item,) = report.dropped_items
    assert item.episode_id == "merged"
    assert "prompt ids differ from the prompt the model saw" in item.detail
    assert "merges across the reply boundary" in item.detail


def test_turn_export_tokenises_each_prompt_from_its_last_special_token(
    smollm2_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prompt check adds only each prompt's tail to the export's tokenizer calls (the
    last ``<|im_start|>assistant\\n`` and the reply prefill), not a second tokenisation of the whole prompt."""
    run = tmp_path / "run"
    ids = write_trajectory_run(run, 3, n_turns=3)
    texts: list[str] = []
    real = export_dataset_module.tokenize_batch

    def recording(tokenizer: Any, batch: list[str]) -> Any:
        texts.extend(batch)
        return real(tokenizer, batch)

    monkeypatch.setattr(export_dataset_module, "tokenize_batch", recording)
    opts = ExportOptions(tokenizer=str(smollm2_dir), mode="turn")
    report = export_dataset([EpisodeRef(run, i) for i in ids], tmp_path / "ds", opts)
    assert report.n_examples == 9 and report.dropped == {}
    long = [t for t in texts if len(t) > 200]  # the examples
    short = [t for t in texts if len(t) <= 200]  # the prompts' tails
    assert len(long) == 9
    assert len(short) == 9 and all(t == "<|im_start|>assistant\n```repl\n" for t in short)
