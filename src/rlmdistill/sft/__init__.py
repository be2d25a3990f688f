"""SFT stage: fine-tune the root on an exported dataset with TRL ``SFTTrainer`` + LoRA.

``config`` (:class:`SFTConfig`, YAML/TOML), ``data`` (dataset checks: supervised tokens, end-of-turn tokens, template and vocabulary),
``train`` (:func:`train`, adapter folder with ``sft.json`` and ``train_log.jsonl``), ``merge``
(:func:`merge_adapter`), ``cli`` (``rlmdistill sft`` / ``sft merge``, :func:`register`).
``train`` is the module; the function is ``rlmdistill.sft.train.train``.
Names are imported lazily so that ``rlmdistill --help`` does not load ``transformers``.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "SFTConfig": "config",
    "build_config": "config",
    "DatasetError": "data",
    "merge_adapter": "merge",
    "SFTError": "train",
    "SFTManifest": "train",
    "SFTResult": "train",
    "TrainLogRecord": "train",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"rlmdistill.sft.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'rlmdistill.sft' has no attribute {name!r}")
