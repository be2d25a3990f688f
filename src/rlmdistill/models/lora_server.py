"""vLLM's runtime LoRA endpoints and where a root is served (:class:`ServingConfig`).

A floor every stage may import (``models``): the loop loads each tuned adapter into the
running server (``rlmdistill.loop.serving`` re-exports this module), and ``rlmdistill rl``
with ``rollouts: served`` loads each new policy version of the adapter it trains.

An adapter is loaded with ``POST /v1/load_lora_adapter {"lora_name", "lora_path"}`` (the
server must run with ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``), after
which its name is a model id. Source: vLLM docs, "LoRA Adapters" > "Dynamically serving LoRA
Adapters".

A name that is already loaded answers HTTP 400 "... has already been loaded" and keeps serving
the *old* weights (vllm#31326), so a re-trained adapter is loaded by unloading the name first
(``POST /v1/unload_lora_adapter {"lora_name"}``) and loading again: every call loads the
adapter folder as it is now. Tested against a real vLLM server in
``tests/test_vllm_server.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import urllib3
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ServingConfig", "ServingError", "load_lora_adapter", "unload_lora_adapter"]


class ServingError(RuntimeError):
    """The server refused or could not be reached to load an adapter (names server + adapter)."""


class ServingConfig(BaseModel):
    """Where the experiment's roots are served (vLLM with LoRA)."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(description="OpenAI-compatible base URL, e.g. http://gpu:8000/v1.")
    model: str = Field(description="Served model id of the base (as in `vllm serve MODEL`).")
    key_env: str | None = Field(
        None, description="Environment variable holding the API key (default RLMDISTILL_API_KEY)."
    )
    load_adapters: bool = Field(
        True,
        description="Load each tuned adapter with POST /v1/load_lora_adapter; false when the "
        "server was started with --lora-modules NAME=PATH for every adapter already.",
    )
    adapter_root: str | None = Field(
        None,
        description="Path of the workspace's adapters/ folder as the server sees it (when the "
        "server runs on another machine with the folder mounted elsewhere).",
    )

    def spec(self, model: str) -> str:
        """The ``openai:`` model spec of a served model id."""
        opts = f"+key_env={self.key_env}" if self.key_env else ""
        return f"openai:{model}@{self.base_url}{opts}"

    def server_path(self, adapter_dir: Path) -> str:
        """``adapter_dir`` as the server sees it."""
        if self.adapter_root is None:
            return str(Path(adapter_dir).resolve())
        return f"{self.adapter_root.rstrip('/')}/{Path(adapter_dir).name}"


def _post(serving: ServingConfig, path: str, body: dict[str, str]) -> tuple[int, str]:
    """POST ``body`` to ``{base_url}/{path}``; (status, text). Raises :class:`ServingError`
    when the server cannot be reached."""
    url = serving.base_url.rstrip("/") + "/" + path
    key = os.environ.get(serving.key_env or "RLMDISTILL_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        resp = urllib3.request(
            "POST", url, json=body, headers=headers, timeout=120.0, retries=False
        )
    except urllib3.exceptions.HTTPError as exc:
        raise ServingError(
            f"{url}: cannot reach the server for adapter {body['lora_name']} ({exc})"
        ) from exc
    return resp.status, resp.data.decode("utf-8", "replace")


def unload_lora_adapter(serving: ServingConfig, name: str) -> None:
    """Unload model id ``name`` from the server (``POST /v1/unload_lora_adapter``).

    Raises :class:`ServingError` naming the server and the adapter when the server refuses.
    """
    status, text = _post(serving, "unload_lora_adapter", {"lora_name": name})
    if status >= 400:
        raise ServingError(
            f"{serving.base_url}: unloading adapter {name} failed with HTTP {status}: {text[:300]}"
        )


def load_lora_adapter(serving: ServingConfig, name: str, adapter_dir: Path) -> str:
    """Load ``adapter_dir`` into the server as model id ``name``; returns its ``openai:`` spec.

    When ``name`` is already loaded (HTTP 400 "already been loaded"), it is unloaded and loaded
    again, so the server serves the adapter as it is on disk now (vllm#31326).

    Raises :class:`ServingError` naming the server and the adapter when a request fails
    (a server without ``--enable-lora`` / runtime updating answers 404 or 400).
    """
    if serving.load_adapters:
        body = {"lora_name": name, "lora_path": serving.server_path(adapter_dir)}
        status, text = _post(serving, "load_lora_adapter", body)
        if status == 400 and "already" in text.lower():
            unload_lora_adapter(serving, name)
            status, text = _post(serving, "load_lora_adapter", body)
        if status >= 400:
            raise ServingError(
                f"{serving.base_url}/load_lora_adapter: loading adapter {name} from "
                f"{body['lora_path']} failed with HTTP {status}: {text[:300]} (is the server "
                "started with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True?)"
            )
    return serving.spec(name)
