"""Coverage probe (``collect/coverage.py``, method ``shingle-v1``): hand-checkable values.

Lengths are in normalised characters (:func:`normalise`); the three-document room uses
texts that are already normalised (lowercase, single spaces), so raw length = normalised.
"""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path

import pytest

from rlmdistill.collect.coverage import (
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
    assert files == [
        f"{room.room_hash}.coverage-{PROBE_VERSION}-k{K}-s{STRIDE}.cp.npy",
        f"{room.room_hash}.coverage-{PROBE_VERSION}-k{K}-s{STRIDE}.npz",
    ]
    assert CoverageIndex.load_or_build(room, tmp_path / "cache") is built  # in-process share
    loaded = CoverageIndex._load(
        tmp_path / "cache" / files[1], tmp_path / "cache" / files[0], room.room_hash
    )
    assert loaded is not None
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
