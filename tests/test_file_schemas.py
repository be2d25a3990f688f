"""Every file we write has one typed, versioned schema, and old files keep loading.

Covers the shared :class:`~rlmdistill.provenance.Provenance` record, ``run.json``'s typed
``config``, the merged checkpoint's record, the one price-table loader, and ``room.json``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"


def test_price_table_is_read_in_one_place(tmp_path: Path) -> None:
    from rlmdistill.analysis import cli as analysis_cli
    from rlmdistill.collect.config import CollectConfig
    from rlmdistill.collect.executor import run_limits
    from rlmdistill.judge import cli as judge_cli
    from rlmdistill.models.limits import DEFAULT_PRICES, load_prices

    assert judge_cli.load_prices is load_prices
    assert analysis_cli.load_prices is load_prices
    assert load_prices(None) is DEFAULT_PRICES

    good = tmp_path / "prices.yaml"
    good.write_text(
        "version: t1\nprices:\n  - {pattern: 'openai:m@*', input: 1.0, output: 2.0}\n",
        encoding="utf-8",
    )
    table = load_prices(good)
    assert (table.version, table.prices[0].output) == ("t1", 2.0)

    bad = tmp_path / "bad.yaml"
    bad.write_text("version: t2\nprices:\n  - {pattern: 'x', input: -1, output: 0}\n", "utf-8")
    cfg = CollectConfig(rooms=[], root="local:a", sub="local:b", prices=str(bad))
    # collect reads the price file through the same loader: the error names the file
    with pytest.raises(ValueError, match=r"bad\.yaml: not a valid price table"):
        run_limits(cfg)
    with pytest.raises(FileNotFoundError, match=r"missing\.yaml: price table not found"):
        load_prices(tmp_path / "missing.yaml")


def test_manifests_share_one_provenance_record() -> None:
    from rlmdistill.analysis.schema import Report
    from rlmdistill.export.grpo import GrpoManifest
    from rlmdistill.provenance import Provenance
    from rlmdistill.rl.train import RLManifest
    from rlmdistill.traces.artefacts import ExportManifest, MergeManifest, SFTManifest
    from rlmdistill.traces.schema import RunManifest

    for cls in (RunManifest, ExportManifest, SFTManifest, Report, GrpoManifest, RLManifest):
        assert issubclass(cls, Provenance), cls.__name__
    assert issubclass(MergeManifest, Provenance)
    assert set(Provenance.model_fields) == {"versions", "git_commit", "git_dirty", "machine"}


def test_current_provenance_fills_versions_and_commit() -> None:
    from rlmdistill.provenance import current_provenance, git_state, package_versions

    p = current_provenance({"cpus": 3})
    assert p.versions == package_versions() and p.versions["python"]
    assert (p.git_commit, p.git_dirty) == git_state()
    assert p.machine == {"cpus": 3}
    assert current_provenance().machine == {}


@pytest.mark.parametrize("run", ["run_b25d9e7", "run_73ea734_wall", "run_0aba44b_openai"])
def test_old_run_json_loads_with_typed_config(run: str) -> None:
    from rlmdistill.traces.runs import load_manifest

    raw = json.loads((DATA / run / "run.json").read_text(encoding="utf-8"))
    m = load_manifest(DATA / run)
    assert m.config.root == raw["config"]["root"]
    assert m.config.sub == raw["config"]["sub"]
    assert m.config.episodes == raw["config"]["episodes"]
    assert m.config.depth == raw["config"].get("depth", 1)
    # no fingerprint_version recorded: the rule of every run written before versions
    assert m.config.fingerprint_version == raw["config"].get("fingerprint_version", 1)
    # fields of the collect config that are not typed here are kept as written
    assert m.config.model_dump(mode="json")["sub_sampling"] == raw["config"]["sub_sampling"]
    assert m.versions == raw["versions"]
    assert m.machine == raw.get("machine", {})


def test_merge_record_of_earlier_versions_loads(tmp_path: Path) -> None:
    from rlmdistill.traces.artefacts import ArtefactError, load_merge_manifest

    old = {  # what `sft merge` wrote before the record was typed
        "created_at": "2025-06-01T10:00:00+00:00",
        "adapter": "/a/adapters/r1",
        "base_path": "/m/base",
        "dtype": "float32",
        "versions": {"python": "3.11.7"},
        "git_commit": None,
        "git_dirty": None,
    }
    (tmp_path / "rlmdistill_merge.json").write_text(json.dumps(old), encoding="utf-8")
    m = load_merge_manifest(tmp_path)
    assert (m.schema_version, m.adapter, m.dtype, m.machine) == (1, "/a/adapters/r1", "float32", {})
    (tmp_path / "rlmdistill_merge.json").write_text('{"adapter": 1}', encoding="utf-8")
    with pytest.raises(ArtefactError, match=r"rlmdistill_merge\.json: not a valid merge record"):
        load_merge_manifest(tmp_path)


def test_golden_manifests_load_with_provenance(tmp_path: Path) -> None:
    """The committed fixture's ``export.json`` and ``sft.json`` (written before the shared
    record) load, and keep their recorded provenance."""
    from rlmdistill.traces.artefacts import load_export_manifest, load_sft_manifest

    ws = tmp_path / "ws"
    shutil.copytree(DATA / "golden_ws", ws)
    for folder, load, name in (
        (ws / "datasets" / "r1", load_export_manifest, "export.json"),
        (ws / "adapters" / "r1", load_sft_manifest, "sft.json"),
    ):
        raw = json.loads((folder / name).read_text(encoding="utf-8").replace("@WS@", str(ws)))
        (folder / name).write_text(json.dumps(raw), encoding="utf-8")
        m = load(folder)
        assert m.versions == raw["versions"]
        assert m.git_commit == raw["git_commit"]
        assert m.machine == raw.get("machine", {})


def test_room_json_typed_for_both_builders(tmp_path: Path) -> None:
    from rlmdistill.rooms.cuad import SAMPLE_SOURCE, build_cuad_room
    from rlmdistill.rooms.meta import CuadRoomMeta, SynthRoomMeta, read_room_meta, write_room_meta
    from rlmdistill.rooms.synth import build_synth_room

    cuad = build_cuad_room(SAMPLE_SOURCE, tmp_path / "cuad", n_contracts=2, seed=1)
    meta = read_room_meta(tmp_path / "cuad")
    assert isinstance(meta, CuadRoomMeta)
    assert (meta.seed, meta.n_contracts, meta.task_id) == (1, 2, cuad.task_id)
    assert sorted(c.source_file for c in meta.contracts) == cuad.contracts

    synth = build_synth_room(tmp_path / "synth", n_docs=20, seed=5)
    smeta = read_room_meta(tmp_path / "synth")
    assert isinstance(smeta, SynthRoomMeta)
    assert (smeta.seed, smeta.n_docs, smeta.room_hash) == (5, 20, synth.room_hash)
    # at version 1 no schema_version key is written, so the room's bytes never change;
    # writing the record back gives the builder's bytes
    raw = (tmp_path / "synth" / "room.json").read_bytes()
    assert b"schema_version" not in raw
    write_room_meta(tmp_path / "synth", smeta)
    assert (tmp_path / "synth" / "room.json").read_bytes() == raw


def test_room_json_errors_name_the_file(tmp_path: Path) -> None:
    from rlmdistill.rooms.meta import read_room_meta

    with pytest.raises(FileNotFoundError, match=r"room\.json: no room\.json"):
        read_room_meta(tmp_path)
    (tmp_path / "room.json").write_text('{"kind": "cuad", "seed": "x"}', encoding="utf-8")
    with pytest.raises(ValueError, match=r"(?s)room\.json: not a valid room\.json.*seed"):
        read_room_meta(tmp_path)
    (tmp_path / "room.json").write_text('{"schema_version": 9, "kind": "cuad"}', "utf-8")
    with pytest.raises(ValueError, match="schema_version 9 is newer"):
        read_room_meta(tmp_path)


def test_split_json_written_by_the_loop_is_a_rooms_split(tmp_path: Path) -> None:
    """The loop's ``rooms/split.json`` validates as :class:`RoomsSplit`; an older split without
    the later fields loads; the dashboard's held-out rooms come from the typed reader."""
    from rlmdistill.dashboard.roles import workspace_roles
    from rlmdistill.loop.config import ExperimentConfig
    from rlmdistill.loop.rooms import prepare_rooms
    from rlmdistill.rooms.cuad import SAMPLE_SOURCE
    from rlmdistill.traces.artefacts import ArtefactError, read_rooms_split

    ws = tmp_path / "ws"
    cfg = ExperimentConfig.model_validate(
        {
            "name": "t",
            "workspace": str(ws),
            "base": "local:x",
            "sub": "local:y",
            "rooms": {
                "source": str(SAMPLE_SOURCE),
                "contracts_per_room": 2,
                "train_rooms": 1,
                "holdout_rooms": 1,
            },
        }
    )
    rooms = prepare_rooms(cfg)
    split = read_rooms_split(ws)
    assert (split.train, split.holdout) == (["rooms/train-0"], ["rooms/holdout-0"])
    assert split.passed and split.shared == [] and split.schema_version == 1
    assert split.n_criteria == {
        Path(k).relative_to(ws).as_posix(): n for k, n in rooms.n_criteria.items()
    }
    assert split.cuad is not None and split.cuad["source"] == str(SAMPLE_SOURCE)
    assert split.n_documents == {"rooms/train-0": 2, "rooms/holdout-0": 2}
    roles = workspace_roles(ws, [])
    assert (roles.heldout, roles.train_rooms) == ({"holdout-0"}, {"train-0"})

    old = {"train": ["/w/rooms/a"], "holdout": ["/w/rooms/b"], "n_criteria": {"/w/rooms/a": 3}}
    (ws / "rooms" / "split.json").write_text(json.dumps(old), encoding="utf-8")
    split = read_rooms_split(ws)
    assert (split.room_names("train"), split.n_documents, split.shared_paragraphs) == (["a"], {}, 0)
    (ws / "rooms" / "split.json").write_text('{"train": 3}', encoding="utf-8")
    with pytest.raises(ArtefactError, match=r"split\.json: not a valid rooms split record"):
        read_rooms_split(ws)


def test_experiment_record_reads_what_the_loop_wrote_and_names_a_bad_file(tmp_path: Path) -> None:
    """``experiment.json`` is an ``ExperimentConfig`` dump: the typed fields read back, the rest
    is kept; a file that is not an experiment record, or from a newer version, is named."""
    from rlmdistill.traces.artefacts import ArtefactError, read_experiment_record

    (tmp_path / "experiment.json").write_text(
        json.dumps({"name": "qs", "base": "local:qwen2.5-coder-0.5b", "rounds": 2, "seed": 3}),
        encoding="utf-8",
    )
    rec = read_experiment_record(tmp_path)
    assert (rec.name, rec.base, rec.rounds, rec.schema_version) == (
        "qs",
        "local:qwen2.5-coder-0.5b",
        2,
        1,
    )
    assert rec.model_extra == {"seed": 3}
    (tmp_path / "experiment.json").write_text('{"base": 5}', encoding="utf-8")
    with pytest.raises(ArtefactError, match=r"experiment\.json: not a valid experiment record"):
        read_experiment_record(tmp_path)
    (tmp_path / "experiment.json").write_text('{"schema_version": 2}', encoding="utf-8")
    with pytest.raises(ArtefactError, match="newer than this rlmdistill knows"):
        read_experiment_record(tmp_path)
