"""Does the adapter change what the root does? Greedy outputs of base vs base + adapter.

A LoRA run can "finish" and change nothing (zero learning rate, adapter not loaded, targets
that never fire). This check decodes the same prompt greedily with the base model and with the
adapter applied (``peft``), and reports whether the generated token ids differ, where they
first differ, and the largest absolute difference of the next-token logits.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from rlmdistill.models.base import Message

__all__ = ["GreedyCheck", "greedy_change"]


class GreedyCheck(BaseModel):
    """Result of :func:`greedy_change`."""

    prompt_source: str
    """Where the prompt came from (e.g. an episode id and turn)."""
    max_new_tokens: int
    base_text: str
    tuned_text: str
    changed: bool
    """The greedy token ids differ."""
    first_difference: int | None
    """Index of the first differing generated token (``None`` when identical)."""
    max_abs_logit_diff: float
    """max |logits_tuned - logits_base| over the vocabulary at the first generated position."""


def greedy_change(
    base_dir: Path,
    adapter_dir: Path,
    messages: list[Message],
    *,
    prefill: str | None = None,
    max_new_tokens: int = 32,
    prompt_source: str = "",
) -> GreedyCheck:
    """Decode ``messages`` (+ ``prefill``) greedily with and without the adapter.

    ``base_dir`` is a checkpoint folder (``config.json`` + tokenizer), ``adapter_dir`` a
    ``peft`` adapter folder. Runs in float32 on CPU. Raises ``FileNotFoundError`` /
    ``ValueError`` from ``transformers``/``peft`` for unusable folders.
    """
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base_dir)
    rendered = tok.apply_chat_template(
        [m.model_dump() for m in messages], tokenize=False, add_generation_prompt=True
    )
    text = str(rendered) + (prefill or "")
    ids = tok(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    model.eval()
    tuned = PeftModel.from_pretrained(model, str(adapter_dir))
    tuned.eval()
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    kwargs = {"do_sample": False, "max_new_tokens": max_new_tokens, "pad_token_id": pad}
    with torch.no_grad():
        with tuned.disable_adapter():
            base_logits = tuned(ids).logits[0, -1]
            base_out = tuned.generate(ids, **kwargs)[0, ids.shape[1] :]
        tuned_logits = tuned(ids).logits[0, -1]
        tuned_out = tuned.generate(ids, **kwargs)[0, ids.shape[1] :]
    a, b = base_out.tolist(), tuned_out.tolist()
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    if first is None and len(a) != len(b):
        first = min(len(a), len(b))
    return GreedyCheck(
        prompt_source=prompt_source,
        max_new_tokens=max_new_tokens,
        base_text=tok.decode(a, skip_special_tokens=False),
        tuned_text=tok.decode(b, skip_special_tokens=False),
        changed=a != b,
        first_difference=first,
        max_abs_logit_diff=float((tuned_logits - base_logits).abs().max()),
    )
