"""Data rooms: a folder of documents (in category folders) plus an optional ``task.json``.

Layout rule, checked in this order:

1. ``<room>/documents/`` is a directory: documents come from it, the task from
   ``<room>/task.json`` (optional).
2. Otherwise the whole ``<room>`` folder holds documents, except the top-level ``task.json``,
   ``room.json`` and ``README*`` files and every hidden file or folder (name starting with
   ``.``) at any depth.

A document's id is its POSIX path relative to the documents root (``"Distribution/acme.txt"``);
its folder is the first path component (``""`` for files at the root). Supported formats:
``.txt``/``.md`` (text, see :func:`decode_text`), ``.pdf`` (pypdf), ``.docx`` (python-docx,
paragraphs then tables), ``.html``/``.htm`` (decoded like text, then BeautifulSoup text with a
``"\\n"`` separator). Other files are skipped and listed in :attr:`DataRoom.skipped`, and so
is a document whose text cannot be extracted (a corrupt PDF), with the reason, unless the room
is loaded with ``strict=True`` (then :class:`RoomError` names the file).

Text files are decoded as UTF-8 when they are valid UTF-8 (so a UTF-8 room's text, and its
``room_hash``, is what it always was); otherwise the encoding is detected with
charset-normalizer (:func:`decode_text`). Each document records the encoding it was decoded
with and how many U+FFFD replacement characters decoding needed; :meth:`DataRoom.notes` lists
the documents that were not UTF-8, needed replacements, or were skipped.

Derived files live under ``<room>/.rlmdistill/`` when the room is writable: extracted text of
non-text formats (``text/``, with a ``.json`` beside HTML text holding its encoding) and token
counts per tokenizer (``token_counts.json``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from rlmdistill.rooms.task import Task, load_task

__all__ = [
    "SUPPORTED_SUFFIXES",
    "DataRoom",
    "DecodedText",
    "Document",
    "RoomError",
    "decode_text",
    "extract",
    "extract_text",
    "locate_moved_room",
]

SUPPORTED_SUFFIXES: frozenset[str] = frozenset({".txt", ".md", ".pdf", ".docx", ".html", ".htm"})
"""File suffixes (lowercase) that become documents."""

_PLAIN_SUFFIXES = frozenset({".txt", ".md"})
_HTML_SUFFIXES = frozenset({".html", ".htm"})
_CACHE_DIR = ".rlmdistill"
SNAPSHOT_FORMAT = 2
"""Format of :meth:`DataRoom.snapshot`'s index: 2 = columns (1 = one dict per document)."""
_SNAPSHOT_FIELDS = ("id", "folder", "chars", "byte_start", "byte_end", "encoding", "replaced")
"""Per-document fields of a snapshot index, in the order :meth:`DataRoom.snapshot` writes."""
_PREFERRED_LEGACY = "cp1252"


class RoomError(ValueError):
    """A room folder is missing or a document's text could not be extracted (names the file)."""


class DecodedText(NamedTuple):
    """Text decoded from bytes (:func:`decode_text`), or extracted from a file (:func:`extract`)."""

    text: str
    encoding: str | None
    """Codec the bytes were decoded with as Python names it (``"utf-8"``, ``"cp1252"``, ...);
    ``None`` for formats whose parser decodes (PDF, DOCX)."""
    replaced: int
    """U+FFFD replacement characters decoding put in the text (0: every byte decoded)."""


def decode_text(data: bytes, encoding: str | None = None) -> DecodedText:
    """Decode the bytes of a text file.

    With ``encoding`` given (known from an earlier load), decode with it. Otherwise: valid
    UTF-8 is UTF-8 (a UTF-8 byte-order mark stays in the text, as it always did); else the
    encoding is detected with charset-normalizer (``from_bytes(...).best()``), except that
    Windows-1252 is taken when its decoding fits a language at least as well as the detected
    one (charset-normalizer's ``coherence``): on short Western text the detector ranks look-alike
    code pages first (measured: ``"Café"`` in Latin-1 came back as UTF-16-BE, French text as
    cp1257, ``"crème"`` -> ``"crčme"``), and Windows-1252 is the default for legacy Western text
    (WHATWG Encoding Standard). Bytes the chosen codec cannot decode become U+FFFD, counted in
    :attr:`DecodedText.replaced`; when nothing fits, UTF-8 with replacement is used.
    """
    if encoding is None:
        try:
            return DecodedText(data.decode("utf-8"), "utf-8", 0)
        except UnicodeDecodeError:
            encoding = _detect_encoding(data)
    try:
        return DecodedText(data.decode(encoding), encoding, 0)
    except UnicodeDecodeError:
        text = data.decode(encoding, errors="replace")
        return DecodedText(text, encoding, text.count("\ufffd"))


def _detect_encoding(data: bytes) -> str:
    """The codec :func:`decode_text` uses for bytes that are not UTF-8 (see there)."""
    from charset_normalizer import from_bytes

    best = from_bytes(data).best()
    legacy = None
    with contextlib.suppress(UnicodeDecodeError):
        data.decode(_PREFERRED_LEGACY)
        legacy = from_bytes(data, cp_isolation=[_PREFERRED_LEGACY], threshold=1.0).best()
    if legacy is not None and (best is None or legacy.coherence >= best.coherence):
        return _PREFERRED_LEGACY
    return "utf-8" if best is None else str(best.encoding)


def extract(path: Path, encoding: str | None = None) -> DecodedText:
    """Extract the plain text of one supported file, with the encoding it was decoded with.

    ``encoding`` (text and HTML files only) skips detection (see :func:`decode_text`).
    Raises :class:`RoomError` naming ``path`` when the suffix is not supported or extraction
    fails (corrupt PDF, unreadable file, ...).
    """
    suffix = path.suffix.lower()
    try:
        if suffix in _PLAIN_SUFFIXES:
            return decode_text(path.read_bytes(), encoding)
        if suffix == ".pdf":
            from pypdf import PdfReader

            reader = PdfReader(str(path))
            text = "\n\n".join((page.extract_text() or "") for page in reader.pages)
            return DecodedText(text, None, 0)
        if suffix == ".docx":
            import docx

            doc = docx.Document(str(path))
            parts = [p.text for p in doc.paragraphs]
            for table in doc.tables:
                for row in table.rows:
                    parts.append("\t".join(cell.text for cell in row.cells))
            return DecodedText("\n".join(parts), None, 0)
        if suffix in _HTML_SUFFIXES:
            from bs4 import BeautifulSoup

            raw = decode_text(path.read_bytes(), encoding)
            text = BeautifulSoup(raw.text, "html.parser").get_text("\n")
            return raw._replace(text=text)
    except Exception as exc:  # any parser failure becomes a RoomError naming the file
        raise RoomError(f"{path}: cannot extract text ({type(exc).__name__}: {exc})") from exc
    raise RoomError(f"{path}: unsupported document type {suffix!r}")


def extract_text(path: Path) -> str:
    """Extract the plain text of one supported file (:func:`extract`'s text).

    Raises :class:`RoomError` naming ``path`` when the suffix is not supported or extraction
    fails (corrupt PDF, unreadable file, ...).
    """
    return extract(path).text


class Document:
    """One document of a room. Text is read lazily and cached on first access.

    Attributes: ``id`` (POSIX path relative to the documents root), ``folder`` (top-level
    folder or ``""``), ``path`` (absolute file path), ``n_chars`` (characters of the extracted
    text), ``sha256`` (hex digest of the UTF-8 extracted text), ``encoding`` (codec the file
    was decoded with, ``None`` for PDF/DOCX or an HTML text cached by an older version) and
    ``replaced`` (U+FFFD characters decoding put in).
    """

    __slots__ = (
        "_cache_path",
        "_text",
        "encoding",
        "folder",
        "id",
        "n_chars",
        "path",
        "replaced",
        "sha256",
    )

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
        encoding: str | None = None,
        replaced: int = 0,
    ) -> None:
        self.id = id
        self.folder = folder
        self.path = path
        self.n_chars = n_chars
        self.sha256 = sha256
        self.encoding = encoding
        self.replaced = replaced
        self._text = text
        self._cache_path = cache_path

    @property
    def name(self) -> str:
        """File name (last id component)."""
        return self.id.rsplit("/", 1)[-1]

    @property
    def text(self) -> str:
        """Extracted text (read from the source or the text cache the first time, then kept)."""
        if self._text is None:
            self._text = self.read_text()
        return self._text

    def read_text(self) -> str:
        """Extracted text, without keeping it on the document (the kept text when
        :attr:`text` was read before). For passes over a whole room (snapshot, coverage
        index), so a room of N characters is never held in memory whole. Raises what
        :func:`extract` raises."""
        if self._text is not None:
            return self._text
        if self._cache_path is not None and self._cache_path.is_file():
            return self._cache_path.read_text(encoding="utf-8")
        return extract(self.path, self.encoding).text

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
        """``(id, reason)`` for each file that is not a document: an unsupported type, or (not
        strict) a document whose text could not be extracted, e.g. a corrupt PDF."""
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
    def load(cls, path: str | Path, *, strict: bool = False) -> DataRoom:
        """Load the room at ``path`` (see the module docstring for the layout rule).

        A document whose text cannot be extracted (corrupt PDF, unreadable file) is left out
        and listed in :attr:`skipped` with the reason; with ``strict=True`` it is an error.

        Raises :class:`RoomError` when ``path`` is not a directory or (``strict``) a document
        cannot be extracted, and :class:`~rlmdistill.rooms.task.TaskError` for an invalid
        ``task.json``.
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
            try:
                documents.append(_load_document(file, doc_id, folder, cache_dir))
            except OSError as exc:  # e.g. a dangling symlink: stat() fails before extraction
                if strict:
                    raise RoomError(f"{file}: cannot read ({exc.strerror or exc})") from exc
                skipped.append((doc_id, f"cannot read ({exc.strerror or exc})"))
            except RoomError as exc:
                if strict:
                    raise
                skipped.append((doc_id, str(exc).removeprefix(f"{file}: ")))
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

    @property
    def not_utf8(self) -> list[tuple[str, str]]:
        """``(id, encoding)`` of each document decoded with another codec than UTF-8."""
        return [(d.id, d.encoding) for d in self.documents if d.encoding not in (None, "utf-8")]

    @property
    def with_replacements(self) -> list[tuple[str, int]]:
        """``(id, count)`` of each document whose decoding put in U+FFFD characters."""
        return [(d.id, d.replaced) for d in self.documents if d.replaced]

    def notes(self) -> list[str]:
        """One line per document worth a look: decoded from another encoding than UTF-8,
        decoded with replacement characters, or skipped (with the reason). Empty for a clean
        UTF-8 room. ``rooms show``, ``collect`` and ``loop`` print these."""
        lines = [f"decoded as {enc} (not UTF-8): {doc_id}" for doc_id, enc in self.not_utf8]
        lines += [
            f"{n} replacement character(s) (bytes no encoding decoded): {doc_id}"
            for doc_id, n in self.with_replacements
        ]
        lines += [f"skipped {doc_id}: {why}" for doc_id, why in self.skipped]
        return lines

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
    @property
    def snapshot_key(self) -> str:
        """The name of this room's snapshot in a shared cache: ``room_hash`` + ``-`` + 8 hex
        chars of a sha256 over what else :meth:`snapshot` writes (``room_id`` and the skipped
        files). ``room_hash`` alone covers only the documents, so two rooms with the same
        documents under other folder names would share one cache file, each run rewriting it
        for its own room and warning that it was tampered with."""
        extra = json.dumps([self.room_id, [list(x) for x in self.skipped]], ensure_ascii=False)
        return f"{self.room_hash}-{hashlib.sha256(extra.encode('utf-8')).hexdigest()[:8]}"

    def snapshot(self, dest: str | Path) -> Path:
        """Write a shared, memory-mappable snapshot for REPL processes; returns the index path.

        Files: ``<dest>.bin`` holds every document's text as UTF-8, back to back, in id order;
        ``<dest>.json`` is the index ``{"format": 2, "room_id", "room_hash", "blob",
        "columns": {"id", "folders", "folder", "chars", "byte_start", "byte_end", "encoding",
        "replaced"}, "skipped": [{"id", "reason"}]}``: one list per field with an entry per
        document in id order (``folder`` indexes ``folders``, the sorted folder names;
        ``encoding``/``replaced`` as on :class:`Document`). Columns, not one dict per document:
        every REPL parses the index, and 5,000 dicts held 3.4 MiB in each (1.6 MiB in columns;
        the collector's memory target). The REPL still reads format 1 (a ``"documents"`` list of dicts with the same
        fields). Concurrent episodes map the same ``.bin`` read-only, so the OS page cache holds
        one copy of the room however many REPLs run. Both files are written under temporary
        names and renamed into place.
        """
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        blob = dest.with_suffix(".bin")
        index = dest.with_suffix(".json")
        tmp_blob = blob.with_name(f"{blob.name}.{os.getpid()}.tmp")
        folders = sorted({d.folder for d in self.documents})
        slot = {f: i for i, f in enumerate(folders)}
        cols: dict[str, list[Any]] = {k: [] for k in _SNAPSHOT_FIELDS}
        offset = 0
        with open(tmp_blob, "wb") as fh:
            for d in self.documents:
                text = d.read_text()
                data = text.encode("utf-8", "surrogatepass")
                fh.write(data)
                row = (d.id, slot[d.folder], len(text), offset, offset + len(data), d.encoding,
                       d.replaced)  # fmt: skip
                for k, v in zip(_SNAPSHOT_FIELDS, row, strict=True):
                    cols[k].append(v)
                offset += len(data)
        payload = {
            "format": SNAPSHOT_FORMAT,
            "room_id": self.room_id,
            "room_hash": self.room_hash,
            "blob": blob.name,
            "columns": {"folders": folders, **cols},
            "skipped": [{"id": doc_id, "reason": why} for doc_id, why in self.skipped],
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


def snapshot_documents(index: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-document entries of a parsed snapshot index (:meth:`DataRoom.snapshot`), as
    dicts with ``id``, ``folder``, ``chars``, ``byte_start``, ``byte_end``, ``encoding`` and
    ``replaced``, in id order, from either format (2: columns; 1: a ``"documents"`` list,
    returned as it is). Raises ``KeyError`` naming the missing field of a malformed index."""
    cols = index.get("columns")
    if cols is None:
        return list(index["documents"])
    names = cols["folders"]
    rows = zip(*(cols[k] for k in _SNAPSHOT_FIELDS), strict=True)
    return [{**dict(zip(_SNAPSHOT_FIELDS, r, strict=True)), "folder": names[r[1]]} for r in rows]


def _walk(root: Path) -> Iterator[Path]:
    """Regular files under ``root`` (hidden folders pruned), in sorted order."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            yield Path(dirpath) / name


def _load_document(file: Path, doc_id: str, folder: str, cache_dir: Path) -> Document:
    """Extract (or read from the text cache) one document and record its size, digest and
    encoding.

    HTML text is cached under a key of its own version (``html-v2``) with a ``.json`` beside
    it holding the encoding: older caches of HTML decoded non-UTF-8 bytes with replacement
    characters, so they are not reused.
    """
    suffix = file.suffix.lower()
    if suffix in _PLAIN_SUFFIXES:
        ex = extract(file)
        return Document(
            doc_id, folder, file, len(ex.text), _sha(ex.text),
            encoding=ex.encoding, replaced=ex.replaced,
        )  # fmt: skip
    stat = file.stat()
    version = "\0html-v2" if suffix in _HTML_SUFFIXES else ""
    key = hashlib.sha256(
        f"{doc_id}\0{stat.st_size}\0{stat.st_mtime_ns}{version}".encode()
    ).hexdigest()
    cache_path = cache_dir / f"{key[:24]}.txt"
    meta_path = cache_path.with_suffix(".json")
    if cache_path.is_file() and (not version or meta_path.is_file()):
        text = cache_path.read_text(encoding="utf-8")
        meta: dict[str, Any] = {}
        if version:
            with contextlib.suppress(OSError, ValueError):
                meta = json.loads(meta_path.read_text(encoding="utf-8"))
        return Document(
            doc_id, folder, file, len(text), _sha(text), cache_path=cache_path,
            encoding=meta.get("encoding"), replaced=int(meta.get("replaced", 0)),
        )  # fmt: skip
    ex = extract(file)
    text = ex.text
    facts: dict[str, Any] = {"encoding": ex.encoding, "replaced": ex.replaced}
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        if version:
            meta_path.write_text(json.dumps(facts), encoding="utf-8")
        cache_path.write_text(text, encoding="utf-8")
    except (OSError, UnicodeError):  # read-only room: keep the text in memory instead
        return Document(doc_id, folder, file, len(text), _sha(text), text=text, **facts)
    return Document(doc_id, folder, file, len(text), _sha(text), cache_path=cache_path, **facts)


def locate_moved_room(recorded: str | Path, room_hash: str, near: Path) -> Path | None:
    """Find a room recorded at ``recorded`` (a folder that no longer exists) after its
    workspace moved: the folder ``A / tail`` for ``A`` the folders above ``near`` (nearest
    first) and ``tail`` the last 1..4 components of ``recorded`` (shortest first), whose
    content hash is ``room_hash``; ``None`` when none is.

    ``near`` is something that moved with the room (a run folder of the same workspace). Only
    folders holding a ``task.json`` are loaded, and a candidate counts only if it loads with
    the recorded content hash, so a folder that merely has the same name is never taken for
    the room.
    """
    parts = Path(recorded).parts
    anchors = [Path(near).resolve(), *Path(near).resolve().parents][:6]
    for k in range(1, min(4, len(parts) - 1) + 1):
        tail = Path(*parts[-k:])
        for anchor in anchors:
            candidate = anchor / tail
            if candidate == Path(recorded) or not (candidate / "task.json").is_file():
                continue  # episodes ran on rooms with a task: nothing else is loaded
            try:
                if DataRoom.load(candidate).room_hash == room_hash:
                    return candidate
            except (RoomError, ValueError):
                continue
    return None


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _count_tokens(tokenizer: Any, text: str) -> int:
    try:
        ids = tokenizer.encode(text, add_special_tokens=False)
    except TypeError:
        ids = tokenizer.encode(text)
    return len(ids)
