"""Export of root turns cut by max_tokens (``finish_reason == "length"``): keep, mask, drop."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets

from rlmdistill.export import ExportOptions, export_dataset
from rlmdistill.traces.runs import EpisodeRef, load_summaries


def _mark_first_turn_truncated(run: Path) -> tuple[list[EpisodeRef], str]:
    """Copy-edited run: turn 0 of the first episode recorded as cut by max_tokens."""
    refs = [EpisodeRef(run, s.episode_id) for s in load_summaries(run)]
    cut = refs[0].episode_id
    path = run / "trajectories" / f"{cut}.jsonl"
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec.get("record_type") == "turn" and rec["turn"] == 0:
            rec["finish_reason"] = "length"
        lines.append(json.dumps(rec))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return refs, cut


def test_truncated_turns_keep_mask_drop(
    collected_run: Path, smollm2_dir: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    shutil.copytree(collected_run, run)
    refs, cut = _mark_first_turn_truncated(run)

    def export(name: str, **kw: object) -> tuple[dict[str, int], dict[str, int]]:
        opts = ExportOptions(tokenizer=str(smollm2_dir), **kw)  # type: ignore[arg-type]
        report = export_dataset(refs, tmp_path / name, opts)
        ds = datasets.load_from_disk(str(tmp_path / name))
        supervised = {
            f"{r['episode_id']}:{r['turn']}": r["n_supervised"] for r in ds
        }  # fmt: skip
        return report.dropped, supervised

    kept_drops, kept = export("keep")
    masked_drops, masked = export("mask", truncated_turns="mask")
    dropped_drops, dropped = export("drop", truncated_turns="drop")
    assert kept_drops == masked_drops == {} and len(kept) == 2
    other = next(k for k in kept if not k.startswith(cut))
    # trajectory mode: the cut reply stays in the context, unsupervised; the other episode
    # is untouched
    assert masked[other] == kept[other]
    assert 0 < masked[f"{cut}:-1"] < kept[f"{cut}:-1"]
    assert dropped_drops == {"truncated_turn": 1} and set(dropped) == {other}
    # turn mode: the cut turn's own example goes, the episode's later turns stay
    turn_drops, turns = export("turns", mode="turn", truncated_turns="mask")
    all_drops, all_turns = export("turns-keep", mode="turn")
    assert turn_drops == {"truncated_turn": 1} and all_drops == {}
    assert set(all_turns) - set(turns) == {f"{cut}:0"}
