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
points, the hash of every aligned window and the duplicate intervals. Each distinct observed
input is kept as its normalised text; :meth:`CoverageProbe.result` hashes all their K-windows
into a set (one episode's result at a time), tests every aligned
window against that set (in slices of :data:`_SCAN`, so its temporaries stay a few MB), merges
hits into runs and extends each run's two ends window by window (at most ``S - 1`` windows
each side), rolling the end window's hash one character per step and stepping only the runs
still growing; the duplicate characters it overlaps come from prefix sums over the (sorted)
duplicate intervals, O(R log D).

**Build** (streaming; :class:`_Builder`). Pass 0 normalises one document at a time (its text
is read without being kept on the :class:`~rlmdistill.rooms.room.Document`) and appends its
code points to a raw file (1, 2 or 4 bytes each: the narrowest that fits the room, widened in
place if a later document needs it) and its aligned-window hashes to a second file. Pass 1
reads the code points back in chunks of whole documents of one folder (never mapped or held
whole), hashes every window and looks it up in an open-addressing table of all aligned hashes
(:class:`_KeyTable`, sized to all aligned windows at load <= 0.7, of which only the distinct
ones take a slot; filled in batches; a packed-bit prefilter of 8 bits per key rejects most
non-keys), keeping per key the first position that holds it; a per-folder table does the same
within the folder (built when the scan enters the folder, dropped when it leaves). Documents
are scanned in id order, so when the scan is at document ``d`` every earlier occurrence has
been seen: the aligned windows of ``d`` are marked duplicate at once and their runs formed;
each run side is kept as its anchor window's index into the window file and the first
position of its text (:class:`_Chains`, 8 bytes a side). Then each side's chain of up to
``S - 1`` edge windows is followed in that earlier copy (rolling both hashes); where the copy
diverges, the window is looked up in a scan of the room (round 1) and, where it occurs
earlier, followed again from there; chains still open after that have all their remaining
windows looked up in one more scan (round 2). Each look-up scan tests every window against one
packed-bit prefilter of all the round's distinct hashes (16 bits each); only the windows that
pass it meet the room's and the folder's tables. Hashing and prefilter tests run in blocks of
:data:`_BLOCK` values (temporaries in the CPU's cache), and the heap keeps the per-chunk
temporaries for reuse (:func:`_heap_settings`). Results equal the earlier builders (same
intervals and coverage: ``tests/test_coverage_build.py``, on synthetic rooms of 0.9, 5.2 and
62.5 M characters) and the brute-force reading of the definition (``tests/test_coverage.py``).

**Complexity.** Build: O(N) for N room characters, whatever the repetition: three hashing
scans (the look-up rounds only up to the last queried document), each window with an O(1)
prefilter test and, for keys, an O(1) table probe. Memory: the key table (8 / 0.7 bytes per
aligned window, A = N / S of them, plus its per-slot first position, 4 / 0.7 bytes), the
prefilter (1 byte per window), the largest folder's table, the run sides (8 bytes each while
the scan runs, ~37 while they are followed) and the look-up rounds' tables (~20 bytes per
distinct hash), plus ~50 MB of per-chunk temporaries: measured 912 MiB at the peak for a
325 M-character room (2.8x its 323 MiB of UTF-8 text). Kept: code points (N x 1..4 bytes) and
window hashes (8 x A bytes = 0.5 bytes per character), both memory-mapped from the cache,
plus the duplicate intervals (16 bytes each). ``observe``: O(n) for an input of n characters
(its normalised text is kept: 1-4 bytes per character).
``result``: O(A + M log M + R x S) for M distinct observed windows and R runs; the mapped
pages each step reads are released after it (every read maps 64 KB around it, the kernel's
fault-around). The index is cached on disk (:meth:`CoverageIndex.load_or_build`, cache format
:data:`CACHE_FORMAT`); processes share one copy of the mapped files through the page cache.
Measured (``benchmarks/bench_lab_room.py``, ``docs/synth.md``, 2-core Intel Xeon, 2026-12-02):
a 5,000-document synthetic room of 325 M normalised characters (29.8% duplicates) builds in
99 s with a peak of 912 MiB (2.8x its text; the in-memory builder took 8.3-8.7 GB, the first
streaming builder 1.4 GB), and ``result()`` takes about 1 s; older figures (in-memory
builder, ``benchmarks/bench_coverage_probe.py``, 5,000 documents, 2-core shared machine):
synthetic room of 40 M characters (synth-v2, 29% duplicates) built in 6.9 s, ``result()``
0.14 s.

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
import math
import mmap
import os
import tempfile
import threading
import unicodedata
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt

from rlmdistill import heap
from rlmdistill.rooms.room import DataRoom
from rlmdistill.traces.schema import Coverage

__all__ = [
    "CACHE_FORMAT",
    "PROBE_VERSION",
    "STRIDE",
    "CoverageDetail",
    "CoverageIndex",
    "CoverageProbe",
    "K",
    "WindowCache",
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

_BLOCK = 1 << 15
"""Values per step of the element-wise passes over a chunk (hashing, prefilter tests): 256 KB
per uint64 temporary, so a pass's temporaries stay in the CPU's L2 cache."""

_SCAN = 1 << 18
"""Aligned windows tested per slice in :meth:`CoverageProbe.detail` (~5 MB of temporaries)."""

_EXTEND = 1 << 14
"""Runs extended per batch in :meth:`CoverageProbe.detail`."""

_GATHER = 1 << 10
"""Runs whose code points are read before their pages are released
(:meth:`CoverageIndex._gather`)."""

CACHE_FORMAT = 2
"""On-disk layout of a cached index (part of its file names). 1: one ``.npz`` with the window
positions, documents and hashes read into memory plus a ``.cp.npy``; 2: ``.npz`` metadata and
duplicate intervals, raw ``.cp`` and ``.win`` files that are memory-mapped."""

_BASE = 0x9E3779B97F4A7C15  # odd, so invertible mod 2^64
_BASE_INV = pow(_BASE, -1, 1 << 64)
_MIX = np.uint64(0xD6E8FEB86659FD93)  # odd multiplier for hash-table slots
_B = np.uint64(_BASE)
_B_INV = np.uint64(_BASE_INV)
_B_TOP = np.uint64(pow(_BASE, K - 1, 1 << 64))  # B^(K-1): weight of a window's first char

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
Arr = npt.NDArray[Any]
_T = TypeVar("_T")
_R = TypeVar("_R")


def normalise(text: str) -> str:
    """Normalised form used on both sides: NFKC, ``lower()``, whitespace runs -> one space.

    The runs are collapsed with ``str.split()`` (2-3x faster than ``re.sub(r"\\s+", ...)``),
    keeping one space where the text starts or ends with whitespace: the same result, since
    ``str.isspace`` and the ``\\s`` class agree on every code point (checked exhaustively in
    the tests)."""
    t = unicodedata.normalize("NFKC", text).lower()
    if not t:
        return t
    body = " ".join(t.split())
    if not body:
        return " "
    return (" " if t[0].isspace() else "") + body + (" " if t[-1].isspace() else "")


def _codepoints(text: str) -> npt.NDArray[np.uint32]:
    """Code points of ``text`` as uint32 (lone surrogates kept)."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")


@functools.lru_cache(maxsize=1)
def _powers() -> tuple[U64, U64]:
    """``(B^t, B^-t)`` mod 2^64 for t < ``max(_CHUNK, _BLOCK) + K`` (uint64 products wrap mod
    2^64)."""
    n = max(_CHUNK, _BLOCK) + K
    pw = np.empty(n, dtype=np.uint64)
    inv = np.empty(n, dtype=np.uint64)
    pw[0] = inv[0] = 1
    pw[1:] = _BASE
    inv[1:] = _BASE_INV
    return np.cumprod(pw, dtype=np.uint64), np.cumprod(inv, dtype=np.uint64)


def _window_hashes(cp: Arr) -> U64:
    """Hash of every K-window of the code-point array ``cp`` (length ``len(cp) - K + 1``).

    ``h(i) = sum_j cp[i + j] * B^(K - 1 - j) mod 2^64``, from prefix sums of ``cp[t] * B^-t``,
    computed in blocks of :data:`_BLOCK` windows whose temporaries stay in the CPU's cache
    (with 1 M-window blocks every step streamed 8 MB arrays through memory: 2-3x slower).
    """
    n = int(cp.shape[0])
    if n < K:
        return np.empty(0, dtype=np.uint64)
    pw, inv = _powers()
    out = np.empty(n - K + 1, dtype=np.uint64)
    block = min(_BLOCK, n - K + 1)  # a short text's temporaries are its own size: fresh
    seg = np.empty(block + K - 1, dtype=np.uint64)  # 256 KB pages per call cost page faults
    q = np.zeros(block + K, dtype=np.uint64)
    for s in range(0, n - K + 1, _BLOCK):
        e = min(n - K + 1, s + _BLOCK)
        m = e - s + K - 1
        sg, o = seg[:m], out[s:e]
        sg[:] = cp[s : e + K - 1]
        np.multiply(sg, inv[:m], out=sg)
        np.cumsum(sg, out=q[1 : m + 1])
        np.subtract(q[K : m + 1], q[: m - K + 1], out=o)
        np.multiply(o, pw[K - 1 : m], out=o)
    return out


def _unique(x: U64, *, overwrite: bool = False) -> U64:
    """Sorted unique values (sort-based; ``np.unique``'s hash path is slower for uint64).
    ``overwrite=True`` sorts ``x`` itself (one copy of it less)."""
    s = x.ravel() if overwrite else np.sort(x.ravel())
    if overwrite:
        s.sort()
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
    """Sorted unique uint64 keys with a packed-bit prefilter on the top bits, for fast ``isin``.

    The prefilter has 16..32 bits per key (2^12 .. 2^27 bits, stored 8 to a byte), so 3-6% of
    non-keys pass it. It is sized to the keys, not fixed: a fixed 16 MB ``np.zeros`` cost up
    to 33 ms per episode (page faults when the allocator hands back recycled memory that must
    be zeroed), a third of the harness overhead of a short episode, and a byte per bit cost an
    episode 8-16 MB while it computed its result (measured with 8 episodes at once). Memory:
    8 bytes per key plus 2..4 bytes per key of prefilter. ``unique=True``: ``keys`` are already
    sorted and unique (kept as they are, no copy).
    """

    def __init__(self, keys: U64, bits: int | None = None, *, unique: bool = False) -> None:
        self.keys = keys if unique else _unique(keys)
        if bits is None:
            bits = min(27, max(12, int(self.keys.size).bit_length() + 4))
        self.shift = np.uint64(64 - bits)
        self.bitmap = np.zeros(1 << (bits - 3), dtype=np.uint8)
        for s in range(0, self.keys.size, _SCAN):  # slices: temporaries stay ~3 MB
            top = (self.keys[s : s + _SCAN] >> self.shift).astype(np.uint32)
            np.bitwise_or.at(self.bitmap, top >> 3, np.left_shift(1, top & 7).astype(np.uint8))

    def lookup(self, h: U64) -> tuple[I64, I64]:
        """``(where, idx)``: positions in ``h`` whose value is a key, and the key's index."""
        top = h >> self.shift
        bit = (self.bitmap[top >> np.uint64(3)] >> (top & np.uint64(7)).astype(np.uint8)) & 1
        cand = np.flatnonzero(bit)
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


def _passing(test: Any, h: U64) -> I64:
    """``np.flatnonzero(test(h))``, tested in blocks of :data:`_BLOCK` values (cache-sized
    temporaries)."""
    if h.size <= _BLOCK:
        return np.flatnonzero(test(h))
    parts = [np.flatnonzero(test(h[s : s + _BLOCK])) + s for s in range(0, h.size, _BLOCK)]
    return np.concatenate(parts)


class _BitFilter:
    """Packed-bit prefilter on the top bits of uint64 keys: :meth:`maybe` is False where a
    value is certainly not a key. ``n_keys``: the most keys it will hold; ``bits_per_key``:
    filter bits per key (at most 2^34 bits), so about ``1 / bits_per_key`` of non-keys pass.
    Memory: ``n_keys * bits_per_key / 8`` bytes."""

    def __init__(self, n_keys: int, bits_per_key: int) -> None:
        bits = min(34, max(12, math.ceil(math.log2(max(1, n_keys) * bits_per_key))))
        self.shift = np.uint64(64 - bits)
        self.bitmap = np.zeros(1 << (bits - 3), dtype=np.uint8)

    def add(self, values: U64) -> None:
        """Set the bits of ``values`` (any number, repeats allowed)."""
        for s in range(0, values.size, _CHUNK):
            top = values[s : s + _CHUNK] >> self.shift
            np.bitwise_or.at(
                self.bitmap, top >> np.uint64(3), (1 << (top & np.uint64(7))).astype(np.uint8)
            )

    def maybe(self, h: U64) -> npt.NDArray[np.bool_]:
        top = h >> self.shift
        byte = self.bitmap[top >> np.uint64(3)]
        return ((byte >> (top & np.uint64(7)).astype(np.uint8)) & 1).view(np.bool_)


class _KeyTable:
    """Open-addressing hash table (linear probing) of distinct uint64 keys, filled in batches,
    with a packed-bit prefilter on the keys' top bits.

    ``capacity``: the most keys it will hold (below 2^31); ``max_load``: the slot array holds
    ``capacity / max_load`` slots (any number: a key's home slot is the high half of its
    mixed hash scaled to the table, Lemire's multiply-shift range reduction, "A fast
    alternative to the modulo reduction", 2016), so a full table has load ``max_load``; at
    the default 0.7 a lookup resolves in about 1-3 probes (linear probing: about
    ``(1 + 1 / (1 - load)) / 2`` for a key). A caller whose capacity is an upper bound on
    the distinct keys (the build: every aligned window, of which only the distinct ones
    take a slot) can allow more. ``filter_bits``: prefilter bits per key. Each key has a
    slot (its id, int64 in ``[0, n_slots]``), so per-key values live in arrays of
    ``n_slots + 1`` entries (:meth:`values`). Memory: 8 / ``max_load`` bytes per key (slots)
    plus ``filter_bits / 8`` bytes per key (prefilter). Key 0 (the empty-slot marker) lives
    in the extra last slot. Lookups are whole-array numpy operations, one round per probe
    step.
    """

    def __init__(self, capacity: int, filter_bits: int = 8, max_load: float = 0.7) -> None:
        self.n_slots = max(16, math.ceil(max(1, capacity) / max_load))
        if self.n_slots >= 2**32:
            raise ValueError(f"key table of {capacity:,} keys: too large (2^32 slots or more)")
        self.slot_key = np.zeros(self.n_slots, dtype=np.uint64)
        self.has_zero = False
        fbits = min(34, max(6, math.ceil(math.log2(max(1, capacity) * filter_bits))))
        self.fshift = np.uint64(64 - fbits)
        # A byte per bit up to 32 MB (one gather per test), packed 8 to a byte beyond.
        self.packed = fbits > 25
        self.filter = np.zeros(1 << (fbits - 3 if self.packed else fbits), dtype=np.uint8)

    def _home(self, h: U64) -> I64:
        n = np.uint64(self.n_slots)
        return ((((h * _MIX) >> np.uint64(32)) * n) >> np.uint64(32)).view(np.int64)

    def _next(self, slot: I64) -> I64:
        """The slot after each of ``slot`` (wrapping at the end of the table)."""
        slot = slot + 1
        slot[slot == self.n_slots] = 0
        return slot

    def add(self, values: U64) -> None:
        """Insert ``values`` (duplicates and keys already present allowed)."""
        values = np.asarray(values, dtype=np.uint64).ravel()
        if values.size == 0:
            return
        top = values >> self.fshift
        if self.packed:
            np.bitwise_or.at(
                self.filter, top >> np.uint64(3), (1 << (top & np.uint64(7))).astype(np.uint8)
            )
        else:
            self.filter[top] = 1
        zero = values == 0
        if zero.any():
            self.has_zero = True
            values = values[~zero]
        slot = self._home(values)
        while values.size:
            free = self.slot_key[slot] == 0
            self.slot_key[slot[free]] = values[free]  # one writer per slot wins
            more = self.slot_key[slot] != values  # equal values always move together
            values, slot = values[more], self._next(slot[more])

    @property
    def size(self) -> int:
        """Number of distinct keys."""
        return int(np.count_nonzero(self.slot_key)) + int(self.has_zero)

    def values(self, fill: int, dtype: Any) -> Arr:
        """A per-slot value array (``n_slots + 1`` entries of ``dtype``) filled with ``fill``."""
        return np.full(self.n_slots + 1, fill, dtype=dtype)

    def maybe(self, h: U64) -> npt.NDArray[np.bool_]:
        """Prefilter: False where ``h`` is certainly not a key (about 8% false positives at
        capacity)."""
        top = h >> self.fshift
        if not self.packed:
            return self.filter[top].view(np.bool_)
        byte = self.filter[top >> np.uint64(3)]
        return ((byte >> (top & np.uint64(7)).astype(np.uint8)) & 1).view(np.bool_)

    def get(self, h: U64) -> I64:
        """Slot of each value of ``h`` (``-1`` where it is not a key)."""
        h = np.asarray(h, dtype=np.uint64)
        if h.size == 0:
            return np.full(h.shape, -1, dtype=np.int64)
        slot = self._home(h)
        kk = self.slot_key[slot]
        hit = kk == h  # first probe on the whole array; the rest only for the few left
        out = np.where(hit, slot, -1)
        todo = np.flatnonzero(~hit & (kk != 0))
        slot = self._next(slot[todo])
        while todo.size:
            kk = self.slot_key[slot]
            hit = kk == h[todo]
            out[todo[hit]] = slot[hit]
            more = ~hit & (kk != 0)
            todo, slot = todo[more], self._next(slot[more])
        zero = h == 0  # the empty-slot marker: key 0 has the extra slot instead
        if zero.any():
            out[zero] = self.n_slots if self.has_zero else -1
        return out

    def find(self, h: U64) -> tuple[I64, I64]:
        """``(where, slot)``: positions in ``h`` holding a key, and that key's slot."""
        cand = _passing(self.maybe, h)
        slot = self.get(h[cand])
        ok = slot >= 0
        return cand[ok], slot[ok]


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


def _n_windows(lengths: I64) -> I64:
    """Indexed (aligned) windows per document: starts ``0, S, 2S, ...`` up to ``len - K``,
    plus the last window ``len - K`` when it is not aligned (0 for a document shorter than K)."""
    over = np.asarray(lengths, dtype=np.int64) - K
    return np.where(over >= 0, over // STRIDE + 1 + (over % STRIDE != 0), 0).astype(np.int64)


def _aligned_offsets(length: int) -> I64:
    """Offsets of one document's indexed windows (see :func:`_n_windows`)."""
    if length < K:
        return np.empty(0, dtype=np.int64)
    p = np.arange(0, length - K + 1, STRIDE, dtype=np.int64)
    return p if p[-1] == length - K else np.append(p, length - K)


def _doc_dtype(n_docs: int) -> Any:
    """Narrowest dtype for document indices up to ``n_docs`` (the "none yet" value)."""
    return np.uint16 if n_docs < 2**16 else np.int32


def _cp_dtype(top: int) -> Any:
    return np.uint8 if top < 256 else np.uint16 if top < 65536 else np.uint32


class _Chains:
    """Runs of duplicate aligned windows and the chains of edge windows beyond their ends,
    gathered chunk by chunk during :class:`_Builder`'s first scan (one instance for the room,
    one for folders), then decided by :meth:`start`, :meth:`step` and :meth:`finish`.

    Per run side (left of the run's first window, right of its last; ``L`` = left, ``R`` =
    right): the anchor window (an aligned window, stored as its index into the ``.win`` file:
    its start, document and hash follow from it) and ``q``: the start of an identical window
    in an earlier document (its first occurrence). A side's chain grows one window at a time
    while the next window lies inside the document and also in an earlier document (an
    earlier one of the same folder, for folders), at most ``S - 1`` windows: the module
    docstring's edge rule. Memory while the first scan runs: 4 + 4 bytes per side (8 + 8 for
    a room of 2^32 characters or more), in per-chunk arrays.
    """

    def __init__(self, idx_dtype: Any, pos_dtype: Any) -> None:
        self.idx_dtype, self.pos_dtype = idx_dtype, pos_dtype
        self.side: dict[str, list[list[Arr]]] = {"L": [[], []], "R": [[], []]}

    def add(
        self,
        aidx: I64,
        aloc: I64,
        adoc: I64,
        dup: npt.NDArray[np.bool_],
        slot_at: I64,
        firstpos: Arr,
    ) -> None:
        """Record the runs among one chunk's aligned windows (``aidx``: their indices into the
        ``.win`` file, ``aloc``: chunk-local starts, ``adoc``: documents, ``dup``: duplicate
        flags). ``slot_at``: each window of the chunk's key slot; ``firstpos``: per slot, the
        first position holding the key (in an earlier document, for a duplicate window)."""
        sel = np.flatnonzero(dup)
        if sel.size == 0:
            return
        pos, doc = aloc[sel], adoc[sel]
        new = np.ones(pos.size, dtype=bool)
        new[1:] = (pos[1:] > np.maximum.accumulate(pos + K)[:-1]) | (doc[1:] != doc[:-1])
        heads = np.flatnonzero(new)
        tails = np.append(heads[1:], pos.size) - 1
        for name, ends in (("L", heads), ("R", tails)):
            idx, q = self.side[name]
            idx.append(aidx[sel[ends]].astype(self.idx_dtype))
            q.append(firstpos[slot_at[pos[ends]]].astype(self.pos_dtype))

    def start(self, b: _Builder) -> tuple[U64, I64]:
        """Follow every chain in the earlier copy it was found in (:func:`_follow`); the
        windows where chains stopped and still need a look-up: ``(hashes, documents)``.

        A chain is followed by comparing the window after its end with the window after ``q``
        (the same text one step further in the earlier copy), rolling both hashes one
        character at a time. Where they differ, :meth:`_Builder._earliest` looks the window up
        (round 1); a chain whose window occurs in an earlier document is followed again from
        that occurrence, and where it stops once more, all its remaining windows are looked up
        at once (round 2, :meth:`step`), so the build scans the room twice more at most.
        """
        self.n = sum(a.size for a in self.side["L"][0])
        if not self.n:
            return np.empty(0, np.uint64), np.empty(0, np.int64)
        idx = np.concatenate(self.side["L"][0] + self.side["R"][0]).astype(np.int64)
        self.q = np.concatenate(self.side["L"][1] + self.side["R"][1]).astype(np.int64)
        self.side = {}
        _trim_heap()
        pos, doc = _positions(idx, b.win_first, b.doc_starts)
        self.pos, self.doc = pos, doc.astype(np.int32)
        del doc
        self.cur_h = b.window_hashes(idx)
        del idx
        self.ext = np.zeros(self.pos.size, dtype=np.int8)
        act = np.arange(self.pos.size, dtype=np.int64)
        self.act, nxt = _follow(b, act, *self._state())
        return nxt, self.doc[self.act].astype(np.int64)

    def _state(self) -> tuple[int, I64, Arr, Arr, U64, I64]:
        return self.n, self.pos, self.doc, self.ext, self.cur_h, self.q

    def step(self, b: _Builder, earliest: I64, nxt: U64) -> tuple[U64, I64]:
        """Round 1's answers in (``earliest``: first position of each looked-up window);
        the round-2 look-ups: every remaining window of each chain still open."""
        if not self.n:
            return np.empty(0, np.uint64), np.empty(0, np.int64)
        act = self.act
        hit = earliest < b.doc_starts[self.doc[act]]
        act, nxt, earliest = act[hit], nxt[hit], earliest[hit]
        self.ext[act] += 1
        self.q[act], self.cur_h[act] = earliest, nxt
        act = act[self.ext[act] < STRIDE - 1]
        act, nxt = _follow(b, act, *self._state())
        # every remaining window of these chains: steps ext+1 .. S-1 inside the document
        w = STRIDE - 1
        ok = np.zeros((act.size, w), dtype=bool)
        out_h: list[U64] = [np.empty(0, np.uint64)]
        out_d: list[Arr] = [np.empty(0, self.doc.dtype)]
        for s in range(0, act.size, _FOLLOW):  # batches: see _FOLLOW
            a = act[s : s + _FOLLOW]
            hs = np.zeros((a.size, w), dtype=np.uint64)
            okb = ok[s : s + _FOLLOW]
            cp = b.mapped()
            sg = np.where(a < self.n, -1, 1)
            d = self.doc[a]
            lo, hi = b.doc_starts[d], b.doc_starts[d + 1] - K
            col = self.ext[a].astype(np.int64)  # the column of step ext + 1
            p = (self.pos[a] + sg * (col + 1)).astype(np.int64)  # the window whose hash is nxt
            h = nxt[s : s + _FOLLOW].copy()
            alive = np.ones(a.size, dtype=bool)
            for _ in range(w):
                i = np.flatnonzero(alive & (col < w))
                if i.size == 0:
                    break
                hs[i, col[i]] = h[i]
                okb[i, col[i]] = True
                nxt_p = p[i] + sg[i]
                inside = (nxt_p >= lo[i]) & (nxt_p <= hi[i])
                alive[:] = False
                i = i[inside]
                if i.size:
                    h[i] = _roll(cp, h[i], p[i], sg[i])
                    p[i] += sg[i]
                    col[i] += 1
                    alive[i] = True
            del cp
            out_h.append(hs[okb])
            out_d.append(np.broadcast_to(d[:, None], okb.shape)[okb])
        self.act2, self.ok2 = act, ok
        return np.concatenate(out_h), np.concatenate(out_d)

    def finish(self, b: _Builder, earliest: I64, qdoc: I64) -> tuple[I64, I64]:
        """Round 2's answers in; the duplicate intervals (merged, sorted)."""
        if not self.n:
            z = np.empty(0, np.int64)
            return z, z
        act, ok = self.act2, self.ok2
        hit = np.zeros(ok.shape, dtype=bool)
        hit[ok] = earliest < b.doc_starts[qdoc]
        done = np.arange(STRIDE - 1)[None, :] < self.ext[act][:, None]  # steps already taken
        self.ext[act] = np.cumprod(done | hit, axis=1).sum(axis=1)
        n, ext = self.n, self.ext.astype(np.int64)
        return CoverageIndex._merge(self.pos[:n] - ext[:n], self.pos[n:] + K + ext[n:])


_TRIM_EVERY = 16
"""The build's scans give freed heap back (:func:`_trim_heap`) every this many chunks: its
per-chunk temporaries differ in size from chunk to chunk, and without it the heap's free
holes grew by ~200 MB over one scan of a 325 M-character room."""

_BUILD_LOAD = 0.7
"""Most load of the build's tables of aligned windows, sized to all of them (any size, not the
next power of two: 29.0 M slots instead of 33.6 M for a 325 M-character room's 20.3 M aligned
windows); only distinct windows take a slot, so the actual load is lower (0.66 there: 94.7%
of them distinct). At 0.85 (load 0.80) the longer probe sequences cost 16% more CPU on a
62.5 M-character room for 13 MiB less; at 0.6, 4% less CPU for 15 MiB more."""

_FOLLOW = 1 << 13
"""Chains followed per batch (each batch maps the code points afresh, so the pages it reads
leave the process's resident set when it ends: at most ~64 MB of them)."""


def _follow(
    b: _Builder, act: I64, n: int, pos: I64, doc: Arr, ext: Arr, cur_h: U64, q: I64
) -> tuple[I64, U64]:
    """Grow the chains ``act`` (each at the window ``pos + sign * ext``, hash ``cur_h``, the
    same text as the window at ``q`` in an earlier document; sides below ``n`` grow left, the
    others right) while the next window equals the next one after ``q`` (``ext``, ``cur_h``
    and ``q`` are updated in place). Returns the chains that stopped on a window inside their
    document that still needs a look-up, and that window's hash."""
    out_act: list[I64] = [np.empty(0, np.int64)]
    out_h: list[U64] = [np.empty(0, np.uint64)]
    for s in range(0, act.size, _FOLLOW):
        a = act[s : s + _FOLLOW]
        cp = b.mapped()
        sg = np.where(a < n, -1, 1)
        d = doc[a]
        lo, hi = b.doc_starts[d], b.doc_starts[d + 1] - K
        qq = q[a]
        qd = np.searchsorted(b.doc_starts, qq, side="right") - 1
        qlo, qhi = b.doc_starts[qd], b.doc_starts[qd + 1] - K
        hw, hq = cur_h[a], cur_h[a].copy()
        e = ext[a].astype(np.int64)
        w = pos[a] + sg * e
        open_ = np.flatnonzero(e < STRIDE - 1)
        stop_h = np.zeros(a.size, dtype=np.uint64)
        pend = np.zeros(a.size, dtype=bool)
        while open_.size:
            i = open_
            nw, nq = w[i] + sg[i], qq[i] + sg[i]
            inside = (nw >= lo[i]) & (nw <= hi[i])
            i, nw, nq = i[inside], nw[inside], nq[inside]
            h_next = _roll(cp, hw[i], w[i], sg[i])
            q_in = (nq >= qlo[i]) & (nq <= qhi[i])
            hq_next = _roll(cp, hq[i], np.where(q_in, qq[i], 1), sg[i])
            same = q_in & (h_next == hq_next)
            m = i[same]
            e[m] += 1
            w[m], qq[m], hw[m], hq[m] = nw[same], nq[same], h_next[same], hq_next[same]
            pend[i[~same]], stop_h[i[~same]] = True, h_next[~same]
            open_ = m[e[m] < STRIDE - 1]
        ext[a], cur_h[a], q[a] = e, hw, qq
        del cp
        out_act.append(a[pend])
        out_h.append(stop_h[pend])
    return np.concatenate(out_act), np.concatenate(out_h)


def _roll_left(h: U64, enter: U64, leave: U64) -> U64:
    """Hashes of the windows one character left of those hashed ``h``: ``enter`` is the code
    point coming in on the left, ``leave`` the one going out on the right (mod 2^64)."""
    return enter * _B_TOP + (h - leave) * _B_INV


def _roll_right(h: U64, enter: U64, leave: U64) -> U64:
    """Hashes of the windows one character right of those hashed ``h``: ``enter`` comes in
    on the right, ``leave`` goes out on the left (mod 2^64)."""
    return (h - leave * _B_TOP) * _B + enter


def _roll(cp: Arr, h: U64, p: I64, sign: I64) -> U64:
    """Hashes of the windows at ``p + sign`` (sign -1 or +1 each) from those (``h``) at ``p``."""
    out = np.empty(h.size, dtype=np.uint64)
    left = sign < 0

    def at(q: I64) -> U64:
        return np.asarray(cp[q]).astype(np.uint64)

    pl, pr = p[left], p[~left]
    out[left] = _roll_left(h[left], at(pl - 1), at(pl + K - 1))
    out[~left] = _roll_right(h[~left], at(pr + K), at(pr))
    return out


class _Builder:
    """Streaming build of a room's index files (see the module docstring, "Mechanism").

    Writes ``<base>.cp`` (normalised code points, raw little-endian, narrowest dtype) and
    ``<base>.win`` (uint64 hash of every aligned window) document by document, then finds the
    duplicate intervals in two scans over the code-point file, read back in chunks of whole
    documents of one folder (never mapped or held whole).
    """

    def __init__(self, room: DataRoom, base: Path) -> None:
        self.room = room
        self.base = base
        self.n_docs = len(room.documents)
        self.folders = [d.folder for d in room.documents]
        names = sorted(set(self.folders))
        rank = {f: i for i, f in enumerate(names)}
        self.folder_of = np.array([rank[f] for f in self.folders], dtype=np.int64)
        self.dtype: Any = np.uint8
        self.doc_starts = np.zeros(self.n_docs + 1, dtype=np.int64)
        self.win_first = np.zeros(self.n_docs + 1, dtype=np.int64)  # set by find_duplicates

    # ---------------------------------------------------------------- pass 0
    def write_text(self) -> None:
        """Normalise every document (one at a time; no text is kept) into the two files.

        A document's aligned-window hashes are computed and written on a second thread while
        the next document is read and normalised (numpy releases the GIL; normalising holds
        it); the files are the same, written in the same order."""
        cp_path, win_path = self.paths()
        with (
            open(cp_path, "w+b") as cp_fh,
            open(win_path, "wb") as win_fh,
            ThreadPoolExecutor(1, "coverage-pass0") as pool,
        ):
            fh = cp_fh
            pending: Future[Any] | None = None

            def hashes(a: Arr) -> None:
                win_fh.write(self._aligned_hashes(a).tobytes())

            for i, doc in enumerate(self.room.documents):
                text = normalise(doc.read_text())
                if text.isascii():
                    a: Arr = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
                else:
                    a = _codepoints(text)
                    need = _cp_dtype(int(a.max()))
                    if np.dtype(need).itemsize > np.dtype(self.dtype).itemsize:
                        fh = self._widen(fh, need)
                del text
                a = a.astype(self.dtype, copy=False)
                fh.write(a.tobytes())
                self.doc_starts[i + 1] = self.doc_starts[i] + a.size
                if pending is not None:
                    pending.result()  # one document in flight; raises its error here
                pending = pool.submit(hashes, a)
            if pending is not None:
                pending.result()
            if fh is not cp_fh:
                fh.close()

    def paths(self) -> tuple[Path, Path]:
        return self.base.with_name(self.base.name + ".cp"), self.base.with_name(
            self.base.name + ".win"
        )

    def _widen(self, fh: Any, dtype: Any) -> Any:
        """Rewrite the code points written so far in the wider ``dtype``; the new handle."""
        cp_path, _ = self.paths()
        fh.flush()
        tmp = cp_path.with_name(cp_path.name + ".wide")
        with open(tmp, "wb") as out:
            fh.seek(0)
            while True:
                part = np.fromfile(fh, dtype=self.dtype, count=_CHUNK)
                if part.size == 0:
                    break
                out.write(part.astype(dtype).tobytes())
        fh.close()
        tmp.replace(cp_path)
        self.dtype = dtype
        new = open(cp_path, "r+b")  # noqa: SIM115 - closed by write_text
        new.seek(0, os.SEEK_END)
        return new

    @staticmethod
    def _aligned_hashes(a: Arr) -> U64:
        """Hashes of one document's aligned windows, hashed ``_CHUNK`` windows at a time."""
        offs = _aligned_offsets(int(a.size))
        out = np.empty(offs.size, dtype=np.uint64)
        n_win = max(0, int(a.size) - K + 1)
        for s in range(0, n_win, _CHUNK):
            e = min(n_win, s + _CHUNK)
            lo, hi = np.searchsorted(offs, [s, e])
            out[lo:hi] = _window_hashes(a[s : e + K - 1])[offs[lo:hi] - s]
        return out

    # ---------------------------------------------------------------- scans
    def _chunks(self) -> list[tuple[int, int]]:
        """Document ranges ``[d0, d1)``: consecutive documents of one folder, together at
        most ``_CHUNK`` characters (or one longer document)."""
        out: list[tuple[int, int]] = []
        d0 = 0
        for d in range(1, self.n_docs + 1):
            if (
                d == self.n_docs
                or self.folder_of[d] != self.folder_of[d0]
                or self.doc_starts[d + 1] - self.doc_starts[d0] > _CHUNK
            ):
                out.append((d0, d))
                d0 = d
        return out if self.n_docs else []

    def _read(self, fh: Any, start: int, stop: int) -> Arr:
        fh.seek(start * np.dtype(self.dtype).itemsize)
        return np.fromfile(fh, dtype=self.dtype, count=stop - start)

    def _win_slices(self, docs: I64, fh: Any, wf: I64) -> U64:
        """Aligned-window hashes of the documents ``docs`` (increasing), from the .win file."""
        parts = []
        for d0, d1 in _ranges(docs):
            fh.seek(int(wf[d0]) * 8)
            parts.append(np.fromfile(fh, dtype=np.uint64, count=int(wf[d1] - wf[d0])))
        return np.concatenate(parts) if parts else np.empty(0, np.uint64)

    def find_duplicates(self) -> tuple[tuple[I64, I64], tuple[I64, I64]]:
        """``(dup, folder_dup)`` intervals (see the module docstring, "Duplicates")."""
        _, win_path = self.paths()
        wf = np.zeros(self.n_docs + 1, dtype=np.int64)
        np.cumsum(_n_windows(np.diff(self.doc_starts)), out=wf[1:])
        self.win_first = wf
        n_win = int(wf[-1])
        chunks = self._chunks()
        last_chunk = {int(self.folder_of[d0]): i for i, (d0, _) in enumerate(chunks)}
        none, pdt = self._pos_dtype()
        idt = np.uint32 if n_win < 2**32 else np.int64
        edges, fedges = _Chains(idt, pdt), _Chains(idt, pdt)
        with open(win_path, "rb") as wfh:
            table = _KeyTable(n_win, max_load=_BUILD_LOAD)
            for s in range(0, n_win, _CHUNK):
                table.add(np.fromfile(wfh, dtype=np.uint64, count=min(_CHUNK, n_win - s)))
            first = table.values(none, pdt)
            ftabs: dict[int, tuple[_KeyTable, Arr]] = {}

            def hits(
                fh: Any, d0: int, d1: int, table: _KeyTable = table
            ) -> tuple[int, U64, I64, I64]:
                # read-only on `table`: runs a chunk ahead on the scan's second thread
                cs, ce = int(self.doc_starts[d0]), int(self.doc_starts[d1])
                h = _window_hashes(self._read(fh, cs, ce))
                where, slot, _ = self._hits(table, h, self.doc_starts[d0 : d1 + 1] - cs, d0)
                return h.size, h[where], where, slot

            for ci, (d0, d1), (n_h, hw, where, slot) in self._scan(chunks, hits):
                if ci % _TRIM_EVERY == 0:
                    _trim_heap()
                f = int(self.folder_of[d0])
                if f not in ftabs:
                    members = np.flatnonzero(self.folder_of == f)
                    keys = self._win_slices(members, wfh, wf)
                    ft = _KeyTable(keys.size, max_load=_BUILD_LOAD)
                    ft.add(keys)
                    ftabs[f] = (ft, ft.values(none, pdt))
                ft, ffirst = ftabs[f]
                cs = int(self.doc_starts[d0])
                _first_seen(first, slot, where + cs)
                slot_at = np.full(n_h, -1, dtype=np.int64)
                slot_at[where] = slot
                fw, fslot = ft.find(hw)
                del hw
                _first_seen(ffirst, fslot, where[fw] + cs)
                fslot_at = np.full(n_h, -1, dtype=np.int64)
                fslot_at[where[fw]] = fslot
                aidx = np.arange(wf[d0], wf[d1])
                apos, adoc = _positions(aidx, wf, self.doc_starts)
                aloc, dstart = apos - cs, self.doc_starts[adoc]
                g = first[slot_at[aloc]] < dstart
                fg = ffirst[fslot_at[aloc]] < dstart
                edges.add(aidx, aloc, adoc, g, slot_at, first)
                fedges.add(aidx, aloc, adoc, fg, fslot_at, ffirst)
                if last_chunk[f] == ci:
                    del ftabs[f]
            del table, first, ftabs, hits
        _trim_heap()
        (gq, gd), (fq, fd) = edges.start(self), fedges.start(self)
        ge, fe = self._earliest(gq, gd, fq, fd)
        _trim_heap()
        (gq2, gd2), (fq2, fd2) = edges.step(self, ge, gq), fedges.step(self, fe, fq)
        del gq, gd, fq, fd, ge, fe
        _trim_heap()
        ge2, fe2 = self._earliest(gq2, gd2, fq2, fd2)
        _trim_heap()
        return edges.finish(self, ge2, gd2), fedges.finish(self, fe2, fd2)

    def _pos_dtype(self) -> tuple[int, Any]:
        """``(none, dtype)``: a position no window has and the narrowest dtype holding it."""
        none = int(self.doc_starts[-1])
        return none, (np.uint32 if none < 2**32 else np.int64)

    def window_hashes(self, idx: I64) -> U64:
        """Hashes of the aligned windows ``idx`` (indices into the ``.win`` file), read from the
        file in slices of ``_CHUNK`` hashes (never mapped or held whole)."""
        _, win_path = self.paths()
        out = np.empty(idx.size, dtype=np.uint64)
        order = np.argsort(idx, kind="stable")
        srt = idx[order]
        with open(win_path, "rb") as fh:
            n = int(self.win_first[-1])
            for s in range(0, n, _CHUNK):
                lo, hi = np.searchsorted(srt, [s, s + _CHUNK])
                if hi > lo:
                    fh.seek(s * 8)
                    part = np.fromfile(fh, dtype=np.uint64, count=min(_CHUNK, n - s))
                    out[order[lo:hi]] = part[srt[lo:hi] - s]
        return out

    def mapped(self) -> Arr:
        """The code-point file memory-mapped (read-only); drop it to unmap."""
        cp_path, _ = self.paths()
        n = int(self.doc_starts[-1])
        return (
            np.memmap(cp_path, dtype=self.dtype, mode="r", shape=(n,))
            if n
            else np.empty(0, self.dtype)
        )

    def _scan(
        self, chunks: list[tuple[int, int]], work: Callable[[Any, int, int], _T]
    ) -> Iterator[tuple[int, tuple[int, int], _T]]:
        """``(i, chunk, work(fh, *chunk))`` for each of ``chunks`` in order, each computed one
        chunk ahead on a second thread (``fh``: its own handle on the code-point file).

        ``work`` must only read shared state: it runs while the caller handles the previous
        chunk. Its numpy steps (hashing, prefilter tests, table probes) release the GIL, so
        on two cores the scan's reading half overlaps its writing half (:func:`_first_seen`,
        the run sides); the order of the results, and so every result, is that of a plain
        loop. Memory: one more chunk's results in flight. Errors in ``work`` are raised here.
        """
        if not chunks:
            return
        cp_path, _ = self.paths()
        with open(cp_path, "rb") as fh, ThreadPoolExecutor(1, "coverage-scan") as pool:
            nxt = pool.submit(work, fh, *chunks[0])
            try:
                for i, chunk in enumerate(chunks):
                    got = nxt.result()
                    if i + 1 < len(chunks):
                        nxt = pool.submit(work, fh, *chunks[i + 1])
                    yield i, chunk, got
            finally:
                nxt.cancel()

    def _hits(self, table: _KeyTable, h: U64, ldoc: I64, d0: int) -> tuple[I64, I64, I64]:
        """``(where, slot, doc)`` of the chunk's windows that hold a key and lie inside one
        document (``where``: chunk-local start)."""
        where, slot = table.find(h)
        dloc = np.searchsorted(ldoc, where, side="right") - 1
        ok = where + K <= ldoc[dloc + 1]
        return where[ok], slot[ok], dloc[ok] + d0

    def _earliest(self, gq: U64, gd: I64, fq: U64, fd: I64) -> tuple[I64, I64]:
        """For each window hash of ``gq`` (looked up from document ``gd``): the first position
        of a window with that hash in the room; of ``fq`` / ``fd``: in ``fd``'s folder. Only
        the documents before the last one asked from are scanned, once for both; the text's
        length where there is none.

        Each group (the room; each folder) has a table of its distinct hashes; one packed-bit
        prefilter over all of them (:class:`_BitFilter`, 16 bits per key) is the only test
        every window of the scan gets, the tables see only the few windows that pass it."""
        none, pdt = self._pos_dtype()
        union = _BitFilter(gq.size + fq.size, 16)

        def tables(qh: U64, groups: Arr | None) -> dict[int, tuple[_KeyTable, Arr, I64 | None]]:
            tabs: dict[int, tuple[_KeyTable, Arr, I64 | None]] = {}
            for gid in np.unique(groups) if groups is not None else [0]:
                m = np.flatnonzero(groups == gid) if groups is not None else None
                keys = _unique(qh[m] if m is not None else qh.copy(), overwrite=True)
                t = _KeyTable(keys.size)  # distinct keys; tested only where `union` passes
                t.add(keys)
                union.add(keys)
                tabs[int(gid)] = (t, t.values(none, pdt), m)
            return tabs

        gtab = tables(gq, None) if gq.size else {}
        ftab = tables(fq, self.folder_of[fd])
        g_stop = int(gd.max()) if gd.size else 0
        stop = max(g_stop, int(fd.max()) if fd.size else 0)

        def todo(d0: int) -> list[tuple[_KeyTable, Arr, I64 | None]]:
            f = int(self.folder_of[d0])
            return ([gtab[0]] if d0 < g_stop and gtab else []) + ([ftab[f]] if f in ftab else [])

        def hits(fh: Any, d0: int, d1: int) -> list[tuple[Arr, I64, I64]]:
            # read-only on the tables and `union`: runs a chunk ahead on the second thread
            cs, ce = int(self.doc_starts[d0]), int(self.doc_starts[d1])
            h = _window_hashes(self._read(fh, cs, ce))
            cand = _passing(union.maybe, h)
            hc = h[cand]
            del h
            ldoc = self.doc_starts[d0 : d1 + 1] - cs
            out = []
            for t, first, _ in todo(d0):
                where, slot = t.find(hc)
                where = cand[where]
                dloc = np.searchsorted(ldoc, where, side="right") - 1
                ok = where + K <= ldoc[dloc + 1]  # inside one document
                out.append((first, slot[ok], where[ok] + cs))
            return out

        chunks = [c for c in self._chunks() if c[0] < stop and todo(c[0])]
        for ci, _, found in self._scan(chunks, hits):
            if ci % _TRIM_EVERY == 0:
                _trim_heap()
            for first, slot, pos in found:
                _first_seen(first, slot, pos)

        def answers(tabs: dict[int, tuple[_KeyTable, Arr, I64 | None]], qh: U64) -> I64:
            out = np.full(qh.size, none, dtype=np.int64)
            for t, first, m in tabs.values():
                if m is None:
                    for s in range(0, qh.size, _CHUNK):
                        out[s : s + _CHUNK] = first[t.get(qh[s : s + _CHUNK])]
                else:
                    out[m] = first[t.get(qh[m])]
            return out

        return answers(gtab, gq), answers(ftab, fq)


def _first_seen(first: Arr, slot: I64, pos: I64) -> None:
    """``first[slot] = min(first[slot], pos)`` (only the entries that change are written)."""
    upd = pos < first[slot]
    if upd.any():
        np.minimum.at(first, slot[upd], pos[upd].astype(first.dtype))


def _ranges(idx: I64) -> list[tuple[int, int]]:
    """Maximal runs ``[a, b)`` of consecutive integers in the increasing array ``idx``."""
    if idx.size == 0:
        return []
    cut = np.flatnonzero(np.diff(idx) != 1) + 1
    starts = np.concatenate([[0], cut])
    ends = np.concatenate([cut, [idx.size]])
    return [(int(idx[a]), int(idx[b - 1]) + 1) for a, b in zip(starts, ends, strict=True)]


def _positions(sel: I64, win_first: I64, doc_starts: I64) -> tuple[I64, I64]:
    """``(start, doc)`` of the aligned windows with indices ``sel`` (see :func:`_n_windows`)."""
    doc = np.searchsorted(win_first, sel, side="right") - 1
    pos = np.minimum(doc_starts[doc] + (sel - win_first[doc]) * STRIDE, doc_starts[doc + 1] - K)
    return pos, doc


class CoverageIndex:
    """Per-room index for :class:`CoverageProbe` (immutable once built; share it freely).

    Build with :meth:`build` or :meth:`load_or_build`. Attributes: ``room_hash``,
    ``doc_ids`` / ``folders`` (room id order), ``doc_starts`` (int64, ``n_docs + 1``: offsets of
    each document in the concatenated normalised text), ``cp`` (the normalised code points,
    memory-mapped), ``win_hash`` (uint64 hash of every aligned window, memory-mapped;
    ``win_first`` (int64, ``n_docs + 1``) gives each document's first one), ``n_chars``
    (normalised characters), ``n_windows``, ``dup`` / ``folder_dup`` (duplicate intervals,
    global positions) and ``duplicate_chars`` (see the module docstring).
    """

    def __init__(
        self,
        *,
        room_hash: str,
        doc_ids: list[str],
        folders: list[str],
        cp: Arr,
        doc_starts: I64,
        win_hash: U64,
        dup: tuple[I64, I64],
        folder_dup: tuple[I64, I64],
    ) -> None:
        self.room_hash = room_hash
        self.doc_ids = doc_ids
        self.folders = folders
        self.cp = cp
        self.doc_starts = doc_starts
        self.win_hash = win_hash
        self.dup = dup
        self.folder_dup = folder_dup
        self.n_docs = len(doc_ids)
        self.n_chars = int(doc_starts[-1])
        self.doc_len = np.diff(doc_starts)
        self.win_first = np.zeros(self.n_docs + 1, dtype=np.int64)
        np.cumsum(_n_windows(self.doc_len), out=self.win_first[1:])
        self.n_windows = int(self.win_first[-1])
        if self.n_windows != int(win_hash.shape[0]):
            raise ValueError(
                f"coverage index of room {room_hash}: {win_hash.shape[0]} window hashes for "
                f"{self.n_windows} windows"
            )
        names = sorted(set(folders))
        self.folder_names = names
        rank = {f: i for i, f in enumerate(names)}
        self.folder_of = np.array([rank[f] for f in folders], dtype=np.int64)
        self.duplicate_chars = int((dup[1] - dup[0]).sum())
        self._dup_doc = self._per_doc(*dup)
        self._fdup_doc = self._per_doc(*folder_dup)
        self._dup_cum = _cumulative(dup)
        self._fdup_cum = _cumulative(folder_dup)

    # ------------------------------------------------------------------ build
    @classmethod
    def build(cls, room: DataRoom) -> CoverageIndex:
        """Normalise every document, hash the aligned windows and find duplicate text.

        The index files are written to a temporary folder and memory-mapped (the folder is
        removed at once; the mappings keep the data). Reads every document's text once,
        without caching it on the document (raises what :meth:`Document.read_text` raises
        for an unreadable file). Time: about 1-2 s per 10^7 characters (module docstring).
        """
        with tempfile.TemporaryDirectory(prefix="rlmdistill-coverage-") as tmp:
            base = Path(tmp) / "index"
            meta = cls._build_files(room, base)
            index = cls._open(base, meta)
        if index is None:  # the files were just written: only a broken disk gets here
            raise OSError(f"coverage index of room {room.room_hash}: files unreadable after build")
        return index

    @classmethod
    def _build_files(cls, room: DataRoom, base: Path) -> dict[str, Any]:
        """Write ``<base>.cp``, ``<base>.win`` and ``<base>.npz`` for ``room``; the metadata."""
        _heap_settings()
        b = _Builder(room, base)
        b.write_text()
        dup, folder_dup = b.find_duplicates()
        _trim_heap()
        cp_path, win_path = b.paths()
        meta = {
            "version": PROBE_VERSION,
            "format": CACHE_FORMAT,
            "k": K,
            "stride": STRIDE,
            "room_hash": room.room_hash,
            "doc_ids": [d.id for d in room.documents],
            "folders": b.folders,
            "cp_dtype": np.dtype(b.dtype).str,
            "n_chars": int(b.doc_starts[-1]),
        }
        cp = _map(cp_path, b.dtype, int(b.doc_starts[-1]))
        win = _map(win_path, np.uint64, win_path.stat().st_size // 8)
        with open(base.with_name(base.name + ".npz"), "wb") as fh:
            np.savez(
                fh,
                meta=np.array(json.dumps(meta)),
                doc_starts=b.doc_starts,
                dup_s=dup[0],
                dup_e=dup[1],
                fdup_s=folder_dup[0],
                fdup_e=folder_dup[1],
                cp_sha=np.array(_digest(cp)),
                win_sha=np.array(_digest(win)),
            )
        return meta

    @classmethod
    def _open(cls, base: Path, meta: dict[str, Any] | None = None) -> CoverageIndex | None:
        """The index in ``<base>.npz`` / ``.cp`` / ``.win`` (the last two memory-mapped), or
        ``None`` when the files do not agree with each other or with ``meta``."""
        with np.load(base.with_name(base.name + ".npz"), allow_pickle=False) as z:
            stored = json.loads(str(z["meta"]))
            if meta is not None and stored != meta:
                return None
            if (stored.get("version"), stored.get("format"), stored.get("k")) != (
                PROBE_VERSION,
                CACHE_FORMAT,
                K,
            ) or stored.get("stride") != STRIDE:
                return None
            arrays = {name: z[name] for name in z.files if name != "meta"}
        doc_starts = arrays["doc_starts"]
        n_chars = int(doc_starts[-1]) if doc_starts.size else 0
        if stored.get("n_chars") != n_chars or len(stored["doc_ids"]) + 1 != doc_starts.size:
            return None
        wf = int(_n_windows(np.diff(doc_starts)).sum())
        try:
            cp = _map(base.with_name(base.name + ".cp"), np.dtype(stored["cp_dtype"]), n_chars)
            win = _map(base.with_name(base.name + ".win"), np.uint64, wf)
        except ValueError:  # a file of the wrong size
            return None
        if _digest(cp) != str(arrays["cp_sha"]) or _digest(win) != str(arrays["win_sha"]):
            return None
        return cls(
            room_hash=stored["room_hash"],
            doc_ids=list(stored["doc_ids"]),
            folders=list(stored["folders"]),
            cp=cp,
            doc_starts=doc_starts,
            win_hash=win,
            dup=(arrays["dup_s"], arrays["dup_e"]),
            folder_dup=(arrays["fdup_s"], arrays["fdup_e"]),
        )

    # ------------------------------------------------------------------ runs
    def _runs(self, sel: I64, hashes: U64) -> _Runs:
        """Group hit aligned windows (``sel``: increasing indices into ``win_hash``;
        ``hashes``: their hashes) into runs: overlapping or touching windows of one document."""
        if sel.size == 0:
            z = np.empty(0, np.int64)
            return _Runs(z, z, np.empty(0, np.uint64), np.empty(0, np.uint64), z, z, z)
        pos, doc = _positions(sel, self.win_first, self.doc_starts)
        ends = pos + K
        new = np.ones(pos.size, dtype=bool)
        new[1:] = (pos[1:] > np.maximum.accumulate(ends)[:-1]) | (doc[1:] != doc[:-1])
        heads = np.flatnonzero(new)
        tails = np.append(heads[1:], pos.size) - 1
        rdoc = doc[heads]
        return _Runs(
            first=pos[heads],
            last=pos[tails],
            first_hash=hashes[heads],
            last_hash=hashes[tails],
            lo=self.doc_starts[rdoc],
            hi=self.doc_starts[rdoc + 1] - K,
            doc=rdoc,
        )

    def _hit_windows(self, seen: _HashSet) -> tuple[I64, U64]:
        """Indices of the aligned windows whose hash is in ``seen``, and those hashes, scanned
        in slices of ``_SCAN`` windows (temporary memory stays ~20 bytes x ``_SCAN`` per
        thread) whose mapped pages are released after each slice. The slices are shared out
        over :func:`_result_pool`'s threads (numpy releases the GIL), in order. The hashes come
        back with the indices because gathering them from the mapping afterwards maps them
        again, 64 KB around each (the kernel's fault-around): the whole 155 MiB file stayed
        resident in each process on a 325 M-character room."""

        def scan(s: int) -> tuple[I64, U64]:
            h = np.asarray(self.win_hash[s : s + _SCAN])
            where, _ = seen.lookup(h)
            got = h[where]
            del h
            _release(self.win_hash, s, s + _SCAN)
            return where + s, got

        parts = _pool_map(scan, range(0, self.n_windows, _SCAN))
        if not parts:
            return np.empty(0, np.int64), np.empty(0, np.uint64)
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def _cp_at(self, pos: I64) -> U64:
        """Code points at ``pos`` (clipped to the text) as uint64."""
        return np.asarray(self.cp[pos.clip(0, max(0, self.cp.size - 1))]).astype(np.uint64)

    def _step_left(self, h: U64, p: I64) -> U64:
        """Hashes of the windows at ``p - 1`` from those (``h``) at ``p`` (rolling, exact)."""
        return _roll_left(h, self._cp_at(p - 1), self._cp_at(p + K - 1))

    def _step_right(self, h: U64, p: I64) -> U64:
        """Hashes of the windows at ``p + 1`` from those (``h``) at ``p`` (rolling, exact)."""
        return _roll_right(h, self._cp_at(p + K), self._cp_at(p))

    def _gather(self, base: I64, offs: I64) -> U64:
        """Code points at ``base[:, None] + offs`` (clipped to the text) as uint64, shape
        ``(base.size, offs.size)``; ``base`` increasing. Read in chunks of :data:`_GATHER`
        rows, each chunk's pages released right after it: a result's runs lie close together
        all over a room with boilerplate, so reading a whole batch before releasing made most
        of its span resident (110-205 MiB per result on a 337 M-character room)."""
        out = np.empty((base.size, offs.size), dtype=np.uint64)
        for s in range(0, base.size, _GATHER):
            pos = base[s : s + _GATHER, None] + offs
            out[s : s + _GATHER] = self._cp_at(pos)
            _release(self.cp, int(pos.min()), int(pos.max()) + 1)
        return out

    def _extend(self, runs: _Runs, seen: _HashSet) -> tuple[I64, I64]:
        """Covered intervals: each run extended window by window (at most S-1 each side) while
        the next window is observed and inside the document; merged as :meth:`_finish` does.

        The S-1 windows on each side of every run are hashed at once from the code points
        around it (:meth:`_side_hashes`: one ``(runs, K + S - 2)`` gather, prefix sums along
        rows), tested in one lookup, and each run grows by its count of leading hits that lie
        inside its document: the same bounds as stepping window by window with the rolling
        hash (exact mod 2^64 either way), in ~25 array operations per batch instead of ~20 per
        step (a result with one run on a small room 1.0 -> 0.2 ms, 2-core AMD EPYC). Batches
        of ``_EXTEND`` runs are independent (each writes only its own slice of the bounds), so
        they are shared out over :func:`_result_pool`'s threads."""
        starts, ends = runs.first.copy(), runs.last + K
        steps = np.arange(1, STRIDE, dtype=np.int64)  # step s: the window s characters out

        def batch(b0: int) -> None:
            sl = slice(b0, min(runs.first.size, b0 + _EXTEND))
            for sign in (-1, 1):
                p = (runs.first if sign < 0 else runs.last)[sl]
                room = p - runs.lo[sl] if sign < 0 else runs.hi[sl] - p  # steps inside the doc
                act = np.flatnonzero(room > 0)
                if act.size == 0:
                    continue
                p = p[act]
                hit = seen.contains(self._side_hashes(p, sign).ravel()).reshape(act.size, -1)
                hit &= steps[None, :] <= room[act, None]
                grown = np.where(hit.all(axis=1), STRIDE - 1, np.argmin(hit, axis=1))
                if sign < 0:
                    starts[sl][act] = p - grown
                else:
                    ends[sl][act] = p + grown + K

        _pool_map(batch, range(0, runs.first.size, _EXTEND))
        return self._merge(starts, ends)

    def _side_hashes(self, p: I64, sign: int) -> U64:
        """Hashes of the windows 1 .. S-1 characters left (``sign`` -1) or right (+1) of the
        windows at ``p``, shape ``(p.size, S - 1)``, column ``s - 1`` for step ``s``; equal to
        :func:`_window_hashes` of the same windows (code points past the text are clipped, as
        :meth:`_cp_at` reads them)."""
        width = K + STRIDE - 2
        first = -(STRIDE - 1) if sign < 0 else 1  # offset of the first code point read
        cp = self._gather(p, np.arange(first, first + width, dtype=np.int64))
        pw, inv = _powers()
        np.multiply(cp, inv[:width], out=cp)
        q = np.zeros((p.size, width + 1), dtype=np.uint64)
        np.cumsum(cp, axis=1, out=q[:, 1:])
        h = (q[:, K:] - q[:, : width - K + 1]) * pw[K - 1 : width]
        return h[:, ::-1] if sign < 0 else h  # left: the nearest window first

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

    def _overlap_per_doc(self, a: tuple[I64, I64], b: tuple[I64, I64], cum: I64) -> I64:
        """Per-document length of the intersection of the disjoint intervals ``a`` with the
        sorted disjoint intervals ``b`` (``cum``: :func:`_cumulative` of ``b``); O(|a| log |b|)."""
        if a[0].size == 0 or b[0].size == 0:
            return np.zeros(self.n_docs, dtype=np.int64)
        ov = _length_below(a[1], b, cum) - _length_below(a[0], b, cum)
        doc = np.searchsorted(self.doc_starts, a[0], side="right") - 1
        return np.bincount(doc, weights=ov, minlength=self.n_docs).astype(np.int64)

    def shares_text(self, text: str) -> bool:
        """Whether ``text`` (normalised as the probe normalises) holds one of the room's aligned
        windows: by the probe's rule, a span of at least ``K + S - 1`` (79) normalised
        characters in common with a document is always found, one of ``K`` (64) to 78 when it
        happens to hold an aligned window, a shorter one never. A text for which this is false
        covers nothing when it is a probe's only input.

        For checking many short texts (an importer checks every sub-call prompt) without a
        probe each: O(len(text)) hashing plus one lookup per window. The first call keeps a
        set of the window hashes on the index (8 to 12 bytes per aligned window).
        """
        norm = normalise(text)
        if len(norm) < K:
            return False
        table = self._window_set
        return bool(table.lookup(_window_hashes(_codepoints(norm)))[0].size)

    @functools.cached_property
    def _window_set(self) -> _HashSet:
        return _HashSet(np.asarray(self.win_hash))

    # ------------------------------------------------------------------ cache
    @classmethod
    def load_or_build(cls, room: DataRoom, cache_dir: Path) -> CoverageIndex:
        """The index for ``room`` from ``cache_dir``, built and saved there on a miss.

        Files (cache format :data:`CACHE_FORMAT`): ``<room_hash>.coverage-<PROBE_VERSION>-k<K>
        -s<STRIDE>-f<CACHE_FORMAT>`` + ``.npz`` (metadata, document offsets, duplicate
        intervals), ``.cp`` (normalised code points) and ``.win`` (aligned-window hashes); the
        last two are memory-mapped read-only, so processes share one copy through the page
        cache. They are built under temporary names and renamed into place. Caches of an
        earlier format have other names and are never read (the index is rebuilt beside
        them). Within one process, concurrent callers for the same room share one build and
        one loaded index (kept for the life of the process). An unreadable or mismatched cache
        is rebuilt; an unwritable ``cache_dir`` builds in a temporary folder instead. Raises
        what :meth:`build` raises.
        """
        cache_dir = Path(cache_dir)
        base = (
            cache_dir / f"{room.room_hash}.coverage-{PROBE_VERSION}-k{K}-s{STRIDE}-f{CACHE_FORMAT}"
        )
        key = str(base.resolve())
        with _LOCKS_GUARD:
            lock = _LOCKS.setdefault(key, threading.Lock())
        with lock:
            hit = _LOADED.get(key)
            if hit is not None:
                return hit
            index = None
            if all(base.with_name(base.name + x).is_file() for x in _SUFFIXES):
                with contextlib.suppress(OSError, ValueError, KeyError):
                    index = cls._open(base)
                if index is not None and index.room_hash != room.room_hash:
                    index = None
            if index is None:
                index = cls._build_cached(room, base)
            _LOADED[key] = index
            return index

    @classmethod
    def _build_cached(cls, room: DataRoom, base: Path) -> CoverageIndex:
        tag = f"{os.getpid()}.{threading.get_ident()}.tmp"
        tmp = base.with_name(f"{base.name}.{tag}")
        try:
            base.parent.mkdir(parents=True, exist_ok=True)
            meta = cls._build_files(room, tmp)
        except OSError:
            _remove(tmp)
            return cls.build(room)
        try:
            for x in (".cp", ".win", ".npz"):  # the .npz last: it makes the cache visible
                base.with_name(tmp.name + x).replace(base.with_name(base.name + x))
        except OSError:
            _remove(tmp)
        index = (
            cls._open(base, meta)
            if all(base.with_name(base.name + x).is_file() for x in _SUFFIXES)
            else None
        )
        return index if index is not None else cls.build(room)


_SUFFIXES = (".npz", ".cp", ".win")


def _remove(base: Path) -> None:
    for x in (*_SUFFIXES, ".cp.wide"):
        with contextlib.suppress(OSError):
            base.with_name(base.name + x).unlink()


def _map(path: Path, dtype: Any, n: int) -> Arr:
    """``path`` memory-mapped read-only as ``n`` values of ``dtype`` (ValueError if its size
    differs; an empty array for ``n == 0``)."""
    size = path.stat().st_size
    if size != n * np.dtype(dtype).itemsize:
        raise ValueError(f"{path}: {size} bytes, expected {n} x {np.dtype(dtype).itemsize}")
    if n == 0:
        return np.empty(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(n,))


def _heap_settings() -> None:
    """Pin glibc's mmap threshold and trim threshold at 32 MiB (``mallopt``), so the build's
    per-chunk temporaries (8 MB each) come from the heap and are reused chunk after chunk,
    while the big tables are mapped and returned to the system when freed; the build calls
    :func:`_trim_heap` between its stages. With the threshold at 1 MiB every temporary was a
    fresh mapping whose pages the kernel faulted in and zeroed: on a 62.5 M-character room
    6.4 of the build's 18.4 CPU seconds were system time (1.7 of 12.4 at 32-64 MiB). glibc's
    own default raises the threshold to each freed block's size, so big freed blocks would
    stay in the heap. No-op outside glibc; the setting holds for the process."""
    libc = heap.libc()
    with contextlib.suppress(AttributeError, OSError):
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 32 << 20)  # M_TRIM_THRESHOLD


def _trim_heap() -> None:
    """Give freed heap pages back to the system (``malloc_trim(0)``; no-op outside glibc)."""
    libc = heap.libc()
    with contextlib.suppress(AttributeError, OSError):
        libc.malloc_trim(0)


_KEEP_MAPPED = 32 << 20
"""Mapped index files of at most this many bytes stay resident (:func:`_release` leaves them):
releasing a small room's pages only made every result fault them in again (on the 2-core AMD
EPYC, a 130 k-character room: ``_extend`` of one run 1.3 ms, most of it released and re-read
pages)."""


def _release(arr: Arr, start: int, stop: int) -> None:
    """Drop the pages of the memory-mapped ``arr[start:stop]`` from this process's resident
    set (``MADV_DONTNEED``: they stay in the page cache and come back on the next read), so a
    pass over a whole room's mapped text or window hashes does not leave it all resident in
    every process. No-op for an array in memory, or mapped from a file of at most
    :data:`_KEEP_MAPPED` bytes."""
    mm = getattr(arr, "_mmap", None)
    if mm is None or not hasattr(mm, "madvise") or len(mm) <= _KEEP_MAPPED:
        return
    item, page = arr.dtype.itemsize, mmap.PAGESIZE
    lo = max(0, start) * item // page * page
    hi = min(len(mm), -(-max(0, stop) * item // page) * page)
    if hi > lo:
        with contextlib.suppress(OSError, ValueError):
            mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)


def _cumulative(iv: tuple[I64, I64]) -> I64:
    """Lengths of the first i intervals of ``iv``, summed (``len + 1`` entries)."""
    cum = np.zeros(iv[0].size + 1, dtype=np.int64)
    np.cumsum(iv[1] - iv[0], out=cum[1:])
    return cum


def _length_below(x: I64, iv: tuple[I64, I64], cum: I64) -> I64:
    """Total length of the sorted disjoint intervals ``iv`` below each position of ``x``."""
    s, e = iv
    j = np.searchsorted(s, x, side="left")  # intervals starting before x
    out = cum[j].copy()
    m = j > 0
    out[m] -= np.maximum(0, e[j[m] - 1] - x[m])
    return out


def _digest(cp: Arr) -> str:
    """Cheap integrity check of the code-point file: sha256 of its size and 64 sampled bytes."""
    h = hashlib.sha256(f"{cp.dtype}:{cp.shape[0]}".encode())
    if cp.shape[0]:
        h.update(np.asarray(cp[np.linspace(0, cp.shape[0] - 1, 64).astype(np.int64)]).tobytes())
    return h.hexdigest()


_RESULT_THREADS = max(1, min(4, os.cpu_count() or 1))
"""Threads of :func:`_result_pool`: one per core, at most 4 (one result runs at a time,
:data:`_RESULT_SLOT`)."""


def _pool_map(fn: Callable[[int], _R], starts: range) -> list[_R]:
    """``[fn(s) for s in starts]``, shared out over :func:`_result_pool`'s threads when there
    is more than one (a pool's hand-off costs more than one small room's slice)."""
    if len(starts) <= 1:
        return [fn(s) for s in starts]
    return list(_result_pool().map(fn, starts))


@functools.lru_cache(maxsize=1)
def _result_pool() -> ThreadPoolExecutor:
    """The process's pool for a coverage result's scans (:meth:`CoverageIndex._hit_windows`,
    :meth:`CoverageIndex._extend`): :data:`_RESULT_THREADS` worker threads,
    started on first use and kept for the life of the process. On 2 idle cores (AMD EPYC) it
    took ``result()`` on a 337 M-character room from 1.01 s to 0.43 s (median of 3,
    ``benchmarks/bench_lab_room.py --steps result``)."""
    return ThreadPoolExecutor(_RESULT_THREADS, "coverage-result")


_RESULT_SLOT = threading.Lock()
"""Held while one :meth:`CoverageProbe.detail` runs (see there)."""

_LOCKS_GUARD = threading.Lock()
_LOCKS: dict[str, threading.Lock] = {}
_LOADED: dict[str, CoverageIndex] = {}


def _after_fork_in_child() -> None:
    """A forked child (the importers' coverage workers) has none of its parent's threads:
    start its own result pool when it needs one, and take fresh locks (one held by a parent
    thread at the fork would never be released in the child)."""
    global _RESULT_SLOT, _LOCKS_GUARD
    _result_pool.cache_clear()
    _RESULT_SLOT, _LOCKS_GUARD = threading.Lock(), threading.Lock()
    _LOCKS.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


class WindowCache:
    """The distinct window hashes of input texts that recur across probes (a system prompt
    every episode is sent), so that each is normalised and hashed once per process, not once
    per episode. A text's hashes are kept from its second sighting on (a text seen once costs
    its 16-byte digest), up to ``max_bytes`` of hashes, then the cache starts again. For one
    thread (an importer's coverage worker); the result of a probe is the same with or without
    it."""

    def __init__(self, max_bytes: int = 64 << 20) -> None:
        self.max_bytes = max_bytes
        self._seen: set[bytes] = set()
        self._hashes: dict[bytes, U64] = {}
        self._bytes = 0

    def get(self, digest: bytes) -> U64 | None:
        """The sorted distinct window hashes of the text with this digest, if kept."""
        return self._hashes.get(digest)

    def put(self, digest: bytes, hashes: U64) -> None:
        """Offer a text's hashes (kept if the text was offered before; not copied)."""
        if digest not in self._seen:
            if len(self._seen) >= 1 << 20:
                self._seen.clear()
            self._seen.add(digest)
            return
        if self._bytes + hashes.nbytes > self.max_bytes:
            self._hashes.clear()
            self._bytes = 0
        self._hashes[digest] = hashes
        self._bytes += hashes.nbytes


class CoverageProbe:
    """Coverage of one episode. Call :meth:`observe` with every model input; thread-safe.

    Memory while the episode runs: a reference to each distinct input text, as given (a
    sub-call's prompt is the same object as the one its record keeps, so it costs nothing
    more), and a 16-byte digest per input. Neither its window hashes (8 bytes per window: 8 MB
    per million characters, which made the probe the largest per-episode cost of a collector
    running many episodes over one room) nor its normalised copy (another 1-4 bytes
    per character) is held: both are computed in :meth:`detail`, one episode at a time.
    """

    def __init__(self, index: CoverageIndex, windows: WindowCache | None = None) -> None:
        self.index = index
        self.windows = windows
        self._lock = threading.Lock()
        self._seen_texts: set[bytes] = set()
        self._texts: list[str] = []
        self._digests: list[bytes] = []

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
            self._texts.append(text)
            self._digests.append(digest)

    @property
    def n_observed(self) -> int:
        """Distinct input texts observed so far (it only grows; equal counts at two moments
        mean the same texts, so the same :meth:`detail`)."""
        with self._lock:
            return len(self._texts)

    def _observed(self) -> U64:
        """Sorted distinct hashes of every K-window of the observed texts (normalised here)."""
        with self._lock:
            texts = list(zip(self._texts, self._digests, strict=True))
        parts = []
        cache = self.windows
        for t, digest in texts:
            hashes = cache.get(digest) if cache is not None else None
            if hashes is None:
                norm = normalise(t)
                if len(norm) < K:
                    continue
                hashes = _unique(_window_hashes(_codepoints(norm)), overwrite=True)
                if cache is not None:
                    cache.put(digest, hashes)
            parts.append(hashes)
        if len(parts) > 1:
            return _unique(np.concatenate(parts), overwrite=True)
        return parts[0].copy() if parts else np.empty(0, np.uint64)

    def detail(self) -> CoverageDetail:
        """Coverage with the character counts behind it (see the module docstring).

        One result is computed at a time per process (:data:`_RESULT_SLOT`): its temporaries
        grow with how often the observed text recurs in the room (boilerplate is credited
        everywhere it occurs), so episodes that end together take turns instead of holding
        them all at once; the work is CPU-bound numpy, so taking turns costs little wall time.
        """
        with _RESULT_SLOT:
            return self._detail()

    def _detail(self) -> CoverageDetail:
        ix = self.index
        observed = self._observed()
        if observed.size:
            seen = _HashSet(observed, unique=True)
            covered = ix._extend(ix._runs(*ix._hit_windows(seen)), seen)
        else:
            covered = (np.empty(0, np.int64), np.empty(0, np.int64))
        cov_doc = ix._per_doc(*covered)
        dup_doc = ix._dup_doc
        cov_dup_doc = ix._overlap_per_doc(covered, ix.dup, ix._dup_cum)
        fdup_doc = ix._fdup_doc
        cov_fdup_doc = ix._overlap_per_doc(covered, ix.folder_dup, ix._fdup_cum)

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
