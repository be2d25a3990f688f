"""Control groups of one sandboxed REPL: its process cap, its memory cap and its freezer.

One REPL gets one folder in each cgroup hierarchy it needs, under the collector's own cgroup:

- ``pids`` (``pids.max``): processes and threads, needed when the collector is root (where
  ``RLIMIT_NPROC`` of a shared uid would count every sandbox together);
- ``memory`` (v1 ``memory.limit_in_bytes``, v2 ``memory.max`` and ``memory.swap.max=0``): all
  of the REPL's processes together, its tmpfs pages included; over it the kernel's OOM killer
  kills inside that cgroup only, never the collector;
- freezer (v2 ``cgroup.freeze``, which needs no controller and exists in every cgroup2 folder,
  else v1 ``freezer.state``): the REPL is frozen while the model thinks and thawed for its next
  block, so no thread or child of the REPL's code runs between blocks.

Both cgroup v1 (a mount per controller, "hybrid" systems with cgroup2 beside them) and a pure
cgroup v2 tree are found from ``/proc/self/mountinfo`` and ``/proc/self/cgroup``
(https://docs.kernel.org/admin-guide/cgroup-v2.html, sections "Freezer" and "Memory";
https://docs.kernel.org/admin-guide/cgroup-v1/freezer-subsystem.html). Where a folder cannot be
made (not root, no delegation, read-only cgroupfs), memory and freezer are left out and
:attr:`ReplCgroup.notes` says so in words; the caller records it.

Folders are named ``rlmdistill-<pid>-<start time>-<n>`` (the collector's pid and its start time
in clock ticks, so that a reused pid is told apart): :func:`sweep` removes those of collectors
that are gone (a collector killed with SIGKILL cannot clean up), thawing and killing what they
still hold, at the next collector's first REPL.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import queue
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

MOUNTINFO = "/proc/self/mountinfo"
PROC_CGROUP = "/proc/self/cgroup"
PREFIX = "rlmdistill"


class CgroupUnavailable(OSError):
    """A cgroup that the caller requires (the process cap of a root collector) cannot be made."""


def process_start_time(pid: int) -> int | None:
    """Start time of process ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field 22),
    or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def owner_tag() -> str:
    """``<pid>-<start time>`` of this process: the owner part of the names it gives folders."""
    return f"{os.getpid()}-{process_start_time(os.getpid())}"


def owner_alive(pid: int, start: int) -> bool:
    """Whether the process that named a folder ``<pid>-<start>`` still runs."""
    return process_start_time(pid) == start


def parse_owned(name: str) -> tuple[int, int] | None:
    """``(pid, start time)`` of a folder named ``rlmdistill-<pid>-<start>[-...]``, else None."""
    parts = name.split("-")
    if len(parts) < 3 or parts[0] != PREFIX or not (parts[1].isdigit() and parts[2].isdigit()):
        return None
    return int(parts[1]), int(parts[2])


@dataclass(frozen=True)
class Hierarchies:
    """This process's cgroup folders: ``v1`` by controller name, ``v2`` the cgroup2 folder."""

    v1: dict[str, Path] = field(default_factory=dict)
    v2: Path | None = None

    def v2_controllers(self) -> set[str]:
        """Controllers this process's cgroup2 folder hands to its children."""
        if self.v2 is None:
            return set()
        try:
            return set((self.v2 / "cgroup.subtree_control").read_text().split())
        except OSError:
            return set()


@functools.lru_cache(maxsize=8)
def hierarchies(mountinfo: str = MOUNTINFO, proc_cgroup: str = PROC_CGROUP) -> Hierarchies:
    """Where this process's cgroups are (read once per process; a collector does not move)."""
    v1_mounts: dict[str, str] = {}
    v2_mount: str | None = None
    try:
        with open(mountinfo, encoding="utf-8") as fh:
            for line in fh:
                left, _, right = line.partition(" - ")
                fstype, _, options = [*right.split(), "", "", ""][:3]
                fields = left.split()
                if len(fields) < 5:
                    continue
                if fstype == "cgroup":
                    for opt in options.split(","):
                        v1_mounts.setdefault(opt, fields[4])
                elif fstype == "cgroup2" and v2_mount is None:
                    v2_mount = fields[4]
        with open(proc_cgroup, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return Hierarchies()
    v1: dict[str, Path] = {}
    v2: Path | None = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "" and v2_mount is not None:
            v2 = Path(v2_mount + path)
        for c in controllers.split(","):
            if c in v1_mounts:
                v1[c] = Path(v1_mounts[c] + path)
    return Hierarchies(v1, v2)


_counter = itertools.count()
_swept: set[Path] = set()
_swept_lock = threading.Lock()


class ReplCgroup:
    """The cgroup folders of one REPL (see the module docstring).

    ``max_tasks``: ``pids.max``, or None for no process cap; raises :class:`CgroupUnavailable`
    when it is asked for and no pids cgroup can be made. ``memory_bytes``: the memory cap of
    all the REPL's processes together, or None. ``freeze``: make a freezer for
    :meth:`freeze`/:meth:`thaw`. What could not be made is left out and described in
    :attr:`notes` (keys ``memory``, ``freeze``).
    """

    def __init__(
        self,
        *,
        max_tasks: int | None,
        memory_bytes: int | None,
        freeze: bool,
        where: Hierarchies | None = None,
    ) -> None:
        h = where if where is not None else hierarchies()
        self.name = f"{PREFIX}-{owner_tag()}-{next(_counter)}"
        self.folders: dict[Path, Path] = {}  # hierarchy base -> this REPL's folder
        self.notes: dict[str, str] = {}
        self.memory: str | None = None
        """Which file holds the memory cap (``memory.max`` / ``memory.limit_in_bytes``)."""
        self._freeze_file: Path | None = None
        self._freeze_values = ("1", "0")
        v2_ctl = h.v2_controllers()
        try:
            if max_tasks is not None:
                base = h.v1.get("pids") or (h.v2 if "pids" in v2_ctl else None)
                if base is None:
                    raise CgroupUnavailable("no pids cgroup in /proc/self/cgroup")
                (self._folder(base) / "pids.max").write_text(f"{max_tasks}\n")
            if memory_bytes is not None:
                self._make_memory(h, v2_ctl, memory_bytes)
            if freeze:
                self._make_freezer(h)
        except BaseException:
            self.close()
            raise

    # -- making ------------------------------------------------------------------------
    def _folder(self, base: Path) -> Path:
        if base not in self.folders:
            sweep(base)
            folder = base / self.name
            folder.mkdir()
            self.folders[base] = folder
        return self.folders[base]

    def _make_memory(self, h: Hierarchies, v2_ctl: set[str], limit: int) -> None:
        try:
            if "memory" in h.v1:
                folder = self._folder(h.v1["memory"])
                (folder / "memory.limit_in_bytes").write_text(f"{limit}\n")
                with contextlib.suppress(OSError):  # swap accounting may be off
                    (folder / "memory.memsw.limit_in_bytes").write_text(f"{limit}\n")
                self.memory = "cgroup v1 memory.limit_in_bytes"
            elif h.v2 is not None and "memory" in v2_ctl:
                folder = self._folder(h.v2)
                (folder / "memory.max").write_text(f"{limit}\n")
                with contextlib.suppress(OSError):
                    (folder / "memory.swap.max").write_text("0\n")
                self.memory = "cgroup v2 memory.max"
            else:
                raise FileNotFoundError("no memory controller in this process's cgroups")
        except OSError as exc:
            self.notes["memory"] = (
                f"no memory cgroup could be made ({exc}): memory is capped per process only "
                "(RLIMIT_AS = repl.memory_limit_mb), so a REPL's children together may use more"
            )

    def _make_freezer(self, h: Hierarchies) -> None:
        errors = []
        if h.v2 is not None:
            try:
                f = self._folder(h.v2) / "cgroup.freeze"
                if not f.exists():
                    raise FileNotFoundError(f"{f} (kernel older than 5.2)")
                self._freeze_file, self._freeze_values = f, ("1", "0")
                return
            except OSError as exc:
                errors.append(str(exc))
        if "freezer" in h.v1:
            try:
                self._freeze_file = self._folder(h.v1["freezer"]) / "freezer.state"
                self._freeze_values = ("FROZEN", "THAWED")
                return
            except OSError as exc:
                errors.append(str(exc))
        self.notes["freeze"] = (
            "no freezer cgroup could be made ("
            + ("; ".join(errors) or "no cgroup2 folder and no v1 freezer")
            + "): threads and children of the REPL's code keep running between blocks"
        )

    # -- use ---------------------------------------------------------------------------
    @property
    def can_freeze(self) -> bool:
        """Whether :meth:`freeze` stops the REPL."""
        return self._freeze_file is not None

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run through ``/bin/sh``, which joins every folder first (so nothing forks
        before it is inside)."""
        procs = [str(f / "cgroup.procs") for f in self.folders.values()]
        if not procs:
            return argv
        script = " && ".join(f'echo $$ > "${i + 1}"' for i in range(len(procs)))
        n = len(procs)
        return ["/bin/sh", "-c", f'{script} && shift {n} && exec "$@"', "sh", *procs, *argv]

    def freeze(self) -> None:
        """Stop every process of the REPL (asynchronous: they stop within microseconds)."""
        if self._freeze_file is not None:
            with contextlib.suppress(OSError):
                self._freeze_file.write_text(self._freeze_values[0])

    def thaw(self) -> None:
        """Let the REPL's processes run again."""
        if self._freeze_file is not None:
            with contextlib.suppress(OSError):
                self._freeze_file.write_text(self._freeze_values[1])

    def memory_events(self) -> dict[str, int]:
        """OOM kills in the REPL's memory cgroup so far (``{"oom_kill": n}``; empty if none)."""
        for folder in self.folders.values():
            for name in ("memory.events", "memory.oom_control"):
                with contextlib.suppress(OSError, ValueError):
                    text = (folder / name).read_text()
                    for line in text.splitlines():
                        key, _, value = line.partition(" ")
                        if key == "oom_kill":
                            return {"oom_kill": int(value)}
        return {}

    def close(self) -> None:
        """Thaw, SIGKILL whatever is left and remove the folders. Idempotent.

        Killed processes take ~10 ms to leave; rather than wait on the episode's critical path,
        folders still busy go to one background reaper thread that retries for ~5 s; one left
        after that is removed by a later :func:`sweep`."""
        self.thaw()
        left = {b: f for b, f in self.folders.items() if not _try_remove(f)}
        self.folders = {}
        if left:
            _REAPER.put(list(left.values()))


def _try_remove(folder: Path) -> bool:
    """One thaw-kill-rmdir attempt; True when the folder is gone."""
    for name, value in (("cgroup.freeze", "0"), ("freezer.state", "THAWED")):
        with contextlib.suppress(OSError):
            (folder / name).write_text(value)
    try:
        pids = (folder / "cgroup.procs").read_text().split()
    except OSError:
        return not folder.exists()
    for pid in pids:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    try:
        folder.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


class _Reaper:
    """Removes busy cgroup folders in the background (see :meth:`ReplCgroup.close`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = -1
        self._queue: queue.SimpleQueue[list[Path]] = queue.SimpleQueue()
        self.pending: set[Path] = set()

    def put(self, folders: list[Path]) -> None:
        with self._lock:
            self.pending.update(folders)
            if self._pid != os.getpid():
                self._queue = queue.SimpleQueue()
                threading.Thread(
                    target=self._loop, args=(self._queue,), name="cgroup-reaper", daemon=True
                ).start()
                self._pid = os.getpid()
            self._queue.put(folders)

    def _loop(self, q: queue.SimpleQueue[list[Path]]) -> None:
        while True:
            folders = q.get()
            for _ in range(500):
                folders = [f for f in folders if not _try_remove(f)]
                if not folders:
                    break
                time.sleep(0.01)
            self.pending.difference_update(folders)

    def drain(self, timeout_s: float = 1.0) -> None:
        """Wait up to ``timeout_s`` for pending folders to go (at exit, and in tests)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            left = [p for p in list(self.pending) if p.exists() and not _try_remove(p)]
            if not left:
                return
            time.sleep(0.01)


_REAPER = _Reaper()


def sweep(base: Path, *, force: bool = False) -> list[Path]:
    """Remove ``rlmdistill-<pid>-<start>-<n>`` folders under ``base`` whose collector is gone
    (thawed, their processes killed). Runs once per ``base`` per process unless ``force``.
    Returns the folders removed."""
    with _swept_lock:
        if base in _swept and not force:
            return []
        _swept.add(base)
    removed = []
    with contextlib.suppress(OSError):
        for entry in base.iterdir():
            owner = parse_owned(entry.name)
            if owner is None or owner_alive(*owner) or not entry.is_dir():
                continue
            if _try_remove(entry) or _try_again(entry):
                removed.append(entry)
    return removed


def _try_again(folder: Path, tries: int = 100) -> bool:
    for _ in range(tries):
        time.sleep(0.01)
        if _try_remove(folder):
            return True
    return False


def sweep_all(where: Hierarchies | None = None) -> list[Path]:
    """:func:`sweep` every hierarchy this process belongs to (forced). Returns what went."""
    h = where if where is not None else hierarchies()
    bases = {*h.v1.values(), *([h.v2] if h.v2 is not None else [])}
    return [p for base in bases for p in sweep(base, force=True)]
