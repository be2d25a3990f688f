"""Coverage probe (``coverage/index.py``, method ``shingle-v1``): hand-checkable values.

Lengths are in normalised characters (:func:`normalise`); the three-document room uses
texts that are already normalised (lowercase, single spaces), so raw length = normalised.
"""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path

import numpy as np
import pytest

from rlmdistill.coverage.index import (
    CACHE_FORMAT,
    PROBE_VERSION,
    STRIDE,
    CoverageIndex,
    CoverageProbe,
    K,
    normalise,
)
from rlmdistill.rooms import DataRoom
from rlmdistill.rooms.cuad import SAMPLE_SOURCE, build_cuad_room

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "omicron",
    "pi",
    "rho",
    "sigma",
    "tau",
    "upsilon",
    "phi",
    "chi",
    "psi",
    "omega",
]

CLAUSE = (
    "the licensee shall not assign this agreement without the prior written consent of the "
    "licensor, which consent shall not be unreasonably withheld or delayed"
)
"""Shared verbatim by a.txt and b.txt (155 chars; bounded by different digits on each side)."""


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _write_room(root: Path, files: dict[str, str]) -> DataRoom:
    for rel, text in files.items():
        path = root / "documents" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (root / "task.json").write_text(
        json.dumps({"title": "t", "instructions": "i", "criteria": []}), encoding="utf-8"
    )
    return DataRoom.load(root)


@pytest.fixture
def room3(tmp_path: Path) -> tuple[DataRoom, dict[str, str]]:
    rng = random.Random(7)
    texts = {
        "Alpha/a.txt": _words(rng, 200) + " 1" + CLAUSE + "1 " + _words(rng, 100),
        "Alpha/b.txt": _words(rng, 150) + " 2" + CLAUSE + "2 " + _words(rng, 50),
        "Beta/c.txt": _words(rng, 300),
    }
    for text in texts.values():
        assert normalise(text) == text
    return _write_room(tmp_path / "room", texts), texts


@pytest.fixture
def index3(room3: tuple[DataRoom, dict[str, str]]) -> CoverageIndex:
    return CoverageIndex.build(room3[0])


def test_normalise() -> None:
    assert normalise("Hello\n\t  WORLD\u00a0ﬁne") == "hello world fine"


def test_duplicates_are_found_exactly(index3: CoverageIndex) -> None:
    assert len(CLAUSE) == 155
    assert index3.duplicate_chars == len(CLAUSE)  # the copy in b.txt (later in id order)


def test_whole_document_and_dedup_overall(
    room3: tuple[DataRoom, dict[str, str]], index3: CoverageIndex
) -> None:
    _, texts = room3
    la, lb, lc = (len(texts[k]) for k in ("Alpha/a.txt", "Alpha/b.txt", "Beta/c.txt"))
    probe = CoverageProbe(index3)
    probe.observe("System: read this.\n" + texts["Alpha/a.txt"] + "\nThanks.")
    cov = probe.result()
    assert cov.method == PROBE_VERSION == "shingle-v1"
    assert cov.per_document["Alpha/a.txt"] == 1.0  # (a)
    # The shared clause reached the model, so it is covered in b.txt too ...
    assert cov.per_document["Alpha/b.txt"] == len(CLAUSE) / lb
    assert cov.per_document["Beta/c.txt"] == 0.0
    # ... but counts once overall (e): the copy in b.txt is left out of both sides.
    assert cov.overall == la / (la + lb + lc - len(CLAUSE))
    # (g) per folder: Alpha = (a + clause-in-b - dup) / (a + b - dup); Beta = 0.
    assert cov.per_folder == {"Alpha": la / (la + lb - len(CLAUSE)), "Beta": 0.0}
    detail = probe.detail()
    assert detail.duplicate_chars == detail.duplicate_covered_chars == len(CLAUSE)
    assert detail.covered_chars == la
    assert detail.unique_chars == la + lb + lc - len(CLAUSE)
    assert detail.per_document_chars["Alpha/b.txt"] == (len(CLAUSE), lb)


def test_half_document_is_exact(
    room3: tuple[DataRoom, dict[str, str]], index3: CoverageIndex
) -> None:
    _, texts = room3
    c = texts["Beta/c.txt"]
    n = len(c) // 2
    assert n > 10 * K
    probe = CoverageProbe(index3)
    probe.observe(c[:n])  # (b)
    cov = probe.result()
    # Spans >= K + STRIDE - 1 are counted to the character, so the fraction is exact.
    assert cov.per_document["Beta/c.txt"] == n / len(c)
    assert cov.per_folder["Beta"] == n / len(c)
    assert cov.per_document["Alpha/a.txt"] == cov.per_document["Alpha/b.txt"] == 0.0
    total = sum(len(t) for t in texts.values()) - len(CLAUSE)
    assert cov.overall == n / total


def test_middle_slice_any_alignment(
    room3: tuple[DataRoom, dict[str, str]], index3: CoverageIndex
) -> None:
    c = room3[1]["Beta/c.txt"]
    for start in (1, 7, 15, 16, 333):
        probe = CoverageProbe(index3)
        probe.observe("<<" + c[start : start + 500] + ">>")
        assert probe.detail().per_document_chars["Beta/c.txt"] == (500, len(c))


def test_normalisation_whitespace_and_case(
    room3: tuple[DataRoom, dict[str, str]], index3: CoverageIndex
) -> None:
    a = room3[1]["Alpha/a.txt"]
    mangled = "\n".join(w.upper() if i % 3 == 0 else w for i, w in enumerate(a.split(" ")))
    mangled = mangled.replace("\n", " \t\n ", 50)
    assert mangled != a
    probe = CoverageProbe(index3)
    probe.observe(mangled)  # (c)
    assert probe.result().per_document["Alpha/a.txt"] == 1.0


def test_no_room_text_is_zero(index3: CoverageIndex) -> None:
    probe = CoverageProbe(index3)
    probe.observe("You are a diligent M&A lawyer. " * 40)  # (d)
    probe.observe("")
    probe.observe("short")
    cov = probe.result()
    assert cov.overall == 0.0
    assert set(cov.per_document.values()) == {0.0}
    assert cov.per_folder == {"Alpha": 0.0, "Beta": 0.0}


def test_short_spans_are_not_detected(
    room3: tuple[DataRoom, dict[str, str]], index3: CoverageIndex
) -> None:
    c = room3[1]["Beta/c.txt"]
    probe = CoverageProbe(index3)
    probe.observe(c[100 : 100 + K - 1])  # below the minimum detectable span
    assert probe.result().per_document["Beta/c.txt"] == 0.0
    probe.observe(c[1000 : 1000 + K + STRIDE - 1])  # guaranteed from here
    assert probe.detail().per_document_chars["Beta/c.txt"][0] == K + STRIDE - 1


def test_repeats_and_order_do_not_matter(
    room3: tuple[DataRoom, dict[str, str]], index3: CoverageIndex
) -> None:
    _, texts = room3
    inputs = [texts["Alpha/b.txt"][:700], "noise " * 30, texts["Beta/c.txt"][900:1500]]
    once = CoverageProbe(index3)
    for t in inputs:
        once.observe(t)
    twice = CoverageProbe(index3)
    for t in inputs[::-1] + inputs + [inputs[0] + ""]:  # (f)
        twice.observe(t)
    assert once.result() == twice.result()
    assert once.result() == once.result()


def test_an_episode_holds_references_to_its_inputs_not_copies_or_window_hashes(
    room3: tuple[DataRoom, dict[str, str]], index3: CoverageIndex
) -> None:
    """While an episode runs its probe holds only references to the observed texts (kept by
    their records anyway) and a digest each: not 8 bytes per window (issue 17: 8 MB per
    million characters of sub-call prompts was the largest per-episode cost of a collector),
    nor a normalised copy (a byte per character). Measured with tracemalloc, which numpy
    reports its buffers to; the result is that of the text."""
    import tracemalloc

    rng = random.Random(7)
    inputs = [_words(rng, 8_000) for _ in range(25)]  # ~1 M characters of distinct text
    chars = sum(len(t) for t in inputs)
    probe = CoverageProbe(index3)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for t in inputs:
            probe.observe(t)
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert chars > 900_000
    assert held < 200 * len(inputs), (held, chars)  # copies were ~1, hashes >= 8 B per char
    c = room3[1]["Beta/c.txt"]
    probe.observe(c)
    assert probe.result().per_document["Beta/c.txt"] == 1.0


def test_observe_is_thread_safe(
    room3: tuple[DataRoom, dict[str, str]], index3: CoverageIndex
) -> None:
    c = room3[1]["Beta/c.txt"]
    pieces = [c[i : i + 200] for i in range(0, len(c), 150)] + [c[-200:]]
    probe = CoverageProbe(index3)
    threads = [
        threading.Thread(target=lambda ps=pieces[i::8]: [probe.observe(p) for p in ps])
        for i in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert probe.result().per_document["Beta/c.txt"] == 1.0


def test_cache_round_trip(room3: tuple[DataRoom, dict[str, str]], tmp_path: Path) -> None:
    room, texts = room3
    built = CoverageIndex.load_or_build(room, tmp_path / "cache")
    files = sorted(p.name for p in (tmp_path / "cache").iterdir())
    stem = f"{room.room_hash}.coverage-{PROBE_VERSION}-k{K}-s{STRIDE}-f{CACHE_FORMAT}"
    assert files == [f"{stem}.cp", f"{stem}.npz", f"{stem}.win"]
    assert CoverageIndex.load_or_build(room, tmp_path / "cache") is built  # in-process share
    loaded = CoverageIndex._open(tmp_path / "cache" / stem)
    assert loaded is not None
    # The loaded index maps its text and window hashes instead of reading them in.
    assert isinstance(loaded.cp, np.memmap) and isinstance(loaded.win_hash, np.memmap)
    assert np.array_equal(loaded.win_hash, built.win_hash)
    for ix in (built, loaded):
        probe = CoverageProbe(ix)
        probe.observe(texts["Alpha/a.txt"])
        assert probe.result().per_document["Alpha/a.txt"] == 1.0
    assert loaded.duplicate_chars == built.duplicate_chars == len(CLAUSE)


def test_cuad_room_known_slice(tmp_path: Path) -> None:
    build_cuad_room(SAMPLE_SOURCE, tmp_path / "cuad", 3, 0)
    room = DataRoom.load(tmp_path / "cuad")
    assert len(room) == 3
    index = CoverageIndex.build(room)
    doc = room.documents[1]
    raw = doc.text[5000:7000]
    probe = CoverageProbe(index)
    probe.observe(f"Summarise the clauses below.\n\n{raw}\n\nAnswer in JSON.")
    cov = probe.result()
    expected = len(normalise(raw)) / len(normalise(doc.text))
    # Edges may differ by the one whitespace character a cut can split.
    assert abs(cov.per_document[doc.id] - expected) <= 2 / len(normalise(doc.text))
    assert 0 < cov.per_document[doc.id] < 0.5
    others = [d.id for d in room.documents if d.id != doc.id]
    assert all(cov.per_document[o] == 0.0 for o in others)


# --------------------------------------------------------------------------- repetitive rooms
# Rooms whose text repeats across documents (boilerplate) are the probe's slow case; these
# tests pin its values there against a brute-force reading of the module docstring's
# definition (exact substrings, no hashing, no runs).

PARAGRAPH = (
    "notwithstanding anything to the contrary in this agreement, neither party shall be "
    "liable for any indirect, incidental or consequential damages arising out of or in "
    "connection with this agreement, except in the case of fraud or wilful misconduct."
)


def _covered_mask(text: str, present: set[str]) -> list[bool]:
    """Per-character version of :func:`_linked`."""
    n = len(text) - K + 1
    chars = [False] * len(text)
    if n <= 0:
        return chars
    ok = [text[p : p + K] in present for p in range(n)]
    reached = [False] * n
    for a in set(range(0, n, STRIDE)) | {n - 1}:
        if ok[a]:
            reached[a] = True
            for step in (-1, 1):
                p = a + step
                while 0 <= p < n and ok[p] and not reached[p]:
                    reached[p] = True
                    p += step
    for p in range(n):
        if reached[p]:
            chars[p : p + K] = [True] * K
    return chars


def _shingles(text: str) -> set[str]:
    return {text[p : p + K] for p in range(len(text) - K + 1)}


def _brute_force(room: DataRoom, inputs: list[str]) -> dict[str, object]:
    """Reference values straight from the definition (O(n^2) in the room; tiny rooms only)."""
    docs = [(d.id, d.folder, normalise(d.text)) for d in room.documents]  # id order
    seen: set[str] = set()
    for t in inputs:
        seen |= _shingles(normalise(t))
    cov = {i: _covered_mask(t, seen) for i, _, t in docs}
    dup: dict[str, list[bool]] = {}
    fdup: dict[str, list[bool]] = {}
    before: set[str] = set()
    before_in: dict[str, set[str]] = {}
    for i, f, t in docs:
        dup[i] = _covered_mask(t, before)
        fdup[i] = _covered_mask(t, before_in.setdefault(f, set()))
        before |= _shingles(t)
        before_in[f] |= _shingles(t)

    def ratio(ids: list[str], dups: dict[str, list[bool]]) -> tuple[int, int]:
        num = sum(c and not d for i in ids for c, d in zip(cov[i], dups[i], strict=True))
        den = sum(not d for i in ids for d in dups[i])
        return num, den

    all_ids = [i for i, _, _ in docs]
    num, den = ratio(all_ids, dup)
    per_folder = {}
    for f in {f for _, f, _ in docs}:
        fnum, fden = ratio([i for i, g, _ in docs if g == f], fdup)
        per_folder[f] = fnum / fden if fden else 0.0
    return {
        "per_document_chars": {i: (sum(cov[i]), len(t)) for i, _, t in docs},
        "covered_chars": num,
        "unique_chars": den,
        "duplicate_chars": sum(sum(dup[i]) for i in all_ids),
        "duplicate_covered_chars": sum(
            sum(c and d for c, d in zip(cov[i], dup[i], strict=True)) for i in all_ids
        ),
        "overall": num / den if den else 0.0,
        "per_folder": per_folder,
    }


def _assert_matches_brute_force(index: CoverageIndex, room: DataRoom, inputs: list[str]) -> None:
    probe = CoverageProbe(index)
    for t in inputs:
        probe.observe(t)
    got = probe.detail()
    want = _brute_force(room, inputs)
    assert got.per_document_chars == want["per_document_chars"]
    assert got.covered_chars == want["covered_chars"]
    assert got.unique_chars == want["unique_chars"]
    assert got.duplicate_chars == index.duplicate_chars == want["duplicate_chars"]
    assert got.duplicate_covered_chars == want["duplicate_covered_chars"]
    assert got.coverage.overall == want["overall"]
    assert got.coverage.per_folder == want["per_folder"]
    assert got.coverage.per_document == {
        i: (c / n if n else 0.0) for i, (c, n) in got.per_document_chars.items()
    }


@pytest.fixture
def boilerplate_room(tmp_path: Path) -> DataRoom:
    """The same paragraph in 50 documents of 3 folders, at every offset modulo STRIDE, some
    twice, some cut short, some behind a one-letter change; plus two documents without it."""
    rng = random.Random(11)
    files: dict[str, str] = {}
    for i in range(50):
        head = _words(rng, rng.randrange(0, 12)) + " " + "x" * (i % STRIDE)
        body = PARAGRAPH
        if i % 7 == 3:
            body = PARAGRAPH[: rng.randrange(K, len(PARAGRAPH))]  # a truncated copy
        if i % 11 == 5:
            body = PARAGRAPH.replace("indirect", "indirekt")  # near-copy
        if i % 9 == 0:
            body = body + " and " + PARAGRAPH  # repeated inside the document
        files[f"F{i % 3}/d{i:02d}.txt"] = f"{i} {head} {body} {_words(rng, rng.randrange(0, 9))}"
    files["F0/zz.txt"] = _words(rng, 80)
    files["F2/short.txt"] = "too short to hold a window"
    return _write_room(tmp_path / "boiler", files)


def test_repetitive_room_duplicates_match_brute_force(boilerplate_room: DataRoom) -> None:
    index = CoverageIndex.build(boilerplate_room)
    want = _brute_force(boilerplate_room, [])
    assert index.duplicate_chars == want["duplicate_chars"]
    # Nearly all of each later copy is a duplicate: the paragraph is 246 chars, 50 copies.
    assert index.duplicate_chars > 40 * (len(PARAGRAPH) - 2 * K)
    _assert_matches_brute_force(index, boilerplate_room, [])


def test_repetitive_room_coverage_matches_brute_force(boilerplate_room: DataRoom) -> None:
    index = CoverageIndex.build(boilerplate_room)
    texts = {d.id: d.text for d in boilerplate_room.documents}
    rng = random.Random(3)
    # The paragraph alone: credited in every document holding it.
    _assert_matches_brute_force(index, boilerplate_room, ["Summarise: " + PARAGRAPH])
    # Whole documents, and slices cut at every offset modulo STRIDE.
    _assert_matches_brute_force(index, boilerplate_room, [texts["F1/d04.txt"]])
    slices = []
    for k in range(2 * STRIDE):
        t = texts[rng.choice(sorted(texts))]
        s = rng.randrange(0, max(1, len(t) - K))
        slices.append("<" + t[s : s + K + k * 5] + ">")
    _assert_matches_brute_force(index, boilerplate_room, slices)
    # Pieces of the paragraph around the minimum detectable span.
    pieces = [PARAGRAPH[s : s + K + d] for s, d in ((3, 0), (40, STRIDE - 2), (100, STRIDE))]
    _assert_matches_brute_force(index, boilerplate_room, pieces)


def test_repetitive_room_paragraph_values(boilerplate_room: DataRoom) -> None:
    """Hand-checkable values: observing only the paragraph covers exactly its copies."""
    index = CoverageIndex.build(boilerplate_room)
    probe = CoverageProbe(index)
    probe.observe(PARAGRAPH)
    chars = probe.detail().per_document_chars
    assert len(PARAGRAPH) == 246
    assert chars["F1/d01.txt"][0] == len(PARAGRAPH)  # one full copy, any alignment
    assert chars["F0/d09.txt"][0] == 2 * len(PARAGRAPH)  # two copies in one document
    # The near-copy: both sides of the changed letter are >= K + STRIDE - 1 characters long,
    # so everything but that letter is covered.
    k_at = PARAGRAPH.index("indirect") + len("indire")
    assert min(k_at, len(PARAGRAPH) - k_at - 1) >= K + STRIDE - 1
    assert chars["F2/d05.txt"][0] == len(PARAGRAPH) - 1
    assert chars["F0/zz.txt"][0] == chars["F2/short.txt"][0] == 0


def test_random_repetitive_rooms_match_brute_force(tmp_path: Path) -> None:
    """Seeded rooms written from a few stock phrases (every window repeats many times), with
    the scan cut into small chunks so chunk edges fall everywhere."""
    from rlmdistill.coverage import index as cov_mod

    cov_mod._powers()  # cache the full-size power tables before shrinking the chunk
    phrases = [_words(random.Random(p), 14) for p in range(6)]
    for seed in range(3):
        rng = random.Random(seed)
        files = {
            f"G{rng.randrange(3)}/{i:02d}.txt": " ".join(
                rng.choice(phrases) for _ in range(rng.randrange(1, 9))
            )
            + f" {i}"
            for i in range(30)
        }
        room = _write_room(tmp_path / f"r{seed}", files)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(cov_mod, "_CHUNK", 997)
            index = CoverageIndex.build(room)
        inputs = []
        for _ in range(6):
            t = normalise(room.documents[rng.randrange(len(room))].text)
            s = rng.randrange(0, max(1, len(t) - K))
            inputs.append(t[s : s + rng.randrange(K - 5, 400)])
        _assert_matches_brute_force(index, room, inputs)
        _assert_matches_brute_force(index, room, [phrases[0] + " " + phrases[1]])


def test_result_scans_shared_over_threads_match_brute_force(
    boilerplate_room: DataRoom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The result's window scan and run extension, cut into slices of 7 windows and batches
    of 3 runs shared over 4 threads (so slices finish out of order), give the brute-force
    values: the order of the pieces is that of a plain loop."""
    from concurrent.futures import ThreadPoolExecutor

    from rlmdistill.coverage import index as cov_mod

    index = CoverageIndex.build(boilerplate_room)
    texts = {d.id: d.text for d in boilerplate_room.documents}
    inputs = ["Summarise: " + PARAGRAPH, texts["F1/d04.txt"], texts["F0/zz.txt"][5:300]]
    with ThreadPoolExecutor(4) as pool:
        monkeypatch.setattr(cov_mod, "_result_pool", lambda: pool)
        monkeypatch.setattr(cov_mod, "_SCAN", 7)
        monkeypatch.setattr(cov_mod, "_EXTEND", 3)
        assert index.n_windows > 10 * 7
        _assert_matches_brute_force(index, boilerplate_room, inputs)


def test_rolling_window_hashes_match_prefix_sums(index3: CoverageIndex) -> None:
    """The run-edge hashes rolled one character at a time equal the directly computed ones."""
    from rlmdistill.coverage.index import _window_hashes

    full = _window_hashes(index3.cp)
    p = np.array([0, 5, 300, index3.cp.size - K - 1], dtype=np.int64)
    assert np.array_equal(index3._step_right(full[p], p), full[p + 1])
    assert np.array_equal(index3._step_left(full[p + 1], p + 1), full[p])


def test_side_hashes_are_the_window_hashes_s_characters_out(index3: CoverageIndex) -> None:
    """The hashes a run's extension tests, S-1 windows each side computed at once, equal the
    directly computed window hashes at p - s and p + s (s = 1 .. S-1)."""
    from rlmdistill.coverage.index import STRIDE, _window_hashes

    full = _window_hashes(index3.cp)
    p = np.array([STRIDE, 40, 300, full.size - STRIDE], dtype=np.int64)
    s = np.arange(1, STRIDE)
    left, right = index3._side_hashes(p, -1), index3._side_hashes(p, 1)
    assert left.shape == right.shape == (p.size, STRIDE - 1)
    assert np.array_equal(left, full[p[:, None] - s])
    assert np.array_equal(right, full[p[:, None] + s])


def _result_in_child(q: object) -> None:
    from rlmdistill.coverage import index as cov_mod

    try:
        q.put(cov_mod._result_pool().submit(lambda: 2).result(timeout=20))  # type: ignore[attr-defined]
    except Exception as exc:
        q.put(type(exc).__name__)  # type: ignore[attr-defined]


def test_a_forked_child_gets_result_threads_of_its_own() -> None:
    """The importers fork their coverage workers: a child made while the parent's result
    pool has all its threads (idle) must still get its results computed (without the at-fork
    reset it waits forever: the copied pool believes its idle threads will take the work)."""
    import multiprocessing
    from concurrent.futures import wait

    from rlmdistill.coverage import index as cov_mod

    pool = cov_mod._result_pool()
    started = threading.Barrier(pool._max_workers)  # every thread of the pool started
    wait([pool.submit(started.wait) for _ in range(pool._max_workers)])
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    child = ctx.Process(target=_result_in_child, args=(q,))
    child.start()
    assert q.get(timeout=60) == 2
    child.join(10)


def test_key_table_lookup() -> None:
    """Batched inserts (repeats, keys already present, key 0, the largest key) and lookups
    agree with numpy's set operations."""
    from rlmdistill.coverage.index import _KeyTable

    table = _KeyTable(8)
    table.add(np.array([5, 0, 7], dtype=np.uint64))
    table.add(np.array([5, 2**64 - 1, 0, 7, 7], dtype=np.uint64))
    assert table.size == 4
    needles = np.array([7, 1, 0, 2**64 - 1, 6, 5], dtype=np.uint64)
    got = table.get(needles)
    assert got[[1, 4]].tolist() == [-1, -1]
    assert len({int(g) for g in got[[0, 2, 3, 5]]}) == 4  # four keys, four slots
    assert got[2] == table.n_slots  # key 0 has the extra slot
    rng = np.random.default_rng(0)
    many = rng.integers(0, 2**64 - 1, 50_000, dtype=np.uint64)
    big = _KeyTable(many.size)
    for part in np.array_split(np.concatenate([many, many[:100]]), 7):
        big.add(part)
    assert big.size == np.unique(many).size
    probe = np.concatenate([many[::7], rng.integers(0, 2**64 - 1, 5_000, dtype=np.uint64)])
    where, slot = big.find(probe)
    assert np.array_equal(np.isin(probe, many), np.isin(np.arange(probe.size), where))
    assert np.array_equal(big.get(probe[where]), slot)
    assert bool(big.maybe(many).all())  # the prefilter never rejects a key
    # Equal keys share a slot, distinct keys never do.
    assert np.unique(big.get(many)).size == np.unique(many).size


@pytest.mark.parametrize(("n_keys", "bits"), [(0, 12), (100, 12), (5_000, 17), (3_000_000, 26)])
def test_hash_set_bitmap_is_sized_to_its_keys_and_exact(n_keys: int, bits: int) -> None:
    from rlmdistill.coverage.index import _HashSet

    rng = np.random.default_rng(n_keys)
    keys = rng.integers(0, 2**63, size=n_keys, dtype=np.uint64)
    hs = _HashSet(keys)
    assert hs.bitmap.size * 8 == 2**bits  # packed: 8 bits a byte
    others = rng.integers(0, 2**63, size=2_000, dtype=np.uint64)
    probe = np.concatenate([keys[:1_000], others])
    expected = np.isin(probe, keys)
    assert np.array_equal(hs.contains(probe), expected)
    assert int(expected[: min(1_000, n_keys)].sum()) == min(1_000, n_keys)


# --------------------------------------------------------------------------- streaming build
# The index is built by streaming the room through files (cache format 2); these rooms put
# the build's special cases where the brute-force definition can check them.


def test_streaming_build_edge_cases_match_brute_force(tmp_path: Path) -> None:
    """Root-level documents between folders (the root folder is not contiguous in id order),
    documents shorter than K, a document longer than a scan chunk, text that widens the code
    points from 1 to 2 to 4 bytes part-way through the room, and phrases that recur across
    documents at every offset (so edge windows are decided in both scans)."""
    from rlmdistill.coverage import index as cov_mod

    cov_mod._powers()  # cache the full-size power tables before shrinking the chunk
    rng = random.Random(5)
    phrases = [_words(random.Random(100 + p), 12) for p in range(4)]

    def body(n: int) -> str:
        return " ".join(
            rng.choice(phrases) if rng.random() < 0.5 else _words(rng, 5) for _ in range(n)
        )

    files = {
        "a.txt": body(6),
        "B/x.txt": body(8),
        "B/y.txt": "tiny",
        "c.txt": body(5) + " caf\u00e9 " + body(3),  # 1 byte -> still 1 byte (latin-1)
        "D/long.txt": body(120),  # longer than the shrunk chunk
        "D/z.txt": body(4) + " \u2022 " + body(4),  # widens to 2 bytes
        "e.txt": body(7),
        "F/w.txt": body(5) + " \U0001f4c4 " + body(6),  # widens to 4 bytes
        "F/v.txt": phrases[0] + " " + phrases[1],
        "g.txt": body(9) + " " + phrases[2],
    }
    room = _write_room(tmp_path / "edge", files)
    assert [d.id for d in room.documents][:3] == ["B/x.txt", "B/y.txt", "D/long.txt"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cov_mod, "_CHUNK", 1500)
        small = CoverageIndex.build(room)
    big = CoverageIndex.build(room)
    assert small.cp.dtype == np.uint32 and np.array_equal(small.cp, big.cp)
    for a, b in ((small.dup, big.dup), (small.folder_dup, big.folder_dup)):
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert small.duplicate_chars > 0 and small.folder_dup[0].size > 0
    inputs = [phrases[0], normalise(files["D/long.txt"])[300:1400], files["F/w.txt"]]
    for index in (small, big):
        _assert_matches_brute_force(index, room, [])
        _assert_matches_brute_force(index, room, inputs)
    # The code points are those of the normalised documents, back to back.
    text = "".join(normalise(d.text) for d in room.documents)
    assert "".join(map(chr, np.asarray(big.cp).tolist())) == text


def test_build_does_not_keep_document_texts(tmp_path: Path) -> None:
    """The build reads each document once without caching its text on the room (a 320 M
    character room must never be held whole)."""
    rng = random.Random(2)
    room = _write_room(tmp_path / "r", {f"F/{i}.txt": _words(rng, 80) for i in range(5)})
    CoverageIndex.build(room)
    room.snapshot(tmp_path / "snap" / "room")
    assert all(d._text is None for d in room.documents)


def test_format_1_cache_is_never_read_and_a_damaged_cache_is_rebuilt(
    room3: tuple[DataRoom, dict[str, str]], tmp_path: Path
) -> None:
    """A cache written by the previous layout (format 1: one ``.npz`` + ``.cp.npy`` under a
    name without ``-f<format>``) is left alone and never misread; a format-2 cache whose files
    disagree (a truncated or rewritten ``.win``) is rebuilt."""
    from rlmdistill.coverage import index as cov_mod

    room, texts = room3
    cache = tmp_path / "cache"
    cache.mkdir()
    old = cache / f"{room.room_hash}.coverage-{PROBE_VERSION}-k{K}-s{STRIDE}"
    old.with_name(old.name + ".npz").write_bytes(b"not an index")
    old.with_name(old.name + ".cp.npy").write_bytes(b"junk")
    built = CoverageIndex.load_or_build(room, cache)
    assert built.duplicate_chars == len(CLAUSE)
    assert old.with_name(old.name + ".npz").read_bytes() == b"not an index"
    stem = cache / f"{room.room_hash}.coverage-{PROBE_VERSION}-k{K}-s{STRIDE}-f{CACHE_FORMAT}"
    win = stem.with_name(stem.name + ".win")
    good = win.read_bytes()
    for damaged in (good[:-8], bytes(len(good))):
        win.write_bytes(damaged)
        assert CoverageIndex._open(stem) is None
        cov_mod._LOADED.clear()
        again = CoverageIndex.load_or_build(room, cache)
        assert again.duplicate_chars == len(CLAUSE)
        assert win.read_bytes() == good  # rebuilt in place
        probe = CoverageProbe(again)
        probe.observe(texts["Beta/c.txt"])
        assert probe.result().per_document["Beta/c.txt"] == 1.0


def test_unwritable_cache_still_builds(
    room3: tuple[DataRoom, dict[str, str]], tmp_path: Path
) -> None:
    room, _ = room3
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    index = CoverageIndex.load_or_build(room, blocker / "cache")
    assert index.duplicate_chars == len(CLAUSE)


def test_normalise_whitespace_classes_agree() -> None:
    """:func:`normalise` collapses runs with ``str.split()``; that equals ``re.sub(r"\\s+")``
    because both take the same characters for whitespace, checked for every code point."""
    import re

    ws = re.compile(r"\s")
    assert all(bool(ws.fullmatch(c)) == c.isspace() for c in map(chr, range(0x110000)))
    rng = random.Random(9)
    alphabet = "ab \t\n\r\u00a0\u2003\u3000\x1c\x1f\x85\u2028\ufb01\u0130"
    for _ in range(3000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 10)))
        want = re.sub(r"\s+", " ", __import__("unicodedata").normalize("NFKC", s).lower())
        assert normalise(s) == want, repr(s)


def test_window_cache_keeps_recurring_texts_and_gives_the_same_detail(
    index3: CoverageIndex, room3: tuple[DataRoom, dict[str, str]]
) -> None:
    from rlmdistill.coverage.index import WindowCache

    texts = room3[1]
    system = "You are the root. " * 8  # recurs in every episode
    episodes = [
        [system, "read: " + texts["Alpha/a.txt"][:300]],
        [system, "read: " + texts["Beta/c.txt"][100:500]],
        [texts["Alpha/b.txt"][:200]],  # one text alone (the cached array is not handed out)
        [texts["Alpha/b.txt"][:200]],
        [texts["Alpha/b.txt"][:200], system],
    ]
    cache = WindowCache()
    for inputs in episodes:
        plain, cached = CoverageProbe(index3), CoverageProbe(index3, cache)
        for t in inputs:
            plain.observe(t)
            cached.observe(t)
        assert cached.detail() == plain.detail()
    assert plain.detail().covered_chars > 0
    # kept from the second sighting on: the system prompt and the repeated Alpha/b excerpt
    assert len(cache._hashes) == 2
    small = WindowCache(max_bytes=1)  # anything kept overflows it: starts again each time
    for inputs in episodes:
        probe = CoverageProbe(index3, small)
        for t in inputs:
            probe.observe(t)
        probe.detail()
        assert len(small._hashes) <= 1  # a kept text beyond max_bytes empties it first
