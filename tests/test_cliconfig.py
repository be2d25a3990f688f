"""The one config parser: a pydantic config -> CLI flags plus ``--config FILE``.

Checked on a small config (help from the field, a ``Literal`` as a choice, nested prefixed
flags, file-only fields, precedence defaults < file < typed flags, unknown keys, bad values
naming their flag), and on every command of ``rlmdistill`` built with it (each generated
flag's help is its field's description).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import pytest
import typer
from pydantic import BaseModel, ConfigDict, Field
from typer.testing import CliRunner

from rlmdistill.cli import app as rlm_app
from rlmdistill.cliconfig import ConfigFileError, config_command, config_flags, load_config


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    temperature: float = Field(0.7, description="Sampling temperature.")
    extra: dict[str, int] = Field(default_factory=dict, description="Extra body.")


class Small(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run_dir: Path = Field(description="Run folder.")
    episodes: int = Field(4, ge=1, description="Episodes (samples) per room.")
    mode: Literal["turn", "trajectory"] = Field("trajectory", description="Example shape.")
    few_shot: bool = Field(False, description="Worked example first.")
    rooms: list[str] = Field(default_factory=list, description="Room folders.")
    sampling: Inner = Field(default_factory=Inner, description="Sampling.")


def _app(seen: list[tuple[Small, bool]]) -> typer.Typer:
    app = typer.Typer()

    @config_command(app, "go", arguments=["run_dir"], names={"rooms": ["--room"]})
    def go(config: Small, progress: bool = typer.Option(True, help="Show a progress bar.")) -> None:
        """Do the small thing."""
        seen.append((config, progress))

    @app.command("other")
    def other() -> None:
        """A second command, so typer keeps command names."""

    return app


def _go(tmp_path: Path, *args: str) -> tuple[int, str, list[tuple[Small, bool]]]:
    """Exit code, output with the error box's frame and line breaks taken out, configs seen."""
    seen: list[tuple[Small, bool]] = []
    res = CliRunner().invoke(_app(seen), ["go", str(tmp_path), *args])
    text = " ".join(res.output.replace("│", " ").split())
    return res.exit_code, text, seen


def test_flags_take_help_types_and_defaults_from_the_fields() -> None:
    flags, file_only = config_flags(Small, arguments=["run_dir"], names={"rooms": ["--room"]})
    by_path = {f.path: f for f in flags}
    assert by_path["episodes"].help == "Episodes (samples) per room."
    assert by_path["episodes"].decls == ("--episodes",)
    assert by_path["episodes"].default == 4
    assert by_path["few_shot"].decls == ("--few-shot/--no-few-shot",)
    assert by_path["rooms"].decls == ("--room",)
    assert by_path["sampling.temperature"].decls == ("--sampling-temperature",)
    assert by_path["run_dir"].argument and by_path["run_dir"].required
    assert file_only == ["sampling.extra"]


def test_defaults_then_file_then_typed_flags(tmp_path: Path) -> None:
    code, out, seen = _go(tmp_path)
    assert code == 0, out
    assert seen[0][0] == Small(run_dir=tmp_path) and seen[0][1] is True

    cfg = tmp_path / "c.yaml"
    cfg.write_text("episodes: 3\nmode: turn\nsampling: {temperature: 0.2, extra: {n: 1}}\n")
    code, out, seen = _go(tmp_path, "--config", str(cfg), "--room", "a", "--room", "b")
    assert code == 0, out
    got = seen[0][0]
    assert (got.episodes, got.mode, got.rooms) == (3, "turn", ["a", "b"])
    assert got.sampling == Inner(temperature=0.2, extra={"n": 1})

    # a flag typed on the command line wins, even when it equals the field's default
    code, out, seen = _go(
        tmp_path, "--config", str(cfg), "--episodes", "4", "--sampling-temperature", "1"
    )
    assert code == 0, out
    assert seen[0][0].episodes == 4
    assert seen[0][0].sampling == Inner(temperature=1.0, extra={"n": 1})


def test_bad_values_and_unknown_keys_are_usage_errors_naming_them(tmp_path: Path) -> None:
    code, out, _ = _go(tmp_path, "--mode", "rows")
    assert code == 2 and "rows" in out

    code, out, _ = _go(tmp_path, "--episodes", "0")
    assert code == 2
    assert "--episodes (episodes)" in out and "greater than or equal to 1" in out

    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"sampling": {"temprature": 0.1}}))
    code, out, _ = _go(tmp_path, "--config", str(cfg))
    assert code == 2
    assert "unknown key 'sampling.temprature'" in out and "c.json" in out


def test_load_config_reads_toml_sections_and_names_the_file_and_key(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[small]\nrun_dir = "r"\nepisodes = 2\n')
    got = load_config(Small, cfg, {"mode": "turn"}, section="small")
    assert (got.run_dir, got.episodes, got.mode) == (Path("r"), 2, "turn")
    bad = tmp_path / "bad.yaml"
    bad.write_text("run_dir: r\nepisode: 2\n")
    with pytest.raises(ConfigFileError, match=r"bad\.yaml: unknown key 'episode'"):
        load_config(Small, bad)
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n")
    with pytest.raises(ConfigFileError, match=r"list\.yaml: expected a mapping"):
        load_config(Small, listed)


def test_a_flag_without_description_is_refused() -> None:
    class Bare(BaseModel):
        n: int = 1

    with pytest.raises(TypeError, match=r"Bare\.n: a CLI flag needs a field description"):
        config_flags(Bare)


def _config_commands(app: typer.Typer) -> list[tuple[str, object]]:
    out = [
        (info.name or "", info.callback)
        for info in app.registered_commands
        if hasattr(info.callback, "config_flags")
    ]
    for group in app.registered_groups:
        sub = group.typer_instance
        assert sub is not None
        callback = sub.registered_callback.callback if sub.registered_callback else None
        if hasattr(callback, "config_flags"):  # a group's own flags (sft's training flags)
            out.append((group.name or "", callback))
        out += [(f"{group.name} {n}", cb) for n, cb in _config_commands(sub)]
    return out


def test_every_config_made_flag_of_rlmdistill_has_its_fields_help() -> None:
    commands = _config_commands(rlm_app)
    made = {"collect", "judge", "judge-eval", "export", "export-grpo", "sft", "rl", "report"}
    made |= {"rooms build-cuad", "rooms synth", "rooms show", "loop", "show", "quickstart"}
    assert made <= {name for name, _ in commands}
    for name, callback in commands:
        model = callback.config_model  # type: ignore[attr-defined]
        for flag in callback.config_flags:  # type: ignore[attr-defined]
            node = model
            *parents, leaf = flag.path.split(".")
            for p in parents:
                node = node.model_fields[p].annotation
                node = next(a for a in getattr(node, "__args__", (node,)) if a is not type(None))
            field = node.model_fields[leaf]
            assert flag.help == field.description, f"{name} {flag.path}"


def test_rlmdistill_commands_name_a_bad_file_key_or_flag_value(tmp_path: Path) -> None:
    """Through the real commands: rl's positional file and sft's --config are read by the
    parser (unknown key: the file and key named, exit 2); a bad typed value names its flag."""
    bad = tmp_path / "rl.yaml"
    bad.write_text("rooms: [r]\nout: o\nlearning_rat: 0.1\n")
    res = CliRunner().invoke(rlm_app, ["rl", str(bad)])
    text = " ".join(res.output.replace("│", " ").split())
    assert res.exit_code == 2 and "unknown key 'learning_rat'" in text and "rl.yaml" in text

    sft = tmp_path / "sft.yaml"
    sft.write_text("dataset: d\nbase: smollm2-135m\nout: o\n")
    res = CliRunner().invoke(rlm_app, ["sft", "--config", str(sft), "--lr", "0"])
    text = " ".join(res.output.replace("│", " ").split())
    assert res.exit_code == 2 and "--lr (learning_rate)" in text and "greater than 0" in text


def test_rooms_set_spec_with_an_unknown_key_names_the_file_and_key(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("sizes: '20'\nper_sizes: 2\n")
    res = CliRunner().invoke(rlm_app, ["rooms", "set", "--spec", str(spec), "--out", "x"])
    assert res.exit_code == 2
    assert f"{spec}: unknown key 'per_sizes'" in " ".join(res.output.split())


def test_an_experiment_file_with_an_unknown_key_names_the_file_and_key(tmp_path: Path) -> None:
    from rlmdistill.loop.config import ExperimentError, load_experiment

    exp = tmp_path / "exp.yaml"
    exp.write_text("name: x\nworkspace: ws\nbase: local:x\nsub: local:x\nround: 2\n")
    with pytest.raises(ExperimentError, match=r"exp\.yaml: unknown key 'round'"):
        load_experiment(exp)


def test_collect_takes_out_and_fields_from_the_file_and_typed_flags_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rlmdistill.collect.cli as collect_cli

    seen: list[tuple[object, Path]] = []
    monkeypatch.setattr(
        collect_cli, "run_collect", lambda cfg, out, progress, strict: seen.append((cfg, out))
    )
    cfg = tmp_path / "collect.yaml"
    cfg.write_text(
        f"rooms: [{tmp_path / 'room'}]\nroot: local:a\nsub: local:a\nepisodes: 3\n"
        f"out: {tmp_path / 'runs' / 'r'}\nray: {{address: auto}}\n"
    )
    res = CliRunner().invoke(rlm_app, ["collect", "--config", str(cfg), "--episodes", "4"])
    assert res.exit_code == 0, res.output
    got, out = seen[0]
    assert out == tmp_path / "runs" / "r"
    assert (got.episodes, got.ray.address, got.rooms) == (4, "auto", [str(tmp_path / "room")])
    res = CliRunner().invoke(rlm_app, ["collect", "--config", str(cfg), "--out", "elsewhere"])
    assert res.exit_code == 0 and seen[1][1] == Path("elsewhere") and seen[1][0].episodes == 3
