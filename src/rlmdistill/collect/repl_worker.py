"""The REPL process of one episode (run as a script; standard library only).

Started by :class:`rlmdistill.collect.repl.ReplProcess`. It talks JSON Lines on a private
duplicate of stdout and reads requests from stdin; file descriptor 1 itself points at
``/dev/null`` so stray writes from C code cannot corrupt the protocol, and Python-level
prints of the root's code are captured per block.

Messages, parent -> worker: ``init``, ``exec``, ``get_var``, ``llm_result``;
worker -> parent: ``ready``, ``llm`` (a batch of sub-call prompts), ``result``, ``var``.

The namespace the root's code sees:

- ``room``: read-only mapping ``doc_id -> text`` of the whole data room;
- ``list_documents(folder=None)`` -> ``[{"id", "folder", "chars"}]``;
- ``read(doc_id, start=0, end=None)`` -> text slice (characters);
- ``search(pattern, doc_id=None, window=300, max_hits=10)`` -> ``[{"doc_id", "start", "end",
  "text"}]`` (case-insensitive regex; ``text`` is the hit with ``window`` characters each side);
- ``llm_query(prompt)`` -> ``str`` and ``llm_query_batched(prompts)`` -> ``list[str]``
  (sub-calls, run in parallel by the harness);
- ``FINAL(value)`` / ``FINAL_VAR(name)`` to hand back the memo.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import traceback
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any

_proto_out: Any = None
_proto_in: Any = None


def _send(msg: dict[str, Any]) -> None:
    _proto_out.write(json.dumps(msg) + "\n")  # ASCII: lone surrogates survive (T2)
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


class _Texts(Mapping[str, str]):
    """``doc_id -> text`` over a room snapshot.

    With a ``.bin`` blob the texts stay in one read-only memory map shared (through the page
    cache) by every REPL over the room; a document is decoded when asked for, and the last few
    decoded ones are kept. Inline ``"text"`` fields (small test snapshots) are used as they are.
    """

    def __init__(self, index_path: str) -> None:
        with open(index_path, encoding="utf-8") as fh:
            snap = json.load(fh)
        self.entries: dict[str, dict[str, Any]] = {d["id"]: d for d in snap["documents"]}
        self.inline = {d["id"]: d["text"] for d in snap["documents"] if "text" in d}
        self.chars = {
            d["id"]: (len(d["text"]) if "text" in d else int(d["chars"])) for d in snap["documents"]
        }
        self.map: Any = None
        if snap.get("blob") and len(self.inline) < len(self.entries):
            import mmap

            blob = os.path.join(os.path.dirname(index_path), snap["blob"])
            with open(blob, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                self.map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        self.cache: dict[str, str] = {}

    def __getitem__(self, key: str) -> str:
        if key in self.inline:
            return self.inline[key]
        if key in self.cache:
            return self.cache[key]
        e = self.entries[key]
        text = bytes(self.map[e["byte_start"] : e["byte_end"]]).decode("utf-8", "surrogatepass")
        if len(self.cache) >= 8:
            self.cache.pop(next(iter(self.cache)))
        self.cache[key] = text
        return text

    def __contains__(self, key: object) -> bool:
        return key in self.entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)


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
        self.folders: dict[str, str] = {
            k: e.get("folder", "") for k, e in self.docs.entries.items()
        }
        self.capture_head = int(init.get("capture_head_chars", 200_000))
        self.capture_tail = int(init.get("capture_tail_chars", 50_000))
        self.min_source_chars = int(init.get("min_source_chars", 40))
        self.handed: deque[tuple[str, int, int, str]] = deque(maxlen=4096)
        self.final: dict[str, Any] | None = None
        self.final_error: str | None = None
        self.calls: list[dict[str, Any]] = []
        self.ns: dict[str, Any] = {"__name__": "__repl__"}
        self.ns.update(
            room=_Room(self.docs, self._note),
            list_documents=self.list_documents,
            read=self.read,
            search=self.search,
            llm_query=self.llm_query,
            llm_query_batched=self.llm_query_batched,
            FINAL=self.final_call,
            FINAL_VAR=self.final_var,
        )

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
            {"id": d, "folder": self.folders[d], "chars": self.docs.chars[d]}
            for d in self.docs
            if folder is None or self.folders[d] == folder
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
        _send({"op": "llm", "prompts": prompts, "sources": [self._sources(p) for p in prompts]})
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
        """``FINAL_VAR("memo")`` looks the variable up; ``FINAL_VAR(memo)`` passes the value."""
        passed_value = any(v is name for v in self.ns.values())
        if isinstance(name, str) and not passed_value and name.strip().isidentifier():
            key = name.strip()
            if key not in self.ns:
                self.final_error = f"FINAL_VAR({key}): no variable named {key!r} in the REPL"
                raise NameError(self.final_error)
            self.final = {"source": "final_var", "value": str(self.ns[key])}
        else:
            self.final = {"source": "final_var", "value": str(name)}

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
        return {
            "op": "result",
            "stdout": cap.getvalue(),
            "stdout_chars": cap.total,
            "error": error,
            "final": self.final,
            "final_error": self.final_error,
            "stdout_sources": self._sources(cap.getvalue()) if cap.total else [],
        }

    def get_var(self, name: str) -> dict[str, Any]:
        if name in self.ns and not name.startswith("__"):
            return {"op": "var", "found": True, "value": str(self.ns[name])}
        return {"op": "var", "found": False, "value": None}


def main() -> None:
    global _proto_out, _proto_in
    _proto_out = os.fdopen(os.dup(1), "w", encoding="ascii")
    _proto_in = sys.stdin
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    init = _recv()
    mem = init.get("memory_limit_bytes")
    if mem:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (int(mem), int(mem)))
    worker = _Worker(init)
    _send({"op": "ready", "n_documents": len(worker.docs)})
    while True:
        msg = _recv()
        op = msg.get("op")
        if op == "exec":
            _send(worker.execute(msg["code"]))
        elif op == "get_var":
            _send(worker.get_var(msg["name"]))
        elif op == "shutdown":
            return
        else:
            _send({"op": "error", "error": f"unknown op {op!r}"})


if __name__ == "__main__":
    main()
