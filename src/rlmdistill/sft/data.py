"""Load an exported SFT dataset and check it before any training step runs.

An exported dataset (``datasets/NAME/``, written by the export stage; format in
``docs/architecture.md``) holds pre-tokenised rows: ``input_ids`` from one full render of the
conversation with the chat template and ``assistant_masks`` (1 on every supervised
assistant turn's content and its end-of-turn token). This module checks, for a given
base tokenizer:

- the tokens mean the same thing to the base model: the chat-template sha256 and vocabulary
  recorded in ``export.json`` match the base tokenizer, or (when the template hash differs or
  is not recorded) re-rendering sample rows with the base tokenizer reproduces their ids; every
  id is inside the vocabulary;
- every row has at least one supervised token -- otherwise an error naming the row
  and episode, never a loss averaged over zero tokens;
- every supervised run (assistant turn) ends with an end-of-turn token, and the last
  one was not cut by truncation; rows longer than ``max_length`` are never truncated here:
  refused or dropped and counted (:data:`~rlmdistill.sft.config.LengthPolicy`).

:func:`split_eval` then holds out whole episodes of the kept rows for the eval loss.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from rlmdistill.sft.config import LengthPolicy
from rlmdistill.traces.artefacts import ArtefactError, ExportManifest, load_export_manifest
from rlmdistill.traces.layout import EXPORT_MANIFEST

AUTO_EVAL_FRACTION = 0.1
"""Share of episodes held out for the eval loss when ``eval_fraction`` is ``None`` (auto)."""
AUTO_EVAL_MIN_EPISODES = 10
"""Auto holds episodes out only from datasets with at least this many (kept) episodes."""

END_OF_TURN_TOKENS = (
    "<|im_end|>",
    "<|eot_id|>",
    "<|endoftext|>",
    "<|end|>",
    "<|user|>",
    "<|observation|>",
    "<|return|>",
    "<end_of_turn>",
    "<|end_of_turn|>",
    "</s>",
)
"""Special tokens that close an assistant turn in the template families we know (ChatML/Qwen,
Llama 3, GLM-4 -- whose turn ends at the next role marker --, Phi, gpt-oss, Gemma)."""


class DatasetError(ValueError):
    """The dataset cannot be trained on as is; the message names the folder, row and episode."""


@dataclass
class DatasetCheck:
    """What :func:`check_rows` kept and dropped.

    ``kept`` are row indices into the loaded dataset; ``dropped`` counts dropped rows by reason
    (``too_long``, ``last_turn_cut``); ``n_supervised`` / ``n_tokens`` sum over kept rows.
    """

    n_rows: int
    kept: list[int]
    dropped: dict[str, int] = field(default_factory=dict)
    n_tokens: int = 0
    n_supervised: int = 0


class TokenizerCheck:
    """How :func:`check_tokenizer` established that the dataset's ids fit the base tokenizer."""

    def __init__(self, method: str, template_sha256: str, export_template_sha256: str | None):
        self.method = method
        """``template_sha256`` (hashes equal) or ``rerender`` (sample rows re-rendered)."""
        self.template_sha256 = template_sha256
        self.export_template_sha256 = export_template_sha256

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready record for ``sft.json``."""
        return {
            "method": self.method,
            "base_chat_template_sha256": self.template_sha256,
            "export_chat_template_sha256": self.export_template_sha256,
        }


def chat_template_sha256(tokenizer: Any) -> str:
    """Hex sha256 of the tokenizer's chat template string (UTF-8); of ``""`` when it has none."""
    template = getattr(tokenizer, "chat_template", None) or ""
    if isinstance(template, dict):  # named templates: hash a stable JSON form
        template = json.dumps(template, sort_keys=True)
    return hashlib.sha256(str(template).encode("utf-8")).hexdigest()


def vocab_sha256(tokenizer: Any) -> str:
    """Hex sha256 of the tokenizer's vocabulary (``token\\tid`` lines sorted by id)."""
    items = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    return hashlib.sha256("\n".join(f"{t}\t{i}" for t, i in items).encode("utf-8")).hexdigest()


def end_of_turn_ids(tokenizer: Any, extra: Sequence[str] = ()) -> set[int]:
    """Ids of :data:`END_OF_TURN_TOKENS` and ``extra`` token strings (e.g. the export's
    ``tokenizer.end_of_turn``) present in ``tokenizer``, plus its EOS id."""
    vocab = tokenizer.get_vocab()
    ids = {vocab[t] for t in (*END_OF_TURN_TOKENS, *extra) if t in vocab}
    if isinstance(tokenizer.eos_token_id, int):
        ids.add(tokenizer.eos_token_id)
    return ids


def load_export(dataset_dir: Path | str) -> tuple[Any, ExportManifest, str]:
    """``(datasets.Dataset, export.json, sha256 of export.json)`` of an export folder
    (``export.json`` read with :func:`rlmdistill.traces.artefacts.load_export_manifest`).

    Raises:
        DatasetError: the folder, ``export.json`` or the saved dataset is missing or unreadable,
            ``export.json`` does not match its schema, or a required column (``input_ids``,
            ``assistant_masks``) is absent.
    """
    import datasets

    d = Path(dataset_dir)
    manifest_path = d / EXPORT_MANIFEST
    if not d.is_dir():
        raise DatasetError(f"{d}: no such dataset folder (expected datasets/NAME from export)")
    if not manifest_path.is_file():
        raise DatasetError(f"{d}: no export.json; not a dataset written by `rlmdistill export`")
    raw = manifest_path.read_bytes()
    try:
        manifest = load_export_manifest(d)
    except ArtefactError as exc:
        raise DatasetError(str(exc)) from exc
    try:
        ds = datasets.load_from_disk(str(d))
    except (FileNotFoundError, ValueError) as exc:
        raise DatasetError(f"{d}: cannot load the saved dataset: {exc}") from exc
    if not isinstance(ds, datasets.Dataset):
        raise DatasetError(f"{d}: expected one datasets.Dataset, found {type(ds).__name__}")
    missing = [c for c in ("input_ids", "assistant_masks") if c not in ds.column_names]
    if missing:
        raise DatasetError(f"{d}: missing column(s) {missing}; columns: {ds.column_names}")
    return ds, manifest, hashlib.sha256(raw).hexdigest()


def _row_name(ds: Any, i: int) -> str:
    row_meta = []
    for col in ("episode_id", "turn"):
        if col in ds.column_names:
            row_meta.append(f"{col}={ds[i][col]}")
    return f"row {i}" + (f" ({', '.join(row_meta)})" if row_meta else "")


def _rendered_messages(row: dict[str, Any]) -> tuple[list[dict[str, Any]], Any] | None:
    tools = row.get("tools")
    tools = json.loads(tools) if isinstance(tools, str) else tools
    if isinstance(row.get("messages_json"), str):
        return json.loads(row["messages_json"]), tools
    if isinstance(row.get("messages"), list):
        return row["messages"], tools
    return None


def check_tokenizer(
    ds: Any, manifest: ExportManifest, tokenizer: Any, dataset_dir: Path | str, *, sample: int = 3
) -> TokenizerCheck:
    """Check that the dataset's token ids were made with a tokenizer equivalent to ``tokenizer``.

    Accepted when the vocabulary matches (``tokenizer.vocab_sha256`` / ``vocab_size`` in
    ``export.json`` when recorded) and either the chat-template sha256 recorded there
    (``tokenizer.chat_template_sha256``) equals :func:`chat_template_sha256` of ``tokenizer``,
    or re-rendering up to ``sample`` rows' ``messages`` (``messages_json`` + ``tools`` in tool
    style) with ``tokenizer`` gives ids of which the row's ids are a prefix or a suffix (the
    export may have truncated). Every id must be < ``len(tokenizer)``.

    Raises:
        DatasetError: a mismatch, with both hashes or the first differing row named.
    """
    info = manifest.tokenizer
    where = f"{dataset_dir}/{EXPORT_MANIFEST}"
    n_vocab = len(tokenizer)
    if info.vocab_size is not None and info.vocab_size != n_vocab:
        raise DatasetError(
            f"{where}: dataset tokenizer has {info.vocab_size} tokens, the base model's "
            f"tokenizer {n_vocab}; export the dataset with the base model's tokenizer"
        )
    if info.vocab_sha256 is not None and info.vocab_sha256 != vocab_sha256(tokenizer):
        raise DatasetError(
            f"{where}: vocabulary sha256 {info.vocab_sha256} differs from the base model's "
            f"{vocab_sha256(tokenizer)}; export the dataset with the base model's tokenizer"
        )
    for i, ids in enumerate(ds["input_ids"]):
        if ids and max(ids) >= n_vocab:
            raise DatasetError(
                f"{dataset_dir}: {_row_name(ds, i)} has token id {max(ids)} >= vocabulary "
                f"size {n_vocab} of the base model's tokenizer"
            )
    ours = chat_template_sha256(tokenizer)
    theirs = info.chat_template_sha256
    if theirs == ours:
        return TokenizerCheck("template_sha256", ours, theirs)
    checked = 0
    for i in range(min(len(ds), sample)):
        row = ds[i]
        conv = _rendered_messages(row)
        if conv is None:
            continue
        messages, tools = conv
        try:
            text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
        except Exception as exc:  # jinja errors of a foreign template
            raise DatasetError(
                f"{dataset_dir}: {_row_name(ds, i)}: the base tokenizer's chat template cannot "
                f"render this conversation ({type(exc).__name__}: {exc})"
            ) from exc
        full = list(tokenizer(str(text), add_special_tokens=False)["input_ids"])
        ids = list(row["input_ids"])
        if ids != full[: len(ids)] and ids != full[len(full) - len(ids) :]:
            raise DatasetError(
                f"{dataset_dir}: {_row_name(ds, i)}: input_ids differ from one full render with "
                f"the base model's chat template (export template sha256 {theirs}, base "
                f"{ours}); export the dataset with the base model's tokenizer"
            )
        checked += 1
    if checked == 0:
        raise DatasetError(
            f"{where}: chat template sha256 {theirs} differs from the base model's {ours} and "
            "no row carries messages to re-render; export with the base model's tokenizer"
        )
    return TokenizerCheck("rerender", ours, theirs)


def _runs(mask: list[int]) -> list[tuple[int, int]]:
    """``[(start, end_exclusive)]`` of the maximal runs of 1 in ``mask``."""
    out: list[tuple[int, int]] = []
    start = None
    for k, bit in enumerate(mask):
        if bit and start is None:
            start = k
        elif not bit and start is not None:
            out.append((start, k))
            start = None
    if start is not None:
        out.append((start, len(mask)))
    return out


class _Blank:
    """Memoised "this id decodes to whitespace only" (never true for an end-of-turn id)."""

    def __init__(self, tokenizer: Any, eot: set[int]):
        self.tokenizer, self.eot, self.memo = tokenizer, eot, dict[int, bool]()

    def __call__(self, tid: int) -> bool:
        if tid not in self.memo:
            text = self.tokenizer.decode([tid])
            self.memo[tid] = tid not in self.eot and text.strip() == ""
        return self.memo[tid]


def _ends_turn(ids: list[int], start: int, end: int, eot: set[int], blank: _Blank) -> bool:
    """A supervised run ends with an end-of-turn token, possibly followed by whitespace tokens
    that the template keeps inside the turn (e.g. ``<|im_end|>\\n`` in TRL's training templates)."""
    k = end - 1
    while k > start and blank(ids[k]):
        k -= 1
    return ids[k] in eot


def check_rows(
    ds: Any,
    tokenizer: Any,
    dataset_dir: Path | str,
    *,
    max_length: int | None,
    policy: LengthPolicy,
    extra_end_of_turn: Sequence[str] = (),
) -> DatasetCheck:
    """Check every row's masks and length (see the module docstring for the rules).

    Returns which rows to train on and what was dropped, by reason (``too_long`` for rows over
    ``max_length``, ``last_turn_cut`` for rows whose last supervised run does not end with an
    end-of-turn token), when ``policy == "drop"``.

    Raises:
        DatasetError: a row with no supervised token, masks of the wrong length or
            not 0/1, a supervised turn before the last that does not end with an end-of-turn
            token (a template/mask fault), a too-long or cut row when
            ``policy == "refuse"``, or no row left. Messages name the folder, row and episode.
    """
    eot = end_of_turn_ids(tokenizer, extra_end_of_turn)
    blank = _Blank(tokenizer, eot)
    kept: list[int] = []
    dropped: Counter[str] = Counter()
    n_tokens = n_supervised = 0
    n_tokens_col = ds["n_tokens"] if "n_tokens" in ds.column_names else None
    for i, row in enumerate(ds.select_columns(["input_ids", "assistant_masks"])):
        ids, mask = list(row["input_ids"]), list(row["assistant_masks"])
        name = f"{dataset_dir}: {_row_name(ds, i)}"
        if len(ids) != len(mask):
            raise DatasetError(
                f"{name}: assistant_masks has {len(mask)} entries for {len(ids)} input_ids"
            )
        if any(b not in (0, 1) for b in mask):
            raise DatasetError(f"{name}: assistant_masks must hold only 0 and 1")
        if n_tokens_col is not None and n_tokens_col[i] != len(ids):
            raise DatasetError(f"{name}: n_tokens={n_tokens_col[i]} but {len(ids)} input_ids")
        runs = _runs(mask)
        if not runs:
            raise DatasetError(
                f"{name}: no supervised token (assistant_masks all zero); training would "
                "average a loss over zero tokens. Re-export: the export drops such rows."
            )
        for k, (s, e) in enumerate(runs[:-1]):
            if not _ends_turn(ids, s, e, eot, blank):
                raise DatasetError(
                    f"{name}: supervised turn {k} (tokens {s}..{e - 1}) does not end with an "
                    f"end-of-turn token (ends with {tokenizer.convert_ids_to_tokens(ids[e - 1])!r}); "
                    "the model would not learn to stop"
                )
        reason = None
        if max_length is not None and len(ids) > max_length:
            reason = "too_long"
            detail = f"{len(ids)} tokens > max_length {max_length} (rows are never truncated here)"
        elif not _ends_turn(ids, *runs[-1], eot, blank):
            reason = "last_turn_cut"
            last = tokenizer.convert_ids_to_tokens(ids[runs[-1][1] - 1])
            detail = f"last supervised turn ends with {last!r}, not an end-of-turn token (cut?)"
        if reason is not None:
            if policy == "refuse":
                raise DatasetError(f"{name}: {detail}; set length_policy: drop to skip such rows")
            dropped[reason] += 1
            continue
        kept.append(i)
        n_tokens += len(ids)
        n_supervised += sum(mask)
    if not kept:
        raise DatasetError(f"{dataset_dir}: no row left to train on (dropped: {dict(dropped)})")
    return DatasetCheck(len(ds), kept, dict(dropped), n_tokens, n_supervised)


class EvalSplit(NamedTuple):
    """What :func:`split_eval` returns: row indices (into the loaded dataset) of each side."""

    train: list[int]
    eval: list[int]
    """Empty when the eval loss is off."""
    eval_episodes: list[str]
    """Episode ids held out (sorted); empty when off."""
    fraction: float
    """Fraction used (0.0 when off)."""
    note: str
    """One line for the log and ``sft.json``: what was held out, or why the eval loss is off."""


def split_eval(ds: Any, rows: Sequence[int], fraction: float | None, seed: int) -> EvalSplit:
    """Hold out whole episodes of ``rows`` (kept row indices of ``ds``) for the eval loss.

    Rows are grouped by the ``episode_id`` column (each row alone when there is none), so one
    episode's rows (turns) are never split between train and eval. ``k = min(n - 1, max(1,
    round(fraction * n)))`` of the ``n`` episodes are drawn with ``random.Random(seed)`` from
    the sorted ids: deterministic for a given dataset, fraction and seed. ``fraction=None``
    (auto) means :data:`AUTO_EVAL_FRACTION` when ``n >= AUTO_EVAL_MIN_EPISODES``, else off;
    ``0`` is off; any fraction is off when ``n < 2``. When off, every row trains.
    """
    ids = ds["episode_id"] if "episode_id" in ds.column_names else None
    key = [str(ids[i]) if ids is not None else f"row-{i}" for i in rows]
    episodes = sorted(set(key))
    n = len(episodes)
    off = None
    if fraction is None:
        if n < AUTO_EVAL_MIN_EPISODES:
            off = (
                f"eval loss off: {n} episode(s) < {AUTO_EVAL_MIN_EPISODES} (eval_fraction auto); "
                "set eval_fraction to hold some out anyway"
            )
        fraction = AUTO_EVAL_FRACTION
    elif fraction == 0:
        off = "eval loss off (eval_fraction: 0)"
    elif n < 2:
        off = f"eval loss off: {n} episode after the checks, at least 2 are needed"
    if off is not None:
        return EvalSplit(list(rows), [], [], 0.0, off)
    k = min(n - 1, max(1, round(fraction * n)))
    held = set(random.Random(seed).sample(episodes, k))
    train = [i for i, e in zip(rows, key, strict=True) if e not in held]
    evals = [i for i, e in zip(rows, key, strict=True) if e in held]
    grouped = "" if ids is not None else " (no episode_id column: one row per episode)"
    note = (
        f"eval loss on {k} of {n} episodes held out ({len(evals)} rows, eval_fraction "
        f"{fraction:g}, seed {seed}){grouped}"
    )
    return EvalSplit(train, evals, sorted(held), fraction, note)


__all__ = [
    "AUTO_EVAL_FRACTION",
    "AUTO_EVAL_MIN_EPISODES",
    "END_OF_TURN_TOKENS",
    "DatasetCheck",
    "DatasetError",
    "EvalSplit",
    "TokenizerCheck",
    "chat_template_sha256",
    "check_rows",
    "check_tokenizer",
    "end_of_turn_ids",
    "load_export",
    "split_eval",
    "vocab_sha256",
]
