"""Parent side of the per-episode REPL: a persistent Python process, killable on limits.

The worker (``repl_worker.py``) runs in its own process group with an address-space limit, a
file-size limit and (``ReplLimits.sandbox``) an audit-hook guard against writes outside its
scratch folder, sockets and new processes (a guard against mistakes, not a security boundary;
see the worker's docstring); the collector talks to it over pipes. A block that exceeds its
wall-time limit gets the whole process group killed (SIGKILL) — thread timeouts and
``signal.alarm`` cannot stop ``while True: pass`` (case T5). State persists across blocks and survives exceptions (R2).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from pydantic import BaseModel, ConfigDict, Field

WORKER = Path(__file__).with_name("repl_worker.py")


class ReplLimits(BaseModel):
    """Limits of one REPL process (per code block unless noted)."""

    model_config = ConfigDict(extra="forbid")

    block_timeout_s: float = Field(
        600.0,
        gt=0,
        description="Running time of one code block, time waiting for sub-calls excluded (s).",
    )
    memory_limit_mb: int | None = Field(
        4096, description="Address-space limit of the REPL process (MiB); None = unlimited."
    )
    capture_head_chars: int = Field(
        200_000, ge=0, description="Characters of a block's output kept from its start (trace)."
    )
    capture_tail_chars: int = Field(
        50_000, ge=0, description="Characters of a block's output kept from its end (trace)."
    )
    startup_timeout_s: float = Field(60.0, gt=0, description="Time to load the room (seconds).")
    sandbox: bool = Field(
        True,
        description="Refuse writes outside the scratch folder, sockets, new processes and "
        "ctypes in the REPL (audit hook: a guard against mistakes, not a security boundary).",
    )
    max_file_mb: int | None = Field(
        256, ge=1, description="Largest file the REPL may write (MiB, RLIMIT_FSIZE); None = no cap."
    )


class ReplDied(RuntimeError):
    """The REPL process ended or was killed. ``timed_out`` tells a wall-time kill apart."""

    def __init__(self, message: str, *, timed_out: bool) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class BlockOutcome(NamedTuple):
    """What executing one block returned."""

    stdout: str
    """Output as captured for the trace (head + tail when over the capture caps)."""
    stdout_chars: int
    """Characters printed in total."""
    error: str | None
    final: dict[str, Any] | None
    """``{"source": "final_call"|"final_var", "value": str}`` when the block handed back a memo."""
    final_error: str | None
    stdout_sources: list[dict[str, Any]]
    duration_s: float


LlmHandler = Callable[[list[str], list[list[dict[str, Any]]]], list[str]]
"""Called for every ``llm_query``/``llm_query_batched``: (prompts, sources) -> responses.
Raising :class:`SubCallRefused` makes the REPL call raise ``RuntimeError`` with its text."""


class SubCallRefused(Exception):
    """Raised by an :data:`LlmHandler` to refuse a batch (e.g. the sub-call budget is spent)."""


class ReplProcess:
    """One persistent REPL process over one room snapshot.

    ``context_doc`` (depth 2) names a snapshot document exposed as the variable ``context``.

    Use as a context manager; :meth:`execute` runs a block and serves its sub-calls through
    ``on_llm`` in the calling thread.
    """

    def __init__(
        self,
        room_snapshot: Path,
        scratch_dir: Path,
        limits: ReplLimits,
        *,
        context_doc: str | None = None,
    ) -> None:
        self.limits = limits
        scratch_dir.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen(
            [sys.executable, "-u", str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=scratch_dir,
            start_new_session=True,
            env={"PATH": os.environ.get("PATH", ""), "PYTHONIOENCODING": "utf-8"},
        )
        self._buf = b""
        init = {
            "op": "init",
            "room_snapshot": str(room_snapshot),
            "context_doc": context_doc,
            "capture_head_chars": limits.capture_head_chars,
            "capture_tail_chars": limits.capture_tail_chars,
            "memory_limit_bytes": limits.memory_limit_mb * 2**20
            if limits.memory_limit_mb
            else None,
            "sandbox": limits.sandbox,
            "scratch_dir": str(scratch_dir.resolve()),
            "max_file_bytes": limits.max_file_mb * 2**20 if limits.max_file_mb else None,
        }
        self._write(init)
        msg = self._read(time.monotonic() + limits.startup_timeout_s)
        if msg.get("op") != "ready":
            self.kill()
            raise ReplDied(f"REPL failed to start: {msg}", timed_out=False)

    # -- pipes ------------------------------------------------------------------------
    def _write(self, msg: dict[str, Any]) -> None:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write((json.dumps(msg) + "\n").encode("ascii"))
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise ReplDied(f"REPL process is gone ({exc})", timed_out=False) from exc

    def _read(self, deadline: float) -> dict[str, Any]:
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise ReplDied("code block exceeded its time limit; REPL killed", timed_out=True)
            ready, _, _ = select.select([fd], [], [], min(remaining, 1.0))
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                code = self._proc.wait()
                raise ReplDied(f"REPL process died (exit code {code})", timed_out=False)
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        result: dict[str, Any] = json.loads(line)
        return result

    # -- API --------------------------------------------------------------------------
    def execute(
        self, code: str, on_llm: LlmHandler, timeout_s: float | None = None
    ) -> BlockOutcome:
        """Run ``code``; serve its sub-calls with ``on_llm``; return its outcome.

        ``timeout_s`` (default ``limits.block_timeout_s``) bounds the block's own running time:
        time spent waiting for sub-calls in ``on_llm`` is not counted, so a block that
        delegates to a slow local model is not killed for its sub-models' speed (sub-calls are
        bounded by their clients' timeouts and the episode's budgets). Raises
        :class:`ReplDied` when the block exceeds it (the process is killed) or the process dies.
        """
        t0 = time.monotonic()
        deadline = t0 + (timeout_s if timeout_s is not None else self.limits.block_timeout_s)
        self._write({"op": "exec", "code": code})
        while True:
            msg = self._read(deadline)
            op = msg.get("op")
            if op == "llm":
                t_llm = time.monotonic()
                try:
                    responses = on_llm(msg["prompts"], msg["sources"])
                    self._write({"op": "llm_result", "responses": responses})
                except SubCallRefused as exc:
                    self._write({"op": "llm_result", "fatal": str(exc)})
                deadline += time.monotonic() - t_llm
                continue
            if op == "result":
                return BlockOutcome(
                    stdout=msg["stdout"],
                    stdout_chars=msg["stdout_chars"],
                    error=msg["error"],
                    final=msg["final"],
                    final_error=msg["final_error"],
                    stdout_sources=msg["stdout_sources"],
                    duration_s=time.monotonic() - t0,
                )
            raise ReplDied(f"protocol error from REPL: {msg}", timed_out=False)

    def get_var(self, name: str, timeout_s: float = 30.0) -> str | None:
        """Value of REPL variable ``name`` as ``str``, or ``None`` when it does not exist."""
        self._write({"op": "get_var", "name": name})
        msg = self._read(time.monotonic() + timeout_s)
        return msg["value"] if msg.get("found") else None

    @property
    def alive(self) -> bool:
        """True while the worker process runs."""
        return self._proc.poll() is None

    @property
    def pid(self) -> int:
        """Process id of the worker (also its process-group id)."""
        return self._proc.pid

    def kill(self) -> None:
        """SIGKILL the REPL's whole process group and reap it. Idempotent."""
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def close(self) -> None:
        """End the worker: SIGKILL its process group and reap it.

        No graceful shutdown: the worker holds nothing worth flushing (its scratch folder is
        discarded with the episode), and skipping the interpreter's finalisation takes
        ~5-15 ms off the end of every episode."""
        self.kill()

    def __enter__(self) -> ReplProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Repl(Protocol):
    """The REPL seam: what an episode needs of the process that runs the root's code."""

    def execute(
        self, code: str, on_llm: LlmHandler, timeout_s: float | None = None
    ) -> BlockOutcome:
        """Run one code block; ``on_llm`` answers its ``llm_query`` calls (see ReplProcess)."""
        ...

    def get_var(self, name: str, timeout_s: float = 30.0) -> str | None:
        """``str()`` of a REPL variable, or ``None`` when it does not exist."""
        ...

    def close(self) -> None:
        """End the REPL process. Idempotent."""
        ...


class BackgroundRepl:
    """A :class:`ReplProcess` started in a background thread.

    The first root request does not need the REPL, so starting it concurrently takes its
    start-up (~20 ms, more for big rooms) off the episode's critical path. Errors of the
    start-up (:class:`ReplDied`) surface at first use. Arguments as :class:`ReplProcess`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._proc: ReplProcess | None = None
        self._error: BaseException | None = None

        def start() -> None:
            try:
                self._proc = ReplProcess(*args, **kwargs)
            except BaseException as exc:  # surfaced by _get()
                self._error = exc

        self._thread = threading.Thread(target=start, name="repl-start", daemon=True)
        self._thread.start()

    def _get(self) -> ReplProcess:
        self._thread.join()
        if self._proc is None:
            raise self._error or ReplDied("REPL failed to start", timed_out=False)
        return self._proc

    def execute(
        self, code: str, on_llm: LlmHandler, timeout_s: float | None = None
    ) -> BlockOutcome:
        """See :meth:`ReplProcess.execute` (waits for start-up first)."""
        return self._get().execute(code, on_llm, timeout_s)

    def get_var(self, name: str, timeout_s: float = 30.0) -> str | None:
        """See :meth:`ReplProcess.get_var`."""
        return self._get().get_var(name, timeout_s)

    def close(self) -> None:
        """Wait for start-up to finish, then close the process if it started. Idempotent."""
        self._thread.join()
        if self._proc is not None:
            self._proc.close()

    def __enter__(self) -> BackgroundRepl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
