"""``analysis.prefetch``: files not in the page cache are handed to readahead, cached ones
stop it early, nothing read changes; the metrics reader queues its files in the order its
workers open them and leaves no thread behind (the report forks its figure drawer after)."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

import rlmdistill.analysis.metrics as metrics_mod
from rlmdistill.analysis import prefetch
from rlmdistill.analysis.metrics import load_run_metrics, load_runs_metrics
from rlmdistill.traces.layout import trajectory_path

needs_linux = pytest.mark.skipif(not prefetch.supported(), reason="posix_fadvise/RWF_NOWAIT")


def _files(folder: Path, n: int, size: int = 20_000) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        p = folder / f"{i:04d}.jsonl"
        p.write_bytes(bytes([65 + i % 26]) * size)
        out.append(p)
    return out


def _evict(paths: list[Path]) -> bool:
    """Drop the files' pages from the page cache (``POSIX_FADV_DONTNEED`` after ``fsync``;
    no privileges needed). ``False`` where that does not work (tmpfs keeps its pages)."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    fd = os.open(paths[0], os.O_RDONLY)
    try:
        return not prefetch.is_cached(fd)
    finally:
        os.close(fd)


@needs_linux
def test_files_just_written_are_cached_and_stop_it_after_the_first_ones(tmp_path: Path) -> None:
    paths = _files(tmp_path, prefetch.CACHED_STOP + 40)
    before = threading.active_count()
    with prefetch.Prefetch(paths) as ahead:
        assert threading.active_count() == before  # no thread was started
    assert ahead.stopped_cached
    assert (ahead.cached, ahead.queued) == (prefetch.CACHED_STOP, 0)


@needs_linux
def test_files_not_cached_are_queued_and_read_back_unchanged(tmp_path: Path) -> None:
    paths = _files(tmp_path, prefetch.CACHED_STOP + 100)
    want = [p.read_bytes() for p in paths]
    if not _evict(paths):
        pytest.skip("this file system keeps its pages in memory (tmpfs)")
    paths[-1].unlink()  # a file gone meanwhile is skipped (its reader reports it)
    ahead = prefetch.Prefetch(paths, threads=4)
    ahead.wait()
    ahead.stop()
    assert not ahead.stopped_cached
    assert ahead.queued + ahead.cached == len(paths) - 1
    assert ahead.queued >= prefetch.CACHED_STOP  # at least the evicted head was queued
    assert [p.read_bytes() for p in paths[:-1]] == want[:-1]
    assert not [t for t in threading.enumerate() if t.name.startswith("prefetch-")]


def test_nothing_to_read_starts_nothing(tmp_path: Path) -> None:
    ahead = prefetch.Prefetch([])
    ahead.stop()
    assert (ahead.queued, ahead.cached, ahead.stopped_cached) == (0, 0, False)


class _Read:
    """Stands in for ``metrics._RunRead``: a run folder and the items to read."""

    def __init__(self, run_dir: Path, ids: list[str]) -> None:
        self.run_dir = run_dir
        self.to_read = [(i, None, 0, "") for i in ids]


def test_read_order_interleaves_the_chunks_read_at_once() -> None:
    a: Any = _Read(Path("/r/a"), ["a0", "a1", "a2", "a3", "a4"])  # chunks [a0 a1] [a2 a3] [a4]
    b: Any = _Read(Path("/r/b"), ["b0", "b1", "b2"])  # chunks [b0 b1] [b2]
    order = metrics_mod._read_order([a, b], chunk=2, workers=2)
    names = [p.name.removesuffix(".jsonl") for p in order]
    # chunks 0 and 1 together, then 2 (a4) with 3 (b0 b1), then 4 (b2)
    assert names == ["a0", "a2", "a1", "a3", "a4", "b0", "b1", "b2"]
    assert order[0] == trajectory_path(Path("/r/a"), "a0")
    alone = metrics_mod._read_order([a, b], chunk=0, workers=0)
    want = ["a0", "a1", "a2", "a3", "a4", "b0", "b1", "b2"]
    assert [p.name.removesuffix(".jsonl") for p in alone] == want


def test_the_metrics_reader_prefetches_in_read_order_and_leaves_no_thread(
    collected_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "run"
    shutil.copytree(collected_run, other)
    monkeypatch.setattr(metrics_mod, "_PARALLEL_MIN", 1)
    monkeypatch.setattr(metrics_mod, "_CHUNK_MIN", 1)
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setenv(metrics_mod.READ_WORKERS_ENV, "2")
    seen: list[list[Path]] = []
    real = metrics_mod.Prefetch

    class Recording(real):  # type: ignore[misc, valid-type]
        def __init__(self, paths: Any, *args: Any, **kwargs: Any) -> None:
            seen.append(list(paths))
            super().__init__(paths, *args, **kwargs)

    monkeypatch.setattr(metrics_mod, "Prefetch", Recording)
    alone = [
        [r.model_dump() for r in load_run_metrics(d, row_cache=False).rows]
        for d in (collected_run, other)
    ]
    seen.clear()
    together = load_runs_metrics([collected_run, other], row_cache=False)
    assert [[r.model_dump() for r in m.rows] for m in together] == alone
    (paths,) = seen
    n = sum(len(rows) for rows in alone)
    assert len(paths) == n and len(set(paths)) == n
    assert {p.parent.parent for p in paths} == {collected_run, other}
    assert all(p.is_file() for p in paths)
    monkeypatch.undo()
    assert not [t for t in threading.enumerate() if t.name.startswith("prefetch-")]
