"""Parent side of the per-episode REPL: a persistent Python process, killable on limits.

The worker (``repl_worker.py``) runs in its own process group with an address-space limit, a
file-size limit and (``ReplLimits.sandbox``) an audit-hook guard against writes outside its
scratch folder, sockets and new processes (a guard against mistakes, not a security boundary;
see the worker's docstring). Under the ``bwrap`` sandbox mode (the default on Linux) it runs
inside bubblewrap with a process cap and a size-capped scratch tmpfs
(:mod:`rlmdistill.harness.sandbox`). The collector talks to it over pipes. A block that exceeds
its wall-time limit gets the whole process group killed (SIGKILL) — thread timeouts and
``signal.alarm`` cannot stop ``while True: pass``. State persists across blocks and
survives exceptions (R2).

Everything the worker writes is untrusted (the root's code runs in that process and can write
to the pipe): lines are read in linear time up to ``ReplLimits.max_message_mb``; every message
is checked against the protocol (op, fields, types); after each reply the collector sends a
``ping`` with a fresh nonce and requires its ``pong`` as the very next line, so a line forged
before the real reply is caught. Any violation kills the REPL and raises :class:`ReplDied`
(the episode ends ``repl_crashed``). ``FINAL`` values and variables read back over
``ReplLimits.max_value_chars`` raise :class:`ReplValueTooLarge`. Nothing the worker reports is
used for coverage (that is measured on what the collector sends to models).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, NamedTuple, NoReturn, Protocol

from pydantic import BaseModel, ConfigDict, Field

from rlmdistill.harness.cgroups import ReplCgroup
from rlmdistill.harness.sandbox import (
    DEFAULT_MODE,
    REPL_MALLOC_TUNABLES,
    ROOM_INSIDE,
    SCRATCH,
    SandboxMode,
    SandboxUnavailable,
    bwrap_launch,
    explain_failure,
    find_bwrap,
    repl_cgroup,
    spawn,
)

WORKER = Path(__file__).with_name("repl_worker.py")

RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM})
"""``OSError`` numbers of a start that failed for want of descriptors, processes or memory:
:class:`BackgroundRepl` waits and tries again instead of failing the episode."""

START_WORKERS = 8
"""Threads of the process-wide pool that starts REPL processes (:class:`BackgroundRepl`):
a start is a fork/exec and an init message (~1-5 ms), the room load that follows runs in the
worker while the episode sends its first root request."""

OPERATIONAL_FIELDS = frozenset(
    {"scratch_mb", "max_processes", "max_message_mb", "max_value_chars", "max_prompt_chars"}
)
"""``ReplLimits`` fields added with the OS sandbox: caps against deliberate abuse, kept out of
``CollectConfig.fingerprint`` so that runs collected before them keep their episode ids."""


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
        "ctypes in the REPL (audit hook: a guard against mistakes, not a security boundary; "
        "on under sandbox modes bwrap and audit, never under none).",
    )
    max_file_mb: int | None = Field(
        256, ge=1, description="Largest file the REPL may write (MiB, RLIMIT_FSIZE); None = no cap."
    )
    scratch_mb: int = Field(
        256, ge=1, description="bwrap: size of the scratch tmpfs, the only writable path (MiB)."
    )
    max_processes: int = Field(
        64,
        ge=1,
        description="bwrap: processes and threads the REPL may have, itself included "
        "(RLIMIT_NPROC per sandbox; a pids cgroup when the collector is root).",
    )
    max_message_mb: int = Field(
        64, ge=1, description="Longest protocol line the collector reads from the REPL (MiB)."
    )
    max_value_chars: int = Field(
        1_000_000,
        ge=1,
        description="Longest FINAL value (else memo_too_large) or variable read back for "
        "FINAL_VAR (else variable_too_large), in characters.",
    )
    max_prompt_chars: int = Field(
        1_000_000,
        ge=1,
        description="Longest sub-call prompt; a longer one is not sent (error_kind "
        "prompt_too_large), in characters.",
    )


class ReplDied(RuntimeError):
    """The REPL process ended or was killed. ``timed_out`` tells a wall-time kill apart."""

    def __init__(self, message: str, *, timed_out: bool) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class ReplValueTooLarge(Exception):
    """A value handed back by the REPL is over ``ReplLimits.max_value_chars``.

    ``status``: ``memo_too_large`` (a ``FINAL``/``FINAL_VAR`` value in code) or
    ``variable_too_large`` (a variable read back for ``FINAL_VAR`` written in prose)."""

    def __init__(
        self, message: str, status: Literal["memo_too_large", "variable_too_large"]
    ) -> None:
        super().__init__(message)
        self.status = status


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
    duration_s: float


LlmHandler = Callable[[list[str], list[list[dict[str, Any]]]], list[str]]
"""Called for every ``llm_query``/``llm_query_batched``: (prompts, sources) -> responses.
Raising :class:`SubCallRefused` makes the REPL call raise ``RuntimeError`` with its text."""


class SubCallRefused(Exception):
    """Raised by an :data:`LlmHandler` to refuse a batch (e.g. the sub-call budget is spent)."""


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _opt_str(x: object) -> bool:
    return x is None or isinstance(x, str)


def _valid_sources(x: object) -> bool:
    return isinstance(x, list) and all(
        isinstance(s, dict)
        and set(s) == {"doc_id", "start", "end"}
        and isinstance(s["doc_id"], str)
        and _is_int(s["start"])
        and _is_int(s["end"])
        for s in x
    )


def _message_problem(msg: dict[str, Any]) -> str | None:
    """What is wrong with a worker message (``None`` when it has the shape of its op)."""
    op = msg.get("op")
    keys = set(msg)
    if op == "llm":
        prompts, sources = msg.get("prompts"), msg.get("sources")
        if keys != {"op", "prompts", "sources"}:
            return f"llm message with fields {sorted(keys)}"
        if not isinstance(prompts, list) or not prompts:
            return "llm message without prompts"
        if not all(isinstance(p, str) for p in prompts):
            return "llm message with a prompt that is not a string"
        if not isinstance(sources, list) or len(sources) != len(prompts):
            return "llm message whose sources do not match its prompts"
        if not all(_valid_sources(s) for s in sources):
            return "llm message with malformed sources"
        return None
    if op == "result":
        if keys != {"op", "stdout", "stdout_chars", "error", "final", "final_error"}:
            return f"result message with fields {sorted(keys)}"
        final = msg["final"]
        ok = (
            isinstance(msg["stdout"], str)
            and _is_int(msg["stdout_chars"])
            and _opt_str(msg["error"])
            and _opt_str(msg["final_error"])
            and (
                final is None
                or (
                    isinstance(final, dict)
                    and set(final) == {"source", "value"}
                    and final["source"] in ("final_call", "final_var")
                    and isinstance(final["value"], str)
                )
            )
        )
        return None if ok else "result message with fields of the wrong type"
    if op == "var":
        ok = (
            keys == {"op", "found", "value"}
            and isinstance(msg["found"], bool)
            and (isinstance(msg["value"], str) if msg["found"] else msg["value"] is None)
        )
        return None if ok else "malformed var message"
    if op == "ready":
        return (
            None
            if keys == {"op", "n_documents"} and _is_int(msg["n_documents"])
            else ("malformed ready message")
        )
    return f"unexpected message op {str(op)[:40]!r}"


class ReplProcess:
    """One persistent REPL process over one room snapshot.

    ``context_doc`` (depth 2) names a snapshot document exposed as the variable ``context``.
    ``sandbox`` picks the isolation (:mod:`rlmdistill.harness.sandbox`): ``bwrap`` raises
    :class:`~rlmdistill.harness.sandbox.SandboxUnavailable` when bubblewrap cannot start (the
    message names the cause); ``audit`` and ``none`` run a plain process. Any other start-up
    failure raises :class:`ReplDied`.

    Use as a context manager; :meth:`execute` runs a block and serves its sub-calls through
    ``on_llm`` in the calling thread. ``wait_ready=False`` returns once the process is
    started and told its room; :meth:`await_ready` (called by :meth:`execute` and
    :meth:`get_var`) then waits for it to have loaded the room.
    """

    def __init__(
        self,
        room_snapshot: Path,
        scratch_dir: Path,
        limits: ReplLimits,
        *,
        context_doc: str | None = None,
        sandbox: SandboxMode = DEFAULT_MODE,
        wait_ready: bool = True,
    ) -> None:
        self.limits = limits
        self.sandbox = sandbox
        self._buf = bytearray()
        self._scan = 0
        self._max_line = limits.max_message_mb * 2**20
        self._cgroup: ReplCgroup | None = None
        self.notes: dict[str, str] = {}
        """Protections this REPL lacks here, in words (no memory cgroup, no freezer)."""
        scratch_dir.mkdir(parents=True, exist_ok=True)
        nproc = None
        if sandbox == "bwrap":
            blob = room_snapshot.with_suffix(".bin")
            files = [room_snapshot] + ([blob] if blob.exists() else [])
            launch = bwrap_launch(
                find_bwrap(), WORKER, files, scratch_bytes=limits.scratch_mb * 2**20
            )
            root = os.geteuid() == 0
            # the memory cgroup holds the scratch tmpfs's pages too: cap = memory + scratch
            memory = (
                (limits.memory_limit_mb + limits.scratch_mb) * 2**20
                if limits.memory_limit_mb
                else None
            )
            # root: RLIMIT_NPROC of the sandbox's shared uid would count every REPL together,
            # so a pids cgroup caps processes (+ 2: bwrap and the sandbox's pid 1 are in it)
            try:
                self._cgroup = repl_cgroup(limits.max_processes + 2 if root else None, memory)
            except BaseException:
                launch.close()
                raise
            self.notes = dict(self._cgroup.notes)
            argv = self._cgroup.wrap(launch.argv)
            if not root:
                nproc = limits.max_processes + 1  # + 1: bwrap's init shares the user namespace
            snapshot_path, scratch_path = f"{ROOM_INSIDE}/{room_snapshot.name}", SCRATCH
            try:
                self._proc = spawn(
                    argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd="/",
                    start_new_session=True,
                    env={},  # bwrap's own environment is readable inside: keep it empty
                    pass_fds=launch.pass_fds,
                )
            except OSError as exc:
                self._cgroup.close()
                if exc.errno in RESOURCE_ERRNOS:  # out of descriptors/processes: not bwrap's
                    raise
                raise SandboxUnavailable(explain_failure(str(exc))) from exc
            finally:
                launch.close()
        else:
            snapshot_path, scratch_path = str(room_snapshot), str(scratch_dir.resolve())
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-u", str(WORKER)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=scratch_dir,
                start_new_session=True,
                env={
                    "PATH": os.environ.get("PATH", ""),
                    "PYTHONIOENCODING": "utf-8",
                    "GLIBC_TUNABLES": REPL_MALLOC_TUNABLES,
                },
            )
        init = {
            "op": "init",
            "room_snapshot": snapshot_path,
            "context_doc": context_doc,
            "capture_head_chars": limits.capture_head_chars,
            "capture_tail_chars": limits.capture_tail_chars,
            "memory_limit_bytes": limits.memory_limit_mb * 2**20
            if limits.memory_limit_mb
            else None,
            "sandbox": limits.sandbox and sandbox != "none",
            "scratch_dir": scratch_path,
            "max_file_bytes": limits.max_file_mb * 2**20 if limits.max_file_mb else None,
            "max_nproc": nproc,
            "max_prompt_chars": limits.max_prompt_chars,
            "max_message_bytes": self._max_line,
            "max_value_chars": limits.max_value_chars,
        }
        assert self._proc.stdout is not None
        self._poller = select.poll()  # poll, not select(): no 1,024-descriptor limit
        self._poller.register(self._proc.stdout.fileno(), select.POLLIN)
        self._ready_deadline = time.monotonic() + limits.startup_timeout_s
        self._ready = False
        self._ready_lock = threading.Lock()
        try:
            self._write(init)
        except ReplDied as exc:
            self._start_failed(exc)
        if wait_ready:
            self.await_ready()

    def _start_failed(self, exc: ReplDied) -> NoReturn:
        stderr = self._stderr_tail()
        self.kill()
        if self.sandbox == "bwrap" and "bwrap" in stderr:
            raise SandboxUnavailable(explain_failure(stderr, self._proc.returncode)) from exc
        raise ReplDied(
            f"REPL failed to start: {exc}" + (f"; stderr: {stderr[-2000:]}" if stderr else ""),
            timed_out=exc.timed_out,
        ) from exc

    def await_ready(self) -> None:
        """Wait for the worker's ``ready`` message (once; later calls return at once).

        Raises :class:`ReplDied` (or :class:`SandboxUnavailable` under bwrap) when the worker
        does not come up within ``limits.startup_timeout_s`` of its start. A worker that came
        up while nobody was reading (the episode's first root request outlasted the start-up
        limit: a local root takes minutes per turn on a CPU) is up: its ``ready`` line, already
        in the pipe, is read, not taken for a start-up that timed out."""
        with self._ready_lock:
            if self._ready:
                return
            deadline = self._ready_deadline
            if time.monotonic() >= deadline and (self._buf or self._poller.poll(0)):
                deadline = time.monotonic() + 5.0  # the rest of a line already under way
            try:
                msg = self._read(deadline)
                if msg["op"] != "ready":
                    self._protocol_error(f"{msg['op']} message before ready")
            except ReplDied as exc:
                self._start_failed(exc)
            self._ready = True

    # -- pipes ------------------------------------------------------------------------
    def _stderr_tail(self) -> str:
        """What the process wrote to stderr (start-up errors; read only after it failed)."""
        err = self._proc.stderr
        if err is None:
            return ""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=2)
        data = b""
        with contextlib.suppress(OSError, ValueError):
            poller = select.poll()  # poll, not select(): no 1,024-descriptor limit
            poller.register(err.fileno(), select.POLLIN)
            while len(data) < 65536 and poller.poll(50):
                chunk = os.read(err.fileno(), 65536)
                if not chunk:
                    break
                data += chunk
        return data.decode("utf-8", "replace")

    def _write(self, msg: dict[str, Any]) -> None:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write((json.dumps(msg) + "\n").encode("ascii"))
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as exc:
            raise ReplDied(f"REPL process is gone ({exc})", timed_out=False) from exc

    def _protocol_error(self, what: str) -> NoReturn:
        self.kill()
        raise ReplDied(
            f"protocol error from the REPL: {what}; its output is untrusted, so it was killed",
            timed_out=False,
        )

    def _read_line(self, deadline: float) -> bytes:
        """The next line (without its newline), in time linear in its length; a line over
        ``max_message_mb`` is a protocol error."""
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        buf = self._buf
        while True:
            i = buf.find(b"\n", self._scan)
            if i >= 0:
                line = bytes(buf[:i])
                del buf[: i + 1]
                self._scan = 0
                return line
            self._scan = len(buf)
            if len(buf) > self._max_line:
                self._protocol_error(f"a line over {self._max_line:,} bytes")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise ReplDied("code block exceeded its time limit; REPL killed", timed_out=True)
            if not self._poller.poll(max(1, int(min(remaining, 1.0) * 1000))):
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                code = self._proc.wait()
                raise ReplDied(f"REPL process died (exit code {code})", timed_out=False)
            buf += chunk

    def _read(self, deadline: float) -> dict[str, Any]:
        """The next message, checked against the protocol (see :func:`_message_problem`)."""
        line = self._read_line(deadline)
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError):
            self._protocol_error("a line that is not JSON")
        if not isinstance(msg, dict):
            self._protocol_error("a JSON line that is not an object")
        problem = _message_problem(msg)
        if problem is not None:
            self._protocol_error(problem)
        return msg

    def _sync(self, deadline: float) -> None:
        """Ping with a fresh nonce; the very next line must be its pong (else a line was
        forged before the reply just read, or the process kept running after it)."""
        nonce = secrets.token_hex(8)
        self._write({"op": "ping", "nonce": nonce})
        try:
            line = self._read_line(max(deadline, time.monotonic() + 5.0))
        except ReplDied as exc:
            if exc.timed_out:
                self._protocol_error("no pong after a reply (the process kept running)")
            raise
        if line != json.dumps({"op": "pong", "nonce": nonce}).encode():
            self._protocol_error("an unexpected line after a reply (forged by the REPL's code?)")

    # -- API --------------------------------------------------------------------------
    def execute(
        self, code: str, on_llm: LlmHandler, timeout_s: float | None = None
    ) -> BlockOutcome:
        """Run ``code``; serve its sub-calls with ``on_llm``; return its outcome.

        ``timeout_s`` (default ``limits.block_timeout_s``) bounds the block's own running time:
        time spent waiting for sub-calls in ``on_llm`` is not counted, so a block that
        delegates to a slow local model is not killed for its sub-models' speed (sub-calls are
        bounded by their clients' timeouts and the episode's budgets). Raises
        :class:`ReplDied` when the block exceeds it (the process is killed), the process dies
        or breaks the protocol, and :class:`ReplValueTooLarge` for a ``FINAL`` value over
        ``limits.max_value_chars``.
        """
        self.await_ready()
        t0 = time.monotonic()
        deadline = t0 + (timeout_s if timeout_s is not None else self.limits.block_timeout_s)
        self._thaw()
        self._write({"op": "exec", "code": code})
        while True:
            msg = self._read(deadline)
            if msg["op"] == "llm":
                t_llm = time.monotonic()
                try:
                    responses = on_llm(msg["prompts"], msg["sources"])
                    self._write({"op": "llm_result", "responses": responses})
                except SubCallRefused as exc:
                    self._write({"op": "llm_result", "fatal": str(exc)})
                deadline += time.monotonic() - t_llm
                continue
            if msg["op"] != "result":
                self._protocol_error(f"{msg['op']} message while a block runs")
            self._sync(deadline)
            self._freeze()
            final = msg["final"]
            if final is not None and len(final["value"]) > self.limits.max_value_chars:
                raise ReplValueTooLarge(
                    f"FINAL value over {self.limits.max_value_chars:,} characters "
                    "(ReplLimits.max_value_chars)",
                    "memo_too_large",
                )
            return BlockOutcome(
                stdout=msg["stdout"],
                stdout_chars=msg["stdout_chars"],
                error=msg["error"],
                final=final,
                final_error=msg["final_error"],
                duration_s=time.monotonic() - t0,
            )

    def get_var(self, name: str, timeout_s: float = 30.0) -> str | None:
        """Value of REPL variable ``name`` as ``str``, or ``None`` when it does not exist.

        Raises :class:`ReplValueTooLarge` (``variable_too_large``) over
        ``limits.max_value_chars`` and :class:`ReplDied` as :meth:`execute`."""
        self.await_ready()
        deadline = time.monotonic() + timeout_s
        self._thaw()
        self._write({"op": "get_var", "name": name})
        msg = self._read(deadline)
        if msg["op"] != "var":
            self._protocol_error(f"{msg['op']} message in reply to get_var")
        self._sync(deadline)
        self._freeze()
        value: str | None = msg["value"]
        if value is not None and len(value) > self.limits.max_value_chars:
            raise ReplValueTooLarge(
                f"variable {name!r} over {self.limits.max_value_chars:,} characters "
                "(ReplLimits.max_value_chars)",
                "variable_too_large",
            )
        return value

    def _freeze(self) -> None:
        """Stop the REPL's processes until the next block (bwrap with a freezer cgroup): no
        thread or child of the root's code runs while the model thinks."""
        if self._cgroup is not None:
            self._cgroup.freeze()

    def _thaw(self) -> None:
        if self._cgroup is not None:
            self._cgroup.thaw()

    @property
    def frozen_between_blocks(self) -> bool:
        """Whether this REPL is frozen between blocks (see :meth:`_freeze`)."""
        return self._cgroup is not None and self._cgroup.can_freeze

    @property
    def alive(self) -> bool:
        """True while the worker process runs."""
        return self._proc.poll() is None

    @property
    def pid(self) -> int:
        """Process id of the worker (also its process-group id); under bwrap, of bwrap."""
        return self._proc.pid

    def kill(self) -> None:
        """SIGKILL the REPL's whole process group (and its pids cgroup) and reap it.
        Idempotent. Under bwrap, killing bwrap ends the sandbox's pid namespace, and with it
        every process the code started."""
        self.signal_kill()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        for stream in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        if self._cgroup is not None:
            self._cgroup.close()

    def signal_kill(self) -> None:
        """SIGKILL the REPL's process group without waiting for it (the kernel tears it down
        while the caller goes on); :meth:`kill` or :meth:`close` then reaps it. Idempotent."""
        self._thaw()  # a frozen v1 cgroup holds SIGKILL until thawed
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)

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


_start_pool: ThreadPoolExecutor | None = None
_start_pool_lock = threading.Lock()


def _starter() -> ThreadPoolExecutor:
    """The process-wide, bounded pool that starts REPL processes (created on first use)."""
    global _start_pool
    with _start_pool_lock:
        if _start_pool is None:
            _start_pool = ThreadPoolExecutor(START_WORKERS, thread_name_prefix="repl-start")
        return _start_pool


def start_patiently(*args: Any, **kwargs: Any) -> ReplProcess:
    """:class:`ReplProcess` ``(*args, wait_ready=False, **kwargs)``, tried again while the
    start fails for want of descriptors, processes or memory (:data:`RESOURCE_ERRNOS`), with
    a growing pause (10 ms doubling up to 1 s), for up to ``limits.startup_timeout_s``: under
    load an episode waits its turn for a REPL instead of failing. Other errors as
    :class:`ReplProcess`; the last resource error is raised as :class:`ReplDied`."""
    limits: ReplLimits = args[2] if len(args) > 2 else kwargs["limits"]
    deadline = time.monotonic() + limits.startup_timeout_s
    pause = 0.01
    while True:
        try:
            return ReplProcess(*args, wait_ready=False, **kwargs)
        except OSError as exc:
            if exc.errno not in RESOURCE_ERRNOS or time.monotonic() + pause > deadline:
                if exc.errno in RESOURCE_ERRNOS:
                    raise ReplDied(
                        f"REPL failed to start: {exc} (still short of resources after "
                        f"{limits.startup_timeout_s:.0f} s)",
                        timed_out=False,
                    ) from exc
                raise
        time.sleep(pause)
        pause = min(1.0, pause * 2)


class BackgroundRepl:
    """A :class:`ReplProcess` started off the calling thread.

    The first root request does not need the REPL, so the process is started by the shared
    bounded start pool (:data:`START_WORKERS` threads for the whole process, not one thread
    per episode) and the room loads inside it while the episode sends that request; the
    ``ready`` message is read at first use. Errors of the start-up (:class:`ReplDied`,
    :class:`~rlmdistill.harness.sandbox.SandboxUnavailable`) surface at first use. Arguments
    as :class:`ReplProcess`; see :func:`start_patiently` for starts short of resources.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._future: Future[ReplProcess] = _starter().submit(start_patiently, *args, **kwargs)

    def _get(self) -> ReplProcess:
        proc = self._future.result()  # raises the start-up error
        proc.await_ready()
        return proc

    def execute(
        self, code: str, on_llm: LlmHandler, timeout_s: float | None = None
    ) -> BlockOutcome:
        """See :meth:`ReplProcess.execute` (waits for start-up first)."""
        return self._get().execute(code, on_llm, timeout_s)

    def get_var(self, name: str, timeout_s: float = 30.0) -> str | None:
        """See :meth:`ReplProcess.get_var`."""
        return self._get().get_var(name, timeout_s)

    def signal_kill(self) -> None:
        """:meth:`ReplProcess.signal_kill` when the process has started (a start still under
        way is left to :meth:`close`)."""
        if self._future.done() and self._future.exception() is None:
            self._future.result().signal_kill()

    def close(self) -> None:
        """Wait for the start to finish, then close the process if it started. Idempotent."""
        try:
            proc = self._future.result()
        except BaseException:  # a failed start has nothing to close
            return
        proc.close()

    def __enter__(self) -> BackgroundRepl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
