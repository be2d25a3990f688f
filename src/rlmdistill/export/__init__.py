"""Export stage: selected episodes' root turns -> a validated SFT dataset.

``export_dataset(episodes, out_dir, options)`` renders each episode's root turns exactly as
the root saw them (:mod:`.render`), tokenises each example with ONE full chat-template render
and builds assistant masks from character offsets (:mod:`.masks`), handles tool-call style
(:mod:`.tools`), a reasoning root's thoughts by policy, examples from recorded token ids,
and writes a ``datasets`` dataset with a card and ``export.json``
(:mod:`.dataset`). See ``docs/export.md``.
"""

from rlmdistill.export.dataset import (
    DroppedItem,
    EmptyExportError,
    ExportManifest,
    ExportReport,
    FilterTimeScores,
    LengthStats,
    export_dataset,
)
from rlmdistill.export.masks import (
    DefaultSystemPromptError,
    Encoded,
    ReasoningTemplateError,
    TemplateError,
    TemplateInfo,
    encode_conversation,
    load_tokenizer,
    probe_template,
)
from rlmdistill.export.options import ExportOptions, ReasoningPolicy, SystemPromptChoice
from rlmdistill.export.render import Conversation, RenderFailure, render_episode
from rlmdistill.export.tools import REPL_TOOL, ToolCallError, load_messages, normalize_tool_calls

__all__ = [
    "REPL_TOOL",
    "Conversation",
    "DefaultSystemPromptError",
    "DroppedItem",
    "EmptyExportError",
    "Encoded",
    "ExportManifest",
    "ExportOptions",
    "ExportReport",
    "FilterTimeScores",
    "LengthStats",
    "ReasoningPolicy",
    "ReasoningTemplateError",
    "RenderFailure",
    "SystemPromptChoice",
    "TemplateError",
    "TemplateInfo",
    "ToolCallError",
    "encode_conversation",
    "export_dataset",
    "load_messages",
    "load_tokenizer",
    "normalize_tool_calls",
    "probe_template",
    "render_episode",
]
