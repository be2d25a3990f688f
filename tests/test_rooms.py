"""DataRoom loading: layouts, formats, ids, hashes, token counts and snapshots."""

from __future__ import annotations

import json
from pathlib import Path

import docx
import pytest

from rlmdistill.rooms import DataRoom, RoomError, TaskError

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
    assert [d["id"] for d in data["documents"]] == [d.id for d in room.documents]
    first = data["documents"][0]
    assert first["id"] == "Contracts/Supply/supply agreement.txt" and first["folder"] == "Contracts"
    assert (
        blob[first["byte_start"] : first["byte_end"]].decode()
        == "The Supplier shall deliver widgets.\n"
    )
    for d, doc in zip(data["documents"], room.documents, strict=True):
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
        DataRoom.load(root)
    (root / "documents" / "broken.pdf").unlink()
    (root / "task.json").write_text('{"title": 1}', encoding="utf-8")
    with pytest.raises(TaskError, match=r"task\.json"):
        DataRoom.load(root)


def test_undecodable_text_is_replaced(tmp_path: Path) -> None:
    root = tmp_path / "r"
    root.mkdir()
    (root / "latin.txt").write_bytes(b"caf\xe9 au lait")
    assert DataRoom.load(root).get("latin.txt").text == "caf\ufffd au lait"


def test_cited_documents_by_id_name_or_stem_with_separators_alike() -> None:
    from rlmdistill.rooms.text import cited_documents

    ids = ["Supply/acme_supply_agreement.txt", "Leases/hq-lease.txt", "Tax/a.txt"]
    memo = "See ACME SUPPLY AGREEMENT and Leases/hq-lease.txt; nothing on a."
    assert cited_documents(memo, ids) == ["Supply/acme_supply_agreement.txt", "Leases/hq-lease.txt"]
    assert cited_documents(None, ids) == [] and cited_documents("", ids) == []
