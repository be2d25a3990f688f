"""The REPL process of one episode (run as a script; standard library only).

Started by :class:`rlmdistill.harness.repl.ReplProcess`. It talks JSON Lines on a private
duplicate of stdout and reads requests from stdin; file descriptor 1 itself points at
``/dev/null`` so stray writes from C code cannot corrupt the protocol, and Python-level
prints of the root's code are captured per block.

Messages, parent -> worker: ``init``, ``exec``, ``get_var``, ``llm_result``, ``ping``;
worker -> parent: ``ready``, ``llm`` (a batch of sub-call prompts), ``result``, ``var``,
``pong`` (echoes the ``ping``'s nonce; the parent pings after every reply, so a line forged by
the root's code before the real reply is caught as an unexpected message). The parent treats
every line of this process as untrusted: it validates each message and caps its size
(:mod:`rlmdistill.harness.repl`).

The namespace the root's code sees:

- ``room``: read-only mapping ``doc_id -> text`` of the whole data room;
- ``list_documents(folder=None)`` -> ``[{"id", "folder", "chars"}]``;
- ``read(doc_id, start=0, end=None)`` -> text slice (characters);
- ``search(pattern, doc_id=None, window=300, max_hits=10)`` -> ``[{"doc_id", "start", "end",
  "text"}]`` (case-insensitive regex; ``text`` is the hit with ``window`` characters each side);
- ``llm_query(prompt)`` -> ``str`` and ``llm_query_batched(prompts)`` -> ``list[str]``
  (sub-calls, run in parallel by the harness);
- ``FINAL(value)`` / ``FINAL_VAR(name)`` to hand back the memo.

Sandbox (``init["sandbox"]``, on by default): once the room is loaded, :func:`_install_sandbox`
adds a :func:`sys.addaudithook` hook that refuses, with a ``PermissionError`` whose message
starts ``rlmdistill sandbox:``, any write outside the scratch folder (``open`` for writing,
create, remove, rename, link, chmod, truncate, ...; ``/dev/null`` is allowed), every socket
(``socket.__new__``/``connect``/``bind``/``getaddrinfo``, ...), every new process
(``subprocess.Popen``, ``os.system``, ``os.exec*``, ``os.posix_spawn``, ``os.fork``), signals to
other processes, and native code through ``ctypes`` (named ``dlopen``, symbol lookup, raw
addresses). Reads and imports stay allowed. ``RLIMIT_FSIZE`` (``init["max_file_bytes"]``) caps
the size of any file written, and ``TMPDIR`` points into the scratch folder.

Under ``--sandbox bwrap`` (the default on Linux) this process runs inside bubblewrap
(:mod:`rlmdistill.harness.sandbox`), and the hook is only the friendly first line. This hook is
a guard against the mistakes of a weak model (``open("/etc/x", "w")``, ``rm -rf`` by
``os.system``, a stray HTTP call), **not a security boundary**: audit hooks run in the same
interpreter as the code they watch, and adversarial code can get around them (private C modules
such as ``_posixsubprocess``, ``os.open(..., dir_fd=...)`` relative to a directory fd, mutating
interpreter state through ``gc``/frames, races between the check and the system call). Running
untrusted code needs an OS boundary: a container or VM with a read-only root file system and no
network, or seccomp/landlock rules on the process.
"""

from __future__ import annotations

import bisect
import contextlib
import io
import json
import os
import re
import sys
import traceback
from array import array
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any

_proto_out: Any = None
_proto_in: Any = None
_MISSING = object()


def _send(msg: dict[str, Any]) -> None:
    _send_line(json.dumps(msg))  # ASCII: lone surrogates survive (T2)


def _send_line(line: str) -> None:
    _proto_out.write(line + "\n")
    _proto_out.flush()


def _recv() -> dict[str, Any]:
    line = _proto_in.readline()
    if not line:
        raise SystemExit(0)
    return json.loads(line)


class _BoundedCapture(io.TextIOBase):
    """stdout replacement keeping the first ``head`` and last ``tail`` characters."""

    def __init__(self, head: int, tail: int) -> None:
        self.head_cap, self.tail_cap = head, tail
        self.head: list[str] = []
        self.head_len = 0
        self.tail: deque[str] = deque()
        self.tail_len = 0
        self.total = 0

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        n = len(s)
        self.total += n
        if self.head_len < self.head_cap:
            take = s[: self.head_cap - self.head_len]
            self.head.append(take)
            self.head_len += len(take)
            s = s[len(take) :]
        if s:
            if len(s) > self.tail_cap:
                s = s[len(s) - self.tail_cap :]
            self.tail.append(s)
            self.tail_len += len(s)
            while self.tail and self.tail_len - len(self.tail[0]) >= self.tail_cap:
                self.tail_len -= len(self.tail.popleft())
        return n

    def getvalue(self) -> str:
        head = "".join(self.head)
        tail = "".join(self.tail)
        tail = tail[len(tail) - min(len(tail), self.tail_cap) :] if self.tail_cap else ""
        omitted = self.total - len(head) - len(tail)
        if omitted <= 0:
            return head + tail
        return f"{head}\n... [{omitted} characters omitted from the trace] ...\n{tail}"


_DECODED_KEPT = 2
"""Decoded documents a REPL keeps (was 8: up to 8 documents' text held in every REPL)."""


class _Texts(Mapping[str, str]):
    """``doc_id -> text`` over a room snapshot.

    With a ``.bin`` blob the texts stay in one read-only memory map shared (through the page
    cache) by every REPL over the room; a document is decoded when asked for, and the last
    :data:`_DECODED_KEPT` decoded ones are kept (so reading one document piece by piece decodes
    it once; decoding is ~memcpy speed, and each kept document costs the REPL its size).
    Inline ``"text"`` fields (small test snapshots, a depth-2 subagent's context) are used as
    they are.

    The index is held in columns (ids in a list; folders, sizes and byte spans in arrays): a
    snapshot written in columns (``"format": 2``, :meth:`DataRoom.snapshot`) is parsed into
    1.6 MiB on a 5,000-document room where the per-document dicts of format 1 took 3.4 MiB,
    in every REPL. Format 1 (a ``"documents"`` list) still loads.
    """

    def __init__(self, index_path: str) -> None:
        with open(index_path, encoding="utf-8") as fh:
            snap = json.load(fh)
        self.inline: dict[str, str] = {}
        cols = snap.get("columns")
        if cols is None:  # format 1: one dict per document
            docs = snap["documents"]
            self.inline = {d["id"]: d["text"] for d in docs if "text" in d}
            names = sorted({d.get("folder", "") for d in docs})
            cols = {
                "id": [d["id"] for d in docs],
                "folders": names,
                "folder": [names.index(d.get("folder", "")) for d in docs],
                "chars": [len(d["text"]) if "text" in d else int(d["chars"]) for d in docs],
                "byte_start": [int(d.get("byte_start", 0)) for d in docs],
                "byte_end": [int(d.get("byte_end", 0)) for d in docs],
            }
        self.ids: list[str] = cols["id"]
        self.folder_names: list[str] = cols["folders"]
        self._folder = array("l", cols["folder"])
        self._chars = array("q", cols["chars"])
        self._start = array("q", cols["byte_start"])
        self._end = array("q", cols["byte_end"])
        ordered = all(a < b for a, b in zip(self.ids, self.ids[1:], strict=False))
        self._pos = None if ordered else {k: i for i, k in enumerate(self.ids)}
        self.map: Any = None
        if snap.get("blob") and len(self.inline) < len(self.ids):
            import mmap

            blob = os.path.join(os.path.dirname(index_path), snap["blob"])
            with open(blob, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                self.map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        del snap, cols
        self.cache: dict[str, str] = {}

    def _index(self, key: object) -> int:
        """Position of document ``key`` in :attr:`ids`, or -1 (ids in order: a bisection,
        with no id-to-position dict to hold)."""
        if not isinstance(key, str):
            return -1
        if self._pos is not None:
            return self._pos.get(key, -1)
        i = bisect.bisect_left(self.ids, key)
        return i if i < len(self.ids) and self.ids[i] == key else -1

    def rows(self) -> Iterator[tuple[str, str, int]]:
        """``(id, folder, chars)`` of every document, in id order."""
        names = self.folder_names
        for d, f, n in zip(self.ids, self._folder, self._chars, strict=True):
            yield d, names[f], n

    def __getitem__(self, key: str) -> str:
        if key in self.inline:
            return self.inline[key]
        if key in self.cache:
            return self.cache[key]
        i = self._index(key)
        if i < 0:
            raise KeyError(key)
        text = self._decode(self._start[i], self._end[i])
        if len(self.cache) >= _DECODED_KEPT:
            self.cache.pop(next(iter(self.cache)))
        self.cache[key] = text
        return text

    def _decode(self, start: int, end: int) -> str:
        """The blob's bytes ``[start, end)`` decoded, straight from the map (no bytes copy);
        then the pages they lie on leave this process's resident set (``MADV_DONTNEED``: they
        stay in the page cache, shared, and come back on the next read). Without it every
        page a REPL ever read, and the kernel's fault-around beyond it, stayed counted in the
        REPL (6 MiB after reading 40 documents of a 5,000-document room), while the
        decoded text is held in this process's own memory anyway."""
        if end <= start:
            return ""
        with memoryview(self.map)[start:end] as view:
            text = str(view, "utf-8", "surrogatepass")
        madvise = getattr(self.map, "madvise", None)
        if madvise is not None:
            import mmap

            lo = start // mmap.PAGESIZE * mmap.PAGESIZE
            hi = min(len(self.map), -(-end // mmap.PAGESIZE) * mmap.PAGESIZE)
            with contextlib.suppress(OSError, ValueError):
                madvise(mmap.MADV_DONTNEED, lo, hi - lo)
        return text

    def __contains__(self, key: object) -> bool:
        return self._index(key) >= 0

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)


class _Room(Mapping[str, str]):
    """Read-only ``doc_id -> text`` mapping that notes which texts were handed out."""

    def __init__(self, docs: Mapping[str, str], note: Any) -> None:
        self._docs = docs
        self._note = note

    def __getitem__(self, key: str) -> str:
        text = self._docs[key]
        self._note(key, 0, len(text), text)
        return text

    def __iter__(self) -> Iterator[str]:
        return iter(self._docs)

    def __len__(self) -> int:
        return len(self._docs)

    def __repr__(self) -> str:
        return f"<room: {len(self._docs)} documents; use list_documents(), read(), search()>"


class _Worker:
    def __init__(self, init: dict[str, Any]) -> None:
        self.docs = _Texts(init["room_snapshot"])
        self.capture_head = int(init.get("capture_head_chars", 200_000))
        self.capture_tail = int(init.get("capture_tail_chars", 50_000))
        self.min_source_chars = int(init.get("min_source_chars", 40))
        self.max_prompt_chars = int(init.get("max_prompt_chars") or 10**12)
        self.max_message_bytes = int(init.get("max_message_bytes") or 10**12)
        self.max_value_chars = int(init.get("max_value_chars") or 10**12)
        self.handed: deque[tuple[str, int, int, str]] = deque(maxlen=4096)
        self.final: dict[str, Any] | None = None
        self.final_error: str | None = None
        self.calls: list[dict[str, Any]] = []
        self.harness: dict[str, Any] = {
            "room": _Room(self.docs, self._note),
            "list_documents": self.list_documents,
            "read": self.read,
            "search": self.search,
            "llm_query": self.llm_query,
            "llm_query_batched": self.llm_query_batched,
            "FINAL": self.final_call,
            "FINAL_VAR": self.final_var,
        }
        """The names the harness gives the root's code (see :meth:`restore_harness`)."""
        if init.get("context_doc"):  # depth 2: a subagent's REPL over the slice it was given
            self.harness["context"] = self.docs[init["context_doc"]]
        self.ns: dict[str, Any] = {"__name__": "__repl__", **self.harness}

    # -- provenance -------------------------------------------------------------------
    def _note(self, doc_id: str, start: int, end: int, text: str) -> None:
        if len(text) >= self.min_source_chars:
            self.handed.append((doc_id, start, end, text))

    def _sources(self, prompt: str) -> list[dict[str, Any]]:
        seen: set[tuple[str, int, int]] = set()
        out: list[dict[str, Any]] = []
        for doc_id, start, end, text in self.handed:
            key = (doc_id, start, end)
            if key not in seen and text in prompt:
                seen.add(key)
                out.append({"doc_id": doc_id, "start": start, "end": end})
        return out

    # -- room helpers -----------------------------------------------------------------
    def list_documents(self, folder: str | None = None) -> list[dict[str, Any]]:
        return [
            {"id": d, "folder": f, "chars": n}
            for d, f, n in self.docs.rows()
            if folder is None or f == folder
        ]

    def read(self, doc_id: str, start: int = 0, end: int | None = None) -> str:
        if doc_id not in self.docs:
            raise KeyError(f"no document {doc_id!r}; see list_documents()")
        text = self.docs[doc_id]
        start = max(0, int(start))
        stop = len(text) if end is None else min(len(text), int(end))
        piece = text[start:stop]
        self._note(doc_id, start, stop, piece)
        return piece

    def search(
        self, pattern: str, doc_id: str | None = None, window: int = 300, max_hits: int = 10
    ) -> list[dict[str, Any]]:
        rx = re.compile(pattern, re.IGNORECASE)
        ids = [doc_id] if doc_id is not None else list(self.docs)
        hits: list[dict[str, Any]] = []
        for d in ids:
            if d not in self.docs:
                raise KeyError(f"no document {d!r}; see list_documents()")
            text = self.docs[d]
            last_end = -1
            for m in rx.finditer(text):
                start = max(0, m.start() - window)
                if start < last_end:
                    continue  # overlapping window: already covered
                end = min(len(text), m.end() + window)
                piece = text[start:end]
                self._note(d, start, end, piece)
                hits.append({"doc_id": d, "start": start, "end": end, "text": piece})
                last_end = end
                if len(hits) >= max_hits:
                    return hits
        return hits

    # -- sub-calls --------------------------------------------------------------------
    def llm_query(self, prompt: str) -> str:
        return self.llm_query_batched([prompt])[0]

    def llm_query_batched(self, prompts: list[str]) -> list[str]:
        if isinstance(prompts, str):
            prompts = [prompts]
        prompts = [str(p) for p in prompts]
        if not prompts:
            return []
        too_long = [i for i, p in enumerate(prompts) if len(p) > self.max_prompt_chars]
        if too_long:
            raise ValueError(
                f"llm_query prompt {too_long[0]} has {len(prompts[too_long[0]]):,} characters; "
                f"the limit is {self.max_prompt_chars:,}: send smaller pieces"
            )
        msg = {"op": "llm", "prompts": prompts, "sources": [self._sources(p) for p in prompts]}
        line = json.dumps(msg)
        if len(line) + 1 > self.max_message_bytes:
            raise ValueError(
                f"llm_query_batched: this batch is {len(line):,} bytes as sent; the limit is "
                f"{self.max_message_bytes:,}: split it into smaller batches"
            )
        _send_line(line)
        reply = _recv()
        if reply.get("op") != "llm_result":
            raise RuntimeError(f"protocol error: expected llm_result, got {reply.get('op')!r}")
        if reply.get("fatal"):
            raise RuntimeError(reply["fatal"])
        return [str(r) for r in reply["responses"]]

    # -- final answer -----------------------------------------------------------------
    def final_call(self, value: Any) -> None:
        self.final = {"source": "final_call", "value": str(value)}

    def final_var(self, name: Any) -> None:
        """``FINAL_VAR("memo")`` hands back the variable ``memo``; ``FINAL_VAR(memo)`` its value.

        A string that is an identifier is first looked up as a name in the REPL namespace
        (never by which object it is: CPython interns short strings, so ``x = "memo"`` makes
        ``x`` the very object ``"memo"``, and an identity test took the name for a value).
        Only when no variable has that name is the string a value, and then only if some
        variable equals it (``memo = "done"; FINAL_VAR(memo)``); else it is a missing name:
        ``final_error`` is set and ``NameError`` raised. Any other argument is the value."""
        if isinstance(name, str) and name.strip().isidentifier():
            key = name.strip()
            if key in self.ns and key not in self.harness:
                self.final = {"source": "final_var", "value": str(self.ns[key])}
                return
            if not any(
                isinstance(v, str) and v == name
                for k, v in self.ns.items()
                if k not in self.harness and not k.startswith("__")
            ):
                self.final_error = f"FINAL_VAR({key}): no variable named {key!r} in the REPL"
                raise NameError(self.final_error)
        self.final = {"source": "final_var", "value": str(name)}

    def restore_harness(self) -> list[str]:
        """Put back every harness name the root's code rebound or deleted; return those names.

        The root's code may assign any name, ``FINAL`` and ``room`` included (Python cannot
        stop it). A rebinding holds for the rest of the block that made it (the root calls
        its own object; the harness never does: it works through its own references, e.g.
        ``llm_query`` calls :meth:`llm_query_batched` of this worker, not the namespace's).
        After each block the harness's objects are put back, and :meth:`execute` tells the
        root which names it had rebound, so a later block never uses the root's object in
        the harness's place without being told."""
        changed = [k for k, v in self.harness.items() if self.ns.get(k, _MISSING) is not v]
        for k in changed:
            self.ns[k] = self.harness[k]
        return changed

    # -- execution --------------------------------------------------------------------
    def execute(self, code: str) -> dict[str, Any]:
        self.final = None
        self.final_error = None
        cap = _BoundedCapture(self.capture_head, self.capture_tail)
        error = None
        with contextlib.redirect_stdout(cap), contextlib.redirect_stderr(cap):
            try:
                compiled = compile(code, "<repl>", "exec")
                exec(compiled, self.ns)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # the root's code may raise anything, exit() included
                tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
                # drop the worker's own frames: keep from the first <repl> frame on
                keep = [tb[0]] + [f for f in tb[1:] if "repl_worker.py" not in f]
                error = "".join(keep)
        if error is not None and len(error) > self.capture_head + self.capture_tail:
            err = _BoundedCapture(self.capture_head, self.capture_tail)
            err.write(error)
            error = err.getvalue()
        rebound = self.restore_harness()
        if rebound:
            names = ", ".join(rebound)
            cap.write(
                f"\n[harness] this block rebound {names}; the harness's {names} "
                f"{'is' if len(rebound) == 1 else 'are'} back for the next block "
                "(use other names for your own objects)\n"
            )
        final = self.final
        if final is not None:  # over the cap: one character more tells the parent so
            final = {**final, "value": final["value"][: self.max_value_chars + 1]}
        return {
            "op": "result",
            "stdout": cap.getvalue(),
            "stdout_chars": cap.total,
            "error": error,
            "final": final,
            "final_error": self.final_error,
        }

    def get_var(self, name: str) -> dict[str, Any]:
        if name in self.ns and not name.startswith("__"):
            value = str(self.ns[name])[: self.max_value_chars + 1]  # +1: over the cap
            return {"op": "var", "found": True, "value": value}
        return {"op": "var", "found": False, "value": None}


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_FS_EVENTS = {  # audit event -> indexes of its path arguments that must lie inside scratch
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.chflags": (0,),
    "os.lchflags": (0,),
    "os.link": (0, 1),
    "os.mkdir": (0,),
    "os.remove": (0,),
    "os.removexattr": (0,),
    "os.rename": (0, 1),
    "os.rmdir": (0,),
    "os.setxattr": (0,),
    "os.symlink": (1,),  # the link; its target is checked (relative to the link) below
    "os.truncate": (0,),
    "os.utime": (0,),
    "shutil.chown": (0,),
    "shutil.copyfile": (1,),
    "shutil.copymode": (1,),
    "shutil.copystat": (1,),
    "shutil.copytree": (1,),
    "shutil.move": (0, 1),
    "shutil.rmtree": (0,),
    "shutil.unpack_archive": (1,),
}
_PROCESS_EVENTS = frozenset(
    {
        "subprocess.Popen",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "os.startfile",
        "pty.spawn",
    }
)
_NETWORK_EVENTS = frozenset(
    {
        "socket.__new__",
        "socket.connect",
        "socket.bind",
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.gethostbyaddr",
        "socket.sendto",
        "socket.sendmsg",
        "socket.sethostname",
        "http.client.connect",
        "urllib.Request",
        "ftplib.connect",
        "smtplib.connect",
        "telnetlib.Telnet.open",
        "poplib.connect",
        "imaplib.open",
        "nntplib.connect",
        "webbrowser.open",
    }
)
_NATIVE_EVENTS = frozenset({"ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.cdata"})


def _set_limits(init: dict[str, Any]) -> None:
    """Address space, file size and process count (``RLIMIT_*``, soft = hard: not raisable).

    ``RLIMIT_NPROC`` binds only a non-root user (under bwrap: per sandbox, as it has its own
    user namespace); as root the collector caps processes with a pids cgroup instead."""
    import resource
    import signal

    mem = init.get("memory_limit_bytes")
    if mem:
        resource.setrlimit(resource.RLIMIT_AS, (int(mem), int(mem)))
    max_file = init.get("max_file_bytes")
    if max_file:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # over the cap: EFBIG, not a kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(max_file), int(max_file)))
    nproc = init.get("max_nproc")
    if nproc:
        resource.setrlimit(resource.RLIMIT_NPROC, (int(nproc), int(nproc)))


def _install_sandbox(scratch: str) -> None:
    """Refuse writes outside ``scratch``, sockets, new processes and ``ctypes`` (see module doc).

    Everything the hook needs is bound as default arguments now, so that later changes to
    module globals or to ``os.path`` by the root's code do not change the checks.
    """
    root = os.path.realpath(scratch)
    fs_events = dict(_FS_EVENTS)  # a private copy: later edits of the global change nothing
    os.environ["TMPDIR"] = root  # tempfile.gettempdir() then lands inside scratch
    sys.dont_write_bytecode = True  # imports never try to write __pycache__ outside scratch

    def resolve(
        path: Any,
        base: str | None = None,
        _fspath: Any = os.fspath,
        _fsdecode: Any = os.fsdecode,
        _join: Any = os.path.join,
        _getcwd: Any = os.getcwd,
        _realpath: Any = os.path.realpath,
        _readlink: Any = os.readlink,
    ) -> str | None:
        """Absolute real path of ``path`` (``None`` for a file descriptor that is no file)."""
        if isinstance(path, int):
            try:
                target = _readlink(f"/proc/self/fd/{path}")
            except OSError:
                return None
            return target if target.startswith("/") else None
        p = _fsdecode(_fspath(path))
        return str(_realpath(_join(base if base is not None else _getcwd(), p)))

    def inside(real: str | None, _root: str = root, _sep: str = os.sep) -> bool:
        return real is None or real == _root or real.startswith(_root + _sep) or real == "/dev/null"

    def refuse_write(path: Any) -> PermissionError:
        return PermissionError(
            f"rlmdistill sandbox: writing outside the scratch folder is not allowed: {path} "
            f"(scratch folder: {root})"
        )

    def hook(
        event: str,
        args: tuple[Any, ...],
        _proc: frozenset[str] = _PROCESS_EVENTS,
        _net: frozenset[str] = _NETWORK_EVENTS,
        _native: frozenset[str] = _NATIVE_EVENTS,
        _write_flags: int = _WRITE_FLAGS,
        _getpid: Any = os.getpid,
        _getpgid: Any = os.getpgid,
        _dirname: Any = os.path.dirname,
    ) -> None:
        if event == "open":
            path, mode, flags = (*args, None, None, 0)[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool(
                (flags or 0) & _write_flags
            )
            if writing and not isinstance(path, int):
                try:
                    real = resolve(path)
                except (TypeError, ValueError, OSError):
                    real = "?"
                if not inside(real):
                    raise refuse_write(real)
            return
        if event in fs_events:
            for i in fs_events[event]:
                if i < len(args) and args[i] is not None:
                    try:
                        real = resolve(args[i])
                    except (TypeError, ValueError, OSError):
                        real = "?"
                    if not inside(real):
                        raise refuse_write(real)
            if event == "os.symlink" and len(args) > 1:
                link = resolve(args[1])
                target = resolve(args[0], _dirname(link) if link else None)
                if not inside(target):
                    raise refuse_write(target)
            return
        if event in _net:
            raise PermissionError(
                f"rlmdistill sandbox: network access is not allowed ({event}); the REPL talks "
                "to the harness only through llm_query()"
            )
        if event in _proc:
            raise PermissionError(
                f"rlmdistill sandbox: starting processes is not allowed ({event}); "
                "do the work in Python in this REPL"
            )
        if event in _native or (event == "ctypes.dlopen" and args and args[0] is not None):
            raise PermissionError(
                f"rlmdistill sandbox: native code through ctypes is not allowed ({event})"
            )
        if event == "os.kill" and args and args[0] not in (0, _getpid()):
            raise PermissionError("rlmdistill sandbox: signalling other processes is not allowed")
        if event == "os.killpg" and args and args[0] not in (0, _getpgid(0)):
            raise PermissionError("rlmdistill sandbox: signalling other processes is not allowed")

    sys.addaudithook(hook)


def main() -> None:
    """Serve the JSON-lines protocol on stdin / a dup of fd 1 until EOF or ``shutdown``."""
    global _proto_out, _proto_in
    _proto_out = os.fdopen(os.dup(1), "w", encoding="ascii")
    _proto_in = sys.stdin
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    init = _recv()
    _set_limits(init)
    worker = _Worker(init)
    if init.get("sandbox", True):
        _install_sandbox(init.get("scratch_dir") or os.getcwd())
    os.dup2(devnull, 2)  # the parent reads stderr only for start-up errors
    # a first block costs ~2 ms more than the next ones (first runs of the capture, exec and
    # audit paths): pay it here, while the root's first request is out, not in its first block
    worker.execute("pass")
    _send({"op": "ready", "n_documents": len(worker.docs)})
    while True:
        msg = _recv()
        op = msg.get("op")
        if op == "exec":
            _send(worker.execute(msg["code"]))
        elif op == "get_var":
            _send(worker.get_var(msg["name"]))
        elif op == "ping":
            _send({"op": "pong", "nonce": msg.get("nonce")})
        elif op == "shutdown":
            return
        else:
            _send({"op": "error", "error": f"unknown op {op!r}"})


if __name__ == "__main__":
    main()
