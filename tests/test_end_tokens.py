"""A turn that stops on a secondary end-of-sequence id (Qwen's ``<|endoftext|>`` where the
chat template closes a turn with ``<|im_end|>``; trl PR #7039) keeps the template's turn-end id
instead, so the episode stays one token sequence: every end id a template family declares is
checked, on the real SmolLM2 tokenizer (ChatML), on the trl package's Llama 3, Phi-3.5 and
Gemma 3 templates, and (slow) on the Qwen2.5 tokenizer of the embedded Qwen model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlmdistill.models.base import Message, Sampling
from rlmdistill.models.local import (
    declared_end_ids,
    normalise_turn_end,
    template_turn_end,
)


def _trl_template(name: str) -> str:
    import trl

    return (Path(trl.__file__).parent / "chat_templates" / f"{name}.jinja").read_text("utf-8")


def test_normalise_turn_end_by_hand() -> None:
    """ids [5, 0, 9] with end ids {0, 2}, turn end 2: the first end id (0) becomes 2 and its
    logprob the turn-end id's (-7.5); already 2, none, or no turn end: unchanged."""
    ids, lps = normalise_turn_end([5, 0, 9], [-1.0, -0.1, -3.0], [2, 0], 2, [-9.0, -7.5, -8.0])
    assert ids == [5, 2, 9] and lps == [-1.0, -7.5, -3.0]
    assert normalise_turn_end([5, 2, 0], [-1.0, -2.0, -3.0], [2, 0], 2) == (
        [5, 2, 0],
        [-1.0, -2.0, -3.0],
    )
    assert normalise_turn_end([5, 6], None, [2, 0], 2) == ([5, 6], None)
    assert normalise_turn_end([5, 0], None, [2, 0], None) == ([5, 0], None)


@pytest.mark.parametrize(
    ("family", "specials", "generation_eos", "turn_end"),
    [
        # Meta-Llama-3.1/3.2-Instruct generation_config: [<|end_of_text|>, <|eom_id|>, <|eot_id|>]
        ("llama3_2", ["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"], None, "<|eot_id|>"),
        # Phi-3.5-mini-instruct: [<|end|> 32007, <|assistant|> 32001, <|endoftext|> 32000]
        ("phi3_5", ["<|end|>", "<|assistant|>", "<|endoftext|>"], None, "<|end|>"),
        # gemma-3-*-it: [<eos> 1, <end_of_turn> 106]
        ("gemma3", ["<eos>", "<end_of_turn>"], None, "<end_of_turn>"),
    ],
)
def test_each_template_family_names_its_turn_end(
    smollm2_tokenizer: Any, family: str, specials: list[str], generation_eos: Any, turn_end: str
) -> None:
    """The family's real template (from the trl wheel) over the SmolLM2 vocabulary with the
    family's special tokens added; the generation config declares them all as end ids."""
    from types import SimpleNamespace

    tok = smollm2_tokenizer.__class__.from_pretrained(smollm2_tokenizer.name_or_path)
    tok.add_special_tokens({"additional_special_tokens": specials})
    tok.chat_template = _trl_template(family)
    ids = [tok.convert_tokens_to_ids(s) for s in specials]
    ends = declared_end_ids(tok, SimpleNamespace(eos_token_id=ids))
    assert ends[: len(ids)] == ids
    expected = tok.convert_tokens_to_ids(turn_end)
    assert template_turn_end(tok, ends) == expected
    for end in ends:  # every declared end id becomes the template's turn end
        assert normalise_turn_end([7, end, 8], None, ends, expected)[0] == [7, expected, 8]


def _forced_end_client(model_dir: Path, end_ids: list[int], end_id: int) -> Any:
    """A :class:`PolicyChatClient` over the tiny random Llama whose generation config declares
    ``end_ids`` and whose first generated id is ``end_id`` (a +100 ``sequence_bias``)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlmdistill.rl.policy_client import PolicyChatClient

    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    model.generation_config.eos_token_id = end_ids
    model.generation_config.sequence_bias = {(end_id,): 100.0}
    model.eval()
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    return PolicyChatClient.from_model(model, tok, model_id="local:tiny", max_batch=1)


def test_every_declared_end_id_ends_a_turn_that_the_next_prompt_extends(
    tiny_llama_dir: Path,
) -> None:
    """A ChatML model whose generation config declares ``<|im_end|>`` and ``<|endoftext|>``
    (as Qwen3's ``[151645, 151643]`` does; here over the SmolLM2 vocabulary). Whichever the
    model stops on, the kept completion ends with ``<|im_end|>`` (the id the template renders), its
    logprob is that id's, and the next turn's prompt ids extend prompt + completion (one
    sequence for export-grpo and rl). Before: a turn that stopped on ``<|endoftext|>`` kept it,
    and the next prompt did not extend it."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_llama_dir))
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    declared = [im_end, tok.convert_tokens_to_ids("<|endoftext|>")]
    sampling = Sampling(temperature=0.0, max_tokens=8)
    for end in declared:
        client = _forced_end_client(tiny_llama_dir, declared, end)
        try:
            assert client.eos_ids == declared and client.turn_end_id == im_end
            msgs = [Message(role="system", content="s"), Message(role="user", content="u")]
            first = client.chat(msgs, sampling)
            assert first.finish_reason == "stop" and first.token_ids == [im_end], end
            assert first.logprobs is not None and len(first.logprobs) == 1
            # the row's logprob is <|im_end|>'s: far below the +100-biased id's ~0 when the
            # model was pushed to <|endoftext|>
            assert (first.logprobs[0] > -1e-3) == (end == im_end)
            msgs += [
                Message(role="assistant", content=first.text),
                Message(role="user", content="next"),
            ]
            second = client.chat(msgs, sampling)
            assert first.prompt_token_ids is not None and second.prompt_token_ids is not None
            seq = first.prompt_token_ids + first.token_ids
            assert second.prompt_token_ids[: len(seq)] == seq, end
        finally:
            client.close()


@pytest.mark.slow
def test_qwen25_declares_endoftext_and_im_end_and_closes_turns_with_im_end(
    qwen05_dir: Path,
) -> None:
    """The embedded Qwen2.5-Coder tokenizer: generation stops on ``<|im_end|>`` (151645) and
    ``<|endoftext|>`` (151643); the template closes a turn with 151645, so 151643 becomes it."""
    from transformers import AutoTokenizer, GenerationConfig

    tok = AutoTokenizer.from_pretrained(str(qwen05_dir))
    ends = declared_end_ids(tok, GenerationConfig.from_pretrained(str(qwen05_dir)))
    assert set(ends) == {151645, 151643}
    assert template_turn_end(tok, ends) == 151645
    for end in ends:
        assert normalise_turn_end([11, end], None, ends, 151645)[0] == [11, 151645]
