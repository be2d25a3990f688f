"""The coverage index's build (``coverage/index.py``: ``_Builder``, ``_Chains``, ``_KeyTable``,
``_BitFilter``): its memory and speed changes keep every value.

The golden figures were computed by the build before these changes (main at 4b9cf14: key
table sized to a power of two, chain sides as per-chunk columns of start / hash / first
position / document, 1 M-window hashing steps) on ``rooms synth --docs 60 --seed 0`` (generator
``synth-v3``); the same script on a 300- and a 1,000-document room (``--length-scale 4``) gave
identical intervals and coverage for both builds.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import numpy as np
import pytest

from rlmdistill.coverage import index as cov_mod
from rlmdistill.coverage.index import CoverageIndex, CoverageProbe
from rlmdistill.rooms import DataRoom
from rlmdistill.rooms.synth import build_synth_room

GOLDEN_ROOM = {
    "n_chars": 949_469,
    "duplicate_chars": 27_200,
    "dup": (326, "7140b26a6e40c216"),
    "folder_dup": (179, "4f349deee6af456e"),
}
"""Main's build of the 60-document room: interval counts and :func:`_digest` of each."""

GOLDEN_EPISODES = [
    # (covered_chars, unique_chars, duplicate_covered_chars, overall)
    (33_773, 922_269, 1_125, 0.03661946785590755),
    (48_633, 922_269, 3_752, 0.052731903598624695),
    (48_728, 922_269, 4_334, 0.052834910422013534),
    (41_016, 922_269, 1_860, 0.04447292492754283),
]
"""Main's coverage of the four episodes of :func:`_episodes` on that room."""


def _digest(iv: tuple[np.ndarray, np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in iv:
        h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())
    return h.hexdigest()[:16]


def _episodes(index: CoverageIndex, room: DataRoom) -> list[tuple[int, int, int, float]]:
    """Four episodes, each observing 12 random slices of 200-6,000 characters (seed 7)."""
    rng = random.Random(7)
    out = []
    for _ in range(4):
        probe = CoverageProbe(index)
        for d in rng.sample(room.documents, 12):
            t = d.read_text()
            s = rng.randrange(0, max(1, len(t) - 3000))
            probe.observe("Summarise:\n" + t[s : s + rng.randrange(200, 6000)])
        det = probe.detail()
        out.append(
            (
                det.covered_chars,
                det.unique_chars,
                det.duplicate_covered_chars,
                det.coverage.overall,
            )
        )
    return out


@pytest.fixture(scope="module")
def synth60(tmp_path_factory: pytest.TempPathFactory) -> DataRoom:
    path = tmp_path_factory.mktemp("synth60") / "room"
    build_synth_room(path, 60, 0, length_scale=1.0)
    return DataRoom.load(path)


@pytest.mark.parametrize(
    ("chunk", "block"),
    [(None, None), (20_011, 257)],
    ids=["default-steps", "small-chunks-and-blocks"],
)
def test_build_matches_mains_intervals_and_coverage(
    synth60: DataRoom, chunk: int | None, block: int | None
) -> None:
    """Duplicate intervals and four episodes' coverage equal main's build, with the default
    chunk and block sizes and with both shrunk (chunks of whole documents, so the scans cross
    many chunk and block boundaries)."""
    cov_mod._powers()  # the power tables at full size before any step is shrunk
    with pytest.MonkeyPatch.context() as mp:
        if chunk is not None:
            mp.setattr(cov_mod, "_CHUNK", chunk)
            mp.setattr(cov_mod, "_BLOCK", block)
        index = CoverageIndex.build(synth60)
    assert index.n_chars == GOLDEN_ROOM["n_chars"]
    assert index.duplicate_chars == GOLDEN_ROOM["duplicate_chars"]
    assert (index.dup[0].size, _digest(index.dup)) == GOLDEN_ROOM["dup"]
    assert (index.folder_dup[0].size, _digest(index.folder_dup)) == GOLDEN_ROOM["folder_dup"]
    assert _episodes(index, synth60) == GOLDEN_EPISODES


def test_window_hashes_in_blocks_equal_one_block() -> None:
    """Hashing in cache-sized blocks gives the hashes of one pass over the whole array, for
    lengths around the block size (the last block short, or exactly full)."""
    rng = np.random.default_rng(3)
    cp_all = rng.integers(0, 70_000, 5_000).astype(np.uint32)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cov_mod, "_BLOCK", 10_000)
        whole = cov_mod._window_hashes(cp_all)
    for block in (1, 7, 64, 4_937):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(cov_mod, "_BLOCK", block)
            assert np.array_equal(cov_mod._window_hashes(cp_all), whole)
    # the definition: h(i) = sum_j cp[i + j] * B^(K - 1 - j) mod 2^64, at a few positions
    base, k = cov_mod._BASE, cov_mod.K
    for i in (0, 1, 2_000, cp_all.size - k):
        direct = sum(
            int(c) * pow(base, k - 1 - j, 1 << 64) for j, c in enumerate(cp_all[i : i + k])
        )
        assert int(whole[i]) == direct % (1 << 64)


@pytest.mark.parametrize("max_load", [0.7, 0.85, 1.0])
def test_key_table_of_any_size_holds_a_full_load(max_load: float) -> None:
    """A table of a non-power-of-two size filled to its capacity (load ``max_load``, 1.0: every
    slot taken) finds every key and no other value; keys probe past the last slot and wrap."""
    rng = np.random.default_rng(11)
    n = 3_001
    table = cov_mod._KeyTable(n, max_load=max_load)
    pool = rng.integers(1, 2**64 - 1, 400_000, dtype=np.uint64)
    last = pool[table._home(pool) == table.n_slots - 1][:5]  # all want the last slot
    keys = np.unique(np.concatenate([pool[-(n - last.size) :], last]))
    assert keys.size == n and last.size == 5
    assert table.n_slots == int(np.ceil(keys.size / max_load))
    for part in np.array_split(keys, 5):
        table.add(part)
        table.add(part[:10])  # keys already present
    assert table.size == keys.size
    slots = table.get(keys)
    assert np.unique(slots).size == keys.size and slots.min() >= 0
    assert slots.max() < table.n_slots
    assert (table.get(last) < table.n_slots - 1).sum() >= 4  # wrapped past the end
    others = rng.integers(1, 2**64 - 1, 2_000, dtype=np.uint64)
    others = others[~np.isin(others, keys)]
    if max_load < 1.0:  # a lookup of a non-key ends at an empty slot; a full table has none
        assert (table.get(others) == -1).all()
    probe = np.concatenate([keys[::3], others if max_load < 1.0 else others[:0]])
    where, slot = table.find(probe)
    assert np.array_equal(where, np.arange(keys[::3].size))
    assert np.array_equal(slot, slots[::3])


def test_key_table_refuses_2_to_the_32_slots() -> None:
    with pytest.raises(ValueError, match="2\\^32 slots"):
        cov_mod._KeyTable(2**32)


@pytest.mark.parametrize(("n_keys", "bits_per_key"), [(0, 16), (1_000, 16), (100_000, 8)])
def test_bit_filter_never_rejects_a_key(n_keys: int, bits_per_key: int) -> None:
    """Every key passes; non-keys pass at about the filter's fill (bits set / bits)."""
    rng = np.random.default_rng(n_keys)
    keys = rng.integers(0, 2**64 - 1, n_keys, dtype=np.uint64)
    bf = cov_mod._BitFilter(n_keys, bits_per_key)
    bf.add(keys)
    assert bool(bf.maybe(keys).all())
    others = rng.integers(0, 2**64 - 1, 200_000, dtype=np.uint64)
    fill = float(np.unpackbits(bf.bitmap).mean())
    assert fill <= 1 / bits_per_key + 1e-9
    passed = float(bf.maybe(others).mean())
    assert abs(passed - fill) < 0.01
    blocks = cov_mod._passing(bf.maybe, others)
    assert np.array_equal(blocks, np.flatnonzero(bf.maybe(others)))


def test_chain_sides_store_window_indices(tmp_path: Path) -> None:
    """A chain side holds its anchor as an index into the ``.win`` file (uint32 below 2^32
    windows) and its first position (uint32 below 2^32 characters): the start, document and
    hash follow from them, and the hashes read back from the file equal the anchors'."""
    files = {"a.txt": "x" * 10 + " ".join(f"w{i}" for i in range(400))}
    files["b.txt"] = "y" * 7 + files["a.txt"][10:]  # b repeats a (shifted by 3)
    room_dir = tmp_path / "room"
    room_dir.mkdir()
    for name, text in files.items():
        (room_dir / name).write_text(text, encoding="utf-8")
    room = DataRoom.load(room_dir)
    b = cov_mod._Builder(room, tmp_path / "idx")
    b.write_text()
    chains: list[cov_mod._Chains] = []
    real = cov_mod._Chains

    def spy(*args: object) -> cov_mod._Chains:
        c = real(*args)  # type: ignore[arg-type]
        chains.append(c)
        return c

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cov_mod, "_Chains", spy)
        dup, _ = b.find_duplicates()
    room_chains = chains[0]
    assert room_chains.n == 1  # one run: b's aligned windows inside the repeat
    start_b = int(b.doc_starts[1])
    assert int(room_chains.pos[0]) == start_b + 16  # first aligned window wholly in the repeat
    assert int(room_chains.pos[1]) == int(b.doc_starts[2]) - cov_mod.K  # b's last window
    assert room_chains.pos.dtype == np.int64 and room_chains.doc.tolist() == [1, 1]
    win = np.fromfile(b.paths()[1], dtype=np.uint64)
    idx = np.arange(int(b.win_first[1]), int(b.win_first[2]))
    assert np.array_equal(b.window_hashes(idx[::-1]), win[idx[::-1]])
    # the repeat in b is found to the character: it starts 7 characters in
    assert dup[0].tolist() == [start_b + 7] and dup[1].tolist() == [int(b.doc_starts[2])]
