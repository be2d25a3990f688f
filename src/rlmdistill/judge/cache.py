"""Verdict cache of the LLM judge: re-judging an unchanged memo against an unchanged criterion
with the same judge model and prompt version issues no request.

The cache is a JSON Lines file of :class:`~rlmdistill.traces.schema.JudgeCacheEntry`, by
default ``runs/<run>/verdicts/<grader>.cache.jsonl`` (one per run and grader; pass another path
to share one cache between runs). It is append-only, read once when opened (torn last line
tolerated), and keyed by :class:`CacheKey`:

- ``memo_sha256``: sha256 of the memo's UTF-8 text (:func:`rlmdistill.traces.scores.memo_sha256`,
  the same hash the collector writes);
- ``criterion_id`` and ``criterion_hash``: the criterion's id and a hash of its full content
  (:func:`criterion_hash`), so an edited criterion is judged afresh;
- ``judge_model``: the judge's model identity (:func:`rlmdistill.judge.llm.judge_model_key`);
- ``prompt_version``: :data:`rlmdistill.judge.llm.JUDGE_PROMPT_VERSION`.

Only PASS and FAIL are cached. UNGRADABLE (a failed request, a reply still malformed after the
retries) is never cached, so a later ``judge --regrade-ungradable`` asks again. The verdict of
one criterion can depend on which other criteria shared its request; the key ignores that
(batches are an efficiency device, and the prompt asks for each criterion independently).
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import NamedTuple

from rlmdistill.rooms.task import Criterion
from rlmdistill.traces.schema import JudgeCacheEntry
from rlmdistill.traces.scores import memo_sha256
from rlmdistill.traces.store import append_records, parse_records

__all__ = ["CacheKey", "VerdictCache", "criterion_hash", "memo_sha256"]


def criterion_hash(criterion: Criterion) -> str:
    """First 16 hex chars of sha256 over the criterion's canonical JSON (every field, sorted
    keys, unknown LAB fields included): any edit of the criterion changes it."""
    data = criterion.model_dump(mode="json")
    text = json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


class CacheKey(NamedTuple):
    """Identity of one cached judgement (see the module docstring)."""

    memo_sha256: str
    criterion_id: str
    criterion_hash: str
    judge_model: str
    prompt_version: str


def _key_of(entry: JudgeCacheEntry) -> CacheKey:
    return CacheKey(
        entry.memo_sha256,
        entry.criterion_id,
        entry.criterion_hash,
        entry.judge_model,
        entry.prompt_version,
    )


class VerdictCache:
    """An append-only file of cached PASS/FAIL judgements, held in memory as a dict.

    Thread-safe. When the same key is written twice the last entry wins (on reload too).

    Args:
        path: the JSON Lines file (created on the first :meth:`put`; missing = empty cache).

    Raises:
        rlmdistill.traces.store.TraceFileError: the file is corrupt before its last line, or
            a line is not a valid :class:`JudgeCacheEntry` (names the file and record).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._entries: dict[CacheKey, JudgeCacheEntry] = {
            _key_of(e): e for e in parse_records(self.path, JudgeCacheEntry)
        }
        self.hits = 0
        """Lookups answered from the cache since opening."""
        self.misses = 0
        """Lookups that found nothing."""

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: CacheKey) -> JudgeCacheEntry | None:
        """The cached judgement for ``key``, or ``None`` (counted in :attr:`hits`/:attr:`misses`)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
            else:
                self.hits += 1
            return entry

    def put(self, entries: list[JudgeCacheEntry]) -> None:
        """Append ``entries`` to the file (one write) and to the in-memory dict."""
        if not entries:
            return
        with self._lock:
            append_records(self.path, entries)
            for entry in entries:
                self._entries[_key_of(entry)] = entry
