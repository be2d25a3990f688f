"""Rooms of the loop: every room has a rubric criterion (a draw without one is drawn again,
deterministically, keeping train and held-out rooms disjoint), or the loop fails naming the
room and the config fields to change; what happened is written to ``rooms/split.json``.

Sources: the packaged 16-contract CUAD sample (every contract carries 4-8 M&A labels), and a
copy of it whose M&A labels are cleared on all but 4 contracts (as 38 of the 360 contracts
of the shared CUAD subset have none).
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from rlmdistill.loop.config import CuadRooms, ExperimentConfig, ExperimentError
from rlmdistill.loop.rooms import build_cuad_rooms, prepare_rooms, read_split
from rlmdistill.rooms.cuad import MA_CATEGORIES, SAMPLE_SOURCE, criteria_per_contract
from rlmdistill.rooms.task import load_task

# Criteria per contract of the packaged sample (positive M&A labels), by text file name prefix.
SAMPLE_COUNTS = {
    "ADIANUTRITION": 7,
    "AgapeAtpCorp": 7,
    "BNLFINANCIALCORP": 6,
    "DYNTEKINC": 5,
    "GSITECHNOLOGYINC": 4,
    "GridironBionutrientsInc": 7,
    "IVILLAGEINC": 8,
    "InmodeLtd": 7,
    "InnerscopeHearingTechnologiesInc": 7,
    "MERITLIFEINSURANCECO": 5,
    "MJBIOTECH": 6,
    "SIBANNAC": 4,
    "SPARKLINGSPRINGWATERHOLDINGSLTD": 4,
    "SightLife Surgical": 6,
    "SimplicityEsportsGamingCompany": 7,
    "SteelVaultCorp": 4,
}
KEEP_LABELLED = ("DYNTEKINC", "IVILLAGEINC", "SIBANNAC", "SteelVaultCorp")


def _prefix(name: str) -> str:
    return next(p for p in SAMPLE_COUNTS if name.startswith(p))


def _experiment(ws: Path, **rooms: object) -> ExperimentConfig:
    return ExperimentConfig(
        name="t",
        workspace=ws,
        rooms=CuadRooms.model_validate(rooms),
        base="local:smollm2-135m",
        sub="local:smollm2-135m",
    )


@pytest.fixture(scope="module")
def sparse_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packaged sample with every M&A label cleared except on :data:`KEEP_LABELLED`."""
    out = tmp_path_factory.mktemp("cuad") / "sparse"
    shutil.copytree(SAMPLE_SOURCE, out)
    path = out / "master_clauses.csv"
    with path.open(encoding="utf-8-sig", newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = list(reader.fieldnames or []), list(reader)
    index = {
        r["csv_filename"]: r["txt_file"]
        for r in csv.DictReader((out / "contract_index.csv").open(encoding="utf-8-sig"))
    }
    for row in rows:
        if not index[row["Filename"]].startswith(KEEP_LABELLED):
            for cat in MA_CATEGORIES:
                row[cat] = "[]"
                for key in (f"{cat}-Answer", f"{cat}- Answer"):
                    if key in row:
                        row[key] = "No"
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return out


def test_criteria_per_contract_of_the_packaged_sample() -> None:
    counts = criteria_per_contract(SAMPLE_SOURCE)
    assert len(counts) == 16
    assert {_prefix(n): v for n, v in counts.items()} == SAMPLE_COUNTS


def test_quickstart_rooms_of_the_sample_all_have_criteria(tmp_path: Path) -> None:
    """The quickstart's 4 + 4 rooms of 2 contracts: first draws kept, criteria recorded."""
    cfg = _experiment(
        tmp_path / "ws", source=str(SAMPLE_SOURCE), contracts_per_room=2, train_rooms=4,
        holdout_rooms=4,
    )  # fmt: skip
    rooms = prepare_rooms(cfg)
    split = json.loads((tmp_path / "ws" / "rooms" / "split.json").read_text())
    draws = split["cuad"]["rooms"]
    assert [d["name"] for d in draws] == [f"train-{k}" for k in range(4)] + [
        f"holdout-{k}" for k in range(4)
    ]
    assert [d["seed"] for d in draws] == list(range(8)) and {d["attempt"] for d in draws} == {0}
    used = [c for d in draws for c in d["contracts"]]
    assert len(used) == len(set(used)) == 16  # every contract once: train and held-out disjoint
    for d, room in zip(draws, [*rooms.train, *rooms.holdout], strict=True):
        n = len(load_task(room / "task.json").criteria)
        assert d["n_criteria"] == n == sum(SAMPLE_COUNTS[_prefix(c)] for c in d["contracts"])
        assert split["n_criteria"][room.relative_to(tmp_path / "ws").as_posix()] == n
        assert 8 <= n <= 15
        assert d["rejected"] == []
    assert sum(rooms.n_criteria.values()) == sum(SAMPLE_COUNTS.values()) == 94
    assert not rooms.check.shared_documents
    assert rooms.cuad_source == split["cuad"]["source"] == str(SAMPLE_SOURCE)
    # issue #25 item 5: rooms inside the workspace are recorded relative to it
    assert split["train"] == [f"rooms/train-{k}" for k in range(4)]
    assert split["holdout"] == [f"rooms/holdout-{k}" for k in range(4)]
    train, holdout, n_criteria = read_split(tmp_path / "ws")
    assert (train, holdout) == (rooms.train, rooms.holdout)
    assert n_criteria == {Path(k): n for k, n in rooms.n_criteria.items()}
    reused = prepare_rooms(cfg)  # rooms already built: the source is read back from room.json
    assert reused.cuad_source == str(SAMPLE_SOURCE)


def test_draws_without_criteria_are_drawn_again_deterministically(
    tmp_path: Path, sparse_source: Path
) -> None:
    spec = {"source": str(sparse_source), "contracts_per_room": 1, "train_rooms": 2}
    assert sum(v > 0 for v in criteria_per_contract(sparse_source).values()) == 4
    rooms = prepare_rooms(_experiment(tmp_path / "a", holdout_rooms=2, **spec))
    draws = rooms.draws
    # 4 rooms, 4 labelled contracts: each room holds one of them, with its real criteria.
    assert sorted(_prefix(d.contracts[0]) for d in draws) == sorted(KEEP_LABELLED)
    assert [d.n_criteria for d in draws] == [SAMPLE_COUNTS[_prefix(d.contracts[0])] for d in draws]
    assert min(rooms.n_criteria.values()) >= 4
    assert sum(d.attempt for d in draws) > 0  # some first draws had no criterion
    for k, d in enumerate(draws):
        assert d.rejected is not None and len(d.rejected) == d.attempt
        assert d.seed == 0 + k + d.attempt * 4
        assert [r["seed"] for r in d.rejected] == [k + a * 4 for a in range(d.attempt)]
        assert all(_prefix(r["contracts"][0]) not in KEEP_LABELLED for r in d.rejected)
    split = json.loads((tmp_path / "a" / "rooms" / "split.json").read_text())
    assert [r["rejected"] for r in split["cuad"]["rooms"]] == [d.rejected for d in draws]
    assert split["passed"] and not rooms.check.shared_documents
    # Deterministic: another workspace draws the same rooms.
    again = prepare_rooms(_experiment(tmp_path / "b", holdout_rooms=2, **spec))
    assert [(d.seed, d.contracts) for d in again.draws] == [(d.seed, d.contracts) for d in draws]
    # Reused on a second call, with the record of the rejected draws kept.
    reused = build_cuad_rooms(CuadRooms.model_validate({**spec, "holdout_rooms": 2}),
                              tmp_path / "a" / "rooms")  # fmt: skip
    assert reused.reused and reused.draws == draws


def test_too_few_labelled_contracts_fail_naming_the_room_and_the_fix(
    tmp_path: Path, sparse_source: Path
) -> None:
    cfg = _experiment(
        tmp_path / "ws",
        source=str(sparse_source),
        contracts_per_room=1,
        train_rooms=3,
        holdout_rooms=2,
    )
    with pytest.raises(ExperimentError) as err:
        prepare_rooms(cfg)
    msg = str(err.value)
    assert "room holdout-1 (room 5 of 5" in msg
    assert "none of the 12 contracts left carries an M&A label" in msg
    assert "4 of the source's 16 contracts carry one" in msg
    assert "rooms.train_rooms + rooms.holdout_rooms = 5" in msg and "rooms.source" in msg


def test_too_few_contracts_fail_naming_the_room(tmp_path: Path) -> None:
    cfg = _experiment(
        tmp_path / "ws", source=str(SAMPLE_SOURCE), contracts_per_room=3, train_rooms=3,
        holdout_rooms=3,
    )  # fmt: skip
    with pytest.raises(ExperimentError, match=r"room holdout-2 \(room 6 of 6.*only 1 of"):
        prepare_rooms(cfg)


def test_given_room_without_criteria_is_refused(tmp_path: Path) -> None:
    from rlmdistill.rooms.cuad import build_cuad_room

    train, holdout = tmp_path / "train", tmp_path / "holdout"
    a = build_cuad_room(SAMPLE_SOURCE, train, 2, 0)
    build_cuad_room(SAMPLE_SOURCE, holdout, 2, 1, exclude=a.contracts)
    task = json.loads((holdout / "task.json").read_text())
    task["criteria"] = []
    (holdout / "task.json").write_text(json.dumps(task))
    cfg = ExperimentConfig(
        name="t",
        workspace=tmp_path / "ws",
        train_rooms=[train],
        holdout_rooms=[holdout],
        base="local:smollm2-135m",
        sub="local:smollm2-135m",
    )
    with pytest.raises(ExperimentError, match=rf"{holdout}: task.json has no rubric criterion"):
        prepare_rooms(cfg)


# --------------------------------------------------------- rooms of varied size (issue 21)
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

PRE_SIZES_HASHES = {
    "train-0": "2f7131b985ea20f0",
    "train-1": "24e6e3512a3b8bcb",
    "train-2": "f68ac8992627ac35",
    "train-3": "3b014fd1e682eab8",
    "holdout-0": "5d3e46cfae514ba1",
    "holdout-1": "04ebab24668dbd50",
    "holdout-2": "97f48678ee7386a2",
    "holdout-3": "c6e2834fcbba7d0b",
}
"""Room hashes of 4 + 4 rooms of 2 packaged-sample contracts (seed 0), as ``prepare_rooms``
of the code before room sizes could vary (commit 73ea734) built them."""


def _sizes(rooms: list[Path]) -> list[int]:
    return [len(list((r / "documents").rglob("*.txt"))) for r in rooms]


def test_rooms_without_sizes_are_the_rooms_drawn_before_sizes_existed(tmp_path: Path) -> None:
    """No size list or schedule: every room is what the code before them built (room hashes,
    hence episode ids, unchanged), and what the documented rule builds by hand: room k draws
    2 contracts with seed k, excluding the contracts of rooms 0..k-1."""
    from rlmdistill.rooms import DataRoom
    from rlmdistill.rooms.cuad import build_cuad_room

    cfg = _experiment(tmp_path / "ws", source=str(SAMPLE_SOURCE), contracts_per_room=2,
                      train_rooms=4, holdout_rooms=4)  # fmt: skip
    rooms = prepare_rooms(cfg)
    built = [*rooms.train, *rooms.holdout]
    hashes = {p.name: DataRoom.load(p).room_hash for p in built}
    assert hashes == PRE_SIZES_HASHES
    used: list[str] = []
    for k, room in enumerate(built):
        report = build_cuad_room(SAMPLE_SOURCE, tmp_path / "hand" / room.name, 2, k, exclude=used)
        used += report.contracts
        assert DataRoom.load(tmp_path / "hand" / room.name).room_hash == hashes[room.name]
    split = json.loads((tmp_path / "ws" / "rooms" / "split.json").read_text())
    assert set(split["n_documents"].values()) == {2}
    assert "holdout_sizes" not in split["cuad"]["spec"]  # recorded as before sizes existed


@pytest.mark.parametrize("where", ["sample", "shared"])
def test_quickstart_held_out_rooms_vary_in_size(tmp_path: Path, where: str) -> None:
    """examples/quickstart.yaml: 4 training rooms of 2 contracts, held-out rooms of 1, 2, 2, 3,
    from the packaged sample (all 16 contracts, each once) and from ../shared/data/cuad."""
    from rlmdistill.loop.config import load_experiment
    from rlmdistill.rooms.roomset import default_cuad_source

    cfg = load_experiment(EXAMPLES / "quickstart.yaml")
    cfg.workspace = tmp_path / "ws"
    assert cfg.rooms is not None and cfg.rooms.source is None
    if where == "sample":
        cfg.rooms.source = str(SAMPLE_SOURCE)
    elif default_cuad_source() == SAMPLE_SOURCE:
        pytest.skip("../shared/data/cuad is not beside this checkout")
    rooms = prepare_rooms(cfg)
    assert _sizes(rooms.train) == [2, 2, 2, 2] and _sizes(rooms.holdout) == [1, 2, 2, 3]
    split = json.loads((tmp_path / "ws" / "rooms" / "split.json").read_text())
    assert [split["n_documents"][f"rooms/holdout-{k}"] for k in range(4)] == [1, 2, 2, 3]
    assert split["cuad"]["spec"]["holdout_sizes"] == [1, 2, 2, 3]
    assert [len(d["contracts"]) for d in split["cuad"]["rooms"]] == [2, 2, 2, 2, 1, 2, 2, 3]
    used = [c for d in split["cuad"]["rooms"] for c in d["contracts"]]
    assert len(used) == len(set(used)) == 16 and not rooms.check.shared_documents
    assert min(rooms.n_criteria.values()) >= 1
    if where == "sample":  # training rooms come first: the same rooms as before sizes existed
        from rlmdistill.rooms import DataRoom

        assert {p.name: DataRoom.load(p).room_hash for p in rooms.train} == {
            k: v for k, v in PRE_SIZES_HASHES.items() if k.startswith("train-")
        }


def test_room_scaling_example_loads_and_its_rooms_build(tmp_path: Path) -> None:
    """examples/room_scaling.yaml validates (every stage section, depth arms) and its rooms
    build from ../shared/data/cuad without running a model: 8 training rooms of 2, 12 held-out
    rooms of 1..8 contracts, log-spaced."""
    from rlmdistill.loop.config import check_stage_settings, load_experiment

    cfg = load_experiment(EXAMPLES / "room_scaling.yaml")
    check_stage_settings(cfg, "room_scaling.yaml")
    assert cfg.rounds == 2 and cfg.depth_arms == [2]
    assert cfg.eval_settings(2)["depth"] == 2 and cfg.eval_settings(2)["limits"] == {
        "max_turns": 3, "max_sub_calls": 256}  # fmt: skip
    assert cfg.rooms is not None and cfg.rooms.source is not None
    expected = [1, 1, 1, 2, 2, 3, 3, 4, 5, 5, 7, 8]  # 8 ** (i / 11), rounded half up
    assert cfg.rooms.sizes("holdout") == expected and cfg.rooms.sizes("train") == [2] * 8
    if not (Path(cfg.rooms.source) / "master_clauses.csv").is_file():
        pytest.skip(f"{cfg.rooms.source} (the 360-contract CUAD subset) is not here")
    cfg.workspace = tmp_path / "ws"
    rooms = prepare_rooms(cfg)
    assert _sizes(rooms.train) == [2] * 8 and _sizes(rooms.holdout) == expected
    assert not rooms.check.shared_documents and min(rooms.n_criteria.values()) >= 1
    split = json.loads((tmp_path / "ws" / "rooms" / "split.json").read_text())
    assert sum(split["n_documents"].values()) == 16 + 42
    assert split["cuad"]["spec"]["holdout_size_schedule"] == {
        "min": 1, "max": 8, "spacing": "log"}  # fmt: skip


def test_rooms_built_with_other_sizes_are_refused_not_reused(tmp_path: Path) -> None:
    spec = {"source": str(SAMPLE_SOURCE), "contracts_per_room": 2, "train_rooms": 2}
    prepare_rooms(_experiment(tmp_path / "ws", holdout_rooms=2, **spec))
    again = _experiment(tmp_path / "ws", holdout_sizes=[1, 3], **spec)
    with pytest.raises(ExperimentError) as err:
        prepare_rooms(again)
    msg = str(err.value)
    assert "holdout-0 (2, asked 1), holdout-1 (2, asked 3)" in msg and "new workspace" in msg
    assert "train-0" not in msg  # the training rooms match


def test_size_fields_are_checked() -> None:
    ok = CuadRooms.model_validate({"holdout_sizes": [1, 2, 3]})
    assert ok.holdout_rooms == 3 and ok.room_sizes() == [2, 2, 2, 2, 1, 2, 3]
    sched = CuadRooms.model_validate(
        {"train_rooms": 3, "train_size_schedule": {"min": 1, "max": 4, "spacing": "linear"}}
    )
    assert sched.sizes("train") == [1, 3, 4] and sched.sizes("holdout") == [2] * 4
    assert (
        CuadRooms.model_validate({"holdout_rooms": 2, "holdout_sizes": [1, 5]}).holdout_rooms == 2
    )
    for bad, match in [
        ({"holdout_sizes": [1], "holdout_size_schedule": {"min": 1, "max": 2}}, "not both"),
        ({"holdout_rooms": 4, "holdout_sizes": [1, 2]}, "holdout_rooms = 4 but holdout_sizes"),
        ({"train_sizes": [0, 2]}, "train_sizes must all be >= 1"),
        ({"holdout_size_schedule": {"min": 5, "max": 2}}, "min 5 > max 2"),
        ({"holdout_sizes": []}, "at least 1 item"),
    ]:
        with pytest.raises(ValueError, match=match):
            CuadRooms.model_validate(bad)


def test_synthetic_room_set_rooms_are_given_as_folders(tmp_path: Path) -> None:
    """Synthetic rooms of many sizes (``rlmdistill rooms set``) enter the loop as folders; the
    split check and the sizes in split.json cover them too."""
    from rlmdistill.rooms.roomset import RoomSetSpec, build_roomset

    rs = build_roomset(RoomSetSpec(sizes=[20, 30], per_size=2, seed=5, holdout_fraction=0.5),
                       tmp_path / "set")  # fmt: skip
    cfg = ExperimentConfig(
        name="t",
        workspace=tmp_path / "ws",
        train_rooms=rs.room_paths(tmp_path / "set", "train"),
        holdout_rooms=rs.room_paths(tmp_path / "set", "holdout"),
        base="local:smollm2-135m",
        sub="local:smollm2-135m",
    )
    rooms = prepare_rooms(cfg)
    assert not rooms.check.shared_documents
    split = json.loads((tmp_path / "ws" / "rooms" / "split.json").read_text())
    by_room = {Path(k).name: n for k, n in split["n_documents"].items()}
    assert by_room == {r.name: r.size for r in rs.rooms}
    assert sorted(by_room.values()) == [20, 20, 30, 30]


def test_sft_vs_rl_example_loads_with_three_training_arms() -> None:
    """examples/sft_vs_rl.yaml validates every stage section (its rl section as an RLConfig
    over the four training rooms) and names the three training arms, with the quickstart's SFT."""
    from rlmdistill.loop.config import check_stage_settings, load_experiment

    cfg = load_experiment(EXAMPLES / "sft_vs_rl.yaml")
    check_stage_settings(cfg, "sft_vs_rl.yaml")
    assert cfg.arms == ["sft", "grpo", "sft+grpo"]
    assert cfg.rl["num_generations"] == 4 and cfg.rl["reward"] == "pass_rate"
    assert cfg.rooms is not None and (cfg.rooms.train_rooms, cfg.rooms.holdout_rooms) == (4, 4)
    assert cfg.checkpoint_check is not None and cfg.sft["save_strategy"] == "epoch"


def test_sub_distill_example_loads_and_trains_root_and_sub() -> None:
    """examples/sub_distill.yaml validates every section (sft_sub as an SFTConfig of the sub),
    asks for the sub's arms at depth 1 and 2, and trains the root by the quickstart's recipe."""
    from rlmdistill.loop.config import check_stage_settings, load_experiment

    cfg = load_experiment(EXAMPLES / "sub_distill.yaml")
    check_stage_settings(cfg, "sub_distill.yaml")
    assert cfg.train == ["root", "sub"] and cfg.depth_arms == [2]
    assert cfg.sub_rules().where == ["not error", "used_in_memo"]
    assert cfg.sub_sft()["per_device_train_batch_size"] == 4
    # the quickstart's root recipe: a checkpoint per epoch, chosen by behaviour on training rooms
    assert cfg.sft["save_strategy"] == "epoch" and cfg.sft["eval_fraction"] == 0.15
    assert cfg.checkpoint_check is not None and cfg.checkpoint_check.episodes == 1
