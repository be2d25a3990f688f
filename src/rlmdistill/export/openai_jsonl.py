"""An exported SFT dataset as OpenAI fine-tuning JSONL (``rlmdistill export-openai``).

Reads a dataset folder written by :func:`rlmdistill.export.export_dataset` (``rlmdistill
filter`` / ``rlmdistill export``) and writes one JSON line per row, the chat format of
OpenAI's supervised fine-tuning (also read by many trainers: axolotl's ``chat_template``
datasets with per-message ``weight``, torchtune, Together, Fireworks)::

    {"messages": [{"role": "system", "content": ...}, {"role": "user", ...},
                  {"role": "assistant", "content": ..., "weight": 1}, ...],
     "tools": [...]}                                   # tool style only

- Every assistant message carries ``weight`` 0 or 1: the row's ``message_weights`` (1
  exactly on the assistant messages whose tokens ``assistant_masks`` supervises; the worked
  example, earlier replies of a turn-mode example and ``truncated_turns="mask"`` replies are
  0). Other roles carry no weight (the format allows it on assistant messages only).
- Tool calls get their ``arguments`` as a JSON string (the OpenAI wire format; our
  ``messages_json`` keeps a mapping); ``tools`` is the row's tool schema.
- ``reasoning_content`` is not part of the format and is left out (counted).

Datasets exported before ``message_weights`` existed have no per-message weights: they are
refused with the fix (export again), never guessed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from rlmdistill.export.tools import load_messages

__all__ = ["OpenAIExport", "openai_record", "openai_records", "write_openai_jsonl"]

OPENAI_FILE = "openai.jsonl"
"""Default file name, inside the dataset folder."""


class OpenAIExport(NamedTuple):
    """What :func:`write_openai_jsonl` wrote."""

    path: Path
    n_rows: int
    n_weighted: int
    """Assistant messages with weight 1 (over all rows)."""
    n_unweighted: int
    """Assistant messages with weight 0."""
    n_reasoning_dropped: int
    """Assistant messages whose ``reasoning_content`` the format cannot carry."""


def openai_record(row: Mapping[str, Any], where: str = "row") -> tuple[dict[str, Any], int]:
    """One dataset row as an OpenAI fine-tuning record, and how many reasoning texts it left
    out.

    Raises ``ValueError`` naming ``where`` when the row has no ``message_weights`` (exported
    before the column existed) or their count differs from the messages'.
    """
    weights = row.get("message_weights")
    if weights is None:
        raise ValueError(
            f"{where}: no message_weights column (the dataset was exported before per-message "
            "weights were recorded); export it again with this version"
        )
    messages = load_messages(row)
    if len(weights) != len(messages):
        raise ValueError(f"{where}: {len(weights)} message_weights for {len(messages)} messages")
    out: list[dict[str, Any]] = []
    n_reasoning = 0
    for msg, w in zip(messages, weights, strict=True):
        m = {k: v for k, v in msg.items() if k != "reasoning_content"}
        n_reasoning += "reasoning_content" in msg
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {
                    **c,
                    "function": {
                        **c["function"],
                        "arguments": c["function"]["arguments"]
                        if isinstance(c["function"]["arguments"], str)
                        else json.dumps(c["function"]["arguments"], ensure_ascii=False),
                    },
                }
                for c in m["tool_calls"]
            ]
        if m["role"] == "assistant":
            m["weight"] = int(w)
        elif w:
            raise ValueError(f"{where}: a {m['role']} message has weight {w}")
        out.append(m)
    record: dict[str, Any] = {"messages": out}
    if row.get("tools"):
        record["tools"] = json.loads(row["tools"])
    return record, n_reasoning


def openai_records(dataset_dir: Path) -> Iterator[tuple[dict[str, Any], int]]:
    """``(record, reasoning texts left out)`` for every row of a saved dataset, in order.

    Raises ``FileNotFoundError`` when ``dataset_dir`` holds no dataset, and what
    :func:`openai_record` raises (naming the dataset and row).
    """
    from datasets import load_from_disk

    dataset_dir = Path(dataset_dir)
    if not (dataset_dir / "dataset_info.json").exists():
        raise FileNotFoundError(f"{dataset_dir}: no exported dataset (dataset_info.json)")
    ds = load_from_disk(str(dataset_dir))
    for i, row in enumerate(ds):
        yield openai_record(row, f"{dataset_dir} row {i} (episode {row.get('episode_id')})")


def write_openai_jsonl(
    dataset_dir: Path, out: Path | None = None, *, overwrite: bool = False
) -> OpenAIExport:
    """Write the rows of an exported dataset as OpenAI fine-tuning JSONL.

    ``out`` defaults to ``dataset_dir/openai.jsonl``; it is written to a temporary file and
    renamed, so a failure leaves no partial file. Raises ``FileExistsError`` when ``out``
    exists and not ``overwrite``, and what :func:`openai_records` raises.
    """
    dataset_dir = Path(dataset_dir)
    path = Path(out) if out is not None else dataset_dir / OPENAI_FILE
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists (pass --overwrite to replace it)")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    n_rows = n_on = n_off = n_reasoning = 0
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            for record, dropped in openai_records(dataset_dir):
                for m in record["messages"]:
                    if m["role"] == "assistant":
                        n_on += m["weight"] == 1
                        n_off += m["weight"] == 0
                n_reasoning += dropped
                n_rows += 1
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return OpenAIExport(path, n_rows, n_on, n_off, n_reasoning)
