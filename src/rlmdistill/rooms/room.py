"""Data rooms: a folder of documents (in category folders) plus an optional ``task.json``.

Layout rule, checked in this order:

1. ``<room>/documents/`` is a directory: documents come from it, the task from
   ``<room>/task.json`` (optional).
2. Otherwise the whole ``<room>`` folder holds documents, except the top-level ``task.json``,
   ``room.json`` and ``README*`` files and every hidden file or folder (name starting with
   ``.``) at any depth.

A document's id is its POSIX path relative to the documents root (``"Distribution/acme.txt"``);
its folder is the first path component (``""`` for files at the root). Supported formats:
``.txt``/``.md`` (UTF-8, undecodable bytes replaced), ``.pdf`` (pypdf), ``.docx``
(python-docx, paragraphs then tables), ``.html``/``.htm`` (BeautifulSoup text, ``"\\n"``
separator). Other files are skipped and listed in :attr:`DataRoom.skipped`.

Derived files live under ``<room>/.rlmdistill/`` when the room is writable: extracted text of
non-text formats (``text/``) and token counts per tokenizer (``token_counts.json``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlmdistill.rooms.task import Task, load_task

__all__ = ["SUPPORTED_SUFFIXES", "DataRoom", "Document", "RoomError", "extract_text"]

SUPPORTED_SUFFIXES: frozenset[str] = frozenset({".txt", ".md", ".pdf", ".docx", ".html", ".htm"})
"""File suffixes (lowercase) that become documents."""

_PLAIN_SUFFIXES = frozenset({".txt", ".md"})
_CACHE_DIR = ".rlmdistill"


class RoomError(ValueError):
    """A room folder is missing or a document's text could not be extracted (names the file)."""


def extract_text(path: Path) -> str:
    """Extract the plain text of one supported file.

    Returns the text (``str``). Raises :class:`RoomError` naming ``path`` when the suffix is
    not supported or extraction fails (corrupt PDF, unreadable file, ...).
    """
    suffix = path.suffix.lower()
    try:
        if suffix in _PLAIN_SUFFIXES:
            return path.read_bytes().decode("utf-8", errors="replace")
        if suffix == ".pdf":
            from pypdf import PdfReader

            reader = PdfReader(str(path))
            return "\n\n".join((page.extract_text() or "") for page in reader.pages)
        if suffix == ".docx":
            import docx

            doc = docx.Document(str(path))
            parts = [p.text for p in doc.paragraphs]
            for table in doc.tables:
                for row in table.rows:
                    parts.append("\t".join(cell.text for cell in row.cells))
            return "\n".join(parts)
        if suffix in {".html", ".htm"}:
            from bs4 import BeautifulSoup

            raw = path.read_bytes().decode("utf-8", errors="replace")
            return BeautifulSoup(raw, "html.parser").get_text("\n")
    except Exception as exc:  # any parser failure becomes a RoomError naming the file
        raise RoomError(f"{path}: cannot extract text ({type(exc).__name__}: {exc})") from exc
    raise RoomError(f"{path}: unsupported document type {suffix!r}")


class Document:
    """One document of a room. Text is read lazily and cached on first access.

    Attributes: ``id`` (POSIX path relative to the documents root), ``folder`` (top-level
    folder or ``""``), ``path`` (absolute file path), ``n_chars`` (characters of the extracted
    text), ``sha256`` (hex digest of the UTF-8 extracted text).
    """

    __slots__ = ("_cache_path", "_text", "folder", "id", "n_chars", "path", "sha256")

    def __init__(
        self,
        id: str,
        folder: str,
        path: Path,
        n_chars: int,
        sha256: str,
        *,
        text: str | None = None,
        cache_path: Path | None = None,
    ) -> None:
        self.id = id
        self.folder = folder
        self.path = path
        self.n_chars = n_chars
        self.sha256 = sha256
        self._text = text
        self._cache_path = cache_path

    @property
    def name(self) -> str:
        """File name (last id component)."""
        return self.id.rsplit("/", 1)[-1]

    @property
    def text(self) -> str:
        """Extracted text (read from the source or the text cache the first time)."""
        if self._text is None:
            if self._cache_path is not None and self._cache_path.is_file():
                self._text = self._cache_path.read_text(encoding="utf-8")
            else:
                self._text = extract_text(self.path)
        return self._text

    def __repr__(self) -> str:
        return f"Document(id={self.id!r}, n_chars={self.n_chars})"


def _is_hidden(rel_parts: tuple[str, ...]) -> bool:
    return any(part.startswith(".") for part in rel_parts)


class DataRoom:
    """A loaded data room: documents sorted by id, the task (if any) and size figures.

    Build with :meth:`DataRoom.load`. ``room_hash`` is the first 16 hex chars of a sha256 over
    the documents in id order, each fed as ``id + NUL + sha256_hex(text) + NUL``, so it changes
    whenever any document's id or extracted text does (and not when files only move on disk).
    """

    def __init__(
        self,
        path: Path,
        documents: list[Document],
        task: Task | None,
        skipped: list[tuple[str, str]],
        docs_root: Path,
    ) -> None:
        self.path = path
        """Room folder (absolute)."""
        self.room_id = path.name
        """Folder name of the room (human label)."""
        self.documents = sorted(documents, key=lambda d: d.id)
        """Documents sorted by id."""
        self.task = task
        """The room's task, or ``None`` when it has no ``task.json``."""
        self.skipped = skipped
        """``(id, reason)`` for each file that is not a document (unsupported type)."""
        self.docs_root = docs_root
        """Folder that document ids are relative to."""
        self._by_id = {d.id: d for d in self.documents}
        self._token_counts: dict[str, dict[str, int]] = {}
        digest = hashlib.sha256()
        for doc in self.documents:
            digest.update(doc.id.encode("utf-8") + b"\0" + doc.sha256.encode("ascii") + b"\0")
        self.room_hash = digest.hexdigest()[:16]

    # ----------------------------------------------------------------- loading
    @classmethod
    def load(cls, path: str | Path) -> DataRoom:
        """Load the room at ``path`` (see the module docstring for the layout rule).

        Raises :class:`RoomError` when ``path`` is not a directory or a document cannot be
        extracted, and :class:`~rlmdistill.rooms.task.TaskError` for an invalid ``task.json``.
        """
        root = Path(path).resolve()
        if not root.is_dir():
            raise RoomError(f"{root}: data room folder not found")
        docs_dir = root / "documents"
        split_layout = docs_dir.is_dir()
        docs_root = docs_dir if split_layout else root
        task_path = root / "task.json"
        task = load_task(task_path) if task_path.is_file() else None
        cache_dir = root / _CACHE_DIR / "text"

        documents: list[Document] = []
        skipped: list[tuple[str, str]] = []
        for file in _walk(docs_root):
            rel = file.relative_to(docs_root)
            if _is_hidden(rel.parts):
                continue
            if not split_layout and len(rel.parts) == 1:
                name = rel.parts[0]
                if name in {"task.json", "room.json"} or name.startswith("README"):
                    continue
            doc_id = rel.as_posix()
            suffix = file.suffix.lower()
            if suffix not in SUPPORTED_SUFFIXES:
                skipped.append((doc_id, f"unsupported file type {suffix or '(none)'}"))
                continue
            folder = rel.parts[0] if len(rel.parts) > 1 else ""
            documents.append(_load_document(file, doc_id, folder, cache_dir))
        return cls(root, documents, task, skipped, docs_root)

    # ----------------------------------------------------------------- access
    def get(self, doc_id: str) -> Document:
        """Document with id ``doc_id``; raises ``KeyError`` when the room has none."""
        try:
            return self._by_id[doc_id]
        except KeyError:
            raise KeyError(f"room {self.room_id!r} has no document {doc_id!r}") from None

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._by_id

    def __iter__(self) -> Iterator[Document]:
        return iter(self.documents)

    def __len__(self) -> int:
        return len(self.documents)

    @property
    def folders(self) -> dict[str, int]:
        """Documents per top-level folder (``""`` for files at the documents root)."""
        return dict(sorted(Counter(d.folder for d in self.documents).items()))

    @property
    def n_chars(self) -> int:
        """Total characters of extracted text over all documents."""
        return sum(d.n_chars for d in self.documents)

    def texts(self) -> dict[str, str]:
        """``{doc_id: text}`` for every document, in id order."""
        return {d.id: d.text for d in self.documents}

    # ----------------------------------------------------------------- tokens
    def token_count(self, tokenizer: Any, tokenizer_id: str | None = None) -> int:
        """Total tokens of all document texts under ``tokenizer``.

        ``tokenizer`` is any object with ``encode(str) -> sequence`` (a Hugging Face tokenizer
        is called with ``add_special_tokens=False``). Counts are cached per tokenizer id
        (``tokenizer_id``, else ``tokenizer.name_or_path``, else the class name) and room hash,
        in memory and in ``<room>/.rlmdistill/token_counts.json`` when the room is writable.
        """
        tok_id = (
            tokenizer_id or getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__
        )
        tok_id = str(tok_id)
        cached = self._token_counts.get(tok_id, {}).get(self.room_hash)
        if cached is not None:
            return cached
        cache_file = self.path / _CACHE_DIR / "token_counts.json"
        disk: dict[str, dict[str, int]] = {}
        if cache_file.is_file():
            with contextlib.suppress(OSError, ValueError):
                loaded = json.loads(cache_file.read_text(encoding="utf-8"))
                if isinstance(loaded, dict):
                    disk = loaded
        value = disk.get(tok_id, {}).get(self.room_hash)
        if not isinstance(value, int):
            value = sum(_count_tokens(tokenizer, d.text) for d in self.documents)
            disk.setdefault(tok_id, {})[self.room_hash] = value
            with contextlib.suppress(OSError):
                cache_file.parent.mkdir(parents=True, exist_ok=True)
                tmp = cache_file.with_suffix(f".tmp{os.getpid()}")
                tmp.write_text(json.dumps(disk, indent=2, sort_keys=True), encoding="utf-8")
                tmp.replace(cache_file)
        self._token_counts.setdefault(tok_id, {})[self.room_hash] = value
        return value

    # ----------------------------------------------------------------- export
    def snapshot(self, dest: str | Path) -> Path:
        """Write a shared, memory-mappable snapshot for REPL processes; returns the index path.

        Files: ``<dest>.bin`` holds every document's text as UTF-8, back to back, in id order;
        ``<dest>.json`` is the index ``{"room_id", "room_hash", "blob", "documents": [{"id",
        "folder", "chars", "byte_start", "byte_end"}]}``. Concurrent episodes map the same
        ``.bin`` read-only, so the OS page cache holds one copy of the room however many REPLs
        run. Both files are written under temporary names and renamed into place.
        """
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        blob = dest.with_suffix(".bin")
        index = dest.with_suffix(".json")
        tmp_blob = blob.with_name(f"{blob.name}.{os.getpid()}.tmp")
        docs = []
        offset = 0
        with open(tmp_blob, "wb") as fh:
            for d in self.documents:
                data = d.text.encode("utf-8", "surrogatepass")
                fh.write(data)
                docs.append(
                    {
                        "id": d.id,
                        "folder": d.folder,
                        "chars": len(d.text),
                        "byte_start": offset,
                        "byte_end": offset + len(data),
                    }
                )
                offset += len(data)
        payload = {
            "room_id": self.room_id,
            "room_hash": self.room_hash,
            "blob": blob.name,
            "documents": docs,
        }
        tmp_index = index.with_name(f"{index.name}.{os.getpid()}.tmp")
        tmp_index.write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")
        tmp_blob.replace(blob)
        tmp_index.replace(index)
        return index

    def __repr__(self) -> str:
        return (
            f"DataRoom(room_id={self.room_id!r}, documents={len(self.documents)}, "
            f"n_chars={self.n_chars}, room_hash={self.room_hash!r})"
        )


def _walk(root: Path) -> Iterator[Path]:
    """Regular files under ``root`` (hidden folders pruned), in sorted order."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            yield Path(dirpath) / name


def _load_document(file: Path, doc_id: str, folder: str, cache_dir: Path) -> Document:
    """Extract (or read from the text cache) one document and record its size and digest."""
    suffix = file.suffix.lower()
    if suffix in _PLAIN_SUFFIXES:
        text = extract_text(file)
        return Document(doc_id, folder, file, len(text), _sha(text))
    stat = file.stat()
    key = hashlib.sha256(f"{doc_id}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()
    cache_path = cache_dir / f"{key[:24]}.txt"
    if cache_path.is_file():
        text = cache_path.read_text(encoding="utf-8")
        return Document(doc_id, folder, file, len(text), _sha(text), cache_path=cache_path)
    text = extract_text(file)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        cache_path.write_text(text, encoding="utf-8")
    except (OSError, UnicodeError):  # read-only room: keep the text in memory instead
        return Document(doc_id, folder, file, len(text), _sha(text), text=text)
    return Document(doc_id, folder, file, len(text), _sha(text), cache_path=cache_path)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _count_tokens(tokenizer: Any, text: str) -> int:
    try:
        ids = tokenizer.encode(text, add_special_tokens=False)
    except TypeError:
        ids = tokenizer.encode(text)
    return len(ids)
