"""Roots served by an OpenAI-compatible server with LoRA (vLLM) instead of in process.

For a GLM-class root the loop trains LoRA adapters on local weights (``base``) but collects
and evaluates through a vLLM server: the base arm and round-1 training use the served base
model id, and each tuned adapter is loaded into the running server with vLLM's runtime LoRA
endpoint, after which its name is a model id.

The code lives in :mod:`rlmdistill.models.lora_server` (a floor ``rl`` may import too, for
served rollouts); this module re-exports it so the loop's imports stay as they were.
"""

from __future__ import annotations

from rlmdistill.models.lora_server import (
    ServingConfig,
    ServingError,
    load_lora_adapter,
    unload_lora_adapter,
)

__all__ = ["ServingConfig", "ServingError", "load_lora_adapter", "unload_lora_adapter"]
