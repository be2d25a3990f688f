"""What this CPU computes natively, and the compute dtype ``auto`` picks from it.

A CPU either runs bfloat16 matmuls in hardware (x86 AVX512-BF16 or AMX-BF16; Arm's BF16
extension) or PyTorch emulates them by converting to float32 and back. Emulated bfloat16 is
*correct* but slow: measured on a 2-core AMD EPYC with AVX2 only, an
8x896 @ 896x4864 matmul took 11.4 ms in float32 and 103.7 ms in bfloat16 (9x), and batched
generation of Qwen2.5-Coder-0.5B ran slower in bfloat16 too. So ``auto`` decides by capability,
never by "a bfloat16 matmul does not raise":

- bfloat16 where the CPU has native bfloat16 instructions;
- float32 everywhere else.

The decision is a pure function of a :class:`CpuProbe` (so tests can hand in either kind of
CPU), and :func:`cpu_probe` reads the probe of this machine once per process (cached).
:func:`machine_info` is the provenance record written into ``run.json`` and printed by every
benchmark, so a figure can be read against the machine that produced it.
"""

from __future__ import annotations

import functools
import os
import platform
import sys
import threading
from pathlib import Path
from typing import Any, Literal, NamedTuple

ComputeDtype = Literal["float32", "bfloat16"]

VECTOR_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "sve",
    "sve2",
    "bf16",
)
"""CPU flags recorded in provenance (x86 ``/proc/cpuinfo`` ``flags``; Arm ``Features``)."""

NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
"""Flags that mean bfloat16 arithmetic runs in hardware: x86 AVX512-BF16 (``vdpbf16ps``),
AMX-BF16 (``tdpbf16ps``), Arm's ``BF16`` extension (``BFMMLA``/``BFDOT``)."""


class CpuProbe(NamedTuple):
    """What this CPU offers, as read from ``/proc/cpuinfo`` and PyTorch.

    Attributes:
        model: CPU model name (``"AMD EPYC"``, ``"Intel(R) Xeon(R) Platinum 8480+"``, ...).
        arch: ``platform.machine()`` (``x86_64``, ``aarch64``).
        flags: the subset of :data:`VECTOR_FLAGS` the CPU reports, in that order.
        torch_capability: ``torch.backends.cpu.get_cpu_capability()`` (``AVX2``,
            ``AVX512``, ``DEFAULT``, ...), or ``None`` without torch.
        torch_bf16: PyTorch's own answer to "AVX512-BF16 or AMX present"
            (``torch.cpu._is_avx512_bf16_supported() or _is_amx_tile_supported()``), or
            ``None`` where torch does not say.
    """

    model: str
    arch: str
    flags: tuple[str, ...]
    torch_capability: str | None
    torch_bf16: bool | None


class DtypeChoice(NamedTuple):
    """The compute dtype ``auto`` resolved to, and why (printed once, recorded in run.json)."""

    dtype: ComputeDtype
    reason: str


def _cpuinfo() -> tuple[str, set[str]]:
    """``(model name, flags)`` from ``/proc/cpuinfo``; ``(platform.processor(), set())`` elsewhere."""
    model = platform.processor() or platform.machine()
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                if key in ("model name", "cpu model") and model in ("", platform.machine()):
                    model = value.strip()
                elif key in ("flags", "features"):
                    flags.update(value.split())
                if key == "" and flags:  # end of the first processor block
                    break
    except OSError:
        pass
    return model, flags


@functools.lru_cache(maxsize=1)
def cpu_probe() -> CpuProbe:
    """The :class:`CpuProbe` of this machine (read once per process)."""
    model, flags = _cpuinfo()
    capability: str | None = None
    torch_bf16: bool | None = None
    try:
        import torch

        capability = str(torch.backends.cpu.get_cpu_capability())
        checks = [
            getattr(torch.cpu, name, None)
            for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
        ]
        answers = [bool(c()) for c in checks if c is not None]
        torch_bf16 = any(answers) if answers else None
    except Exception:  # torch absent or too old to say: decide from the flags alone
        pass
    return CpuProbe(
        model=model,
        arch=platform.machine(),
        flags=tuple(f for f in VECTOR_FLAGS if f in flags),
        torch_capability=capability,
        torch_bf16=torch_bf16,
    )


def choose_compute_dtype(probe: CpuProbe | None = None) -> DtypeChoice:
    """The dtype ``dtype: auto`` runs a CPU model in: bfloat16 only where it is native.

    Args:
        probe: the CPU to decide for (default: this machine's :func:`cpu_probe`).

    Returns:
        ``DtypeChoice("bfloat16", reason)`` when PyTorch reports AVX512-BF16/AMX or the CPU
        reports a flag of :data:`NATIVE_BF16_FLAGS`; else ``DtypeChoice("float32", reason)``.
        On x86 a torch limited to kernels below AVX-512 (``ATEN_CPU_CAPABILITY=avx2``, with
        ``ONEDNN_MAX_CPU_ISA=AVX2`` the way to measure a CPU without native bfloat16 on one
        that has it) gets float32 whatever the flags say: its bfloat16 would be emulated.
    """
    p = probe or cpu_probe()
    native = [f for f in NATIVE_BF16_FLAGS if f in p.flags]
    cap = p.torch_capability
    limited = p.arch in ("x86_64", "AMD64") and cap is not None and not cap.startswith("AVX512")
    if limited and (p.torch_bf16 or native):
        return DtypeChoice(
            "float32",
            f"torch runs {cap} kernels here (ATEN_CPU_CAPABILITY limits it below this "
            "CPU's AVX-512): bfloat16 would be emulated, several times slower than float32",
        )
    if p.torch_bf16 or native:
        how = ", ".join(native) or "torch reports AVX512-BF16/AMX"
        return DtypeChoice("bfloat16", f"native bfloat16 on this CPU ({how})")
    cap = p.torch_capability or "unknown"
    return DtypeChoice(
        "float32",
        f"no native bfloat16 on this CPU (torch capability {cap}, no AVX512-BF16/AMX/BF16 "
        "flag): bfloat16 would be emulated, several times slower than float32",
    )


def torch_threads() -> int | None:
    """``torch.get_num_threads()``, or ``None`` without torch."""
    try:
        import torch

        return int(torch.get_num_threads())
    except Exception:
        return None


def machine_info() -> dict[str, Any]:
    """Provenance of the machine a figure was measured on (``run.json``, benchmarks).

    Keys: ``cpu_model``, ``arch``, ``cpus`` (usable by this process), ``vector_extensions``
    (the subset of :data:`VECTOR_FLAGS` present), ``torch_cpu_capability``, ``torch_threads``,
    ``auto_dtype`` and ``auto_dtype_reason`` (:func:`choose_compute_dtype`).
    """
    p = cpu_probe()
    choice = choose_compute_dtype(p)
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 0
    return {
        "cpu_model": p.model,
        "arch": p.arch,
        "cpus": cpus,
        "vector_extensions": list(p.flags),
        "torch_cpu_capability": p.torch_capability,
        "torch_threads": torch_threads(),
        "auto_dtype": choice.dtype,
        "auto_dtype_reason": choice.reason,
    }


def runnable_tasks(loadavg: Path = Path("/proc/loadavg")) -> int | None:
    """Tasks runnable on the whole machine now, the reading process among them: the
    "running" half of the fourth field of ``/proc/loadavg`` ("running/total", ``proc(5)``).
    Unlike the load averages it does not lag. ``None`` where the file cannot be read or
    parsed (not Linux)."""
    try:
        return int(loadavg.read_text(encoding="ascii").split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return None


def machine_line() -> str:
    """One line of :func:`machine_info` for benchmark output (``machine: ...``)."""
    m = machine_info()
    return (
        f"machine: {m['cpu_model']} ({m['arch']}), {m['cpus']} CPUs, torch threads "
        f"{m['torch_threads']}, torch capability {m['torch_cpu_capability']}, "
        f"extensions {' '.join(m['vector_extensions']) or '-'}; auto dtype {m['auto_dtype']}"
    )


_ANNOUNCED: set[str] = set()
_ANNOUNCE_LOCK = threading.Lock()


def announce_once(choice: DtypeChoice, what: str = "local models") -> None:
    """Print ``choice`` to stderr the first time it is made in this process for ``what``."""
    with _ANNOUNCE_LOCK:
        if what in _ANNOUNCED:
            return
        _ANNOUNCED.add(what)
    print(f"[rlmdistill] {what}: dtype auto -> {choice.dtype} ({choice.reason})", file=sys.stderr)


__all__ = [
    "NATIVE_BF16_FLAGS",
    "VECTOR_FLAGS",
    "ComputeDtype",
    "CpuProbe",
    "DtypeChoice",
    "announce_once",
    "choose_compute_dtype",
    "cpu_probe",
    "machine_info",
    "machine_line",
    "torch_threads",
]
