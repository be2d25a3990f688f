"""Export options: tokenizer, mode, style, system prompt, length policy, supervision."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

__all__ = [
    "ExportMode",
    "ExportOptions",
    "ExportOptionsError",
    "ExportStyle",
    "ReasoningPolicy",
    "SystemPromptChoice",
    "TruncatedTurns",
    "Truncation",
    "build_export_options",
]

ExportMode = Literal["trajectory", "turn"]
"""``trajectory``: one example per episode, every root turn supervised; ``turn``: one
example per root turn (prompt = history as seen, completion = that turn)."""
ExportStyle = Literal["plain", "tools"]
"""``plain``: assistant = the reply text, REPL output = user messages (as the root saw them);
``tools``: ```` ```repl ```` blocks become ``repl`` tool calls, REPL output tool messages."""
Truncation = Literal["drop", "keep_start"]
"""Over ``max_length``: ``drop`` the example, or ``keep_start``: keep the system prompt, worked
example and task, and drop the earliest whole turns until it fits (counted). The last
assistant turn is never cut; tokens are never cut mid-conversation."""

TruncatedTurns = Literal["keep", "mask", "drop"]
"""Root turns whose reply ``max_tokens`` cut (recorded ``finish_reason == "length"``):
``keep`` them as any turn; ``mask``: never supervised (trajectory mode: the reply stays in
the context, unsupervised; turn mode: its example is dropped as ``truncated_turn``); ``drop``
the episode's examples (trajectory mode: the whole episode; turn mode: that turn's example),
reason ``truncated_turn``. Turns of traces without a finish reason count as not truncated."""


ReasoningPolicy = Literal["all", "last", "drop"]
"""What happens to a reasoning root's thoughts (see ``docs/export.md``): ``all`` keeps them in
every supervised reply (needs a template that renders earlier turns' reasoning, e.g. TRL's
``qwen3_training.jinja``/``glm4moe_training.jinja``); ``last`` keeps them in the last reply of
each example only (what Qwen3/GLM-4.5 inference templates do); ``drop`` trains on answers
only."""


class SystemPromptChoice(NamedTuple):
    """The resolved system prompt of an export."""

    source: str
    """``collected``, ``plain`` or the file path given."""
    text: str | None
    """Replacement system prompt text, or ``None`` to keep each episode's collected one."""
    keep_few_shot: bool
    """Whether the worked-example turns stay in the prompt (never supervised)."""

    @property
    def sha256(self) -> str | None:
        """sha256 (hex) of the replacement text, when there is one."""
        return None if self.text is None else hashlib.sha256(self.text.encode()).hexdigest()


class ExportOptions(BaseModel):
    """How root turns become an SFT dataset (recorded in ``export.json`` and the card)."""

    model_config = ConfigDict(extra="forbid")

    tokenizer: str = Field(
        description="Tokenizer directory, or an embedded model name pulled by "
        "`rlmdistill models pull` (never downloaded from a hub)."
    )
    chat_template: str | None = Field(
        None, description="Optional .jinja file replacing the tokenizer's chat template."
    )
    mode: ExportMode = Field(
        "trajectory",
        description="trajectory: one example per episode; turn: one example per root turn.",
    )
    style: ExportStyle = Field("plain", description="plain text, or REPL blocks as tool calls.")
    system_prompt: str = Field(
        "collected",
        description="collected: as the episodes were collected; plain: the collected system "
        "prompt without the worked example; or a file whose text replaces the system prompt "
        "(worked example dropped). Context distillation.",
    )
    keep_few_shot: bool | None = Field(
        None,
        description="Keep the worked-example turns (unsupervised context). Default: keep only "
        "with system_prompt=collected.",
    )
    max_length: int = Field(8192, ge=8, description="Most tokens per example.")
    truncation: Truncation = Field("drop", description="Policy for examples over max_length.")
    supervise_prefill: bool = Field(
        True, description="Train on the reply prefill as part of the assistant turn."
    )
    min_supervised_tokens: int = Field(
        1,
        ge=1,
        description="Drop examples with fewer supervised tokens (a row with none would average a loss over zero tokens).",
    )
    default_system: Literal["refuse", "allow"] = Field(
        "refuse",
        description="When a conversation has no system message and the template injects a "
        "default one (Qwen, SmolLM2): refuse, or allow it (recorded).",
    )
    reasoning: ReasoningPolicy = Field(
        "last",
        description="Reasoning policy: all (every reply, via a training template), last "
        "(the last reply of each example), drop (answers only).",
    )
    from_ids: bool = Field(
        False,
        description="Turn mode: build each example from the recorded token ids (prompt + "
        "completion as the model saw and produced them) instead of a re-render; the "
        "re-render is compared and mismatches are counted in the report.",
    )
    truncated_turns: TruncatedTurns = Field(
        "keep",
        description="Root turns cut by max_tokens (finish_reason length): keep, mask (never "
        "supervised) or drop (the example holding one).",
    )
    end_of_turn_tokens: list[str] = Field(
        default_factory=list,
        description="Extra tokens that close an assistant turn (probed from the template "
        "and eos otherwise).",
    )

    @model_validator(mode="after")
    def _check(self) -> ExportOptions:
        if self.style == "tools" and not self.supervise_prefill:
            raise ValueError(
                "supervise_prefill=False needs style='plain': in tool style the prefilled "
                "fence becomes part of the tool call"
            )
        if (
            self.system_prompt not in ("collected", "plain")
            and not Path(self.system_prompt).is_file()
        ):
            raise ValueError(
                f"system_prompt must be 'collected', 'plain' or a text file; "
                f"{self.system_prompt!r} is not a file"
            )
        if self.from_ids and self.mode != "turn":
            raise ValueError(
                "from_ids=True needs mode='turn': a trajectory's recorded prompts drop earlier "
                "reasoning, so one id sequence cannot hold every reply as produced"
            )
        if self.from_ids and self.style != "plain":
            raise ValueError("from_ids=True needs style='plain' (ids are the text as produced)")
        if self.chat_template is not None and not Path(self.chat_template).is_file():
            raise ValueError(f"chat_template {self.chat_template!r} is not a file")
        return self

    def system_prompt_choice(self) -> SystemPromptChoice:
        """Resolve :attr:`system_prompt` (reads the file) and the few-shot policy."""
        if self.system_prompt == "collected":
            keep = True if self.keep_few_shot is None else self.keep_few_shot
            return SystemPromptChoice("collected", None, keep)
        keep = False if self.keep_few_shot is None else self.keep_few_shot
        if self.system_prompt == "plain":
            return SystemPromptChoice("plain", None, keep)
        text = Path(self.system_prompt).read_text(encoding="utf-8")
        return SystemPromptChoice(self.system_prompt, text, keep)


class ExportOptionsError(ValueError):
    """Export options that do not validate; the message names every bad field."""


def build_export_options(**values: Any) -> ExportOptions:
    """An :class:`ExportOptions` from the given fields, ``None`` values left at their
    defaults (what a command's unset flags give). Raises :class:`ExportOptionsError`
    (``invalid export options: FIELD: problem; ...``) when the options are invalid."""
    data = {k: v for k, v in values.items() if v is not None}
    try:
        return ExportOptions.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(options)'}: {e['msg']}" for e in exc.errors()
        )
        raise ExportOptionsError(f"invalid export options: {problems}") from exc
