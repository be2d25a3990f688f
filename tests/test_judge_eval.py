"""``judge-eval`` on the packaged CUAD sample, and the two false passes of issue #20."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import SHARED_CUAD
from typer.testing import CliRunner

from rlmdistill.cli import app
from rlmdistill.judge.evalset import (
    SHAPED_ON,
    SPLIT_SALT,
    EvalCase,
    contract_split,
    paraphrase_text,
    quote_text,
)
from rlmdistill.judge.evaluation import EvalOutcome, JudgeEvalConfig, JudgeEvalReport, run
from rlmdistill.judge.reference import ReferenceGrader, document_context, span_parts
from rlmdistill.rooms import DataRoom, Task, build_cuad_room
from rlmdistill.rooms.cuad import SAMPLE_SOURCE
from rlmdistill.traces.store import parse_records


@pytest.fixture(scope="module")
def sample_eval(tmp_path_factory: pytest.TempPathFactory) -> tuple[JudgeEvalReport, Path]:
    """judge-eval over the first 4 contracts (by name) of the packaged 16-contract sample."""
    out = tmp_path_factory.mktemp("judge-eval")
    config = JudgeEvalConfig(
        source=SAMPLE_SOURCE, out=out, part="all", max_contracts=4, n_resamples=200
    )
    return run(config), out


def test_judge_eval_on_sample_room(sample_eval: tuple[JudgeEvalReport, Path]) -> None:
    report, out = sample_eval
    # the first 4 contracts by name, one room: Adia Nutrition (7 positive M&A labels), Agape
    # ATP (7), BNL Financial (6), DynTek (5) -> 25 criteria (rooms.cuad.criteria_per_contract);
    # per criterion 1 gold quote, 1 paraphrase, 2 random unlabelled passages, 1 nearest one,
    # 2 other clauses, 1 neighbour (every document here has enough candidates)
    assert (report.n_rooms, report.n_documents, report.n_criteria) == (1, 4, 25)
    counts = {k: f.n_cases for k, f in report.figures.items()}
    assert counts == {
        "gold_quote": 25,
        "paraphrase": 25,
        "unlabelled": 50,
        "unlabelled_nearest": 25,
        "other_clause": 50,
        "neighbour": 25,
    }
    assert report.contracts[0].startswith("ADIANUTRITION")
    cases = list(parse_records(out / "cases.jsonl", EvalOutcome))
    assert len(cases) == report.n_cases
    assert report.figures["gold_quote"].n_cases == report.n_criteria
    # must-pass memos pass; decoys overlapping no labelled clause and neighbours fail
    for kind in ("gold_quote",):
        fig = report.figures[kind]
        assert fig.n_pass == fig.n_cases
        assert fig.pass_share.value == 1.0
    for kind in ("unlabelled", "unlabelled_nearest", "neighbour"):
        fig = report.figures[kind]
        assert fig.n_cases > 0 and fig.n_pass == 0, (kind, [c.reason for c in cases])
    # one known false pass: one of Agape ATP's Exclusivity spans ("The Manufacturer covenants
    # not to sell any product listed ...") keeps 2 distinctive words, "listed" and "product",
    # and the quoted Minimum Commitment clause ("... are listed below: Product Name ...") holds
    # both:
    # the price of MIN_DISTINCTIVE = 2, chosen on the tune contracts
    wrong = [c.case_id for c in cases if c.expected == "FAIL" and c.verdict == "PASS"]
    assert wrong == ["cuad-02-exclusivity:other_clause:1"]
    assert report.figures["other_clause"].n_pass == 1
    # paraphrases of 22 of 25 criteria pass; the other 3 clauses have no distinctive word
    # left once names, defined terms and boilerplate are out ("best 0 of 0")
    para = [c for c in cases if c.kind == "paraphrase"]
    assert sum(c.verdict == "PASS" for c in para) == 22
    assert all("best 0 of 0" in c.reason for c in para if c.verdict == "FAIL")
    assert report.acceptance == {
        "gold_quote": True,
        "unlabelled": True,
        "unlabelled_nearest": True,
    }
    # the interval is over documents: 4 of them
    assert report.figures["unlabelled"].pass_share.n == 4
    assert report.figures["unlabelled"].pass_share.unit == "documents"
    written = JudgeEvalReport.model_validate_json((out / "report.json").read_text())
    assert written.figures == report.figures


def test_specific_sample_decoys(sample_eval: tuple[JudgeEvalReport, Path]) -> None:
    """The Agape ATP supply agreement's Anti-Assignment criterion: ref-v1 passed the memo
    quoting its Minimum Commitment clause under Anti-Assignment ("shares 2 of 2 distinctive
    words": its two distinctive words were party names); ref-v2 fails it."""
    _, out = sample_eval
    cases = {c.case_id: c for c in parse_records(out / "cases.jsonl", EvalOutcome)}
    gold = cases["cuad-02-anti-assignment:gold_quote"]
    assert gold.contract.startswith("AgapeAtpCorp") and gold.verdict == "PASS"
    assert "-word quote of the labelled clause" in gold.reason
    decoys = [c for c in cases.values() if c.criterion_id == "cuad-02-anti-assignment"]
    assert {c.kind for c in decoys if c.expected == "FAIL"} >= {"other_clause", "neighbour"}
    assert all(c.verdict == "FAIL" for c in decoys if c.expected == "FAIL")
    neighbour = cases["cuad-02-anti-assignment:neighbour"]
    assert neighbour.reason.startswith("substance:")


def test_judge_eval_cli(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "judge-eval",
            str(SAMPLE_SOURCE),
            "--out",
            str(tmp_path / "je"),
            "--part",
            "all",
            "--max-contracts",
            "1",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["n_documents"] == 1 and report["grader_version"] == "ref-v5"
    bad = CliRunner().invoke(
        app, ["judge-eval", str(SAMPLE_SOURCE), "--out", str(tmp_path / "x"), "--part", "x"]
    )
    assert bad.exit_code == 2


def test_split_is_fixed_by_name() -> None:
    # sha256("rlmdistill-judge-eval-v1:" + name)[:8] as an integer, even -> tune
    names = [f"EXAMPLE{i}_EX-10.1_Supply Agreement.txt" for i in range(40)]
    parts = {n: contract_split(n) for n in names}
    assert set(parts.values()) == {"tune", "heldout"}
    assert all(contract_split(n) == p for n, p in parts.items())  # no hidden state
    assert contract_split("SIBANNAC,INC_12_04_2017-EX-2.1-Strategic Alliance Agreement.txt") == (
        "tune"  # by the hash rule
    )


def test_contracts_the_grader_was_shaped_on_are_never_held_out() -> None:
    """Every packaged sample contract (the tests grade memos of them; two rules fix false
    passes found on Agape ATP and MJ Biotech) and the Oaktree agreement (a rule fixes a false
    pass on it) are in ``tune``; by the hash rule alone 6 of the 16 samples and Oaktree
    would be held out."""
    sample = sorted(c.name for c in (SAMPLE_SOURCE / "contracts").iterdir())
    assert len(sample) == 16
    oaktree = "OAKTREECAPITALGROUP,LLC_03_02_2020-EX-10.8-Services Agreement.txt"
    assert {contract_split(n) for n in [*sample, oaktree]} == {"tune"}
    assert frozenset([*sample, oaktree]) == SHAPED_ON
    held_by_hash = [
        n
        for n in sample
        if int(hashlib.sha256(f"{SPLIT_SALT}:{n}".encode()).hexdigest()[:8], 16) % 2
    ]
    assert len(held_by_hash) == 6


def test_quote_and_paraphrase_text() -> None:
    second = "Either party may terminate this Agreement upon ninety (90) days notice, effective now"
    span = f"Short bit<omitted>{second}"
    assert span_parts(span) == ["Short bit", second]
    # the first part of >= 8 words (the second here), its first 30 words
    assert quote_text(span) == second
    assert quote_text(span, n_words=3) == "Either party may"
    # content words (4+ letters, not stopwords: "bit", "either", "party", "agreement",
    # "upon", "days", "notice", "now" drop out) and numbers, once each, in groups of 4
    assert paraphrase_text(span) == "short terminate ninety 90, and also effective"
    assert "omitted" not in paraphrase_text(span)


def test_document_context_finds_names_and_boilerplate() -> None:
    # "Distributor" is capitalised in 3 of 3 non-initial uses: a defined term; "products"
    # is lower case; "shall" is in every one of the 25 segments: boilerplate
    body = " ".join(
        f"The Distributor shall order widget{i} items from the supplier." for i in range(20)
    )
    text = body + " Each Distributor shall keep records. The Distributor shall sell products."
    names, frequent = document_context(text)
    assert "distributor" in names and "products" not in names and "widget3" not in names
    assert {"shall", "order", "items", "supplier"} <= frequent
    assert "records" not in frequent


def _sample_room(tmp_path: Path) -> tuple[DataRoom, dict[str, str]]:
    out = tmp_path / "room16"
    build_cuad_room(SAMPLE_SOURCE, out, 16, seed=0)
    meta = json.loads((out / "room.json").read_text())
    return DataRoom.load(out), {c["source_file"][:12]: c["doc_id"] for c in meta["contracts"]}


def _grade_one(room: DataRoom, crit_doc: str, category: str, memo: str) -> tuple[str, str]:
    assert room.task is not None
    crit = next(
        c
        for c in room.task.criteria
        if c.evidence is not None
        and c.evidence.documents == [crit_doc]
        and c.evidence.category == category
    )
    task = Task(title="t", instructions="i", criteria=[crit])
    (v,) = ReferenceGrader().grade(memo, task, room, episode_id="e", memo_sha256=None)
    return v.verdict, v.reason


def test_issue20_unlabelled_passage_sharing_3_of_7_words_fails(tmp_path: Path) -> None:
    """Issue #20, second false pass: a memo quoting, under Termination For Convenience, a
    passage of the MJ Biotech joint venture agreement that overlaps no labelled clause.
    In this 16-contract room ref-v1 passed it on "shares 3 of 7 distinctive words of the
    labelled clause" (checked against ref-v1 from git history): words such as "participant"
    and "venture" are defined terms found all over the contract. ref-v2 leaves names,
    defined terms and boilerplate out and fails it ("best 2 of 6 distinctive words, needed
    4")."""
    room, docs = _sample_room(tmp_path)
    doc = docs["MJBIOTECH,IN"]
    text = " ".join(room.get(doc).text.split())
    start = text.index("In the event of a withdrawal of the Tax Matters Participant")
    passage = " ".join(text[start:].split()[:30])
    memo = (
        f'## {doc}\n\n- **Termination For Convenience**: the contract provides that "{passage}".\n'
    )
    verdict, reason = _grade_one(room, doc, "Termination For Convenience", memo)
    assert verdict == "FAIL" and reason.startswith("substance:"), reason
    # the same memo quoting the labelled clause instead passes
    assert room.task is not None
    gold = next(
        c.evidence.spans[0]
        for c in room.task.criteria
        if c.evidence is not None
        and c.evidence.documents == [doc]
        and c.evidence.category == "Termination For Convenience"
    )
    good = memo.replace(passage, quote_text(gold))
    assert _grade_one(room, doc, "Termination For Convenience", good)[0] == "PASS"


def test_issue20_other_clause_with_party_names_fails(tmp_path: Path) -> None:
    """Issue #20, first false pass, on the packaged sample: a memo quoting another clause of
    the same contract under a category passed ref-v1 because party names and defined terms
    of the contract (Franchisor, Smaaash, Centres, Territory) counted as distinctive words of
    the labelled clause: Simplicity Esports' Insurance clause under Exclusivity "shares 4 of
    13 distinctive words" under ref-v1 in this 16-contract room. ref-v2: "best 0 of 5". The
    Exclusivity clause itself still passes."""
    room, docs = _sample_room(tmp_path)
    doc = docs["SimplicityEs"]
    insurance = (
        "During the Term, Franchisee shall maintain policies of insurance as may be requested "
        "by Franchisor, subject to applicable law, in relation to the Smaaash Centres."
    )
    memo = f'## {doc}\n\n- **Exclusivity**: the contract provides that "{insurance}".\n'
    verdict, reason = _grade_one(room, doc, "Exclusivity", memo)
    assert verdict == "FAIL" and reason.startswith("substance:"), reason
    exclusive = (
        "Except as provided in the next sentence, the license granted herein shall be exclusive."
    )
    good = memo.replace(insurance, exclusive)
    assert _grade_one(room, doc, "Exclusivity", good)[0] == "PASS"


@pytest.mark.skipif(not SHARED_CUAD.is_dir(), reason="needs the shared CUAD subset")
def test_issue20_term_clause_under_termination_for_convenience_fails(tmp_path: Path) -> None:
    """Issue #20, first false pass as reported: the Oaktree services agreement's term clause
    ("this Agreement shall terminate on the earlier of (a) the expiration of the term of such
    Fund ...") quoted under Termination For Convenience. ref-v1: "shares 3 of 6 distinctive
    words" (Oaktree, Fund, Advisor: party names and defined terms). ref-v2: FAIL."""
    name = "OAKTREECAPITALGROUP,LLC_03_02_2020-EX-10.8-Services Agreement.txt"
    counts_exclude = [p.name for p in (SHARED_CUAD / "contracts").iterdir() if p.name != name]
    out = tmp_path / "oaktree"
    build_cuad_room(SHARED_CUAD, out, 1, seed=0, exclude=counts_exclude)
    room = DataRoom.load(out)
    (doc,) = [d.id for d in room.documents]
    term = (
        "In relation to each Fund, this Agreement shall terminate on the earlier of (a) the "
        "expiration of the term of such Fund or (b) the date, if any, on which Oaktree US (or "
        "any affiliate it has substituted in its stead in accordance with such Fund's Fund "
        "Agreement) is removed as general partner of such Fund"
    )
    memo = f'## {doc}\n\n- **Termination For Convenience**: the contract provides that "{term}".\n'
    verdict, reason = _grade_one(room, doc, "Termination For Convenience", memo)
    assert verdict == "FAIL" and reason.startswith("substance:"), reason


def test_eval_case_round_trips() -> None:
    case = EvalCase(
        case_id="c:gold_quote",
        room="r",
        document="d.txt",
        contract="D.txt",
        criterion_id="c",
        category="Exclusivity",
        kind="gold_quote",
        expected="PASS",
        memo="m",
    )
    assert EvalCase.model_validate_json(case.model_dump_json()) == case


def test_ref_v1_verdicts_keep_loading_and_ref_v2_grades_again(tmp_path: Path) -> None:
    """A run graded by ref-v1 (verdict lines with grader_version "ref-v1") keeps its lines;
    `judge` with ref-v2 grades the episode again and appends, once."""
    import datetime as dt
    import hashlib

    from rlmdistill.judge.run import judge_run, load_verdicts
    from rlmdistill.traces.schema import EpisodeSummary, RoomInfo, RunManifest, TokenUsage, Verdict
    from rlmdistill.traces.store import append_records

    room_dir = tmp_path / "rooms" / "r2"
    build_cuad_room(SAMPLE_SOURCE, room_dir, 2, seed=0)
    room = DataRoom.load(room_dir)
    assert room.task is not None
    crit = room.task.criteria[0]
    assert crit.evidence is not None and crit.evidence.category is not None
    doc, category = crit.evidence.documents[0], crit.evidence.category
    memo = f'## {doc}\n\n- **{category}**: "{quote_text(crit.evidence.spans[0])}".\n'
    sha = hashlib.sha256(memo.encode()).hexdigest()
    info = RoomInfo(
        room_id=room.room_id,
        room_hash=room.room_hash,
        path=str(room_dir),
        n_documents=len(room.documents),
        n_chars=room.n_chars,
        folders=room.folders,
    )
    run = tmp_path / "runs" / "old"
    run.mkdir(parents=True)
    manifest = RunManifest(run_id="old", config={}, config_hash="x", versions={}, rooms=[info])
    (run / "run.json").write_text(manifest.model_dump_json())
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    summary = EpisodeSummary(
        episode_id="ep0",
        run_id="old",
        sample_index=0,
        room=info,
        task_id=room.task.id,
        root_model="root",
        sub_model="sub",
        seed=0,
        status="completed",
        n_turns=1,
        n_sub_calls=0,
        tokens=TokenUsage(),
        wall_time_s=1.0,
        memo=memo,
        memo_chars=len(memo),
        memo_sha256=sha,
        started_at=t0,
        ended_at=t0,
    )
    append_records(run / "episodes.jsonl", [summary])
    old = Verdict(
        episode_id="ep0",
        grader="reference",
        grader_version="ref-v1",
        criterion_id=crit.id,
        verdict="FAIL",
        reason="written by ref-v1",
        memo_sha256=sha,
    )
    append_records(run / "verdicts" / "reference.jsonl", [old])
    first = judge_run(run, ReferenceGrader())
    assert (first.graded, first.skipped) == (1, 0)
    verdicts = load_verdicts(run, "reference")
    assert verdicts[0] == old  # the old line is kept, unchanged
    new = [v for v in verdicts if v.grader_version == "ref-v5"]
    assert len(new) == len(room.task.criteria) and len(verdicts) == 1 + len(new)
    assert next(v for v in new if v.criterion_id == crit.id).verdict == "PASS"
    again = judge_run(run, ReferenceGrader())
    assert (again.graded, again.skipped) == (0, 1)
