"""Coverage probe: how much of a room's text reached any model during one episode.

Method ``shingle-v1`` (:data:`PROBE_VERSION`). Coverage is measured on what the models were
actually sent (every root request's messages and every sub-call prompt, passed to
:meth:`CoverageProbe.observe`), not trusted from the code path that sent it.

**Normalisation** (:func:`normalise`), applied identically to documents and model inputs:
Unicode NFKC, then ``str.lower()``, then every run of whitespace (``\\s+``, Unicode-aware)
replaced by one space. **Unit**: normalised characters (code points of the normalised text).
Every size below (document length, covered characters, duplicate characters) is in this unit.

**Definition.** Let ``K`` = :data:`K` (64). A normalised character of a document is *covered*
when it lies inside some K-character window of the document whose exact text occurs in the
normalised text of some model input, and that window is linked, through windows at
consecutive positions that all occur in model inputs, to a *stride-aligned* window (one
starting at a multiple of ``S`` = :data:`STRIDE` (16) from the document start, or the
document's last window). In plain terms: every shared span of >= ``K + S - 1`` (= 79)
normalised characters between a document and a model input is found and counted exactly, to
the character; a shared span of ``K`` .. ``K + S - 2`` characters is counted only when it
happens to contain an aligned window; shorter spans are never counted (**minimum detectable
span = K = 64; guaranteed detection from 79**). A document shorter than ``K`` normalised
characters can never be covered. Text that reaches a model is credited to *every* place in
the room where it occurs (the probe cannot tell which copy a model input was taken from).

**Duplicates.** A character of document ``d`` is a *duplicate* when it lies in a K-window
(found with the same aligned-window + edge rule as above) whose text also occurs in a document
that sorts before ``d`` (room id order). Repetition inside one document is not a duplicate.

- ``per_document[d]`` = covered chars of ``d`` / normalised length of ``d`` (no deduplication:
  the document's own text).
- ``overall`` = covered non-duplicate chars / non-duplicate chars, over the whole room. So a
  clause copied verbatim into several documents counts once in numerator and denominator (at
  its first copy in id order; because identical text is covered identically, which copy is
  kept does not change the value beyond edge effects).
- ``per_folder[f]`` = the same rule applied to folder ``f``'s documents alone (duplicates
  judged only against earlier documents *of the same folder*), so each folder figure is the
  ``overall`` of its own sub-room. ``overall`` is therefore not a weighted mean of the folder
  figures when text repeats across folders.

The character counts behind these ratios (including the duplicate characters excluded from
``overall``) come from :meth:`CoverageProbe.detail`, since :class:`Coverage` has no field for
them.

**Mechanism.** Window hashes are 64-bit polynomial rolling hashes (mod 2^64, computed with
numpy prefix sums); equal hashes are taken as equal text (false matches have probability about
``n_room_windows * n_input_windows / 2^64`` for natural text; no text verification). The room
index (:class:`CoverageIndex`, built once per room) holds the normalised room text as code
points, the hash of every aligned window and the duplicate intervals. Each observed input adds
the hashes of all its K-windows to a set; :meth:`CoverageProbe.result` tests every aligned
window against that set, merges hits into runs and extends each run's two ends window by
window (at most ``S - 1`` windows each side), rolling the end window's hash one character per
step and stepping only the runs still growing. Duplicates are found at build time by two
passes over every window of the room against a vectorised open-addressing hash table of the
queried hashes, keeping per hash the first document that holds it (and per queried
``(hash, folder)`` pair the first document of that folder): first for the aligned windows,
then for the ``S - 1`` windows beyond each duplicate run's ends.

**Complexity.** Build: O(N) for N room characters, whatever the repetition: three hashing
passes over the room's windows, two of them with an O(1) table lookup and update per window
(an earlier version sorted one ``(hash, document)`` entry per repeated occurrence, so rooms
whose text repeats across documents built 2-4x slower and needed ~2 GB); memory about
N x (1..4) bytes (code points, narrowest dtype that fits) + 24 bytes x A (A = N / S aligned
windows) kept, plus transient tables of ~50 bytes per queried window. ``observe``: O(n) for
an input of n characters. ``result``: O(A + M log M + R x S) for M distinct observed windows
and R runs. The index can be cached on disk (:meth:`CoverageIndex.load_or_build`): the code
points are memory-mapped, so processes share one copy through the page cache. Measured
(``benchmarks/bench_coverage_probe.py``, 2-core shared machine, wall / CPU seconds), 5,000
documents, one episode of 1 M input characters:

- synthetic room (``rooms.synth``, generator synth-v2, 40 M characters, 29% of them
  duplicates): build 6.9 s, load from cache 0.02 s, ``result()`` 0.14 s (the synth-v1 room,
  96% duplicates: build 7.8 s / 7.8 s CPU, peak RSS ~1.2 GB, ``result()`` 0.42 s);
- random-word room (37 M characters, 9% duplicates): build 3.4 s / 3.3 s CPU (peak RSS
  ~0.55 GB; before 4.0 s, ~0.75 GB), load 0.02 s, ``result()`` 0.07 s (before 0.08 s).

**Limits.** Text that reaches a model only in an escaped form (``repr`` of a string, JSON with
``\\n`` escapes) breaks into pieces at each escape and is credited only for the pieces of >= K
characters between escapes. Room text that a model writes itself (e.g. a stock legal sentence)
and that then comes back in a later input counts as covered: the probe sees text, not intent.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import threading
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from rlmdistill.rooms.room import DataRoom
from rlmdistill.traces.schema import Coverage

__all__ = [
    "PROBE_VERSION",
    "STRIDE",
    "CoverageDetail",
    "CoverageIndex",
    "CoverageProbe",
    "K",
    "normalise",
]

PROBE_VERSION = "shingle-v1"
"""Goes into :attr:`Coverage.method`; part of the on-disk cache key."""

K = 64
"""Window (shingle) length in normalised characters: the minimum detectable span."""

STRIDE = 16
"""Spacing of the indexed (aligned) windows; spans >= ``K + STRIDE - 1`` are always found."""

_CHUNK = 1 << 20
"""Windows hashed per numpy batch (bounds temporary memory to ~50 MB)."""

_BASE = 0x9E3779B97F4A7C15  # odd, so invertible mod 2^64
_BASE_INV = pow(_BASE, -1, 1 << 64)
_MIX = np.uint64(0xD6E8FEB86659FD93)  # odd multiplier for hash-table slots
_B = np.uint64(_BASE)
_B_INV = np.uint64(_BASE_INV)
_B_TOP = np.uint64(pow(_BASE, K - 1, 1 << 64))  # B^(K-1): weight of a window's first char
_WS = re.compile(r"\s+")

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
Arr = npt.NDArray[Any]


def normalise(text: str) -> str:
    """Normalised form used on both sides: NFKC, ``lower()``, whitespace runs -> one space."""
    return _WS.sub(" ", unicodedata.normalize("NFKC", text).lower())


def _codepoints(text: str) -> npt.NDArray[np.uint32]:
    """Code points of ``text`` as uint32 (lone surrogates kept)."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")


@functools.lru_cache(maxsize=1)
def _powers() -> tuple[U64, U64]:
    """``(B^t, B^-t)`` mod 2^64 for t < ``_CHUNK + K`` (uint64 products wrap mod 2^64)."""
    n = _CHUNK + K
    pw = np.empty(n, dtype=np.uint64)
    inv = np.empty(n, dtype=np.uint64)
    pw[0] = inv[0] = 1
    pw[1:] = _BASE
    inv[1:] = _BASE_INV
    return np.cumprod(pw, dtype=np.uint64), np.cumprod(inv, dtype=np.uint64)


def _window_hashes(cp: Arr) -> U64:
    """Hash of every K-window of the code-point array ``cp`` (length ``len(cp) - K + 1``).

    ``h(i) = sum_j cp[i + j] * B^(K - 1 - j) mod 2^64``, from prefix sums of ``cp[t] * B^-t``.
    """
    n = int(cp.shape[0])
    if n < K:
        return np.empty(0, dtype=np.uint64)
    pw, inv = _powers()
    out = np.empty(n - K + 1, dtype=np.uint64)
    for s in range(0, n - K + 1, _CHUNK):
        e = min(n - K + 1, s + _CHUNK)
        seg = cp[s : e + K - 1].astype(np.uint64)
        m = int(seg.shape[0])
        q = np.zeros(m + 1, dtype=np.uint64)
        np.cumsum(seg * inv[:m], out=q[1:])
        out[s:e] = (q[K:] - q[: m - K + 1]) * pw[K - 1 : m]
    return out


def _unique(x: U64) -> U64:
    """Sorted unique values (sort-based; ``np.unique``'s hash path is slower for uint64)."""
    s = np.sort(x.ravel())
    if s.size < 2:
        return s
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def _sorted_search(keys: Arr, needles: Arr, side: str = "left") -> I64:
    """``np.searchsorted`` with the needles sorted first (far better cache behaviour)."""
    if needles.size < 4096:
        return np.searchsorted(keys, needles, side=side)  # type: ignore[call-overload]
    order = np.argsort(needles)
    out = np.empty(needles.size, dtype=np.int64)
    out[order] = np.searchsorted(keys, needles[order], side=side)  # type: ignore[call-overload]
    return out


class _HashSet:
    """Sorted unique uint64 keys with a bitmap prefilter on the top bits, for fast ``isin``.

    The bitmap has about 16 slots per key (2^12 .. 2^24 bytes), so ~1/16 of non-keys pass the
    prefilter. It is sized to the keys, not fixed at 16 MB: a fixed 16 MB ``np.zeros`` cost
    up to 33 ms per episode (page faults when the allocator hands back recycled memory that
    must be zeroed), a third of the harness overhead of a short episode.
    """

    def __init__(self, keys: U64, bits: int | None = None) -> None:
        self.keys = _unique(keys)
        if bits is None:
            bits = min(24, max(12, int(self.keys.size).bit_length() + 4))
        self.shift = np.uint64(64 - bits)
        self.bitmap = np.zeros(1 << bits, dtype=bool)
        self.bitmap[self.keys >> self.shift] = True

    def lookup(self, h: U64) -> tuple[I64, I64]:
        """``(where, idx)``: positions in ``h`` whose value is a key, and the key's index."""
        cand = np.flatnonzero(self.bitmap[h >> self.shift])
        if cand.size == 0 or self.keys.size == 0:
            return cand, cand
        hc = h[cand]
        idx = _sorted_search(self.keys, hc).clip(0, self.keys.size - 1)
        ok = self.keys[idx] == hc
        return cand[ok], idx[ok]

    def contains(self, h: U64) -> npt.NDArray[np.bool_]:
        out = np.zeros(h.shape, dtype=bool)
        where, _ = self.lookup(h.ravel())
        out.ravel()[where] = True
        return out


class _Table:
    """Vectorised open-addressing hash table (linear probing) over uint64 values.

    Built from ``values`` (duplicates allowed) and queried with whole-array numpy operations,
    one round per probe step; the table has at least twice as many slots as values, so almost
    every query resolves in its first probe and the cost per value or needle is O(1),
    however often a value repeats (unlike sorting or a sorted search). Attributes: ``keys``
    (the distinct values, in id order), ``size`` (their count) and ``inverse`` (int64: the id
    of each input value, ``values == keys[inverse]``).
    """

    def __init__(self, values: U64) -> None:
        n = int(values.size)
        bits = max(4, (2 * n).bit_length())
        self.mask = np.int64((1 << bits) - 1)
        self.shift = np.uint64(64 - bits)
        empty = np.uint64(0)
        while n and bool((values == empty).any()):  # a marker no value equals
            empty = np.uint64(int(empty) + 1)
        self.empty = empty
        slot_key = np.full(1 << bits, empty, dtype=np.uint64)
        ids = np.empty(n, dtype=np.int64)
        pend = np.arange(n, dtype=np.int64)
        slot = self._home(values)
        vals = values
        while pend.size:
            free = slot_key[slot] == empty
            slot_key[slot[free]] = vals[free]  # one writer per slot wins; equal values agree
            done = slot_key[slot] == vals
            ids[pend[done]] = slot[done]
            more = ~done  # the others probe on (equal values always move together)
            pend, slot, vals = pend[more], (slot[more] + 1) & self.mask, vals[more]
        used = slot_key != empty
        self.size = int(used.sum())
        self.slot_key = slot_key
        self.slot_val: npt.NDArray[np.signedinteger[Any]] = np.full(
            1 << bits, -1, dtype=np.int64 if self.size >= 2**31 else np.int32
        )
        self.slot_val[used] = np.arange(self.size)
        self.keys = slot_key[used]
        self.inverse = self.slot_val[ids].astype(np.int64)

    def _home(self, h: U64) -> I64:
        """First slot of each value: top bits of a multiplicative (Fibonacci) hash."""
        return ((h * _MIX) >> self.shift).view(np.int64)

    def get(self, h: U64) -> npt.NDArray[np.signedinteger[Any]]:
        """Id of each value of ``h`` (its index in ``keys``; int32 when that suffices), ``-1``
        where it is not a key."""
        slot = self._home(h)
        kk = self.slot_key[slot]
        out = self.slot_val[slot]  # -1 at empty slots
        miss = kk != h
        out[miss] = -1
        todo = np.flatnonzero(miss & (kk != self.empty))
        while todo.size:
            s = (slot[todo] + 1) & self.mask
            slot[todo] = s
            kk = self.slot_key[s]
            hit = kk == h[todo]
            out[todo[hit]] = self.slot_val[s[hit]]
            todo = todo[~hit & (kk != self.empty)]
        return out

    def contains(self, h: U64) -> npt.NDArray[np.bool_]:
        """Whether each value of ``h`` is a key."""
        return self.get(h) >= 0


class _Runs(NamedTuple):
    """Runs of hit aligned windows (see :meth:`CoverageIndex._runs`), one row per run."""

    first: I64  # first window start of each run (global position)
    last: I64  # last window start of each run
    first_hash: U64  # hash of the window at ``first``
    last_hash: U64  # hash of the window at ``last``
    lo: I64  # smallest window start inside the run's document (the document start)
    hi: I64  # largest window start inside the run's document (document end - K)
    doc: I64  # document index of each run


@dataclass(frozen=True)
class CoverageDetail:
    """Coverage plus the character counts behind it (normalised characters)."""

    coverage: Coverage
    covered_chars: int
    """Overall numerator: covered characters that are not duplicates."""
    unique_chars: int
    """Overall denominator: room characters that are not duplicates."""
    duplicate_chars: int
    """Characters left out of ``overall`` as repeats of text in earlier documents."""
    duplicate_covered_chars: int
    """Of those, how many were covered."""
    per_document_chars: dict[str, tuple[int, int]]
    """``{doc_id: (covered, normalised length)}``."""


class CoverageIndex:
    """Per-room index for :class:`CoverageProbe` (immutable once built; share it freely).

    Build with :meth:`build` or :meth:`load_or_build`. Attributes: ``room_hash``,
    ``doc_ids`` / ``folders`` (room id order), ``doc_starts`` (int64, ``n_docs + 1``: offsets of
    each document in the concatenated normalised text), ``n_chars`` (normalised characters),
    ``duplicate_chars`` (see the module docstring).
    """

    def __init__(
        self,
        *,
        room_hash: str,
        doc_ids: list[str],
        folders: list[str],
        cp: Arr,
        doc_starts: I64,
        win_pos: I64,
        win_doc: I64,
        win_hash: U64,
        dup: tuple[I64, I64],
        folder_dup: tuple[I64, I64],
    ) -> None:
        self.room_hash = room_hash
        self.doc_ids = doc_ids
        self.folders = folders
        self.cp = cp
        self.doc_starts = doc_starts
        self.win_pos = win_pos
        self.win_doc = win_doc
        self.win_hash = win_hash
        self.dup = dup
        self.folder_dup = folder_dup
        self.n_docs = len(doc_ids)
        self.n_chars = int(doc_starts[-1])
        self.doc_len = np.diff(doc_starts)
        names = sorted(set(folders))
        self.folder_names = names
        rank = {f: i for i, f in enumerate(names)}
        self.folder_of = np.array([rank[f] for f in folders], dtype=np.int64)
        self.duplicate_chars = int((dup[1] - dup[0]).sum())

    # ------------------------------------------------------------------ build
    @classmethod
    def build(cls, room: DataRoom) -> CoverageIndex:
        """Normalise every document, hash the aligned windows and find duplicate text.

        Reads every document's text (raises what :attr:`Document.text` raises for an
        unreadable file). Time: a few seconds per 10^7 characters.
        """
        texts = [normalise(d.text) for d in room.documents]
        lengths = np.array([len(t) for t in texts], dtype=np.int64)
        doc_starts = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum(lengths, out=doc_starts[1:])
        cp32 = _codepoints("".join(texts))
        del texts
        top = int(cp32.max()) if cp32.size else 0
        dtype = np.uint8 if top < 256 else np.uint16 if top < 65536 else np.uint32
        cp = cp32.astype(dtype)
        del cp32

        pos_parts: list[I64] = []
        doc_parts: list[I64] = []
        for i, (start, length) in enumerate(zip(doc_starts[:-1], lengths, strict=True)):
            if length < K:
                continue
            p = np.arange(start, start + length - K + 1, STRIDE, dtype=np.int64)
            if p[-1] != start + length - K:
                p = np.append(p, start + length - K)
            pos_parts.append(p)
            doc_parts.append(np.full(p.size, i, dtype=np.int64))
        win_pos = np.concatenate(pos_parts) if pos_parts else np.empty(0, np.int64)
        win_doc = np.concatenate(doc_parts) if doc_parts else np.empty(0, np.int64)
        win_hash = np.empty(win_pos.size, dtype=np.uint64)
        n_win = max(0, cp.size - K + 1)
        for s in range(0, n_win, _CHUNK):
            e = min(n_win, s + _CHUNK)
            lo, hi = np.searchsorted(win_pos, [s, e])
            if hi > lo:
                win_hash[lo:hi] = _window_hashes(cp[s : e + K - 1])[win_pos[lo:hi] - s]

        index = cls(
            room_hash=room.room_hash,
            doc_ids=[d.id for d in room.documents],
            folders=[d.folder for d in room.documents],
            cp=cp,
            doc_starts=doc_starts,
            win_pos=win_pos,
            win_doc=win_doc,
            win_hash=win_hash,
            dup=(np.empty(0, np.int64), np.empty(0, np.int64)),
            folder_dup=(np.empty(0, np.int64), np.empty(0, np.int64)),
        )
        index._find_duplicates()
        return index

    def _find_duplicates(self) -> None:
        """Set :attr:`dup` / :attr:`folder_dup`: two passes over every window of the room (the
        aligned windows' earlier occurrences, then those of the windows at the run edges)."""
        g, f = self._earlier(self.win_hash, self.win_doc)
        eg, ef = self._runs(np.flatnonzero(g)), self._runs(np.flatnonzero(f))
        n_g = eg.first.size
        # Edge windows of both run sets, each position once (a window's hash and document
        # follow from its position); only those inside their document are queried.
        sides = []
        for sign in (-1, 1):
            pos = np.concatenate([eg.first, ef.first] if sign < 0 else [eg.last, ef.last])
            _, rows, back = np.unique(pos, return_index=True, return_inverse=True)
            both = _Runs(*(np.concatenate([a, b])[rows] for a, b in zip(eg, ef, strict=True)))
            hashes, ok = self._edge_side(both, sign)
            docs = np.broadcast_to(both.doc[:, None], ok.shape)
            sides.append((hashes[ok], docs[ok], ok, back))
        cg, cf = self._earlier(
            np.concatenate([s[0] for s in sides]), np.concatenate([s[1] for s in sides])
        )
        hits: list[tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]] = []
        at = 0
        for _, _, ok, back in sides:
            n = int(ok.sum())
            hit_g, hit_f = np.zeros(ok.shape, dtype=bool), np.zeros(ok.shape, dtype=bool)
            hit_g[ok], hit_f[ok] = cg[at : at + n], cf[at : at + n]
            at += n
            hits.append((hit_g[back[:n_g]], hit_f[back[n_g:]]))
        self.dup = self._finish(eg, hits[0][0], hits[1][0])
        self.folder_dup = self._finish(ef, hits[0][1], hits[1][1])
        self.duplicate_chars = int((self.dup[1] - self.dup[0]).sum())

    def _earlier(
        self, hashes: U64, docs: I64
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        """For each ``(hash, doc)``: whether a window with that hash lies (anywhere) in a
        document before ``doc`` in id order, and whether one lies in an earlier document of
        ``doc``'s folder. One pass over every window of the room.

        Keeps, per distinct hash, the first document holding it and, per distinct
        ``(hash, folder)`` pair queried, the first document of that folder holding it (a hash
        queried from one folder only, the common case, needs no pair lookup); so the work per
        room window is O(1) however often its text repeats.
        """
        if hashes.size == 0:
            z = np.zeros(0, dtype=bool)
            return z, z
        n_docs, n_f = self.n_docs, max(1, len(self.folder_names))
        table = _Table(hashes)
        inv, n_keys = table.inverse, table.size
        q_folder = self.folder_of[docs]
        lo_f = np.full(n_keys, n_f, dtype=np.int64)
        hi_f = np.full(n_keys, -1, dtype=np.int64)
        np.minimum.at(lo_f, inv, q_folder)
        np.maximum.at(hi_f, inv, q_folder)
        key_folder = np.where(lo_f == hi_f, lo_f, -1)  # the one folder it is queried from
        multi_q = np.flatnonzero(key_folder[inv] < 0)
        pairs = (
            _Table((inv[multi_q] * n_f + q_folder[multi_q]).astype(np.uint64))
            if multi_q.size
            else None
        )
        first_doc = np.full(n_keys, n_docs, dtype=np.int64)
        first_same = np.full(n_keys, n_docs, dtype=np.int64)  # single-folder keys
        first_pair = np.full(pairs.size if pairs else 0, n_docs, dtype=np.int64)
        n_win = max(0, self.cp.size - K + 1)
        for s in range(0, n_win, _CHUNK):
            e = min(n_win, s + _CHUNK)
            k = table.get(_window_hashes(self.cp[s : e + K - 1]))
            where = np.flatnonzero(k >= 0)
            if where.size == 0:
                continue
            doc = self._doc_of_range(s, e)[where]
            ok = where + (s + K) <= self.doc_starts[doc + 1]  # window inside its document
            k, doc = k[where[ok]], doc[ok]
            np.minimum.at(first_doc, k, doc)
            folder = self.folder_of[doc]
            kf = key_folder[k]
            same = kf == folder
            np.minimum.at(first_same, k[same], doc[same])
            if pairs is not None:
                many = np.flatnonzero(kf < 0)
                p = pairs.get((k[many].astype(np.int64) * n_f + folder[many]).astype(np.uint64))
                found = p >= 0
                np.minimum.at(first_pair, p[found], doc[many[found]])
        in_folder = first_same[inv]
        if pairs is not None:
            in_folder[multi_q] = first_pair[pairs.inverse]
        return first_doc[inv] < docs, in_folder < docs

    def _doc_of_range(self, s: int, e: int) -> I64:
        """Document index of every position in ``[s, e)`` (length ``e - s``)."""
        d0 = int(np.searchsorted(self.doc_starts, s, side="right")) - 1
        d1 = int(np.searchsorted(self.doc_starts, e - 1, side="right")) - 1
        bounds = self.doc_starts[d0 : d1 + 2].clip(s, e)
        return np.repeat(np.arange(d0, d1 + 1, dtype=np.int64), np.diff(bounds))

    # ------------------------------------------------------------------ runs
    def _runs(self, sel: I64) -> _Runs:
        """Group hit aligned windows (``sel``: increasing indices into the window arrays) into
        runs: overlapping or touching windows of one document."""
        pos, doc = self.win_pos[sel], self.win_doc[sel]
        if pos.size == 0:
            z = np.empty(0, np.int64)
            return _Runs(z, z, np.empty(0, np.uint64), np.empty(0, np.uint64), z, z, z)
        ends = pos + K
        new = np.ones(pos.size, dtype=bool)
        new[1:] = (pos[1:] > np.maximum.accumulate(ends)[:-1]) | (doc[1:] != doc[:-1])
        heads = np.flatnonzero(new)
        tails = np.append(heads[1:], pos.size) - 1
        rdoc = doc[heads]
        return _Runs(
            first=pos[heads],
            last=pos[tails],
            first_hash=self.win_hash[sel[heads]],
            last_hash=self.win_hash[sel[tails]],
            lo=self.doc_starts[rdoc],
            hi=self.doc_starts[rdoc + 1] - K,
            doc=rdoc,
        )

    def _cp_at(self, pos: I64) -> U64:
        """Code points at ``pos`` (clipped to the text) as uint64."""
        return np.asarray(self.cp[pos.clip(0, max(0, self.cp.size - 1))]).astype(np.uint64)

    def _step_left(self, h: U64, p: I64) -> U64:
        """Hashes of the windows at ``p - 1`` from those (``h``) at ``p`` (rolling, exact)."""
        return self._cp_at(p - 1) * _B_TOP + (h - self._cp_at(p + K - 1)) * _B_INV

    def _step_right(self, h: U64, p: I64) -> U64:
        """Hashes of the windows at ``p + 1`` from those (``h``) at ``p`` (rolling, exact)."""
        return (h - self._cp_at(p) * _B_TOP) * _B + self._cp_at(p + K)

    def _edge_side(self, runs: _Runs, sign: int) -> tuple[U64, npt.NDArray[np.bool_]]:
        """``(hashes, ok)``, each (R, S-1): the windows at ``first - t`` (``sign`` -1) or
        ``last + t`` (``sign`` +1) for t = 1 .. S-1, and whether each lies inside the run's
        document (hashes outside it are meaningless)."""
        w = STRIDE - 1
        out = np.empty((runs.first.size, w), np.uint64)
        p, h = (runs.first, runs.first_hash) if sign < 0 else (runs.last, runs.last_hash)
        for t in range(w):
            h = self._step_left(h, p) if sign < 0 else self._step_right(h, p)
            p = p + sign
            out[:, t] = h
        steps = np.arange(1, w + 1, dtype=np.int64)[None, :]
        if sign < 0:
            return out, runs.first[:, None] - steps >= runs.lo[:, None]
        return out, runs.last[:, None] + steps <= runs.hi[:, None]

    def _extend(self, runs: _Runs, seen: _HashSet) -> tuple[I64, I64]:
        """Covered intervals: each run extended window by window (at most S-1 each side) while
        the next window is observed and inside the document; merged as :meth:`_finish` does.
        Only runs still growing are stepped, so the cost is O(R + extension steps)."""
        starts, ends = runs.first.copy(), runs.last + K
        for sign in (-1, 1):
            act = np.flatnonzero(runs.first > runs.lo if sign < 0 else runs.last < runs.hi)
            p = (runs.first if sign < 0 else runs.last)[act]
            h = (runs.first_hash if sign < 0 else runs.last_hash)[act]
            for _ in range(STRIDE - 1):
                if act.size == 0:
                    break
                h = self._step_left(h, p) if sign < 0 else self._step_right(h, p)
                p = p + sign
                hit = seen.contains(h)
                act, p, h = act[hit], p[hit], h[hit]
                if sign < 0:
                    starts[act] = p
                    more = p > runs.lo[act]
                else:
                    ends[act] = p + K
                    more = p < runs.hi[act]
                act, p, h = act[more], p[more], h[more]
        return self._merge(starts, ends)

    @classmethod
    def _finish(
        cls,
        runs: _Runs,
        left_hit: npt.NDArray[np.bool_],
        right_hit: npt.NDArray[np.bool_],
    ) -> tuple[I64, I64]:
        """Extend each run by its chain of hit edge windows; merge into disjoint intervals.
        ``left_hit`` / ``right_hit``: (R, S-1), only ever true for windows inside the document."""
        starts = runs.first - np.cumprod(left_hit, axis=1).sum(axis=1)
        ends = runs.last + K + np.cumprod(right_hit, axis=1).sum(axis=1)
        return cls._merge(starts, ends)

    @staticmethod
    def _merge(starts: I64, ends: I64) -> tuple[I64, I64]:
        """Sort intervals and merge overlapping ones (touching ones stay apart)."""
        if starts.size == 0:
            z = np.empty(0, np.int64)
            return z, z
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
        new = np.ones(starts.size, dtype=bool)
        new[1:] = starts[1:] >= np.maximum.accumulate(ends)[:-1]
        heads = np.flatnonzero(new)
        return starts[heads], np.maximum.reduceat(ends, heads)

    def _per_doc(self, starts: I64, ends: I64) -> I64:
        """Interval lengths summed per document (intervals never cross documents)."""
        if starts.size == 0:
            return np.zeros(self.n_docs, dtype=np.int64)
        doc = np.searchsorted(self.doc_starts, starts, side="right") - 1
        return np.bincount(doc, weights=ends - starts, minlength=self.n_docs).astype(np.int64)

    def _overlap_per_doc(self, a: tuple[I64, I64], b: tuple[I64, I64]) -> I64:
        """Per-document length of the intersection of two sets of disjoint intervals."""
        if a[0].size == 0 or b[0].size == 0:
            return np.zeros(self.n_docs, dtype=np.int64)
        pos = np.concatenate([a[0], a[1], b[0], b[1]])
        na, nb = a[0].size, b[0].size
        da = np.concatenate([np.ones(na), -np.ones(na), np.zeros(2 * nb)]).astype(np.int64)
        db = np.concatenate([np.zeros(2 * na), np.ones(nb), -np.ones(nb)]).astype(np.int64)
        order = np.argsort(pos, kind="stable")
        pos = pos[order]
        both = (np.cumsum(da[order]) > 0) & (np.cumsum(db[order]) > 0)
        seg = np.flatnonzero(both[:-1])
        return self._per_doc(pos[seg], pos[seg + 1])

    # ------------------------------------------------------------------ cache
    @classmethod
    def load_or_build(cls, room: DataRoom, cache_dir: Path) -> CoverageIndex:
        """The index for ``room`` from ``cache_dir``, built and saved there on a miss.

        Files: ``<room_hash>.coverage-<PROBE_VERSION>-k<K>-s<STRIDE>.npz`` (index) and
        ``....cp.npy`` (normalised code points, memory-mapped read-only on load), written under
        temporary names and renamed into place. Within one process, concurrent callers for
        the same room share one build and one loaded index (kept for the life of the process).
        An unreadable or mismatched cache is rebuilt; an unwritable ``cache_dir`` just skips
        saving. Raises what :meth:`build` raises.
        """
        cache_dir = Path(cache_dir)
        stem = f"{room.room_hash}.coverage-{PROBE_VERSION}-k{K}-s{STRIDE}"
        npz, cpf = cache_dir / f"{stem}.npz", cache_dir / f"{stem}.cp.npy"
        key = str(npz.resolve())
        with _LOCKS_GUARD:
            lock = _LOCKS.setdefault(key, threading.Lock())
        with lock:
            hit = _LOADED.get(key)
            if hit is not None:
                return hit
            index = None
            if npz.is_file() and cpf.is_file():
                with contextlib.suppress(OSError, ValueError, KeyError):
                    index = cls._load(npz, cpf, room.room_hash)
            if index is None:
                index = cls.build(room)
                with contextlib.suppress(OSError):
                    index._save(npz, cpf)
            _LOADED[key] = index
            return index

    def _save(self, npz: Path, cpf: Path) -> None:
        npz.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "version": PROBE_VERSION,
            "k": K,
            "stride": STRIDE,
            "room_hash": self.room_hash,
            "doc_ids": self.doc_ids,
            "folders": self.folders,
        }
        tag = f"{os.getpid()}.{threading.get_ident()}.tmp"
        tmp_cp = cpf.with_name(f"{cpf.name}.{tag}")
        with open(tmp_cp, "wb") as fh:
            np.save(fh, np.asarray(self.cp))
        tmp_npz = npz.with_name(f"{npz.name}.{tag}")
        with open(tmp_npz, "wb") as fh:
            np.savez(
                fh,
                meta=np.array(json.dumps(meta)),
                doc_starts=self.doc_starts,
                win_pos=self.win_pos,
                win_doc=self.win_doc,
                win_hash=self.win_hash,
                dup_s=self.dup[0],
                dup_e=self.dup[1],
                fdup_s=self.folder_dup[0],
                fdup_e=self.folder_dup[1],
                cp_sha=np.array(_digest(np.asarray(self.cp))),
            )
        tmp_cp.replace(cpf)
        tmp_npz.replace(npz)

    @classmethod
    def _load(cls, npz: Path, cpf: Path, room_hash: str) -> CoverageIndex | None:
        with np.load(npz, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if (meta["version"], meta["k"], meta["stride"], meta["room_hash"]) != (
                PROBE_VERSION,
                K,
                STRIDE,
                room_hash,
            ):
                return None
            arrays = {name: z[name] for name in z.files if name != "meta"}
        cp = np.load(cpf, mmap_mode="r", allow_pickle=False)
        if cp.shape[0] != int(arrays["doc_starts"][-1]) or _digest(cp) != str(arrays["cp_sha"]):
            return None
        return cls(
            room_hash=room_hash,
            doc_ids=list(meta["doc_ids"]),
            folders=list(meta["folders"]),
            cp=cp,
            doc_starts=arrays["doc_starts"],
            win_pos=arrays["win_pos"],
            win_doc=arrays["win_doc"],
            win_hash=arrays["win_hash"],
            dup=(arrays["dup_s"], arrays["dup_e"]),
            folder_dup=(arrays["fdup_s"], arrays["fdup_e"]),
        )


def _digest(cp: Arr) -> str:
    """Cheap integrity check of the code-point file: sha256 of its size and 64 sampled bytes."""
    h = hashlib.sha256(f"{cp.dtype}:{cp.shape[0]}".encode())
    if cp.shape[0]:
        h.update(np.asarray(cp[np.linspace(0, cp.shape[0] - 1, 64).astype(np.int64)]).tobytes())
    return h.hexdigest()


_LOCKS_GUARD = threading.Lock()
_LOCKS: dict[str, threading.Lock] = {}
_LOADED: dict[str, CoverageIndex] = {}


class CoverageProbe:
    """Coverage of one episode. Call :meth:`observe` with every model input; thread-safe.

    Memory: 8 bytes per distinct K-window observed (about 8 MB per million input characters).
    """

    def __init__(self, index: CoverageIndex) -> None:
        self.index = index
        self._lock = threading.Lock()
        self._seen_texts: set[bytes] = set()
        self._parts: list[U64] = []

    def observe(self, text: str) -> None:
        """Record one model input exactly as sent (a message's content, a sub-call prompt, or
        a whole request rendered to text). Repeats of an identical text are skipped cheaply;
        order and repetition never change the result."""
        if not text:
            return
        digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        with self._lock:
            if digest in self._seen_texts:
                return
            self._seen_texts.add(digest)
        h = _window_hashes(_codepoints(normalise(text)))
        if h.size:
            h = _unique(h)
            with self._lock:
                self._parts.append(h)

    def _observed(self) -> U64:
        with self._lock:
            if len(self._parts) > 1:
                self._parts = [_unique(np.concatenate(self._parts))]
            return self._parts[0] if self._parts else np.empty(0, np.uint64)

    def detail(self) -> CoverageDetail:
        """Coverage with the character counts behind it (see the module docstring)."""
        ix = self.index
        observed = self._observed()
        if observed.size:
            seen = _HashSet(observed)
            covered = ix._extend(ix._runs(np.flatnonzero(seen.contains(ix.win_hash))), seen)
        else:
            covered = (np.empty(0, np.int64), np.empty(0, np.int64))
        cov_doc = ix._per_doc(*covered)
        dup_doc = ix._per_doc(*ix.dup)
        cov_dup_doc = ix._overlap_per_doc(covered, ix.dup)
        fdup_doc = ix._per_doc(*ix.folder_dup)
        cov_fdup_doc = ix._overlap_per_doc(covered, ix.folder_dup)

        per_document: dict[str, float] = {}
        per_chars: dict[str, tuple[int, int]] = {}
        for i, doc_id in enumerate(ix.doc_ids):
            n = int(ix.doc_len[i])
            c = int(cov_doc[i])
            per_document[doc_id] = c / n if n else 0.0
            per_chars[doc_id] = (c, n)
        per_folder: dict[str, float] = {}
        for f_idx, name in enumerate(ix.folder_names):
            m = ix.folder_of == f_idx
            num = int(cov_doc[m].sum() - cov_fdup_doc[m].sum())
            den = int(ix.doc_len[m].sum() - fdup_doc[m].sum())
            per_folder[name] = num / den if den else 0.0
        dup_total = int(dup_doc.sum())
        num = int(cov_doc.sum() - cov_dup_doc.sum())
        den = ix.n_chars - dup_total
        coverage = Coverage(
            method=PROBE_VERSION,
            overall=num / den if den else 0.0,
            per_folder=per_folder,
            per_document=per_document,
        )
        return CoverageDetail(
            coverage=coverage,
            covered_chars=num,
            unique_chars=den,
            duplicate_chars=dup_total,
            duplicate_covered_chars=int(cov_dup_doc.sum()),
            per_document_chars=per_chars,
        )

    def result(self) -> Coverage:
        """The episode's :class:`Coverage` (``method`` = :data:`PROBE_VERSION`) so far."""
        return self.detail().coverage
