"""``export.json`` and the dataset card record the labels a dataset's runs carried (count,
reviewers, the file's sha256), so the SFT lineage says what people decided."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

from rlmdistill.export.dataset import export_dataset
from rlmdistill.export.options import ExportOptions
from rlmdistill.testing.trajectory_runs import write_trajectory_run
from rlmdistill.traces import labels as lb
from rlmdistill.traces import layout
from rlmdistill.traces.artefacts import load_export_manifest
from rlmdistill.traces.runs import EpisodeRef, load_summaries


def test_export_records_labels_used(tmp_path: Path, smollm2_dir: Path) -> None:
    run = tmp_path / "runs" / "r"
    ids = write_trajectory_run(run, 2, n_turns=2, obs_chars=300)
    memos = {s.episode_id: s.memo for s in load_summaries(run)}
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    lb.append_labels(
        run,
        [
            lb.Label(
                episode_id=eid,
                memo_hash=lb.memo_hash(memos[eid]),
                target="episode",
                verdict="keep",
                reviewer=who,
                time=t0,
            )
            for eid, who in zip(ids, ["ann", "bob"], strict=True)
        ],
    )
    digest = hashlib.sha256(layout.labels_path(run).read_bytes()).hexdigest()
    out = tmp_path / "ds"
    export_dataset(
        [EpisodeRef(run, e) for e in ids], out, ExportOptions(tokenizer=str(smollm2_dir))
    )
    (src,) = load_export_manifest(out).sources
    assert src.labels is not None
    assert (src.labels.count, src.labels.reviewers, src.labels.sha256) == (
        2,
        ["ann", "bob"],
        digest,
    )
    card = (out / "README.md").read_text(encoding="utf-8")
    assert f"people's labels used: 2 by ann, bob (`labels.jsonl` sha256 {digest})" in card
    # a manifest written before labels existed still loads (no "labels" key)
    raw = json.loads((out / layout.EXPORT_MANIFEST).read_text(encoding="utf-8"))
    del raw["sources"][0]["labels"]
    (out / layout.EXPORT_MANIFEST).write_text(json.dumps(raw), encoding="utf-8")
    assert load_export_manifest(out).sources[0].labels is None
