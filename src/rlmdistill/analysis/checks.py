"""Sections a caller hands to the report, computed outside the analysis stage.

The loop checks that an adapter changes what the root does (``rlmdistill.loop.adapter_check``:
greedy decoding of the same prompt with the base model and with the adapter) and hands the
result to :func:`~rlmdistill.analysis.compare.build_report` (``ReportConfig.adapter_checks``)
as an :class:`AdapterCheck`; it is stored in ``report.json``'s ``adapter_checks`` and
``report.md`` renders it from there, like every other section.

Only pydantic here, so :mod:`rlmdistill.analysis.main` can name the type without importing
scipy or matplotlib.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["AdapterCheck"]


class AdapterCheck(BaseModel):
    """Does the adapter change the root? Greedy decoding of one prompt, base vs base + adapter.

    Fields (as ``rlmdistill.loop.adapter_check.GreedyCheck`` measures them, plus the adapter):
        adapter: the adapter folder as the caller names it (the loop: relative to its workspace).
        prompt_source: where the prompt came from (episode id, run, room).
        max_new_tokens: tokens decoded greedily with each model.
        changed: the greedy token ids differ.
        first_difference: index of the first differing generated token (``None``: identical).
        max_abs_logit_diff: max |logits_tuned - logits_base| over the vocabulary at the first
            generated position (logit units).
        base_text, tuned_text: the decoded outputs (``report.md`` shows their first 300
            characters).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    adapter: str
    prompt_source: str
    max_new_tokens: int
    changed: bool
    first_difference: int | None
    max_abs_logit_diff: float
    base_text: str
    tuned_text: str
