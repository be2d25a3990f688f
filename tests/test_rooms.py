"""DataRoom loading: layouts, formats, ids, hashes, token counts and snapshots."""

from __future__ import annotations

import json
from pathlib import Path

import docx
import pytest

from rlmdistill.rooms import DataRoom, RoomError, TaskError
from rlmdistill.rooms.room import snapshot_documents

EXAMPLE_TASK = Path("/work/shared/data/lab/task.example.json")


def minimal_pdf(text: str) -> bytes:
    """A one-page PDF whose content stream draws ``text`` in Helvetica (valid xref table)."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode("latin-1")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def make_room(root: Path) -> Path:
    """A room in the ``documents/`` layout with one file per supported format and some noise."""
    docs = root / "documents"
    (docs / "Contracts" / "Supply").mkdir(parents=True)
    (docs / "Corporate").mkdir()
    (docs / "Contracts" / "Supply" / "supply agreement.txt").write_text(
        "The Supplier shall deliver widgets.\n", encoding="utf-8"
    )
    (docs / "Corporate" / "minutes.md").write_text("# Board minutes\nApproved.", encoding="utf-8")
    (docs / "Corporate" / "charter.pdf").write_bytes(minimal_pdf("Charter of Acme Corp"))
    word = docx.Document()
    word.add_paragraph("Employment agreement of the CEO")
    table = word.add_table(rows=1, cols=2)
    table.rows[0].cells[0].text = "Salary"
    table.rows[0].cells[1].text = "USD 300,000"
    word.save(str(docs / "Corporate" / "employment.docx"))
    (docs / "notice.html").write_text(
        "<html><body><h1>Notice</h1><p>Termination <b>effective</b> now.</p></body></html>",
        encoding="utf-8",
    )
    (docs / "Corporate" / "cap_table.xlsx").write_bytes(b"PK\x03\x04 not really")
    (docs / ".DS_Store").write_bytes(b"\0\0")
    (docs / "Corporate" / ".hidden").mkdir()
    (docs / "Corporate" / ".hidden" / "secret.txt").write_text("hidden", encoding="utf-8")
    (root / "task.json").write_text(EXAMPLE_TASK.read_text(encoding="utf-8"), encoding="utf-8")
    return root


def test_loads_every_supported_format(tmp_path: Path) -> None:
    room = DataRoom.load(make_room(tmp_path / "acme"))
    assert room.room_id == "acme"
    assert [d.id for d in room.documents] == [
        "Contracts/Supply/supply agreement.txt",
        "Corporate/charter.pdf",
        "Corporate/employment.docx",
        "Corporate/minutes.md",
        "notice.html",
    ]
    assert room.folders == {"": 1, "Contracts": 1, "Corporate": 3}
    assert room.skipped == [("Corporate/cap_table.xlsx", "unsupported file type .xlsx")]
    assert "Charter of Acme Corp" in room.get("Corporate/charter.pdf").text
    employment = room.get("Corporate/employment.docx").text
    assert "Employment agreement of the CEO" in employment and "USD 300,000" in employment
    html = room.get("notice.html").text
    assert "Notice" in html and "effective" in html and "<p>" not in html
    assert room.get("Corporate/minutes.md").text == "# Board minutes\nApproved."
    doc = room.get("Contracts/Supply/supply agreement.txt")
    assert doc.folder == "Contracts" and doc.name == "supply agreement.txt"
    assert (
        doc.path
        == tmp_path / "acme" / "documents" / "Contracts" / "Supply" / "supply agreement.txt"
    )
    assert room.n_chars == sum(len(t) for t in room.texts().values())
    assert all(d.n_chars == len(d.text) for d in room.documents)
    assert room.task is not None and len(room.task.criteria) == 3
    # extracted texts of non-text formats are cached beside the room
    assert len(list((tmp_path / "acme" / ".rlmdistill" / "text").glob("*.txt"))) == 3
    with pytest.raises(KeyError, match="no document"):
        room.get("nope.txt")


def test_flat_layout_skips_room_files(tmp_path: Path) -> None:
    root = tmp_path / "flat"
    (root / "Finance").mkdir(parents=True)
    (root / "Finance" / "accounts.txt").write_text("Revenue 10", encoding="utf-8")
    (root / "top.txt").write_text("top", encoding="utf-8")
    (root / "README.md").write_text("about", encoding="utf-8")
    (root / "room.json").write_text("{}", encoding="utf-8")
    (root / ".rlmdistill").mkdir()
    (root / ".rlmdistill" / "x.txt").write_text("cache", encoding="utf-8")
    room = DataRoom.load(root)
    assert [d.id for d in room.documents] == ["Finance/accounts.txt", "top.txt"]
    assert room.task is None and room.folders == {"": 1, "Finance": 1}


def test_room_hash_stable_and_content_sensitive(tmp_path: Path) -> None:
    root = make_room(tmp_path / "r")
    first = DataRoom.load(root).room_hash
    assert len(first) == 16 and DataRoom.load(root).room_hash == first
    (root / "documents" / "Corporate" / "minutes.md").write_text("changed", encoding="utf-8")
    assert DataRoom.load(root).room_hash != first
    # a renamed document changes the hash too (ids are part of it)
    (root / "documents" / "Corporate" / "minutes.md").write_text(
        "# Board minutes\nApproved.", encoding="utf-8"
    )
    assert DataRoom.load(root).room_hash == first
    (root / "documents" / "Corporate" / "minutes.md").rename(root / "documents" / "minutes.md")
    assert DataRoom.load(root).room_hash != first


class WordTokenizer:
    """Whitespace tokenizer that counts how often it was asked."""

    name_or_path = "test/words"

    def __init__(self) -> None:
        self.calls = 0

    def encode(self, text: str) -> list[str]:
        self.calls += 1
        return text.split()


def test_token_count_cached_per_tokenizer(tmp_path: Path) -> None:
    root = make_room(tmp_path / "r")
    room = DataRoom.load(root)
    tok = WordTokenizer()
    expected = sum(len(t.split()) for t in room.texts().values())
    assert room.token_count(tok) == expected
    calls = tok.calls
    assert room.token_count(tok) == expected and tok.calls == calls  # memory cache
    cache = json.loads((root / ".rlmdistill" / "token_counts.json").read_text(encoding="utf-8"))
    assert cache == {"test/words": {room.room_hash: expected}}
    fresh = DataRoom.load(root)
    tok2 = WordTokenizer()
    assert fresh.token_count(tok2) == expected and tok2.calls == 0  # disk cache
    assert fresh.token_count(tok2, tokenizer_id="other") == expected and tok2.calls > 0


def test_snapshot_is_an_index_plus_a_utf8_blob(tmp_path: Path) -> None:
    room = DataRoom.load(make_room(tmp_path / "r"))
    index = room.snapshot(tmp_path / "snap.json")
    data = json.loads(index.read_text(encoding="utf-8"))
    blob = (tmp_path / data["blob"]).read_bytes()
    assert data["room_id"] == "r" and data["room_hash"] == room.room_hash
    assert data["format"] == 2 and data["columns"]["folders"] == sorted(room.folders)
    docs = snapshot_documents(data)
    assert [d["id"] for d in docs] == [d.id for d in room.documents]
    first = docs[0]
    assert first["id"] == "Contracts/Supply/supply agreement.txt" and first["folder"] == "Contracts"
    assert (
        blob[first["byte_start"] : first["byte_end"]].decode()
        == "The Supplier shall deliver widgets.\n"
    )
    for d, doc in zip(docs, room.documents, strict=True):
        assert blob[d["byte_start"] : d["byte_end"]].decode() == doc.text
        assert d["chars"] == len(doc.text)
    assert not list(tmp_path.glob("*.tmp"))


def test_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(RoomError, match="not found"):
        DataRoom.load(tmp_path / "missing")
    root = tmp_path / "bad"
    (root / "documents").mkdir(parents=True)
    (root / "documents" / "broken.pdf").write_bytes(b"this is not a pdf")
    with pytest.raises(RoomError, match=r"broken\.pdf"):
        DataRoom.load(root, strict=True)
    (root / "documents" / "broken.pdf").unlink()
    (root / "task.json").write_text('{"title": 1}', encoding="utf-8")
    with pytest.raises(TaskError, match=r"task\.json"):
        DataRoom.load(root)


def test_latin1_room_round_trips_cafe(tmp_path: Path) -> None:
    """Issue #25 item 1: a Latin-1 document is decoded with its encoding (not with U+FFFD),
    the encoding is recorded per document (room, snapshot index) and listed by `rooms show`."""
    from typer.testing import CliRunner

    from rlmdistill.cli import app

    root = tmp_path / "r"
    (root / "documents" / "Leases").mkdir(parents=True)
    (root / "documents" / "Leases" / "cafe.txt").write_bytes(
        "Le Café paie 5 %.\n".encode("latin-1")
    )
    (root / "documents" / "Leases" / "plain.txt").write_text("Café, in UTF-8.\n", encoding="utf-8")
    room = DataRoom.load(root)
    cafe = room.get("Leases/cafe.txt")
    assert cafe.text == "Le Café paie 5 %.\n" and "\ufffd" not in cafe.text
    # bytes 0x20-0x7E and 0xE9 mean the same in Latin-1 and Windows-1252 (the codec chosen)
    assert (cafe.encoding, cafe.replaced) == ("cp1252", 0)
    assert room.get("Leases/plain.txt").encoding == "utf-8"
    assert room.not_utf8 == [("Leases/cafe.txt", "cp1252")] and room.with_replacements == []
    assert room.notes() == ["decoded as cp1252 (not UTF-8): Leases/cafe.txt"]
    # the text is re-read lazily with the recorded encoding, and the snapshot keeps it
    assert DataRoom.load(root).get("Leases/cafe.txt").text == "Le Café paie 5 %.\n"
    index = json.loads(room.snapshot(tmp_path / "snap.json").read_text(encoding="utf-8"))
    entry = next(d for d in snapshot_documents(index) if d["id"] == "Leases/cafe.txt")
    blob = (tmp_path / index["blob"]).read_bytes()
    assert blob[entry["byte_start"] : entry["byte_end"]].decode() == "Le Café paie 5 %.\n"
    assert (entry["encoding"], entry["replaced"]) == ("cp1252", 0)
    out = CliRunner().invoke(app, ["rooms", "show", str(root)])
    assert out.exit_code == 0, out.output
    assert "decoded as cp1252 (not UTF-8): Leases/cafe.txt" in out.output


def test_html_in_latin1_is_decoded_and_old_html_caches_are_not_reused(tmp_path: Path) -> None:
    root = tmp_path / "r"
    root.mkdir()
    page = root / "page.html"
    page.write_bytes("<p>Le Café</p>".encode("latin-1"))
    # a text cache written by an older version under the old key (replacement characters)
    import hashlib

    stat = page.stat()
    old_key = hashlib.sha256(f"page.html\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
    old = root / ".rlmdistill" / "text" / f"{old_key.hexdigest()[:24]}.txt"
    old.parent.mkdir(parents=True)
    old.write_text("Le Caf\ufffd", encoding="utf-8")
    doc = DataRoom.load(root).get("page.html")
    assert (doc.text, doc.encoding) == ("Le Café", "cp1252")
    again = DataRoom.load(root).get("page.html")  # from the new cache, encoding kept
    assert (again.text, again.encoding, again.replaced) == ("Le Café", "cp1252", 0)


def test_replacement_characters_are_counted_and_listed(tmp_path: Path) -> None:
    from rlmdistill.rooms.room import decode_text

    # forced to UTF-8, the lone 0xE9 byte is one U+FFFD
    assert decode_text(b"caf\xe9 au lait", "utf-8") == ("caf\ufffd au lait", "utf-8", 1)
    # valid UTF-8 (a real U+FFFD in it included) is decoded as it always was: nothing replaced
    assert decode_text("x\ufffd".encode()) == ("x\ufffd", "utf-8", 0)
    root = tmp_path / "r"
    root.mkdir()
    (root / "a.txt").write_text("fine", encoding="utf-8")
    room = DataRoom.load(root)
    room.documents[0].replaced = 2  # as a document with two undecodable bytes records it
    assert room.notes() == ["2 replacement character(s) (bytes no encoding decoded): a.txt"]


def test_utf8_room_hash_is_unchanged_by_encoding_detection(tmp_path: Path) -> None:
    """The room hash of a UTF-8 room is the documented formula over the text as older
    versions decoded it (``bytes.decode("utf-8", errors="replace")``), so episode ids and
    snapshot caches of existing rooms stay valid."""
    import hashlib

    root = tmp_path / "r"
    root.mkdir()
    files = {"a.txt": "\ufeffBOM kept, Café, ✓\n".encode(), "b/c.md": b"plain ascii"}
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    digest = hashlib.sha256()
    for doc_id in sorted(files):
        text = files[doc_id].decode("utf-8", errors="replace")
        sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
        digest.update(doc_id.encode() + b"\0" + sha.encode() + b"\0")
    assert DataRoom.load(root).room_hash == digest.hexdigest()[:16]


def test_corrupt_pdf_is_skipped_and_reported_unless_strict(tmp_path: Path) -> None:
    """Issue #25 item 2: one corrupt PDF no longer aborts the room; it is skipped with the
    reason (room, snapshot index, `rooms show`), and `--strict` makes it an error."""
    from typer.testing import CliRunner

    from rlmdistill.cli import app

    root = tmp_path / "r"
    (root / "documents" / "Board").mkdir(parents=True)
    (root / "documents" / "Board" / "minutes.txt").write_text("Approved.", encoding="utf-8")
    (root / "documents" / "Board" / "charter.pdf").write_bytes(minimal_pdf("Charter"))
    truncated = minimal_pdf("Broken")[:120]  # a download cut short: no xref, no %%EOF
    (root / "documents" / "Board" / "broken.pdf").write_bytes(truncated)
    room = DataRoom.load(root)
    assert [d.id for d in room.documents] == ["Board/charter.pdf", "Board/minutes.txt"]
    ((doc_id, why),) = room.skipped
    assert doc_id == "Board/broken.pdf" and why.startswith("cannot extract text (Pdf")
    assert room.notes() == [f"skipped Board/broken.pdf: {why}"]
    index = json.loads(room.snapshot(tmp_path / "snap.json").read_text(encoding="utf-8"))
    assert index["skipped"] == [{"id": "Board/broken.pdf", "reason": why}]
    runner = CliRunner()
    out = runner.invoke(app, ["rooms", "show", str(root)])
    assert out.exit_code == 0, out.output
    assert "2 documents" in out.output and "skipped Board/broken.pdf: cannot extract" in out.output
    with pytest.raises(RoomError, match=r"broken\.pdf: cannot extract text"):
        DataRoom.load(root, strict=True)
    out = runner.invoke(app, ["rooms", "show", str(root), "--strict"])
    # the error line wraps at the terminal width wherever the temporary path puts it
    assert out.exit_code == 1 and "broken.pdf: cannot extract text" in out.output.replace("\n", "")
    # a dangling link fails before extraction (stat): skipped the same way
    (root / "documents" / "Board" / "broken.pdf").unlink()
    (root / "documents" / "Board" / "gone.docx").symlink_to(tmp_path / "nowhere.docx")
    assert DataRoom.load(root).skipped == [
        ("Board/gone.docx", "cannot read (No such file or directory)")
    ]
    with pytest.raises(RoomError, match=r"gone\.docx: cannot read"):
        DataRoom.load(root, strict=True)


def test_moved_room_is_found_by_content_hash(tmp_path: Path) -> None:
    import shutil

    from rlmdistill.rooms.room import locate_moved_room

    old = make_room(tmp_path / "old" / "ws" / "rooms" / "r")
    room_hash = DataRoom.load(old).room_hash
    (tmp_path / "new").mkdir()
    shutil.move(tmp_path / "old" / "ws", tmp_path / "new" / "ws")
    run_dir = tmp_path / "new" / "ws" / "runs" / "x"
    run_dir.mkdir(parents=True)
    # tails tried shortest first: runs/x/r, runs/r, ws/r, ... then runs/x/rooms/r, runs/rooms/r,
    # ws/rooms/r (found)
    found = locate_moved_room(old, room_hash, run_dir)
    assert found == tmp_path / "new" / "ws" / "rooms" / "r"
    assert locate_moved_room(old, "0" * 16, run_dir) is None  # same place, other content


def test_cited_documents_by_id_name_or_stem_with_separators_alike() -> None:
    from rlmdistill.rooms.text import cited_documents

    ids = ["Supply/acme_supply_agreement.txt", "Leases/hq-lease.txt", "Tax/a.txt"]
    memo = "See ACME SUPPLY AGREEMENT and Leases/hq-lease.txt; nothing on a."
    assert cited_documents(memo, ids) == ["Supply/acme_supply_agreement.txt", "Leases/hq-lease.txt"]
    assert cited_documents(None, ids) == [] and cited_documents("", ids) == []
