"""``dtype: auto`` follows the CPU's native bfloat16 support, never "a bf16 matmul runs" (issue 24)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlmdistill import hardware
from rlmdistill.hardware import CpuProbe, choose_compute_dtype, machine_info

# The AVX2-only 2-core AMD EPYC of issue 24 (torch says AVX2, no AVX512-BF16): emulated bf16.
AVX2 = CpuProbe("AMD EPYC", "x86_64", ("sse4_2", "avx", "avx2", "fma", "f16c"), "AVX2", False)
# An AMD EPYC (Zen 4) with AVX512-BF16, as torch reports it.
AVX512_BF16 = CpuProbe(
    "AMD EPYC 9B14", "x86_64", ("avx2", "avx512f", "avx512_bf16"), "AVX512", True
)
# A Sapphire Rapids Xeon: AMX-BF16 flag even where torch does not say (older torch).
AMX = CpuProbe("Intel Xeon 8480+", "x86_64", ("avx2", "avx512f", "amx_bf16"), "AVX512", None)
# Graviton 3: Arm BF16 extension.
ARM_BF16 = CpuProbe("Neoverse-V1", "aarch64", ("asimd", "sve", "bf16"), "SVE256", None)
# AVX-512 without its BF16 subset (Skylake-SP): still emulated.
AVX512_NO_BF16 = CpuProbe("Intel Xeon 8175M", "x86_64", ("avx2", "avx512f"), "AVX512", False)


@pytest.mark.parametrize(
    ("probe", "expected"),
    [
        (AVX2, "float32"),
        (AVX512_NO_BF16, "float32"),
        (AVX512_BF16, "bfloat16"),
        (AMX, "bfloat16"),
        (ARM_BF16, "bfloat16"),
    ],
)
def test_auto_dtype_follows_native_bf16(probe: CpuProbe, expected: str) -> None:
    choice = choose_compute_dtype(probe)
    assert choice.dtype == expected
    if expected == "float32":
        assert (
            "no native bfloat16" in choice.reason and str(probe.torch_capability) in choice.reason
        )
    else:
        assert choice.reason.startswith("native bfloat16")


def test_avx2_reason_names_emulation() -> None:
    assert choose_compute_dtype(AVX2).reason == (
        "no native bfloat16 on this CPU (torch capability AVX2, no AVX512-BF16/AMX/BF16 flag): "
        "bfloat16 would be emulated, several times slower than float32"
    )


def test_torch_limited_to_avx2_kernels_gets_float32_on_a_bf16_cpu() -> None:
    """ATEN_CPU_CAPABILITY=avx2 on the AVX512-BF16 EPYC: torch still says BF16 is there (it
    reads the CPU), but its kernels stop at AVX2, so bfloat16 would be emulated."""
    limited = AVX512_BF16._replace(torch_capability="AVX2")
    choice = choose_compute_dtype(limited)
    assert choice == (
        "float32",
        "torch runs AVX2 kernels here (ATEN_CPU_CAPABILITY limits it below this CPU's "
        "AVX-512): bfloat16 would be emulated, several times slower than float32",
    )
    # the same limit on an Arm CPU, or no torch to ask, changes nothing
    assert choose_compute_dtype(ARM_BF16._replace(torch_capability="DEFAULT")).dtype == "bfloat16"
    assert choose_compute_dtype(AVX512_BF16._replace(torch_capability=None)).dtype == "bfloat16"


def test_machine_info_records_the_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hardware, "cpu_probe", lambda: AVX512_BF16)
    info = machine_info()
    assert info["cpu_model"] == "AMD EPYC 9B14"
    assert info["vector_extensions"] == ["avx2", "avx512f", "avx512_bf16"]
    assert info["torch_cpu_capability"] == "AVX512"
    assert info["auto_dtype"] == "bfloat16"
    assert isinstance(info["torch_threads"], int) and info["torch_threads"] >= 1
    assert "auto dtype bfloat16" in hardware.machine_line()


def test_this_machines_probe_is_consistent_with_torch() -> None:
    """The real probe: torch's own AVX512-BF16/AMX answer implies bfloat16, and an ``AVX2``
    capability without a native flag implies float32 (what these 2-core EPYCs report)."""
    probe = hardware.cpu_probe()
    choice = choose_compute_dtype(probe)
    if probe.torch_bf16:
        assert choice.dtype == "bfloat16"
    if probe.torch_capability == "AVX2" and not set(probe.flags) & {"avx512_bf16", "amx_bf16"}:
        assert choice.dtype == "float32"


@pytest.mark.parametrize(("probe", "expected"), [(AVX2, "float32"), (AVX512_BF16, "bfloat16")])
def test_local_client_auto_dtype_follows_probe(
    monkeypatch: pytest.MonkeyPatch, tiny_llama_dir: Path, probe: CpuProbe, expected: str
) -> None:
    import torch

    from rlmdistill.models.local import LocalChatClient

    monkeypatch.setattr(hardware, "cpu_probe", lambda: probe)
    with LocalChatClient(tiny_llama_dir, dtype="auto") as client:
        assert client.dtype == expected
        assert client.dtype_reason == choose_compute_dtype(probe).reason
        weights = {p.dtype for p in client.model.parameters()}
        assert weights == {getattr(torch, expected)}


@pytest.mark.parametrize(
    ("probe", "option", "bf16"),
    [(AVX2, "auto", False), (AVX512_BF16, "auto", True), (AVX512_BF16, "off", False)],
)
def test_sft_precision_on_cpu_uses_the_same_decision(
    monkeypatch: pytest.MonkeyPatch, probe: CpuProbe, option: str, bf16: bool
) -> None:
    import torch

    from rlmdistill.sft.train import resolve_precision

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    p = resolve_precision(option, probe)
    assert (p.device, p.bf16) == ("cpu", bf16)


def test_sft_bf16_on_refused_where_emulated(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from rlmdistill.sft.train import SFTError, resolve_precision

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SFTError, match="no native bfloat16 on this CPU"):
        resolve_precision("on", AVX2)


def test_run_json_records_machine_and_dtypes(collected_run: Path) -> None:
    manifest = json.loads((collected_run / "run.json").read_text(encoding="utf-8"))
    machine = manifest["machine"]
    assert machine["cpu_model"] == hardware.cpu_probe().model
    assert machine["vector_extensions"] == list(hardware.cpu_probe().flags)
    assert machine["auto_dtype"] == choose_compute_dtype().dtype
    assert machine["torch_threads"] >= 1
    # the fake server's clients are not in-process models: no compute dtype to record
    assert manifest["compute_dtypes"] == {}
