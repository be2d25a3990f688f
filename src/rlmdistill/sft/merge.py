"""Export a merged checkpoint: base weights + LoRA adapter folded in (peft ``merge_and_unload``).

``rlmdistill sft merge --adapter adapters/NAME --out models/NAME-merged`` writes a plain
``transformers`` checkpoint (``config.json``, safetensors, tokenizer) that any server loads
without LoRA support (vLLM, SGLang, llama.cpp after conversion) and that ``local:DIR`` specs
load directly.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from rlmdistill.compat import library_warning_filter
from rlmdistill.models.spec import resolve_base
from rlmdistill.provenance import current_provenance
from rlmdistill.sft.train import SFTError
from rlmdistill.traces.artefacts import MergeManifest, load_sft_manifest
from rlmdistill.traces.layout import MERGE_MANIFEST, SFT_MANIFEST


def adapter_base(adapter: Path) -> Path:
    """Base checkpoint directory of an adapter folder: ``sft.json``'s ``base_path`` when
    present, else ``adapter_config.json``'s ``base_model_name_or_path`` (resolved like
    ``--base``).

    Raises:
        SFTError: ``adapter`` holds no ``adapter_config.json``, or names no base.
        BaseModelError: the base it names is not local weights (see
            :func:`rlmdistill.models.spec.resolve_base`).
    """
    config_path = adapter / "adapter_config.json"
    if not config_path.is_file():
        raise SFTError(f"{adapter}: no adapter_config.json; not a LoRA adapter folder")
    if (adapter / SFT_MANIFEST).is_file():
        base = load_sft_manifest(adapter).base_path
        if Path(base, "config.json").is_file():
            return Path(base)
    name = json.loads(config_path.read_text("utf-8")).get("base_model_name_or_path")
    if not name:
        raise SFTError(f"{config_path}: no base_model_name_or_path; pass --base")
    return resolve_base(str(name))


def merge_adapter(
    adapter: Path | str,
    out: Path | str,
    *,
    base: str | None = None,
    dtype: Literal["float32", "bfloat16"] = "float32",
) -> Path:
    """Write base + adapter merged into one checkpoint at ``out``; returns ``out``.

    ``base`` overrides the base recorded with the adapter. The merged weights equal the
    adapter-wrapped model's (up to float rounding): ``W + (alpha / r) * B @ A`` per target.

    Raises:
        SFTError: not an adapter folder, or ``out`` already holds a checkpoint.
        FileNotFoundError: the base model cannot be found.
    """
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter, out = Path(adapter).resolve(), Path(out).resolve()
    base_dir = resolve_base(base) if base else adapter_base(adapter)
    if (out / "config.json").exists():
        raise SFTError(f"{out} already holds a checkpoint; choose another --out")
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=getattr(torch, dtype))
    with library_warning_filter():  # peft reads the deprecated is_gradient_checkpointing
        merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    out.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(str(out))
    AutoTokenizer.from_pretrained(str(base_dir)).save_pretrained(str(out))
    record = MergeManifest(
        created_at=datetime.now(UTC),
        adapter=str(adapter),
        base_path=str(base_dir),
        dtype=dtype,
        **current_provenance().model_dump(),
    )
    (out / MERGE_MANIFEST).write_text(record.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return out


__all__ = ["MERGE_MANIFEST", "adapter_base", "merge_adapter"]
