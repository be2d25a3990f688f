"""Synthetic data rooms (rooms/synth.py): sizes, planted issues findable, determinism, errors, CLI.

Issue 4 item 4 acceptance: every criterion's evidence is grepped in the generated documents;
the 5,000-document build is in ``benchmarks/bench_synth_room.py`` and the slow test below.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from rlmdistill.judge.reference import ReferenceGrader
from rlmdistill.rooms import DataRoom, load_task
from rlmdistill.rooms.cli import register
from rlmdistill.rooms.cuad import SAMPLE_SOURCE
from rlmdistill.rooms.synth import (
    CHARS_PER_TOKEN,
    SynthError,
    _cuad_pool,
    _plan,
    build_synth_room,
    n_issues_for,
    n_leaf_folders_for,
)
from rlmdistill.rooms.synth_catalog import CATEGORIES
from rlmdistill.rooms.synth_text import format_usd
from rlmdistill.rooms.text import normalise_ws

STRUCTURE_IDS = {"MEMO-executive-summary", "MEMO-exposure-quantified", "MEMO-next-steps"}


@pytest.fixture(scope="module")
def room20(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("synth") / "r20"
    build_synth_room(out, 20, 7)
    return out


@pytest.fixture(scope="module")
def room300(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("synth") / "r300"
    build_synth_room(out, 300, 11)
    return out


def _tree_digest(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize(("fixture", "n_docs"), [("room20", 20), ("room300", 300)])
def test_room_loads_and_sizes_match_report(
    fixture: str, n_docs: int, request: pytest.FixtureRequest
) -> None:
    path: Path = request.getfixturevalue(fixture)
    meta = json.loads((path / "room.json").read_text(encoding="utf-8"))
    room = DataRoom.load(path)
    assert len(room) == n_docs == meta["sizes"]["documents"]
    assert room.n_chars == meta["sizes"]["chars"]
    assert meta["sizes"]["approx_tokens"] == round(room.n_chars / CHARS_PER_TOKEN)
    assert room.room_hash == meta["room_hash"]
    assert sorted(room.folders) == sorted(c.folder for c in CATEGORIES)  # all 14 categories
    assert meta["sizes"]["leaf_folders"] == len({d.id.rsplit("/", 1)[0] for d in room}) == 14
    assert room.skipped == []
    task = room.task
    assert task is not None and len(task.criteria) == meta["sizes"]["criteria"]
    assert len(meta["issues"]) == n_issues_for(n_docs)
    assert set(meta["issues_by_class"]) == {"single", "multi", "missing"}
    assert {c.type for c in task.criteria} == {
        "finding",
        "citation",
        "quantification",
        "recommendation",
        "missing-evidence",
    }
    # Realistic length: mean document of several thousand characters, none trivially short.
    assert 8_000 < room.n_chars / len(room) < 40_000
    assert min(d.n_chars for d in room) > 400
    # The letter of intent states the deal structure.
    loi = room.get(meta["letter_of_intent"]).text
    assert meta["target"] in loi and meta["buyer"] in loi


@pytest.mark.parametrize("fixture", ["room20", "room300"])
def test_every_criterion_evidence_is_in_the_named_documents(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    """Planted issues are findable: documents exist, spans and key terms appear verbatim
    (whitespace-normalised) in them, amounts appear as stated (or their basis does)."""
    path: Path = request.getfixturevalue(fixture)
    room = DataRoom.load(path)
    task = room.task
    assert task is not None
    norm = {d.id: normalise_ws(d.text) for d in room}
    no_evidence = {c.id for c in task.criteria if c.evidence is None}
    assert no_evidence == STRUCTURE_IDS
    for crit in task.criteria:
        ev = crit.evidence
        if ev is None:
            continue
        assert ev.documents and ev.spans and ev.category, crit.id
        assert crit.sources == ev.documents
        for doc_id in ev.documents:
            assert doc_id in room, f"{crit.id}: {doc_id} not in room"
        texts = [norm[d] for d in ev.documents]
        for span in ev.spans:
            assert any(normalise_ws(span) in t for t in texts), f"{crit.id}: span not found"
        joined = " ".join(texts).lower()
        assert ev.key_terms and all(term in joined for term in ev.key_terms), crit.id
        if crit.type == "quantification":
            assert ev.amounts, crit.id
            for amount in ev.amounts:
                shown = f"{amount.value:g}%" if amount.unit == "%" else format_usd(amount.value)
                if amount.note:  # derived figure: its basis is in the documents
                    basis = re.search(r"\$[\d,]+", amount.note)
                    assert basis and basis.group(0) in " ".join(texts), crit.id
                else:
                    assert shown in " ".join(texts), f"{crit.id}: {shown} not in documents"


def test_multi_document_issues_need_two_documents(room300: Path) -> None:
    """A multi issue's facts sit in different documents: no single document holds them all."""
    meta = json.loads((room300 / "room.json").read_text(encoding="utf-8"))
    task = load_task(room300 / "task.json")
    room = DataRoom.load(room300)
    multis = [i for i in meta["issues"] if i["class"] == "multi"]
    assert multis
    for issue in multis:
        assert len(issue["documents"]) >= 2
        ev = task.criterion(issue["id"]).evidence
        assert ev is not None
        for doc_id in issue["documents"]:
            text = normalise_ws(room.get(doc_id).text)
            assert not all(normalise_ws(s) in text for s in ev.spans), (issue["id"], doc_id)
        kinds = {i["kind"] for i in multis}
        assert "consent" in kinds or len(multis) < len(kinds) + 1


@pytest.mark.parametrize("fixture", ["room20", "room300"])
def test_missing_evidence_documents_are_referenced_and_absent(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    path: Path = request.getfixturevalue(fixture)
    meta = json.loads((path / "room.json").read_text(encoding="utf-8"))
    room = DataRoom.load(path)
    missing = [i for i in meta["issues"] if i["class"] == "missing"]
    assert missing
    ids = {d.id for d in room}
    heads = [d.text.split("\n", 1)[0].lower() for d in room]
    for issue in missing:
        absent = issue["absent_document"]
        title = absent["title"]
        referencing = [d for d in room if title in normalise_ws(d.text)]
        assert [d.id for d in referencing] == issue["documents"]
        assert absent["would_be_id"] not in ids
        stem = absent["would_be_id"].rsplit("/", 1)[-1].rsplit(".", 1)[0]
        assert not any(stem in i for i in ids), stem
        # No document of that kind is in the room at all (its title never heads a document).
        kind_title = title.split(" between ")[0].split(" of ")[0].split(" dated ")[0].lower()
        assert not any(h.startswith(kind_title) for h in heads), kind_title


def test_reference_grader_passes_a_gold_memo_and_fails_a_vague_one(room20: Path) -> None:
    """The rubric works with the reference grader: a memo that cites each evidence document
    and quotes its span next to the category passes every gradable criterion."""
    room = DataRoom.load(room20)
    task = room.task
    assert task is not None
    gold = []
    for crit in task.criteria:
        if crit.evidence is not None:
            ev = crit.evidence
            for doc_id, span in zip(ev.documents, ev.spans, strict=False):
                gold.append(f'## {doc_id}\n\n{ev.category}: "{span}"')
    grader = ReferenceGrader()
    verdicts = grader.grade("\n\n".join(gold), task, room, episode_id="e", memo_sha256=None)
    by_id = {v.criterion_id: v for v in verdicts}
    for crit in task.criteria:
        expected = "UNGRADABLE" if crit.evidence is None else "PASS"
        assert by_id[crit.id].verdict == expected, (crit.id, by_id[crit.id].reason)
    vague = "The data room looks fine. " + " ".join(d.id for d in room)
    verdicts = grader.grade(vague, task, room, episode_id="e", memo_sha256=None)
    assert all(v.verdict != "PASS" for v in verdicts)


def test_same_seed_gives_byte_identical_room(tmp_path: Path, room20: Path) -> None:
    build_synth_room(tmp_path / "again", 20, 7)
    assert _tree_digest(tmp_path / "again") == _tree_digest(room20)
    other = build_synth_room(tmp_path / "other", 20, 8)
    meta = json.loads((room20 / "room.json").read_text(encoding="utf-8"))
    assert other.room_hash != meta["room_hash"] and other.target != meta["target"]


def test_cuad_contracts_are_copied_verbatim_and_attributed(room300: Path) -> None:
    meta = json.loads((room300 / "room.json").read_text(encoding="utf-8"))
    cuad = meta["cuad_documents"]
    assert len(cuad) == min(16, 300 // 10) == meta["sizes"]["cuad_documents"]
    attribution = (room300 / "ATTRIBUTION.md").read_text(encoding="utf-8")
    assert "CC BY 4.0" in attribution and "Atticus" in attribution
    for doc_id, name in cuad.items():
        assert doc_id.startswith("02_Material_Contracts/")
        src = SAMPLE_SOURCE / "contracts" / name
        assert (room300 / "documents" / doc_id).read_bytes() == src.read_bytes()
        assert f"`{doc_id}` | {name}" in attribution
    assert meta["cuad_source"] == "rlmdistill:cuad_sample"


def test_no_cuad_and_length_scale(tmp_path: Path) -> None:
    small = build_synth_room(tmp_path / "a", 20, 1, cuad_source=None, length_scale=0.5)
    big = build_synth_room(tmp_path / "b", 20, 1, cuad_source=None, length_scale=2.0)
    assert small.n_cuad_docs == big.n_cuad_docs == 0
    assert 3.0 < big.n_chars / small.n_chars < 5.0
    assert "No third-party text" in (tmp_path / "a" / "ATTRIBUTION.md").read_text()


def test_5000_document_plan_has_80_folders_in_14_categories() -> None:
    """Folder scaling checked on the plan alone (fast); the full build is benchmarked."""
    ctx, issues = _plan(5000, 0, 1.0, [])
    leaves = {d.id.rsplit("/", 1)[0] for d in ctx.docs}
    assert len(ctx.docs) == 5000
    assert len(leaves) == n_leaf_folders_for(5000) == 80
    assert {leaf.split("/", 1)[0] for leaf in leaves} == {c.folder for c in CATEGORIES}
    assert len(issues) == n_issues_for(5000) == 177
    assert len({d.id for d in ctx.docs}) == 5000
    assert n_leaf_folders_for(20) == 14 and n_leaf_folders_for(1200) == 20


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_docs": 19, "seed": 0}, "between 20 and 5000"),
        ({"n_docs": 5001, "seed": 0}, "between 20 and 5000"),
        ({"n_docs": 20.5, "seed": 0}, "integer"),
        ({"n_docs": 20, "seed": -1}, "non-negative"),
        ({"n_docs": 20, "seed": 0, "length_scale": 0}, "length_scale"),
        ({"n_docs": 20, "seed": 0, "cuad_partition": (2, 2)}, "cuad_partition"),
    ],
)
def test_bad_arguments_raise_clear_errors(
    tmp_path: Path, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(SynthError, match=message):
        build_synth_room(tmp_path / "r", **kwargs)  # type: ignore[arg-type]
    assert not (tmp_path / "r").exists()


def test_output_folder_rules(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("x")
    with pytest.raises(SynthError, match="not empty"):
        build_synth_room(other, 20, 0)
    with pytest.raises(SynthError, match="not a built room"):
        build_synth_room(other, 20, 0, overwrite=True)
    assert (other / "keep.txt").read_text() == "x"
    first = build_synth_room(tmp_path / "r", 20, 0)
    again = build_synth_room(tmp_path / "r", 20, 0, overwrite=True)
    assert again.room_hash == first.room_hash
    with pytest.raises(SynthError, match="CUAD"):
        build_synth_room(tmp_path / "r2", 20, 0, cuad_source=tmp_path)


def _cli() -> typer.Typer:
    app = typer.Typer()
    rooms = typer.Typer()
    register(rooms)
    app.add_typer(rooms, name="rooms")
    return app


def test_cli_synth_prints_sizes_folders_and_criteria(tmp_path: Path) -> None:
    out = tmp_path / "cli"
    result = CliRunner().invoke(
        _cli(), ["rooms", "synth", "--docs", "20", "--seed", "3", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    meta = json.loads((out / "room.json").read_text(encoding="utf-8"))
    flat = " ".join(result.output.split())
    assert f"{meta['sizes']['chars']:,}" in flat
    assert f"{meta['sizes']['approx_tokens']:,}" in flat
    assert "14 leaf folders in 14 categories" in flat
    assert f"{meta['sizes']['criteria']} (" in flat
    bad = CliRunner().invoke(
        _cli(), ["rooms", "synth", "--docs", "10", "--out", str(tmp_path / "x")]
    )
    assert bad.exit_code == 1 and "between 20 and 5000" in " ".join(bad.output.split())


def test_cli_synth_reads_its_config_file_and_no_cuad_still_copies_none(tmp_path: Path) -> None:
    """``rooms synth --config`` sets SynthRoomConfig's fields (flags typed win), and
    ``--no-cuad`` (the off switch of ``copy_cuad``) builds the room the Python builder builds
    with ``cuad_source=None``, byte for byte."""
    cfg = tmp_path / "synth.yaml"
    cfg.write_text("docs: 20\nseed: 4\nlength_scale: 0.5\ncopy_cuad: true\n", encoding="utf-8")
    out = tmp_path / "cli"
    res = CliRunner().invoke(
        _cli(), ["rooms", "synth", "--config", str(cfg), "--no-cuad", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    ref = build_synth_room(tmp_path / "ref", 20, 4, cuad_source=None, length_scale=0.5)
    assert ref.n_cuad_docs == 0
    made = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert made == sorted(p.relative_to(ref.out) for p in ref.out.rglob("*") if p.is_file())
    for rel in made:
        assert (out / rel).read_bytes() == (ref.out / rel).read_bytes(), rel
    typo = tmp_path / "typo.yaml"
    typo.write_text("doc: 20\n", encoding="utf-8")
    bad = CliRunner().invoke(_cli(), ["rooms", "synth", "--config", str(typo), "--out", "x"])
    assert bad.exit_code == 2 and "unknown key 'doc'" in " ".join(bad.output.split())


@pytest.mark.slow
def test_5000_document_room_builds_and_loads(tmp_path: Path) -> None:
    report = build_synth_room(tmp_path / "big", 5000, 0)
    room = DataRoom.load(tmp_path / "big")
    assert len(room) == 5000 and room.room_hash == report.room_hash
    assert report.n_folders == 80 and len(room.folders) == 14
    assert report.n_criteria > 300


def test_filler_is_varied_and_deterministic(tmp_path: Path) -> None:
    """Filler text rarely repeats across documents (coverage index, 64-character shingles:
    the share of the room's characters that also occur in an earlier document), and the same
    seed gives the same bytes."""
    from rlmdistill.coverage.index import CoverageIndex

    first = build_synth_room(tmp_path / "a", 120, 4, cuad_source=None)
    again = build_synth_room(tmp_path / "b", 120, 4, cuad_source=None)
    assert again.room_hash == first.room_hash
    assert _tree_digest(tmp_path / "a") == _tree_digest(tmp_path / "b")
    index = CoverageIndex.build(DataRoom.load(tmp_path / "a"))
    share = index.duplicate_chars / index.n_chars
    assert index.n_chars > 1_000_000
    assert 0.0 < share < 0.12, share  # 0.060 measured (synth-v2: 0.10; synth-v1: 0.87 at 300)


def test_filler_sections_shapes_and_slots() -> None:
    """Every paragraph names the target, no template slot is left unfilled, the family's
    paragraph shapes appear, and a seed fixes the text."""
    import random

    from rlmdistill.rooms.synth_text import filler_sections

    slots = {"t": "Norva", "T": "Norva Robotics, Inc.", "cp": "Kesri", "CP": "Kesri Supply LLC"}
    seen: dict[str, str] = {}
    for family in ("contract", "minutes", "report", "financial", "letter", "policy", "schedule"):
        sections = filler_sections(random.Random(family), family, slots, 20_000)  # type: ignore[arg-type]
        again = filler_sections(random.Random(family), family, slots, 20_000)  # type: ignore[arg-type]
        assert sections == again
        paragraphs = [p for _, ps in sections for p in ps]
        assert 18_000 < sum(len(p) for p in paragraphs) < 40_000  # headings count too
        for p in paragraphs:
            assert "Norva" in p and "{" not in p and "[" not in p and "|" not in p, p
        seen[family] = "\n".join(paragraphs)
    assert '" means ' in seen["contract"]  # the definitions paragraph
    assert "\n(a) " in seen["contract"]
    assert "RESOLVED, that" in seen["minutes"] and "Present: " in seen["minutes"]
    assert "Observation " in seen["report"] and "Table " in seen["financial"]
    assert "\n1) " in seen["policy"] and "\n1. " in seen["schedule"]


def test_synonym_choices_leave_slots_and_capitals_alone() -> None:
    """synth-v3's word-level variety: listed lowercase words become choices, slot names and
    capitalised words (defined terms) never change, and no alternative is issue language."""
    import random

    from rlmdistill.rooms.synth_text import _SYNONYMS, _vary, render

    assert _vary("{person} shall keep the Records in {site}") == (
        "{person} [shall|will] [keep|maintain|hold] the Records in {site}"
    )
    assert _vary("Confidential Information") == "Confidential Information"
    issue = ("terminat", "consent", "exclusiv", "compet", "assign", "default", "penalt", "uncap")
    for word, alts in _SYNONYMS.items():
        assert word == word.lower() and word not in alts
        assert not any(b in a for a in (word, *alts) for b in issue), (word, alts)
    rng = random.Random(0)
    slots = {"t": "Norva", "T": "Norva Robotics, Inc.", "cp": "Kesri", "CP": "Kesri Supply LLC"}
    texts = {render("c_item", rng, slots) for _ in range(200)}
    assert len(texts) > 150 and not any("[" in t or "|" in t for t in texts)


# ----------------------------------------------------------------------------- issue table
GOLDEN = Path(__file__).resolve().parent / "data" / "synth_rooms_sha256.json"
"""sha256 of every file of the rooms below, recorded from the if-chain generator (commit
73ea734, ``synth-v3``) before issue kinds became a table (re-recording from the table code gives the same file).
``SYNTH_GOLDEN_FROM=<commit> PYTHONPATH=<that commit's src> python tests/test_synth.py --record``
rewrites it; do so only with a new :data:`~rlmdistill.rooms.synth.GENERATOR`."""
GOLDEN_ROOMS: dict[str, dict[str, object]] = {
    "n20-s7": {"n_docs": 20, "seed": 7},
    "n300-s11": {"n_docs": 300, "seed": 11},
    "n60-s5-nocuad-x0.3": {"n_docs": 60, "seed": 5, "cuad_source": None, "length_scale": 0.3},
    "n80-s9-part1of2-x0.25": {
        "n_docs": 80,
        "seed": 9,
        "cuad_partition": (1, 2),
        "length_scale": 0.25,
    },
}
"""Rooms pinned byte for byte. ``n300-s11`` plants every issue kind; the 60- and
80-document rooms plant every multi-document kind (consent included) under the other deal
structures, so both consent wordings are pinned."""
GOLDEN_PLANS = {"n5000-s0": (5000, 0), "n1000-s3": (1000, 3)}
"""Plans (no documents written) whose criteria and issue metadata are pinned: many issues per
kind, so the draws of later cycles are checked too."""


def _room_json_sha(path: Path, built_by: str) -> str:
    """sha256 of ``room.json`` with ``built_by`` (the package version) set to ``built_by``,
    so that a version bump alone does not fail the byte check. Re-dumping is faithful: it
    gives the file's own bytes back when nothing is replaced (asserted)."""
    raw = path.read_bytes()
    meta = json.loads(raw)
    assert (json.dumps(meta, indent=2, ensure_ascii=False) + "\n").encode("utf-8") == raw
    meta["built_by"] = built_by
    dumped = json.dumps(meta, indent=2, ensure_ascii=False) + "\n"
    return hashlib.sha256(dumped.encode("utf-8")).hexdigest()


def _room_digest(out: Path, built_by: str) -> dict[str, str]:
    digest = _tree_digest(out)
    digest["room.json"] = _room_json_sha(out / "room.json", built_by)
    return digest


def _plan_digest(n_docs: int, seed: int) -> str:
    from rlmdistill.rooms.synth import _criteria

    ctx, issues = _plan(n_docs, seed, 1.0, [])
    criteria, meta = _criteria(ctx, issues)
    dumped = json.dumps(
        {
            "criteria": [c.model_dump(mode="json", exclude_unset=True) for c in criteria],
            "issues": meta,
            "inserts": {d.id: d.inserts for d in ctx.docs if d.inserts},
        },
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(dumped.encode("utf-8")).hexdigest()


def _golden() -> dict[str, object]:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


def _report_fields(report: object) -> dict[str, object]:
    import dataclasses

    fields = dataclasses.asdict(report)  # type: ignore[call-overload]
    del fields["out"]
    return json.loads(json.dumps(fields))


@pytest.mark.parametrize("name", sorted(GOLDEN_ROOMS))
def test_rooms_are_byte_identical_to_the_if_chain_generator(name: str, tmp_path: Path) -> None:
    """Issue 19 item 4: the table of issue kinds builds the same bytes as the if-chains did
    (every document, task.json, room.json, ATTRIBUTION.md), and the same report, which is
    all ``rooms synth`` prints besides the folder and the build time."""
    golden = _golden()
    expected = golden["rooms"][name]  # type: ignore[index]
    out = tmp_path / "room"
    report = build_synth_room(out, **GOLDEN_ROOMS[name])  # type: ignore[arg-type]
    digest = _room_digest(out, golden["built_by"])  # type: ignore[arg-type]
    assert sorted(digest) == sorted(expected["files"])
    differ = sorted(k for k in digest if digest[k] != expected["files"][k])
    assert differ == [], f"{name}: {len(differ)} files differ, e.g. {differ[:5]}"
    assert _report_fields(report) == expected["report"]


@pytest.mark.parametrize("name", sorted(GOLDEN_PLANS))
def test_large_plans_are_identical_to_the_if_chain_generator(name: str) -> None:
    assert _plan_digest(*GOLDEN_PLANS[name]) == _golden()["plans"][name]  # type: ignore[index]


def test_golden_rooms_plant_every_kind_and_both_consent_wordings() -> None:
    """The pinned rooms exercise every table entry, and consent under an asset purchase
    (anti-assignment) and under a share purchase or merger (change of control)."""
    from rlmdistill.rooms.synth_kinds import TEMPLATES_BY_KIND

    kinds: set[str] = set()
    consent_categories: set[str] = set()
    for name in ("n300-s11", "n60-s5-nocuad-x0.3", "n80-s9-part1of2-x0.25"):
        kw: dict[str, Any] = dict(GOLDEN_ROOMS[name])
        source = kw.get("cuad_source", SAMPLE_SOURCE)
        pool = _cuad_pool(
            None if source is None else source.resolve(), kw.get("cuad_partition", (0, 1))
        )
        _, issues = _plan(kw["n_docs"], kw["seed"], kw.get("length_scale", 1.0), pool)
        kinds |= {i.kind for i in issues}
        consent_categories |= {i.category for i in issues if i.kind == "consent"}
    assert kinds == set(TEMPLATES_BY_KIND)
    assert consent_categories == {"Anti-Assignment", "Change Of Control"}


def _small_ctx() -> object:
    ctx, _ = _plan(20, 0, 1.0, [])
    return ctx


def test_a_new_issue_kind_is_one_table_entry() -> None:
    """A template written here (not in the table) plants through the same renderer: the
    document comes from its category, degenerate ranges fix the values, so the text, the
    criterion and the amount are known by hand."""
    from rlmdistill.rooms.synth_issues import (
        AmountRule,
        Calc,
        Choice,
        IssueTemplate,
        Money,
        Pick,
        SpanRule,
        Text,
        plant,
    )

    warranty = IssueTemplate(
        kind="warranty-claim",
        klass="single",
        severity="medium",
        category="Warranty Duration",
        values={
            "doc": Pick("02_Material_Contracts", contract=True),
            "amount": Money(1_250_000, 1_250_000, 50_000),
            "months": Choice((24,)),
            "years": Calc(lambda v: v["months"] / 12),
            "claim": Text("a warranty claim of {amount:usd}"),
        },
        spans=(SpanRule("doc", "{doc.short} has made {claim} under a {months}-month warranty."),),
        title="Memo reports {doc.short}'s warranty claim",
        match="PASS if the memo reports the claim in {doc.id} ({years:g} years). FAIL otherwise.",
        amounts=(AmountRule("amount"),),
        amount_what="the warranty claim by {doc.short}",
    )
    ctx = _small_ctx()
    issue = plant(warranty, ctx)  # type: ignore[arg-type]
    (span,) = issue.spans
    doc = span.doc
    assert doc.category == "02_Material_Contracts" and doc.kind is not None
    assert doc.kind.family == "contract"
    short = doc.cp.split()[0].rstrip(",")
    assert (
        span.text == f"{short} has made a warranty claim of $1,250,000 under a 24-month warranty."
    )
    assert issue.title == f"Memo reports {short}'s warranty claim"
    assert (
        issue.match == f"PASS if the memo reports the claim in {doc.id} (2 years). FAIL otherwise."
    )
    assert [a.value for a in issue.amounts] == [1_250_000.0]
    assert issue.amounts[0].model_fields_set == {"value", "tolerance"}  # unit left unset
    assert issue.amount_what == f"the warranty claim by {short}"
    assert (issue.kind, issue.klass, issue.category) == (
        "warranty-claim",
        "single",
        "Warranty Duration",
    )


_BAD_ENTRIES = {
    "undefined name": ("title", "Memo flags {nope}", "title: nope not defined before use"),
    "no spans": ("spans", (), "no spans"),
    "missing without absent": ("klass", "missing", "absent document"),
    "unknown severity": ("severity", "grave", "severity 'grave'"),
    "exclude a later pick": ("values", "exclude-later", "excludes 'other', not picked before"),
    "span in an unpicked document": ("spans", "span-bank", "document 'bank' is not picked"),
    "shadow a base value": ("values", "shadow", "'t' is already defined"),
    "text before its value": ("values", "text-early", "values['a']: b not defined before use"),
    "not a spec": ("values", "not-a-spec", "is not a spec"),
    "deal case missing": ("values", "by-deal", "no 'merger'"),
}


@pytest.mark.parametrize("case", sorted(_BAD_ENTRIES))
def test_a_bad_table_entry_names_the_kind_and_the_field(case: str) -> None:
    from rlmdistill.rooms.synth_issues import (
        ByDeal,
        Choice,
        IssueTemplate,
        IssueTemplateError,
        Pick,
        SpanRule,
        Text,
    )

    doc = Pick("08_Tax")
    special: dict[str, object] = {
        "exclude-later": {"doc": Pick("08_Tax", exclude=("other",)), "other": Pick("07_Finance")},
        "span-bank": (SpanRule("bank", "{t} owes tax."),),
        "shadow": {"doc": doc, "t": Choice(("a",))},
        "text-early": {"doc": doc, "a": Text("{b}"), "b": Choice(("x",))},
        "not-a-spec": {"doc": doc, "x": 3},
        "by-deal": {"doc": doc, "deal": ByDeal({"share purchase": {}, "asset purchase": {}})},
    }
    base: dict[str, object] = {
        "kind": "x-kind",
        "klass": "single",
        "severity": "high",
        "category": "Tax",
        "values": {"doc": doc},
        "spans": (SpanRule("doc", "{t} owes tax."),),
        "title": "Memo flags the tax",
        "match": "PASS if the memo cites {doc.id}.",
    }
    IssueTemplate(**base)  # type: ignore[arg-type]  # the base entry is good
    key, value, message = _BAD_ENTRIES[case]
    base[key] = special.get(value, value) if isinstance(value, str) else value
    with pytest.raises(IssueTemplateError, match=re.escape(message)) as info:
        IssueTemplate(**base)  # type: ignore[arg-type]
    assert "issue kind 'x-kind'" in str(info.value)


def test_a_text_that_cannot_be_filled_names_the_kind_and_the_field() -> None:
    """Names are checked when a template is made; attributes only when it is planted."""
    from rlmdistill.rooms.synth_issues import (
        IssueTemplate,
        IssueTemplateError,
        Pick,
        SpanRule,
        plant,
    )

    tpl = IssueTemplate(
        kind="x-kind",
        klass="single",
        severity="low",
        category="Tax",
        values={"doc": Pick("08_Tax")},
        spans=(SpanRule("doc", "{doc.owner} owes tax."),),
        title="Memo flags the tax",
        match="PASS if the memo cites {doc.id}.",
    )
    with pytest.raises(IssueTemplateError, match=r"issue kind 'x-kind', spans\[0\]: .*owner"):
        plant(tpl, _small_ctx())  # type: ignore[arg-type]


def test_the_example_entry_in_docs_synth_md_is_a_valid_template() -> None:
    """docs/synth.md's example of a new kind stays a working table entry."""
    import rlmdistill.rooms.synth_issues as si

    doc = (Path(__file__).resolve().parents[1] / "docs" / "synth.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(IssueTemplate\(.*?\n\)),?\n```", doc, re.S)
    assert block is not None
    names = {n: getattr(si, n) for n in si.__all__}
    template = eval(block.group(1), names)  # the docs' own text, no input from outside
    issue = si.plant(template, _small_ctx())  # type: ignore[arg-type]
    (span,) = issue.spans
    assert span.doc.category == "02_Material_Contracts"
    assert issue.kind == "warranty-claim" and len(issue.amounts) == 1
    value = issue.amounts[0].value
    assert 100_000 <= value <= 2_000_000 and value % 5_000 == 0
    assert f"${value:,.0f}" in span.text and "{" not in span.text


def _record(path: Path = GOLDEN) -> None:
    """Write :data:`GOLDEN` from the code on ``PYTHONPATH`` (the generator to pin)."""
    import os
    import tempfile

    from rlmdistill import __version__
    from rlmdistill.rooms.synth import GENERATOR

    built_by = f"rlmdistill {__version__}"
    rooms: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, kwargs in sorted(GOLDEN_ROOMS.items()):
            out = Path(tmp) / name
            report = build_synth_room(out, **kwargs)  # type: ignore[arg-type]
            args = {k: list(v) if isinstance(v, tuple) else v for k, v in kwargs.items()}
            rooms[name] = {
                "args": args,
                "report": _report_fields(report),
                "files": _room_digest(out, built_by),
            }
    plans = {name: _plan_digest(*args) for name, args in sorted(GOLDEN_PLANS.items())}
    commit = os.environ.get("SYNTH_GOLDEN_FROM", "")  # the commit the code was taken from
    doc = {
        "about": "sha256 per file of synthetic rooms; see GOLDEN in tests/test_synth.py",
        "generator": GENERATOR,
        "built_by": built_by,
        "recorded_from": commit or "unknown",
        "rooms": rooms,
        "plans": plans,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {path}: {len(rooms)} rooms, {len(plans)} plans")


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--record"]:
        raise SystemExit(
            "usage: PYTHONPATH=<src to record from> python tests/test_synth.py --record"
        )
    _record()
