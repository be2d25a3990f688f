"""Room sets (rooms/roomset.py): manifest, splits, train/holdout separation, load, CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from rlmdistill.rooms import DataRoom
from rlmdistill.rooms.cli import register
from rlmdistill.rooms.roomset import (
    RoomSet,
    RoomSetError,
    RoomSetSpec,
    _assign_splits,
    build_roomset,
    check_split,
    load_roomset,
    log_spaced_sizes,
    parse_sizes,
)


@pytest.fixture(scope="module")
def roomset_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sets") / "set"
    build_roomset(RoomSetSpec(sizes=[20, 30], per_size=2, seed=5, holdout_fraction=0.5), out)
    return out


def test_manifest_lists_every_room_with_split_size_and_hash(roomset_dir: Path) -> None:
    rs = load_roomset(roomset_dir)
    assert [(r.size, r.replicate) for r in rs.rooms] == [(20, 0), (20, 1), (30, 0), (30, 1)]
    assert [r.split for r in rs.rooms if r.size == 20].count("holdout") == 1
    assert [r.split for r in rs.rooms if r.size == 30].count("holdout") == 1
    assert len({r.seed for r in rs.rooms}) == 4 and len({r.target for r in rs.rooms}) == 4
    for entry in rs.rooms:
        room = DataRoom.load(roomset_dir / entry.path)
        assert room.room_hash == entry.room_hash and len(room) == entry.size
        assert room.task is not None and room.task.id == entry.task_id
        assert entry.cuad_partition == ((0, 2) if entry.split == "train" else (1, 2))
    assert rs.room_paths(roomset_dir, "holdout") == [
        (roomset_dir / r.path).resolve() for r in rs.split("holdout")
    ]


def test_train_and_holdout_share_no_text(roomset_dir: Path) -> None:
    check = load_roomset(roomset_dir).check
    assert check is not None and check.passed
    assert check.shared_documents == check.shared_paragraphs == 0
    assert check.shared_cuad_files == [] and check.shared_targets == []
    assert check.n_train_paragraphs > 1000 and check.n_holdout_paragraphs > 500


def test_check_detects_a_copied_room(roomset_dir: Path, tmp_path: Path) -> None:
    """The check can fail: a holdout room that is a copy of a train room is caught."""
    rs = load_roomset(roomset_dir)
    train = rs.split("train")[0]
    shutil.copytree(roomset_dir / train.path, tmp_path / train.path)
    fake = train.model_copy(update={"split": "holdout", "name": "copy"})
    check = check_split(tmp_path, [train, fake])
    assert not check.passed
    assert check.shared_documents == train.size
    assert check.shared_paragraphs > 100 and check.shared_targets == [train.target]
    assert len(check.examples) == 3 and train.target.split()[0] in " ".join(check.examples)


def test_same_spec_gives_same_rooms(tmp_path: Path, roomset_dir: Path) -> None:
    again = build_roomset(
        RoomSetSpec(sizes=[20, 30], per_size=2, seed=5, holdout_fraction=0.5), tmp_path / "s"
    )
    first = load_roomset(roomset_dir)
    assert [r.room_hash for r in again.rooms] == [r.room_hash for r in first.rooms]


def test_assign_splits_follows_the_fraction() -> None:
    spec = RoomSetSpec(sizes=[20, 50, 100, 200], per_size=3, seed=1, holdout_fraction=0.25)
    splits = _assign_splits(spec)
    assert sum(v == "holdout" for v in splits.values()) == 3  # round(12 * 0.25)
    one = RoomSetSpec(sizes=[20, 50, 100, 200], per_size=1, seed=1, holdout_fraction=0.25)
    assert sum(v == "holdout" for v in _assign_splits(one).values()) == 1
    none = RoomSetSpec(sizes=[20], per_size=2, holdout_fraction=0.0)
    assert set(_assign_splits(none).values()) == {"train"}


def test_sizes_parsing_and_log_spacing() -> None:
    assert parse_sizes("20,50, 100") == [20, 50, 100]
    assert (
        parse_sizes("log:20:5000:5") == log_spaced_sizes(20, 5000, 5) == [20, 80, 320, 1300, 5000]
    )
    assert log_spaced_sizes(20, 20, 3) == [20]
    with pytest.raises(RoomSetError, match="cannot parse"):
        parse_sizes("20,abc")
    with pytest.raises(RoomSetError, match="log sizes"):
        parse_sizes("log:10:5000:3")
    with pytest.raises(ValueError, match="between 20 and 5000"):
        RoomSetSpec(sizes=[10, 50])
    assert RoomSetSpec(sizes=[50, 20, 50]).sizes == [20, 50]


def test_single_split_set_has_no_check(tmp_path: Path) -> None:
    rs = build_roomset(RoomSetSpec(sizes=[20], per_size=1, holdout_fraction=0.0), tmp_path / "s")
    assert rs.check is None and [r.split for r in rs.rooms] == ["train"]
    with pytest.raises(RoomSetError, match="not empty"):
        build_roomset(RoomSetSpec(sizes=[20]), tmp_path / "s")
    again = build_roomset(RoomSetSpec(sizes=[20]), tmp_path / "s", overwrite=True)
    assert len(again.rooms) == 1


def test_load_roomset_errors_name_the_file(tmp_path: Path, roomset_dir: Path) -> None:
    with pytest.raises(RoomSetError, match="not found"):
        load_roomset(tmp_path)
    bad = tmp_path / "roomset.json"
    bad.write_text("{oops", encoding="utf-8")
    with pytest.raises(RoomSetError, match="cannot read"):
        load_roomset(bad)
    bad.write_text(json.dumps({"spec": {"sizes": [20]}, "rooms": [{"name": 1}]}))
    with pytest.raises(RoomSetError, match=r"roomset.json: invalid room set: rooms\.0"):
        load_roomset(bad)
    raw = json.loads((roomset_dir / "roomset.json").read_text(encoding="utf-8"))
    (tmp_path / "roomset.json").write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(RoomSetError, match=f"room {raw['rooms'][0]['name']!r} not found"):
        load_roomset(tmp_path)
    assert RoomSet.model_validate(raw) == load_roomset(roomset_dir)


def _cli() -> typer.Typer:
    app = typer.Typer()
    rooms = typer.Typer()
    register(rooms)
    app.add_typer(rooms, name="rooms")
    return app


def test_cli_set_with_flags_and_yaml_spec(tmp_path: Path) -> None:
    runner = CliRunner()
    args = ["rooms", "set", "--sizes", "20,25", "--per-size", "1", "--holdout-fraction", "0.5"]
    result = runner.invoke(_cli(), [*args, "--out", str(tmp_path / "a"), "--no-cuad"])
    assert result.exit_code == 0, result.output
    rs = load_roomset(tmp_path / "a")
    assert [r.size for r in rs.rooms] == [20, 25] and rs.spec.cuad_source is None
    assert "split check: passed" in result.output
    spec = tmp_path / "spec.yaml"
    spec.write_text("sizes: log:20:40:2\nper_size: 1\nholdout_fraction: 0.5\nseed: 9\n")
    result = runner.invoke(
        _cli(), ["rooms", "set", "--spec", str(spec), "--out", str(tmp_path / "b")]
    )
    assert result.exit_code == 0, result.output
    assert [r.size for r in load_roomset(tmp_path / "b").rooms] == [20, 40]
    bad = runner.invoke(_cli(), ["rooms", "set", "--sizes", "5", "--out", str(tmp_path / "c")])
    assert bad.exit_code == 2 and "between 20 and 5000" in bad.output
    none = runner.invoke(_cli(), ["rooms", "set", "--out", str(tmp_path / "d")])
    assert none.exit_code == 2 and "--sizes or --spec" in none.output


@pytest.mark.parametrize(
    ("command", "text"),
    [
        ("set", "Copy CUAD contracts into the rooms (off"),
        ("synth", "Copy CUAD contracts into the room (off"),
    ],
)
def test_cli_help_names_the_no_cuad_flag_once(command: str, text: str) -> None:
    """``--no-cuad`` is the off switch of ``--copy-cuad`` (the commands are made from
    RoomSetOptions and SynthRoomConfig): no ``--no-no-cuad`` negation in the help."""
    result = CliRunner().invoke(_cli(), ["rooms", command, "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    (line,) = [x for x in result.output.splitlines() if "--no-cuad" in x]
    assert text in line and "--no-no-cuad" not in result.output


# ----------------------------------------------------------- CUAD room sizes (issue 21)
def test_scheduled_sizes_round_half_up_and_keep_duplicates() -> None:
    from rlmdistill.rooms.roomset import SizeSchedule, scheduled_sizes

    # 12 ** (i / 11) for i = 0..11: 1, 1.25, 1.57, 1.97, 2.47, 3.09, 3.88, 4.87, 6.10, 7.65,
    # 9.59, 12 (by hand), rounded half up
    assert scheduled_sizes(1, 12, 12) == [1, 1, 2, 2, 2, 3, 4, 5, 6, 8, 10, 12]
    # 12 ** (i / 13), i = 0..13: ... 1.466 -> 1, 1.774 -> 2, 2.600 -> 3, 9.914 -> 10
    assert scheduled_sizes(1, 12, 14) == [1, 1, 1, 2, 2, 3, 3, 4, 5, 6, 7, 8, 10, 12]
    # half up, not Python's round-half-even: 1 + 3 * 1/2 = 2.5 -> 3 (round(2.5) == 2)
    assert scheduled_sizes(1, 4, 3, "linear") == [1, 3, 4]
    assert scheduled_sizes(2, 8, 3) == [2, 4, 8]  # 2 * 4 ** (1/2) = 4 exactly
    assert scheduled_sizes(3, 3, 4) == [3, 3, 3, 3] and scheduled_sizes(1, 12, 1) == [1]
    assert SizeSchedule(min=1, max=12).sizes(12) == scheduled_sizes(1, 12, 12)
    with pytest.raises(RoomSetError, match="1 <= min <= max"):
        scheduled_sizes(5, 2, 3)
    with pytest.raises(RoomSetError, match="n >= 1"):
        scheduled_sizes(1, 2, 0)
