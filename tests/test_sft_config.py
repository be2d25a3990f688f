"""SFT config: YAML/TOML files, CLI flags over file fields, validation messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from rlmdistill.sft.config import DEFAULT_TARGET_MODULES, SFTConfig, build_config

REQUIRED = {"dataset": "datasets/d", "base": "smollm2-135m", "out": "adapters/a"}


def test_defaults_are_documented_and_sane() -> None:
    cfg = SFTConfig(**REQUIRED)  # type: ignore[arg-type]
    assert cfg.target_modules == list(DEFAULT_TARGET_MODULES)
    assert (cfg.lora_r, cfg.lora_alpha, cfg.max_steps, cfg.report_to) == (16, 32, -1, [])
    assert (cfg.bf16, cfg.packing, cfg.length_policy, cfg.seed) == ("auto", False, "refuse", 0)
    assert cfg.eval_fraction is None  # auto: 10% of episodes from 10 episodes up, else off
    schema = SFTConfig.model_json_schema()["properties"]
    undocumented = [name for name, prop in schema.items() if not prop.get("description")]
    assert undocumented == []


def test_yaml_file_then_cli_overrides(tmp_path: Path) -> None:
    f = tmp_path / "sft.yaml"
    f.write_text(
        "dataset: datasets/from-file\nbase: smollm2-135m\nout: adapters/x\n"
        "learning_rate: 0.001\nmax_steps: 100\nlora_r: 4\ntarget_modules: [q_proj, v_proj]\n"
    )
    cfg = build_config(f, {"learning_rate": 0.05, "max_steps": None, "dataset": Path("d2")})
    assert cfg.learning_rate == 0.05  # flag wins
    assert cfg.max_steps == 100  # flag not given: file value stays
    assert cfg.dataset == Path("d2")
    assert (cfg.lora_r, cfg.target_modules) == (4, ["q_proj", "v_proj"])


def test_toml_file_with_or_without_sft_table(tmp_path: Path) -> None:
    flat = tmp_path / "a.toml"
    flat.write_text('base = "smollm2-135m"\nlora_alpha = 64\npacking = true\nmax_length = 512\n')
    nested = tmp_path / "b.toml"
    nested.write_text('[sft]\nbase = "smollm2-135m"\nlora_alpha = 64\n')
    extra = {"dataset": "d", "out": "o"}
    assert build_config(flat, extra).lora_alpha == 64
    assert build_config(flat, extra).packing is True
    assert build_config(nested, extra).lora_alpha == 64


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"learning_rate": 0}, "learning_rate"),
        ({"lr": 0.1}, "lr"),  # unknown field: a typo never passes silently
        ({"packing": True}, "packing needs max_length"),
        ({"target_modules": ["all-linear", "q_proj"]}, "all-linear"),
        ({"bf16": "yes"}, "bf16"),
        ({"length_policy": "truncate"}, "length_policy"),
        ({"eval_fraction": 0.7}, "eval_fraction"),
        ({"eval_fraction": -0.1}, "eval_fraction"),
    ],
)
def test_bad_fields_are_named(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        SFTConfig(**REQUIRED, **fields)  # type: ignore[arg-type]


def test_missing_required_field_and_bad_file(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="dataset"):
        build_config(None, {"base": "b", "out": "o"})
    bad = tmp_path / "sft.ini"
    bad.write_text("x")
    with pytest.raises(ValueError, match=r"sft\.ini: config must be"):
        build_config(bad)
    listy = tmp_path / "sft.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="expected a mapping"):
        build_config(listy)


def test_cli_flags_reach_train(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--config` + `--lr/--max-steps/--epochs/--seed/--resume` arrive resolved in train()."""
    import typer
    from typer.testing import CliRunner

    import rlmdistill.sft.train as train_mod
    from rlmdistill.sft.cli import register

    seen: dict[str, Any] = {}

    def fake_train(config: SFTConfig, *, resume: bool, progress: bool) -> Any:
        seen.update(config=config, resume=resume)
        return train_mod.SFTResult(Path(config.out), 7, 2.0, 1.0, 100, 1.0, 3, {}, None)

    monkeypatch.setattr(train_mod, "train", fake_train)
    f = tmp_path / "sft.yaml"
    f.write_text("learning_rate: 0.001\nnum_train_epochs: 3\nseed: 1\nlora_r: 8\n")
    app = typer.Typer()
    register(app)
    args = ["sft", "--dataset", "ds", "--base", "smollm2-135m", "--out", "ad", "--config", str(f)]
    res = CliRunner().invoke(app, [*args, "--lr", "0.02", "--seed", "5", "--resume"])
    assert res.exit_code == 0, res.output
    cfg = seen["config"]
    assert (cfg.learning_rate, cfg.seed, cfg.num_train_epochs, cfg.lora_r) == (0.02, 5, 3.0, 8)
    assert cfg.dataset == Path("ds") and seen["resume"] is True
    assert "7 steps on 3 examples, loss 2.0000 -> 1.0000" in res.output
    res = CliRunner().invoke(app, [*args, "--lr", "-1"])
    assert res.exit_code == 2 and "learning_rate" in res.output


@pytest.mark.parametrize(
    ("base", "message"),
    [
        ("openai:m@http://127.0.0.1:9/v1", "training needs local weights"),
        ("local:smollm2-135m+adapter=/tmp", "training on top of an adapter is not supported"),
    ],
)
def test_cli_base_without_local_weights_exits_2(tmp_path: Path, base: str, message: str) -> None:
    """A ``--base`` that names no local weights (``models.spec.resolve_base``, shared with
    ``rl`` and the loop) is a user error: exit 2 naming the flag, nothing written."""
    import typer
    from typer.testing import CliRunner

    from rlmdistill.sft.cli import register

    app = typer.Typer()
    register(app)
    out = tmp_path / "ad"
    res = CliRunner().invoke(
        app, ["sft", "--dataset", str(tmp_path), "--base", base, "--out", str(out)]
    )
    assert res.exit_code == 2, res.output
    assert f"--base {base!r}: {message}" in res.output.replace("\n", "")
    assert not out.exists()
