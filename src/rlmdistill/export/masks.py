"""Token ids and assistant masks from ONE full render of a conversation.

How a conversation becomes a training example:

1. ``tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)`` renders the whole
   conversation once; the text is tokenised once with character offsets
   (``add_special_tokens=False``: the template already holds any BOS). These ids are exactly
   ``apply_chat_template(messages, tokenize=True)`` (S7): nothing is rendered turn by turn.
2. Each message is located in the rendered text in order: an assistant turn starts after the
   template's assistant header (the text ``add_generation_prompt=True`` adds, e.g. ChatML
   ``<|im_start|>assistant\\n``, GLM-4 ``<|assistant|>``), its content is found verbatim (or
   stripped, as GLM-4 renders it), and it ends with the first end-of-turn token after the
   content (S3). Tokens overlapping ``[start, end)`` in characters are supervised. No
   ``{% generation %}`` markers are needed (S1); templates with them give the same mask.
3. End-of-turn tokens are learnt from the template itself by a probe render
   (``[user, assistant, user]`` and a tool-call probe): the first special token after the
   assistant content is the turn closer (ChatML ``<|im_end|>``; GLM-4 closes a turn with the
   next role marker ``<|user|>`` / ``<|observation|>``). When the template renders nothing
   after the LAST assistant turn (GLM-4), that closer is appended to the ids and supervised,
   so the tuned root learns to stop; the manifest records it.
4. A template that injects a default system prompt when the conversation has none (Qwen2.5:
   "You are Qwen...", SmolLM2: "You are a helpful AI assistant named SmolLM...") is detected
   and refused unless explicitly allowed (S7: never injected silently).

Sources: Hugging Face chat templates (``transformers`` docs, "Chat templates" and
``return_assistant_tokens_mask``); TRL ``SFTTrainer`` assistant-only loss, which reads
``assistant_masks``; GLM-4 stop tokens ``<|user|>``/``<|observation|>`` as in TRL's
``glm4moe_training.jinja``.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np

__all__ = [
    "ConversationInput",
    "DefaultSystemPromptError",
    "Encoded",
    "PromptCut",
    "ReasoningTemplateError",
    "TemplateError",
    "TemplateInfo",
    "Tokens",
    "TurnPromptCutter",
    "check_turn_prompt",
    "clear_tokenizer_cache",
    "encode_conversation",
    "encode_conversations",
    "finish_conversations",
    "first_difference",
    "load_tokenizer",
    "probe_template",
    "render_conversations",
    "tokenize_batch",
    "turn_prompt_text",
]

_PROBE_USER = "Probe user message 7Q2."
_PROBE_ASSISTANT = "Probe assistant reply 9K4."
_PROBE_TOOL = "Probe tool output 3W8."
_PROBE_TOOL_CALL = {
    "id": "call_probe",
    "type": "function",
    "function": {"name": "probe_tool", "arguments": {"code": "x = 1"}},
}
_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "probe_tool",
            "description": "probe",
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string"}},
                "required": ["code"],
            },
        },
    }
]


class TemplateError(ValueError):
    """The chat template cannot give correct masks for a conversation (names the message)."""


class DefaultSystemPromptError(TemplateError):
    """The template injects a default system prompt into a conversation without one (S7)."""


class ReasoningTemplateError(TemplateError):
    """The reasoning policy needs the template to render reasoning, and it does not (a
    setting problem: the export stops instead of dropping every example)."""


def first_difference(expected: str, rendered: str, context: int = 40) -> str:
    """Where two texts first differ: ``"at char N: expected '...' rendered '...'"`` with up
    to ``context`` characters of each from that point (``repr``-quoted); ``"equal"``."""
    n = min(len(expected), len(rendered))
    i = next((k for k in range(n) if expected[k] != rendered[k]), n)
    if i == len(expected) == len(rendered):
        return "equal"
    return (
        f"at char {i}: expected {expected[i : i + context]!r} "
        f"rendered {rendered[i : i + context]!r}"
    )


def _best_match(text: str, content: str, cursor: int) -> str:
    """For content not found verbatim: the longest prefix of ``content`` found in ``text``
    after ``cursor``, and where the two part from there."""
    lo, hi = 0, len(content)  # content[:lo] is found; content[:hi + 1] is not
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if text.find(content[:mid], cursor) >= 0:
            lo = mid
        else:
            hi = mid - 1
    at = text.find(content[:lo], cursor) if lo else cursor
    return first_difference(content, text[at : at + len(content) + 40])


class Encoded(NamedTuple):
    """One encoded conversation.

    ``input_ids`` and ``assistant_masks`` have the same length; ``assistant_masks[i] == 1``
    on every supervised token (content of each supervised assistant turn and its end-of-turn
    token). ``appended_closer`` is True when the end-of-turn token of the last assistant turn
    was appended after the render (the template renders none, e.g. GLM-4).
    """

    input_ids: list[int]
    assistant_masks: list[int]
    appended_closer: bool
    text: str
    """The one full render (without any appended closer)."""


@dataclass(frozen=True)
class TemplateInfo:
    """What the export learnt about a tokenizer's chat template from probe renders."""

    template_sha256: str
    """sha256 (hex) of the chat template text."""
    assistant_header: str
    """Text ``add_generation_prompt=True`` adds: where an assistant turn starts."""
    eot_ids: frozenset[int]
    """Token ids that may close an assistant turn (probe closers, eos, extra tokens)."""
    closer_id: int
    """Token that closes a plain assistant turn in the template (ChatML ``<|im_end|>``)."""
    tool_closer_id: int | None
    """Token that closes an assistant turn with tool calls (GLM-4 ``<|observation|>``);
    ``None`` when the template does not render tool calls."""
    default_system: str | None
    """Text the template injects when there is no system message, or ``None``."""
    generation_markers: bool
    """Whether the template has ``{% generation %}`` blocks (not needed, recorded)."""

    def token_names(self, tokenizer: Any) -> dict[str, Any]:
        """Readable summary for manifests: closers and end-of-turn tokens as strings."""
        conv = tokenizer.convert_ids_to_tokens
        return {
            "closer": conv(self.closer_id),
            "tool_closer": None if self.tool_closer_id is None else conv(self.tool_closer_id),
            "end_of_turn": sorted(conv(i) for i in self.eot_ids),
        }


_TOKENIZER_CACHE: OrderedDict[tuple[str, str, str | None], tuple[Any, int, str]] = OrderedDict()
"""(directory, files sha256, template override) -> (tokenizer, vocabulary size, template)."""
_TOKENIZER_CACHE_SIZE = 4
_TOKENIZER_LOCK = threading.Lock()
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".onnx", ".h5", ".msgpack")


def _tokenizer_files_sha256(directory: Path) -> str:
    """sha256 over the names and bytes of the files a tokenizer may be loaded from: every
    regular file of ``directory`` (and ``additional_chat_templates/``) but model weights."""
    h = hashlib.sha256()
    extra = directory / "additional_chat_templates"
    files = [*directory.iterdir(), *(extra.iterdir() if extra.is_dir() else [])]
    for f in sorted(files):
        if f.is_file() and not f.name.endswith(_WEIGHT_SUFFIXES):
            h.update(f"{f.relative_to(directory)}\0{f.stat().st_size}\0".encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def clear_tokenizer_cache() -> None:
    """Forget every tokenizer :func:`load_tokenizer` has cached."""
    with _TOKENIZER_LOCK:
        _TOKENIZER_CACHE.clear()


def load_tokenizer(
    spec: str, chat_template: str | Path | None = None, *, cache: bool = True
) -> tuple[Any, Path]:
    """Load a tokenizer from a local directory or a pulled embedded model name (never a hub).

    ``spec``: a directory holding ``tokenizer.json``/``tokenizer_config.json``, or the name of
    an embedded model pulled by ``rlmdistill models pull`` (see
    :mod:`rlmdistill.models.registry`). ``chat_template``: optional ``.jinja`` file that
    replaces the tokenizer's template. Returns ``(tokenizer, directory)``.

    Loaded once per process: the tokenizer is cached (the last 4) under its resolved
    directory, the sha256 of its files (every file but weights, see
    :func:`_tokenizer_files_sha256`) and the chat template text, so an edited tokenizer or
    template is loaded afresh. The cached object is shared: callers must not change it; one
    whose chat template or vocabulary size was changed all the same is detected and
    reloaded. ``cache=False`` always loads a private copy.

    Raises ``FileNotFoundError`` naming the spec when it is neither, or when the embedded
    model is not pulled; :class:`TemplateError` when the tokenizer has no chat template or is
    not a fast tokenizer (offsets are needed).
    """
    from rlmdistill.models.pull import resolve_local
    from rlmdistill.models.registry import EMBEDDED_MODELS

    if spec in EMBEDDED_MODELS:
        directory = resolve_local(spec)
    else:
        directory = Path(spec).expanduser()
        if not directory.is_dir() or not any(
            (directory / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")
        ):
            known = ", ".join(sorted(EMBEDDED_MODELS))
            raise FileNotFoundError(
                f"tokenizer {spec!r}: not a directory with tokenizer.json/tokenizer_config.json "
                f"nor an embedded model name ({known})"
            )
    template = (
        Path(chat_template).read_text(encoding="utf-8") if chat_template is not None else None
    )
    if not cache:
        return _load_checked(spec, directory, template), directory
    key = (str(directory.resolve()), _tokenizer_files_sha256(directory), template)
    with _TOKENIZER_LOCK:
        hit = _TOKENIZER_CACHE.get(key)
        if hit is not None:
            tokenizer, n_vocab, loaded_template = hit
            if len(tokenizer) == n_vocab and tokenizer.chat_template == loaded_template:
                _TOKENIZER_CACHE.move_to_end(key)
                return tokenizer, directory
            del _TOKENIZER_CACHE[key]
    tokenizer = _load_checked(spec, directory, template)
    with _TOKENIZER_LOCK:
        _TOKENIZER_CACHE[key] = (tokenizer, len(tokenizer), tokenizer.chat_template)
        while len(_TOKENIZER_CACHE) > _TOKENIZER_CACHE_SIZE:
            _TOKENIZER_CACHE.popitem(last=False)
    return tokenizer, directory


def _load_checked(spec: str, directory: Path, template: str | None) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    if template is not None:
        tokenizer.chat_template = template
    if not getattr(tokenizer, "chat_template", None):
        raise TemplateError(f"tokenizer {spec!r} has no chat template; pass chat_template=FILE")
    if not getattr(tokenizer, "is_fast", False):
        raise TemplateError(f"tokenizer {spec!r} is not a fast tokenizer: offsets are needed")
    return tokenizer


def _render(tokenizer: Any, messages: Sequence[dict[str, Any]], **kw: Any) -> str:
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, **kw)
    if not isinstance(text, str):
        raise TemplateError(f"apply_chat_template returned {type(text).__name__}, not text")
    return text


def _special_ids(tokenizer: Any) -> set[int]:
    return {i for i, tok in tokenizer.added_tokens_decoder.items() if tok.special}


def _first_special_after(tokenizer: Any, text: str, char_pos: int, special: set[int]) -> int | None:
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    for tid, (s, _e) in zip(enc["input_ids"], enc["offset_mapping"], strict=True):
        if s >= char_pos and tid in special:
            return int(tid)
    return None


def _eos_ids(tokenizer: Any, directory: Path | None) -> set[int]:
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen = directory / "generation_config.json" if directory is not None else None
    if gen is not None and gen.is_file():
        value = json.loads(gen.read_text(encoding="utf-8")).get("eos_token_id")
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, int):
                ids.add(v)
    return ids


def probe_template(
    tokenizer: Any,
    directory: Path | None = None,
    extra_end_of_turn: Sequence[str] = (),
) -> TemplateInfo:
    """Learn the assistant header, turn closers and default-system behaviour of a template.

    Renders small probe conversations (a few milliseconds). ``directory``: where to read
    ``generation_config.json`` eos ids from. ``extra_end_of_turn``: more token strings that
    close a turn. Raises :class:`TemplateError` when the template has no generation prompt
    or closes an assistant turn with no special token (masks could not end correctly).
    """
    template = tokenizer.chat_template
    sha = hashlib.sha256(template.encode("utf-8")).hexdigest()
    special = _special_ids(tokenizer)
    user = [{"role": "user", "content": _PROBE_USER}]
    bare = _render(tokenizer, user)
    with_prompt = _render(tokenizer, user, add_generation_prompt=True)
    if not with_prompt.startswith(bare) or len(with_prompt) == len(bare):
        raise TemplateError("chat template adds no assistant header with add_generation_prompt")
    header = with_prompt[len(bare) :]

    plain = _render(
        tokenizer,
        [*user, {"role": "assistant", "content": _PROBE_ASSISTANT}, *user],
    )
    pos = plain.find(_PROBE_ASSISTANT)
    closer = _first_special_after(tokenizer, plain, pos + len(_PROBE_ASSISTANT), special)
    if pos < 0 or closer is None:
        raise TemplateError(
            "chat template closes an assistant turn with no special token: the end-of-turn "
            "token cannot be supervised"
        )
    tool_closer: int | None = None
    try:
        tool_text = _render(
            tokenizer,
            [
                *user,
                {"role": "assistant", "content": "", "tool_calls": [_PROBE_TOOL_CALL]},
                {"role": "tool", "tool_call_id": "call_probe", "content": _PROBE_TOOL},
            ],
            tools=_PROBE_TOOLS,
        )
        call_at = tool_text.find("probe_tool", tool_text.find(_PROBE_USER))
        if call_at >= 0:
            tool_closer = _first_special_after(tokenizer, tool_text, call_at, special)
    except Exception:  # a template without tool support is fine for plain style
        tool_closer = None

    eot = {closer} | _eos_ids(tokenizer, directory)
    if tool_closer is not None:
        eot.add(tool_closer)
    for tok in extra_end_of_turn:
        tid = tokenizer.convert_tokens_to_ids(tok)
        if tid is None or tid == tokenizer.unk_token_id:
            raise TemplateError(f"end-of-turn token {tok!r} is not in the tokenizer's vocabulary")
        eot.add(int(tid))

    return TemplateInfo(
        template_sha256=sha,
        assistant_header=header,
        eot_ids=frozenset(eot),
        closer_id=closer,
        tool_closer_id=tool_closer,
        default_system=_default_system(tokenizer, bare),
        generation_markers="{% generation %}" in template or "{%- generation %}" in template,
    )


def _default_system(tokenizer: Any, bare: str) -> str | None:
    """Text the template adds before a lone user message, beyond special tokens and role
    names; ``None`` when it adds nothing (no default system prompt)."""
    prefix = bare[: bare.find(_PROBE_USER)]
    for tok in sorted(
        (t.content for t in tokenizer.added_tokens_decoder.values()), key=len, reverse=True
    ):
        prefix = prefix.replace(tok, " ")
    words = [w for w in prefix.split() if w.lower() not in {"system", "user"}]
    return " ".join(words) or None


class _Located(NamedTuple):
    header_end: int
    """Character where the assistant turn starts (after its header); -1 for other roles."""
    start: int
    """Content start in the render (== end when the content is empty or not rendered)."""
    end: int
    lead_stripped: int
    """Leading characters of the content the template dropped (GLM-4 strips content)."""


def _locate(
    text: str,
    messages: Sequence[dict[str, Any]],
    header: str,
    eot_strings: Sequence[str],
    where: str,
) -> list[_Located]:
    """Each message's place in the render, found in order. After an assistant turn the
    search resumes past its first end-of-turn token, so text of its tool calls is never
    mistaken for the next message's content."""
    cursor = 0
    out: list[_Located] = []
    for i, msg in enumerate(messages):
        header_end = -1
        if msg["role"] == "assistant":
            h = text.find(header, cursor)
            if h < 0:
                h_stripped = text.find(header.rstrip(), cursor)
                if h_stripped < 0:
                    raise TemplateError(f"{where}: message {i}: assistant header not in render")
                header_end = h_stripped + len(header.rstrip())
            else:
                header_end = h + len(header)
            cursor = header_end
        content = msg.get("content") or ""
        lead = 0
        if content and content.strip():
            p = text.find(content, cursor)
            found = content
            if p < 0:
                found = content.strip()
                lead = len(content) - len(content.lstrip())
                p = text.find(found, cursor)
            if p < 0:
                raise TemplateError(
                    f"{where}: message {i} ({msg['role']}): content not found verbatim in the "
                    f"rendered conversation (template rewrites it); "
                    f"{_best_match(text, content, cursor)}"
                )
            out.append(_Located(header_end, p, p + len(found), lead))
            cursor = p + len(found)
        else:
            out.append(_Located(header_end, cursor, cursor, 0))
        if msg["role"] == "assistant":
            ends = [(q, len(e)) for e in eot_strings if (q := text.find(e, cursor)) >= 0]
            if ends:
                q, n = min(ends)
                cursor = q + n
    return out


class ConversationInput(NamedTuple):
    """One conversation to encode (the arguments of :func:`encode_conversation`)."""

    messages: Sequence[dict[str, Any]]
    supervised: Sequence[bool]
    tools: list[dict[str, Any]] | None = None
    prefill_chars: Sequence[int] | None = None
    where: str = "conversation"
    trim_tail: bool = False


def _render_checked(
    tokenizer: Any,
    info: TemplateInfo,
    conv: ConversationInput,
    default_system: Literal["refuse", "allow"],
) -> str:
    """The one full render of ``conv`` after the checks that need no tokens."""
    messages, supervised, where = conv.messages, conv.supervised, conv.where
    if len(supervised) != len(messages):
        raise ValueError(f"{where}: supervised has {len(supervised)} flags for {len(messages)}")
    if not any(supervised):
        raise TemplateError(f"{where}: no assistant message is supervised")
    if (
        info.default_system is not None
        and default_system == "refuse"
        and not (messages and messages[0]["role"] == "system")
    ):
        raise DefaultSystemPromptError(
            f"{where}: no system message, and the chat template would inject its default "
            f"system prompt ({info.default_system[:60]!r}...); add a system prompt or allow it"
        )
    kw: dict[str, Any] = {"tools": conv.tools} if conv.tools else {}
    return _render(tokenizer, messages, **kw)


class Tokens(NamedTuple):
    """A text's tokens as the tokenizer gives them: ``ids`` and the character ``offsets``
    (``(start, end)`` of each token in the text, end exclusive), both of length n."""

    ids: list[int]
    offsets: list[tuple[int, int]]


def _backend_as_called(tokenizer: Any) -> Any | None:
    """The Rust tokenizer when calling it directly gives what ``tokenizer(texts,
    add_special_tokens=False, return_offsets_mapping=True)`` gives, else ``None``.

    ``transformers`` (``TokenizersBackend._encode_plus``) calls
    ``backend.encode_batch(texts, add_special_tokens=...)`` and copies ``ids`` and ``offsets``
    of each encoding, after switching off any truncation or padding and setting
    ``encode_special_tokens`` to ``split_special_tokens``; when the backend is already in that
    state the direct call is the same call without the conversion of every encoding to
    Python lists of attention masks and type ids."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "encode_batch"):
        return None
    split = getattr(tokenizer, "split_special_tokens", False)
    if backend.truncation is not None or backend.padding is not None:
        return None
    if getattr(backend, "encode_special_tokens", False) != bool(split):
        return None
    return backend


def tokenize_batch(tokenizer: Any, texts: Sequence[str]) -> list[Tokens]:
    """Tokenise ``texts`` in ONE call of the fast tokenizer (``add_special_tokens=False``,
    with offsets): the same ids and offsets as ``tokenizer(text, add_special_tokens=False,
    return_offsets_mapping=True)`` for each text, with the per-call cost paid once and the
    texts encoded in parallel by the Rust backend (``encode_batch``, which releases the GIL).
    The backend is called directly when that is the same call (:func:`_backend_as_called`)."""
    if not texts:
        return []
    backend = _backend_as_called(tokenizer)
    if backend is not None:
        encs = backend.encode_batch(list(texts), add_special_tokens=False)
        return [Tokens(e.ids, e.offsets) for e in encs]
    enc = tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=True)
    return [
        Tokens(list(ids), [tuple(o) for o in offs])  # type: ignore[misc]
        for ids, offs in zip(enc["input_ids"], enc["offset_mapping"], strict=True)
    ]


def _eot_strings(tokenizer: Any, info: TemplateInfo) -> list[str]:
    return [t for t in tokenizer.convert_ids_to_tokens(sorted(info.eot_ids)) if t]


class _Span(NamedTuple):
    """Where a supervised assistant turn's tokens start (chars) and where its end-of-turn
    token is searched from, and the last character before the next message."""

    message: int
    span_start: int
    after: int
    boundary: int
    closer: int


def _spans(
    info: TemplateInfo, conv: ConversationInput, located: list[_Located], n_chars: int
) -> Iterator[_Span]:
    """The supervised assistant turns in order; lazily, so an error about message ``i`` comes
    after the marks of the turns before it (the order of the token loop)."""
    messages, where = conv.messages, conv.where
    for i, (msg, sup) in enumerate(zip(messages, conv.supervised, strict=True)):
        if not sup:
            continue
        if msg["role"] != "assistant":
            raise ValueError(f"{where}: message {i} is {msg['role']!r}, only assistant is trained")
        loc = located[i]
        pre = conv.prefill_chars
        if pre is not None and pre[i] > 0 and loc.end > loc.start:
            span_start = loc.start + max(0, pre[i] - loc.lead_stripped)
        else:
            span_start = loc.header_end
        after = loc.end if loc.end > loc.start else loc.header_end
        boundary = n_chars
        if i + 1 < len(messages):
            nxt = located[i + 1]
            boundary = nxt.start if nxt.header_end < 0 else nxt.header_end
        closer = info.tool_closer_id if msg.get("tool_calls") else info.closer_id
        yield _Span(i, span_start, after, boundary, info.closer_id if closer is None else closer)


def _no_closer(conv: ConversationInput, i: int) -> TemplateError:
    return TemplateError(
        f"{conv.where}: message {i}: no end-of-turn token closes this assistant turn "
        "before the next message"
    )


def _mask_scalar(
    info: TemplateInfo,
    conv: ConversationInput,
    spans: Iterator[_Span],
    n_chars: int,
    tokens: Tokens,
) -> tuple[list[int], list[int], bool]:
    """Token by token, as the export did before :func:`_mask_windows` (kept as its
    reference): ``(ids, mask, appended)``."""
    ids = [int(t) for t in tokens.ids]
    offsets = [(int(a), int(b)) for a, b in tokens.offsets]
    starts = [a for a, _ in offsets]
    mask = [0] * len(ids)
    appended = False
    for sp in spans:
        span_end = -1
        for k in range(bisect.bisect_left(starts, sp.after), len(starts)):
            if ids[k] in info.eot_ids:
                if starts[k] < sp.boundary:
                    span_end = offsets[k][1]
                break
        if span_end < 0:
            if sp.message + 1 < len(conv.messages):
                raise _no_closer(conv, sp.message)
            ids.append(sp.closer)
            mask.append(1)
            appended = True
            span_end = n_chars
        # tokens overlapping [span_start, span_end)
        k = max(0, bisect.bisect_left(starts, sp.span_start) - 1)
        while k < len(starts) and starts[k] < span_end:
            s, e = offsets[k]
            if e > sp.span_start and e > s:
                mask[k] = 1
            k += 1
    return ids, mask, appended


def _start(offset: tuple[int, int]) -> int:
    return offset[0]


def _mask_windows(
    info: TemplateInfo,
    conv: ConversationInput,
    spans: Iterator[_Span],
    n_chars: int,
    tokens: Tokens,
) -> tuple[list[int], list[int], bool]:
    """:func:`_mask_scalar` without a pass over every token in Python: the end-of-turn
    tokens are found with numpy, token positions by binary search over the offsets (the
    same searches, so the same result in any order), and each supervised window
    ``[lo, hi)`` is marked with one numpy comparison. ``hi`` is taken from a binary search
    only when the window proves it is where the token loop stops (every start in it below
    the span's end, the next one not); otherwise the window is walked as the loop walks it.
    """
    ids, offsets = tokens.ids, tokens.offsets
    n = len(offsets)
    eot_at = np.flatnonzero(
        np.isin(np.asarray(ids, dtype=np.int64), np.fromiter(info.eot_ids, dtype=np.int64))
    )
    mask = np.zeros(n, dtype=np.int8)
    extra: list[int] = []
    for sp in spans:
        span_end = -1
        k0 = bisect.bisect_left(offsets, sp.after, key=_start)
        j = int(np.searchsorted(eot_at, k0, "left"))
        if j < len(eot_at) and offsets[eot_at[j]][0] < sp.boundary:
            span_end = offsets[eot_at[j]][1]
        if span_end < 0:
            if sp.message + 1 < len(conv.messages):
                raise _no_closer(conv, sp.message)
            extra.append(sp.closer)
            span_end = n_chars
        lo = max(0, bisect.bisect_left(offsets, sp.span_start, key=_start) - 1)
        hi = max(lo, bisect.bisect_left(offsets, span_end, lo=lo, key=_start))
        win = np.asarray(offsets[lo:hi], dtype=np.int64).reshape(-1, 2)
        if not (bool(np.all(win[:, 0] < span_end)) and (hi == n or offsets[hi][0] >= span_end)):
            hi = lo  # offsets out of order here: walk as the loop does
            while hi < n and offsets[hi][0] < span_end:
                hi += 1
            win = np.asarray(offsets[lo:hi], dtype=np.int64).reshape(-1, 2)
        mask[lo:hi] |= (win[:, 1] > sp.span_start) & (win[:, 1] > win[:, 0])
    return list(ids) + extra, mask.tolist() + [1] * len(extra), bool(extra)


def _masked(
    tokenizer: Any,
    info: TemplateInfo,
    conv: ConversationInput,
    text: str,
    tokens: Tokens,
    *,
    vectorised: bool = True,
) -> Encoded:
    """Locate the messages in ``text``, mark the supervised tokens, apply ``trim_tail``."""
    located = _locate(
        text, conv.messages, info.assistant_header, _eot_strings(tokenizer, info), conv.where
    )
    spans = _spans(info, conv, located, len(text))
    mark = _mask_windows if vectorised else _mask_scalar
    ids, mask, appended = mark(info, conv, spans, len(text), tokens)
    if not any(mask):
        raise TemplateError(f"{conv.where}: assistant mask sums to zero: nothing to supervise")
    if conv.trim_tail:
        last = len(mask) - 1 - mask[::-1].index(1)
        ids, mask = ids[: last + 1], mask[: last + 1]
    return Encoded(ids, mask, appended, text)


def encode_conversation(
    tokenizer: Any,
    info: TemplateInfo,
    messages: Sequence[dict[str, Any]],
    supervised: Sequence[bool],
    *,
    tools: list[dict[str, Any]] | None = None,
    prefill_chars: Sequence[int] | None = None,
    default_system: Literal["refuse", "allow"] = "refuse",
    where: str = "conversation",
    trim_tail: bool = False,
) -> Encoded:
    """Render ``messages`` once, tokenise once, and mark the supervised assistant tokens.

    ``supervised[i]`` says whether message ``i`` (an assistant message) is trained on;
    ``prefill_chars[i]`` characters at the start of its content are left unsupervised
    (a reply prefill when ``supervise_prefill`` is off; 0 by default). Tool-call arguments
    must already be mappings (see :func:`rlmdistill.export.tools.normalize_tool_calls`).
    ``where`` names the episode/example in errors. ``trim_tail`` drops the unsupervised
    tokens after the last supervised one (turn mode: the model never saw them then).
    :func:`encode_conversations` does the same for many conversations with one tokenizer
    call.

    Raises :class:`DefaultSystemPromptError` when there is no system message, the template
    injects one and ``default_system == "refuse"``; :class:`TemplateError` when a message or
    an end-of-turn token cannot be located, or when no token ends up supervised (S1, S2).
    """
    conv = ConversationInput(messages, supervised, tools, prefill_chars, where, trim_tail)
    text = _render_checked(tokenizer, info, conv, default_system)
    (tokens,) = tokenize_batch(tokenizer, [text])
    return _masked(tokenizer, info, conv, text, tokens)


def render_conversations(
    tokenizer: Any,
    info: TemplateInfo,
    convs: Sequence[ConversationInput],
    *,
    default_system: Literal["refuse", "allow"] = "refuse",
) -> list[str | Exception]:
    """The first stage of :func:`encode_conversations`: each conversation's one full render
    after the checks that need no tokens, or the exception that stopped it (returned)."""
    out: list[str | Exception] = []
    for conv in convs:
        try:
            out.append(_render_checked(tokenizer, info, conv, default_system))
        except Exception as exc:  # returned in its place, raised by the caller
            out.append(exc)
    return out


def finish_conversations(
    tokenizer: Any,
    info: TemplateInfo,
    convs: Sequence[ConversationInput],
    rendered: Sequence[str | Exception],
    tokens: Sequence[Tokens],
) -> list[Encoded | Exception]:
    """The last stage of :func:`encode_conversations`: masks from ``tokens``, the tokens of
    the rendered texts in order (those of :func:`render_conversations` that are ``str``)."""
    it = iter(tokens)
    out: list[Encoded | Exception] = []
    for conv, r in zip(convs, rendered, strict=True):
        if not isinstance(r, str):
            out.append(r)
            continue
        try:
            out.append(_masked(tokenizer, info, conv, r, next(it)))
        except Exception as exc:
            out.append(exc)
    return out


def encode_conversations(
    tokenizer: Any,
    info: TemplateInfo,
    convs: Sequence[ConversationInput],
    *,
    default_system: Literal["refuse", "allow"] = "refuse",
    extra_texts: Sequence[str] = (),
) -> tuple[list[Encoded | Exception], list[Tokens]]:
    """:func:`encode_conversation` of each of ``convs``, with ONE tokenizer call for all.

    Returns ``(results, extra)``: ``results[i]`` is the :class:`Encoded` of ``convs[i]``, or
    the exception :func:`encode_conversation` would have raised for it (returned, not
    raised, so one bad conversation does not stop the batch; the caller raises or counts
    it); ``extra`` the tokens of ``extra_texts``, tokenised in the same call (e.g. the turn
    prompts of :func:`check_turn_prompt`). Ids and masks equal the unbatched ones exactly.
    The stages (:func:`render_conversations`, :func:`tokenize_batch`,
    :func:`finish_conversations`) may also be run apart, e.g. to tokenise one batch in a
    thread while the next is rendered.
    """
    rendered = render_conversations(tokenizer, info, convs, default_system=default_system)
    texts = [r for r in rendered if isinstance(r, str)]
    tokens = tokenize_batch(tokenizer, [*texts, *extra_texts])
    out = finish_conversations(tokenizer, info, convs, rendered, tokens[: len(texts)])
    return out, tokens[len(texts) :]


def turn_prompt_text(
    tokenizer: Any, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None = None
) -> str:
    """The prompt a turn-mode example's model saw: ``render(messages[:-1],
    add_generation_prompt=True)`` (the reply prefill not included)."""
    kw: dict[str, Any] = {"tools": tools} if tools else {}
    return _render(tokenizer, messages[:-1], add_generation_prompt=True, **kw)


class PromptCut(NamedTuple):
    """Where a turn prompt's tokenisation may start: ``tail`` (the prompt from character
    ``start`` on) is what is tokenised; ``token_id`` is the added token the tail starts
    with, or -1 when the tail is the whole prompt (no cut)."""

    start: int
    token_id: int
    tail: str


class TurnPromptCutter:
    """The ids of a turn prompt from the example's own tokens and a short tail, exactly.

    A turn-mode example's text ``T`` is the prompt the model saw, ``P`` (prompt + prefill),
    followed by the reply. ``ids(P)`` is needed for :func:`check_turn_prompt`; tokenising
    ``P`` in full costs nearly a second tokenisation of the example. Instead ``P`` is cut at
    its last *cut token* ``c`` (at characters ``[a, a + len(c))``), only ``P[a:]`` is
    tokenised, and ``ids(P) = ids(T)[:k] + ids(P[a:])`` where token ``k`` of ``T`` is ``c`` at
    exactly those characters. The cut token starts the tail (so the text after it is not at
    the start of the input, as in ``P``: Metaspace ``prepend_scheme: first`` is keyed on
    that).

    Why this is exact (Hugging Face ``tokenizers``, ``AddedVocabulary``): the added tokens
    that are not normalised are found first in the raw text, by one Aho-Corasick scan with
    leftmost-longest matches; the text between them is then normalised, pre-tokenised and
    encoded piece by piece, each piece on its own. When ``P`` is a prefix of ``T``, every
    match the scan reports in ``T`` up to and including the one at ``a`` is reported in
    ``P`` too (an earlier or longer match in ``P`` would be one in ``T``), so ``P``'s pieces
    before ``a`` are ``T``'s and give ``T``'s ids; the scan of ``P`` from ``a`` on is the scan
    of ``P[a:]`` alone. This needs, and the cutter checks: a fast tokenizer whose special
    tokens are split (``split_special_tokens`` off), no added token with ``single_word``
    (a match the scan drops), a cut token not normalised, with neither ``lstrip`` nor
    ``rstrip`` and no whitespace at its ends, ``T`` starting with ``P``, and ``T``'s tokens
    holding the cut token's id at exactly ``[a, a + len(c))``. Otherwise (:meth:`cut` gives
    the whole prompt, or :meth:`prompt_ids` gives ``None``) the prompt is tokenised in full.

    Source: ``tokenizers`` ``src/tokenizer/added_vocabulary.rs`` (``find_matches``,
    ``extract_and_normalize``) and ``pre_tokenizers/metaspace.rs``.
    """

    def __init__(self, tokenizer: Any) -> None:
        backend = getattr(tokenizer, "backend_tokenizer", None)
        decoder = (
            backend.get_added_tokens_decoder()
            if backend is not None and hasattr(backend, "get_added_tokens_decoder")
            else getattr(tokenizer, "added_tokens_decoder", {})
        )
        self.cut_ids: dict[str, int] = {}
        """Content -> id of every token a prompt may be cut at (empty: never cut)."""
        usable = (
            backend is not None
            and not getattr(tokenizer, "split_special_tokens", False)
            and not any(getattr(t, "single_word", True) for t in decoder.values())
        )
        if usable:
            for tid, tok in decoder.items():
                content = str(tok.content)
                if (
                    content
                    and content == content.strip()
                    and not tok.normalized
                    and not tok.lstrip
                    and not tok.rstrip
                ):
                    self.cut_ids[content] = int(tid)
        self._length = {tid: len(content) for content, tid in self.cut_ids.items()}
        self._pattern = (
            re.compile("|".join(re.escape(c) for c in sorted(self.cut_ids, key=len, reverse=True)))
            if self.cut_ids
            else None
        )

    def cut(self, text: str, prompt: str) -> PromptCut:
        """Where to cut ``prompt`` (prompt + prefill), the start of the example ``text``:
        at the last occurrence of a cut token; the whole prompt when there is none or
        ``text`` does not start with ``prompt``. Only a proposal: :meth:`prompt_ids` checks
        it against the example's tokens."""
        if self._pattern is None or not text.startswith(prompt):
            return PromptCut(0, -1, prompt)
        n = len(prompt)
        window = 256
        while True:
            lo = max(0, n - window)
            last = None
            for last in self._pattern.finditer(prompt, lo):  # noqa: B007 (the last one)
                pass
            if last is not None:
                return PromptCut(last.start(), self.cut_ids[last.group()], prompt[last.start() :])
            if lo == 0:
                return PromptCut(0, -1, prompt)
            window *= 16

    def prompt_ids(
        self, cut: PromptCut, tokens: Tokens, tail_ids: Sequence[int]
    ) -> list[int] | None:
        """``ids(prompt)`` from the example's ``tokens`` (ids and offsets of the whole
        ``text``) and ``tail_ids`` (the ids of ``cut.tail``); ``None`` when the example's
        tokens do not hold the cut token at the cut (then tokenise the whole prompt)."""
        if cut.token_id < 0:
            return list(tail_ids)
        ids, offsets = tokens.ids, tokens.offsets
        k = bisect.bisect_left(offsets, cut.start, key=_start)
        end = cut.start + self._length[cut.token_id]
        if (
            k < len(ids)
            and ids[k] == cut.token_id
            and tuple(offsets[k]) == (cut.start, end)
            and len(tail_ids) > 0
            and tail_ids[0] == cut.token_id
        ):
            return [*ids[:k], *tail_ids]
        return None


def check_turn_prompt(
    tokenizer: Any,
    messages: Sequence[dict[str, Any]],
    enc: Encoded,
    *,
    tools: list[dict[str, Any]] | None = None,
    prefill: str = "",
    where: str = "conversation",
    seen: str | None = None,
    seen_ids: Sequence[int] | None = None,
) -> None:
    """Check that a turn-mode example is exactly prompt as seen + reply as produced.

    The prompt as the model saw it is ``render(messages[:-1], add_generation_prompt=True)``
    (+ ``prefill``, which the root was given): the full render must start with it, and the
    example's first ids must equal the tokenisation of that prompt + prefill (the prefill is
    supervised by default, yet was part of the prompt). ``seen`` (:func:`turn_prompt_text`)
    and ``seen_ids`` (the ids of ``seen + prefill``) may be given when computed in a batch.
    Raises :class:`TemplateError` naming where the texts or ids first differ.
    """
    if seen is None:
        seen = turn_prompt_text(tokenizer, messages, tools)
    if not enc.text.startswith(seen):
        raise TemplateError(
            f"{where}: the rendered example does not start with the prompt the model saw "
            f"(template is not prefix-preserving here); {first_difference(seen, enc.text)}"
        )
    if seen_ids is None:
        seen_ids = tokenize_batch(tokenizer, [seen + prefill])[0].ids
    seen_ids = list(seen_ids)
    got = enc.input_ids[: len(seen_ids)]
    if got != seen_ids:
        k = next((i for i, (a, b) in enumerate(zip(seen_ids, got, strict=False)) if a != b), None)
        k = min(len(seen_ids), len(got)) if k is None else k
        raise TemplateError(
            f"{where}: prompt ids differ from the prompt the model saw at token {k} "
            f"(tokenising the whole example merges across the reply boundary): "
            f"seen {tokenizer.decode(seen_ids[k : k + 8])!r} "
            f"example {tokenizer.decode(enc.input_ids[k : k + 8])!r}"
        )


def reasoning_support(tokenizer: Any) -> tuple[bool, bool]:
    """``(last, earlier)``: whether the template renders ``reasoning_content`` of the last
    assistant message, and of an earlier one (training templates do; inference ones drop it)."""
    r1, r2 = "Probe reasoning one 5T1.", "Probe reasoning two 8V6."
    conv = [
        {"role": "system", "content": "Probe system."},
        {"role": "user", "content": _PROBE_USER},
        {"role": "assistant", "content": _PROBE_ASSISTANT, "reasoning_content": r1},
        {"role": "user", "content": _PROBE_USER},
        {"role": "assistant", "content": _PROBE_ASSISTANT, "reasoning_content": r2},
    ]
    try:
        text = _render(tokenizer, conv)
    except Exception:
        return False, False
    return r2 in text, r1 in text
