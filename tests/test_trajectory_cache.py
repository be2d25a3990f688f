"""The report's per-episode trajectory-metrics cache (issue 19 item 2, speed): a rebuilt report
reads only the trajectories that changed, a stale or corrupt cache is recomputed, and nothing
is written into the run folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import rlmdistill.analysis.metrics as metrics_mod
from rlmdistill.analysis.metrics import load_run_metrics
from rlmdistill.analysis.trajectory_cache import cache_file


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Episode ids whose trajectory file the metrics read, in order."""
    seen: list[str] = []
    read = metrics_mod._read_trajectory_fields

    def counting(run_dir: Path, episode_id: str):  # type: ignore[no-untyped-def]
        seen.append(episode_id)
        return read(run_dir, episode_id)

    monkeypatch.setattr(metrics_mod, "_read_trajectory_fields", counting)
    return seen


def test_rebuild_reads_only_changed_trajectories(collected_run, tmp_path, counted):
    run = tmp_path / "run"
    shutil.copytree(collected_run, run)
    cache = cache_file(tmp_path / "report" / ".cache", run)
    before = _tree(run)
    first = load_run_metrics(run, trajectory_cache=cache).rows
    ids = [r.episode_id for r in first]
    assert counted == ids and len(ids) == 2 and cache.is_file()
    # nothing changed: no trajectory is read, the rows are the same values
    counted.clear()
    again = load_run_metrics(run, trajectory_cache=cache).rows
    assert counted == []
    assert [r.model_dump() for r in again] == [r.model_dump() for r in first]
    assert _tree(run) == before  # the run folder is never written
    # one trajectory changes (one more sub-call record, a copy of the last): only it is read
    path = run / "trajectories" / f"{ids[1]}.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    call = next(json.loads(x) for x in reversed(lines) if '"record_type":"sub_call"' in x)
    path.write_text("\n".join([*lines, json.dumps(call)]) + "\n", encoding="utf-8")
    counted.clear()
    changed = load_run_metrics(run, trajectory_cache=cache).rows
    assert counted == [ids[1]]
    assert changed[0].model_dump() == first[0].model_dump()
    assert changed[1].n_sub_calls_with_text == first[1].n_sub_calls_with_text + 1
    assert changed[1] == load_run_metrics(run).rows[1]  # as read without a cache


def test_corrupt_or_foreign_cache_is_recomputed(collected_run, tmp_path, counted):
    cache = cache_file(tmp_path / ".cache", collected_run)
    want = load_run_metrics(collected_run, trajectory_cache=cache).rows
    n = len(want)
    cache.write_text('{"version": 1, "run_dir": "x", "reach_ngram": 8, "episo', "utf-8")
    counted.clear()
    assert load_run_metrics(collected_run, trajectory_cache=cache).rows == want
    assert len(counted) == n  # everything read again
    json.loads(cache.read_text(encoding="utf-8"))  # and the file replaced by a valid one
    # a cache of another reach n-gram is not used for this one
    counted.clear()
    other = load_run_metrics(collected_run, reach_ngram=3, trajectory_cache=cache).rows
    assert len(counted) == n and other == load_run_metrics(collected_run, reach_ngram=3).rows
    # an entry whose fields do not validate makes the whole file unusable, never a bad row
    data = json.loads(cache.read_text(encoding="utf-8"))
    first = next(iter(data["episodes"]))
    data["episodes"][first]["fields"]["answer_reach"] = "high"
    cache.write_text(json.dumps(data), "utf-8")
    counted.clear()
    assert load_run_metrics(collected_run, reach_ngram=3, trajectory_cache=cache).rows == other
    assert len(counted) == n


def test_unwritable_cache_only_loses_the_speed_up(collected_run, tmp_path, counted):
    blocked = tmp_path / ".cache"
    blocked.write_text("a file where the cache folder would be", "utf-8")  # mkdir fails
    cache = cache_file(blocked, collected_run)
    rows = load_run_metrics(collected_run, trajectory_cache=cache).rows
    assert rows == load_run_metrics(collected_run).rows and not cache.exists()
    assert blocked.read_text("utf-8") == "a file where the cache folder would be"
