"""How much of each document a memo reproduces word for word: the reference grader's guard
against a memo that pastes the data room instead of reviewing it.

A root with the documents in its REPL can "write" a memo by printing them (a 0.5B base root
did, in the quickstart of 2026-12-04: its memo was the ``repr`` of the documents dict, 8,720
words). Rules that reward a word-for-word quote of a labelled clause next to a citation then
pass most criteria, and rejection sampling would keep such episodes and teach the root to
paste. The measure here is per document: the share of the document's distinct
:data:`GRAM_WORDS`-word runs (normalised words, :func:`rlmdistill.rooms.text.words`) that
occur in the memo (:func:`rlmdistill.traces.sub_credit.word_runs`, the runs of the sub-call
credit's memo rule). Quoting clauses, as a good memo does, reproduces a small share; a paste
reproduces most of it.

Measured on the 59 memos of two quickstart workspaces (2026-12-04; base, training, checkpoint
check and tuned runs; documents of 1,220-6,152 distinct runs): the pasted memo reproduced
0.933 of its document (the ``repr`` escapes cost a few runs); every other memo at most 0.183
of any document (median 0.090), while about 36-80% of their own words sat in copied runs
(they quote sub-call answers that quote the contracts). So a memo-level copied share cannot
tell a paste from quoting, and a per-document share can: :data:`COPY_SHARE` (0.5) leaves a
margin of 2.7x above the highest honest memo. A document of fewer than
:data:`MIN_COPY_GRAMS` runs reproduced is never a
paste (an honest memo may quote all of a one-paragraph amendment).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from rlmdistill.rooms.room import DataRoom
from rlmdistill.traces.sub_credit import word_runs

__all__ = ["COPY_SHARE", "GRAM_WORDS", "MIN_COPY_GRAMS", "Copied", "copied_documents", "pasted"]

GRAM_WORDS = 8
"""Words in one run (the reference grader's shortest quote, ``MIN_QUOTE_WORDS``)."""
COPY_SHARE = 0.5
"""Share of a document's distinct runs in the memo from which the memo is a paste of it."""
MIN_COPY_GRAMS = 300
"""Fewest reproduced runs that can make a paste (about a page of text)."""


@dataclass(frozen=True)
class Copied:
    """One document's reproduction in a memo: ``copied`` of its ``total`` distinct
    :data:`GRAM_WORDS`-word runs occur in the memo (both counts of runs, not words)."""

    document_id: str
    copied: int
    total: int

    @property
    def share(self) -> float:
        """``copied / total`` in [0, 1]; 0 for a document shorter than one run."""
        return self.copied / self.total if self.total else 0.0

    @property
    def is_paste(self) -> bool:
        """The memo pastes this document: share >= :data:`COPY_SHARE` and at least
        :data:`MIN_COPY_GRAMS` runs reproduced."""
        return self.share >= COPY_SHARE and self.copied >= MIN_COPY_GRAMS


@functools.lru_cache(maxsize=64)
def _document_grams(text: str) -> frozenset[tuple[str, ...]]:
    """A document's distinct runs; cached, since every episode of a room reads the same."""
    return word_runs(text, GRAM_WORDS)


def copied_documents(memo: str, room: DataRoom) -> list[Copied]:
    """Per document of ``room`` (in id order), how many of its distinct
    :data:`GRAM_WORDS`-word runs ``memo`` reproduces. Reads every document's text (cached by
    the room). Never raises for an empty memo (all counts 0)."""
    memo_grams = word_runs(memo, GRAM_WORDS)
    out = []
    for doc in room.documents:
        grams = _document_grams(doc.text)
        out.append(Copied(doc.id, len(grams & memo_grams) if memo_grams else 0, len(grams)))
    return out


def pasted(memo: str | None, room: DataRoom | None) -> Copied | None:
    """The document ``memo`` pastes most of (highest share among :attr:`Copied.is_paste`),
    or ``None``: no memo, no room, or no document pasted."""
    if not memo or not memo.strip() or room is None:
        return None
    pastes = [c for c in copied_documents(memo, room) if c.is_paste]
    return max(pastes, key=lambda c: c.share) if pastes else None
