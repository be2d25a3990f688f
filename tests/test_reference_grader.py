"""Reference grader on a real CUAD room: good memos pass, gaming memos fail."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from conftest import CUAD_SOURCE as CUAD

from rlmdistill.judge import Grader, ReferenceGrader, pass_rates, split_passages
from rlmdistill.judge.reference import CATEGORY_TERMS, category_pattern
from rlmdistill.rooms import Criterion, DataRoom, Task, build_cuad_room, load_task
from rlmdistill.rooms.text import content_words
from rlmdistill.traces.schema import Verdict


@pytest.fixture(scope="module")
def room(tmp_path_factory: pytest.TempPathFactory) -> DataRoom:
    out = tmp_path_factory.mktemp("cuad") / "room"
    build_cuad_room(CUAD, out, n_contracts=8, seed=11)
    loaded = DataRoom.load(out)
    assert loaded.task is not None and len(loaded.task.criteria) >= 20
    return loaded


def _task(room: DataRoom) -> Task:
    assert room.task is not None
    return room.task


def _grade(room: DataRoom, memo: str | None) -> list[Verdict]:
    return ReferenceGrader().grade(memo, _task(room), room, episode_id="ep-1", memo_sha256=None)


def _ev(crit: Criterion) -> tuple[str, str, list[str]]:
    ev = crit.evidence
    assert ev is not None and ev.category is not None
    return ev.documents[0], ev.category, ev.spans


def test_good_memo_quoting_the_clauses_passes(room: DataRoom) -> None:
    parts = ["# Due-diligence memo", "Summary: findings per contract below."]
    for crit in _task(room).criteria:
        doc_id, category, spans = _ev(crit)
        quote = " ".join(spans[0].split()[:25])
        parts.append(f'- {category} ({doc_id}): the contract provides that "{quote}".')
    memo = "\n\n".join(parts)
    sha = hashlib.sha256(memo.encode()).hexdigest()
    verdicts = ReferenceGrader().grade(memo, _task(room), room, episode_id="ep-1", memo_sha256=sha)
    assert [v.criterion_id for v in verdicts] == [c.id for c in _task(room).criteria]
    assert all(v.verdict == "PASS" for v in verdicts), [v.reason for v in verdicts]
    # a quote of >= 8 words decides, or (clauses shorter than 8 words) the distinctive-word share
    assert all(
        "-word quote of the labelled clause" in v.reason
        or "distinctive words of the labelled clause" in v.reason
        for v in verdicts
    )
    v = verdicts[0]
    assert (v.grader, v.grader_version, v.episode_id, v.memo_sha256) == (
        "reference",
        "ref-v5",
        "ep-1",
        sha,
    )
    assert v.criterion_type == "finding" and v.weight == 1.0
    assert pass_rates(verdicts, _task(room).criteria).pass_rate == 1.0


def test_paraphrase_sharing_distinctive_words_passes(room: DataRoom) -> None:
    """Under a heading that cites the document, a bullet restating the clause's content
    words (in an order that quotes nothing) passes on the word-share rule."""
    crit = next(c for c in _task(room).criteria if len(set(content_words(_ev(c)[2][0]))) >= 12)
    doc_id, category, spans = _ev(crit)
    restated = " ".join(sorted(set(content_words(spans[0]))))
    memo = f"## {doc_id}\n\n### {category}\n\n- In substance: {restated}.\n"
    verdict = next(v for v in _grade(room, memo) if v.criterion_id == crit.id)
    assert verdict.verdict == "PASS", verdict.reason
    assert "distinctive words" in verdict.reason


def test_memo_listing_every_id_and_category_fails(room: DataRoom) -> None:
    names = ", ".join(CATEGORY_TERMS)
    synonyms = ", ".join(t.rstrip("*") for terms in CATEGORY_TERMS.values() for t in terms)
    generic = "clause, provision, agreement, party, term, rights, obligations, consent"
    blocks = [f"## {d.id}\n\n{names}. {synonyms}. {generic}." for d in room.documents]
    one_line = " ".join(d.id for d in room.documents) + f" {names} {generic}"
    for memo in ("\n\n".join(blocks), one_line):
        verdicts = _grade(room, memo)
        assert all(v.verdict == "FAIL" for v in verdicts)
        assert all(v.reason.startswith("substance:") for v in verdicts), {
            v.reason for v in verdicts
        }


def test_memo_denying_labelled_clauses_fails(room: DataRoom) -> None:
    lines = []
    for crit in _task(room).criteria:
        doc_id, category, _ = _ev(crit)
        lines.append(f"{doc_id}: no {category} clause found.")
    verdicts = _grade(room, "\n\n".join(lines))
    assert all(v.verdict == "FAIL" for v in verdicts)
    assert all("memo says the clause is absent" in v.reason for v in verdicts)
    variants = ["does not contain a {c} provision", "{c}: none", "{c} is absent", "{c}: not found"]
    crit = _task(room).criteria[0]
    doc_id, category, _ = _ev(crit)
    for variant in variants:
        memo = f"{doc_id}: " + variant.format(c=category) + "."
        verdict = _grade(room, memo)[0]
        assert verdict.verdict == "FAIL" and verdict.reason.startswith("negation:"), memo


def test_empty_and_missing_memos_fail(room: DataRoom) -> None:
    for memo in (None, "", "  \n\n "):
        verdicts = _grade(room, memo)
        assert len(verdicts) == len(_task(room).criteria)
        assert all(v.verdict == "FAIL" and v.reason.startswith("empty:") for v in verdicts)


def test_uncited_and_undiscussed_fail(room: DataRoom) -> None:
    crit = _task(room).criteria[0]
    doc_id, category, spans = _ev(crit)
    quote = " ".join(spans[0].split()[:25])
    uncited = _grade(room, f'{category}: the contract provides that "{quote}".')[0]
    assert uncited.verdict == "FAIL" and uncited.reason.startswith("citation:")
    undiscussed = _grade(room, f"{doc_id}: reviewed, see the schedules.")[0]
    assert undiscussed.verdict == "FAIL" and undiscussed.reason.startswith("category:")
    # a quote far away from the category mention does not count (pick a quote that does
    # not itself mention the category)
    crit = next(
        c
        for c in _task(room).criteria
        if not category_pattern(_ev(c)[1]).search(" ".join(_ev(c)[2][0].split()[:25]).lower())
    )
    doc_id, category, spans = _ev(crit)
    quote = " ".join(spans[0].split()[:25])
    far = f"{doc_id}: {category} issue noted." + " Filler sentence here." * 60 + f' "{quote}"'
    verdict = next(v for v in _grade(room, far) if v.criterion_id == crit.id)
    assert verdict.reason.startswith("substance:"), verdict.reason


def test_citation_forms(room: DataRoom) -> None:
    crit = _task(room).criteria[0]
    doc_id, category, spans = _ev(crit)
    quote = " ".join(spans[0].split()[:25])
    name = doc_id.rsplit("/", 1)[1]
    stem_spaced = name.removesuffix(".txt").replace("_", " ").upper()
    for cited in (doc_id, name, stem_spaced):
        memo = f'**{cited}**\n\n- {category}: "{quote}"\n'
        assert _grade(room, memo)[0].verdict == "PASS", cited


def test_criteria_without_evidence_are_ungradable() -> None:
    task = load_task(Path("/work/shared/data/lab/task.example.json"))
    verdicts = ReferenceGrader().grade("a memo", task, None, episode_id="e", memo_sha256=None)
    assert [v.verdict for v in verdicts] == ["UNGRADABLE"] * 3
    assert verdicts[0].reason == "criterion carries no machine-checkable evidence"
    rates = pass_rates(verdicts, task.criteria)
    assert rates.pass_rate == 0.0 and rates.graded_pass_rate is None and rates.n_ungradable == 3


def test_grader_protocol() -> None:
    assert isinstance(ReferenceGrader(), Grader)


def test_split_passages_inherits_headings() -> None:
    memo = "# Memo\n\nIntro.\n\n## Doc A\n\n- one\n- two\n\n### Sub\n\ntext\n\n## Doc B\n"
    texts = [p.text for p in split_passages(memo)]
    assert texts == [
        "# Memo\nIntro.",
        "# Memo\n## Doc A\n- one\n- two",
        "# Memo\n## Doc A\n### Sub\ntext",
        "# Memo\n## Doc B",
    ]


SPLIT_CASES = {
    # Markdown: after a blank line, an indented block under a list item is the item's next
    # paragraph. Before ref-v4 the blank line ended the passage, so a bullet naming the
    # provision with its quote on an indented paragraph below it was never read whole.
    "indented paragraph (ref-v4)": (
        "## Doc A\n\n- Anti-assignment: the licensee may not assign.\n\n"
        '    "Neither party may assign this Agreement without consent."\n\n'
        "Closing remark, not indented.\n\n  indented text under prose stays apart\n",
        [
            "## Doc A\n- Anti-assignment: the licensee may not assign.\n"
            '    "Neither party may assign this Agreement without consent."',
            "## Doc A\nClosing remark, not indented.",
            "## Doc A\n  indented text under prose stays apart",
        ],
    ),
    # A bullet ending in a colon introduces the next paragraph (the quickstart's root writes
    # "...: Sure, here is the sentence with anti-assignment:" then the quote, unindented): read
    # with the bullet since ref-v5. A list item or heading after the colon is not taken, nor
    # is a paragraph after a bullet without a colon, nor one after prose ending in a colon.
    "after a lead-in colon (ref-v5)": (
        "## Findings\n- Anti-assignment (doc-a): here is the sentence:\n\n"
        '"Neither party may assign this Agreement."\nwithout consent.\n\n'
        "Closing remark.\n\n- Next steps:\n\n- ask for the schedules\n\n"
        "Intro prose:\n\nA paragraph.\n\n- Cap (doc-b): none found.\n\nAnother paragraph.\n",
        [
            "## Findings\n- Anti-assignment (doc-a): here is the sentence:\n"
            '"Neither party may assign this Agreement."\nwithout consent.',
            "## Findings\nClosing remark.",
            "## Findings\n- Next steps:",
            "## Findings\n- ask for the schedules",
            "## Findings\nIntro prose:",
            "## Findings\nA paragraph.",
            "## Findings\n- Cap (doc-b): none found.",
            "## Findings\nAnother paragraph.",
        ],
    ),
}


@pytest.mark.parametrize("case", list(SPLIT_CASES))
def test_a_bullets_next_paragraph_is_read_with_the_bullet_when_it_continues_it(case: str) -> None:
    """Which paragraphs after a list item :func:`split_passages` keeps in the item's passage."""
    memo, expected = SPLIT_CASES[case]
    assert [p.text for p in split_passages(memo)] == expected


QUOTE_LAYOUTS = {
    # the quote on the bullet's indented second paragraph: PASS from ref-v4 (ref-v3 read it
    # as another passage without citation or category: FAIL)
    "indented": '# Memo\n\n- **{category}** ({doc}): the clause reads:\n\n   "{quote}"\n',
    # the quote unindented after the bullet's lead-in colon: PASS from ref-v5 (ref-v4: FAIL)
    "after a colon": '# Memo\n\n- {category} ({doc}): Sure, here is the sentence:\n\n"{quote}"\n',
    # the same quote after a bullet that does not lead into it: a passage of its own, FAIL
    "apart": '# Memo\n\n- {category} ({doc}): the clause reads as follows.\n\nThe text: "{quote}"\n',
}


@pytest.mark.parametrize("layout", list(QUOTE_LAYOUTS))
def test_a_quote_in_the_paragraph_after_the_bullet_counts_when_the_bullet_leads_into_it(
    room: DataRoom, layout: str
) -> None:
    """A bullet names the provision and cites the document; its 20-word quote of the clause
    sits in the paragraph after it, laid out as the quickstart's root writes it."""
    crit = next(c for c in _task(room).criteria if len(_ev(c)[2][0].split()) >= 12)
    doc_id, category, spans = _ev(crit)
    quote = " ".join(spans[0].split()[:20])
    memo = QUOTE_LAYOUTS[layout].format(category=category, doc=doc_id, quote=quote)
    verdict = next(v for v in _grade(room, memo) if v.criterion_id == crit.id)
    if layout == "apart":
        assert verdict.verdict == "FAIL", verdict.reason
    else:
        assert verdict.verdict == "PASS", verdict.reason
        assert "-word quote of the labelled clause" in verdict.reason


def test_pass_rates_arithmetic() -> None:
    crits = [
        Criterion(id=f"c{i}", title="t", match_criteria="m", weight=w)
        for i, w in enumerate([1.0, 2.0, 1.0, 4.0])
    ]

    def verdict(cid: str, label: str) -> Verdict:
        return Verdict(
            episode_id="e",
            grader="g",
            grader_version="1",
            criterion_id=cid,
            verdict=label,
            reason="",
        )  # type: ignore[arg-type]

    rates = pass_rates(
        [
            verdict("c0", "PASS"),
            verdict("c1", "FAIL"),
            verdict("c2", "UNGRADABLE"),
            verdict("zz", "PASS"),
        ],
        crits,
    )
    assert (rates.n_criteria, rates.n_pass, rates.n_fail, rates.n_ungradable, rates.n_missing) == (
        4,
        1,
        1,
        1,
        1,
    )
    assert rates.pass_rate == 0.25
    assert rates.graded_pass_rate == 0.5
    assert rates.weighted_pass_rate == 1.0 / 8.0
    empty = pass_rates([], [])
    assert empty.pass_rate is None and empty.weighted_pass_rate is None


def _quotable(room: DataRoom) -> Criterion:
    """A criterion whose first span's first 25 words do not themselves name the category."""
    return next(
        c
        for c in _task(room).criteria
        if not category_pattern(_ev(c)[1]).search(" ".join(_ev(c)[2][0].split()[:25]).lower())
        and len(_ev(c)[2][0].split()) >= 12
    )


def test_quote_on_a_neighbouring_line_of_another_category_fails(room: DataRoom) -> None:
    """Issue #20: a quote under another category's bullet, on the line after the one that
    names this category, is not this finding's substance (ref-v1 counted anything within
    600 characters). The same quote on this category's own line, in a sub-bullet or a
    ``>`` quote under it, or in a paragraph under a heading naming the category, passes."""
    crit = _quotable(room)
    doc_id, category, spans = _ev(crit)
    quote = " ".join(spans[0].split()[:25])

    def verdict(body: str) -> Verdict:
        return next(
            v for v in _grade(room, f"## {doc_id}\n\n{body}\n") if v.criterion_id == crit.id
        )

    other = "Governing Law"
    neighbour = verdict(f'- **{category}**: see below.\n- **{other}**: "{quote}".')
    assert neighbour.verdict == "FAIL" and neighbour.reason.startswith("substance:")
    labelled = verdict(f'{category}: see below.\n{other}: "{quote}".')
    assert labelled.verdict == "FAIL"
    assert verdict(f'- **{category}**: "{quote}".\n- **{other}**: New York.').verdict == "PASS"
    assert verdict(f'- **{category}**:\n  - "{quote}"').verdict == "PASS"
    assert verdict(f'- **{category}**:\n> "{quote}"').verdict == "PASS"
    assert verdict(f'### {category}\n\nThe contract says "{quote}".').verdict == "PASS"
    # under a heading naming the category, a bullet filed under another category does not count
    filed = verdict(f'### {category}\n\n- {other}: "{quote}"')
    assert filed.verdict == "FAIL"


def test_omitted_marker_is_not_a_word_of_the_clause() -> None:
    """CUAD joins the parts of a discontiguous clause with ``<omitted>``; ref-v1 made
    "omitted" a distinctive word and let a quote run across the marker."""
    from rlmdistill.judge.reference import span_parts

    assert span_parts("Licensee shall<omitted>(c) pay all fees <Omitted> ") == [
        "Licensee shall",
        "(c) pay all fees",
    ]
    evidence = {
        "documents": ["Contracts/acme.txt"],
        "category": "Audit Rights",
        "spans": ["Vendor keeps ledgers<omitted>reviewers examine ledgers quarterly onsite"],
    }
    crit = Criterion(id="c", title="t", match_criteria="m", evidence=evidence)
    task = Task(title="t", instructions="i", criteria=[crit])
    grader = ReferenceGrader()

    def grade(text: str) -> str:
        memo = f"## Contracts/acme.txt\n\n- Audit rights: {text}\n"
        return grader.grade(memo, task, None, episode_id="e", memo_sha256=None)[0].verdict

    # distinctive words: vendor, keeps, ledgers, reviewers, examine, quarterly, onsite (7);
    # "omitted" is not one, so "omitted ledgers onsite" shares 2 of 7 < max(3, 3.5 -> 4)
    assert grade("omitted ledgers onsite omitted") == "FAIL"
    # vendor, ledgers, reviewers, quarterly, onsite: 5 of 7 >= ceil(0.5 * 7) = 4 ("examined"
    # is not "examine"): a paraphrase
    assert grade("vendor ledgers examined by reviewers quarterly onsite") == "PASS"


def _paste(room: DataRoom) -> str:
    """The quickstart base root's memo of 2026-12-04, in kind: the ``repr`` of a dict of the
    room's documents (id -> text), printed as the memo."""
    return repr({d.id: d.text for d in room.documents})


def test_a_memo_pasting_the_documents_fails_every_criterion(room: DataRoom) -> None:
    """The paste cites every document and holds every labelled clause word for word, so the
    rules from citation on pass most criteria; the copy rule fails them all, naming the
    document and the share."""
    from rlmdistill.judge.reference import ReferenceGrader as Grader_

    memo = _paste(room)
    verdicts = _grade(room, memo)
    assert {v.verdict for v in verdicts} == {"FAIL"}
    assert all(v.reason.startswith("copy: the memo reproduces 9") for v in verdicts), verdicts[0]
    # without the copy rule (as ref-v2 graded) the same memo passes quote criteria
    norm = [(p.text.lower(), p.n_headings) for p in split_passages(memo)]
    grader = Grader_()
    common, id_words = grader._room_vocab(room)
    crit = _task(room).criteria[0]
    label, reason = grader._grade_one(
        crit, memo, norm, common | grader._document_vocab(room, crit), id_words
    )
    assert label == "PASS", reason


def test_copied_shares_per_document(room: DataRoom) -> None:
    """Per-document run counts on a hand-built memo: half of one document's text (its first
    half of words) reproduces about half its runs; quoting one clause reproduces few."""
    from rlmdistill.judge.copying import GRAM_WORDS, copied_documents, pasted
    from rlmdistill.rooms.text import words

    doc = max(room.documents, key=lambda d: d.n_chars)
    tokens = words(doc.text)
    half = " ".join(tokens[: len(tokens) // 2])
    shares = {c.document_id: c for c in copied_documents(half, room)}
    mine = shares[doc.id]
    distinct_runs = len({tuple(tokens[i : i + GRAM_WORDS]) for i in range(len(tokens) - 7)})
    assert mine.total == distinct_runs
    assert 0.4 < mine.share < 0.6
    assert pasted(half, room) == (mine if mine.share >= 0.5 else None)
    crit = _task(room).criteria[0]
    quote = " ".join(_ev(crit)[2][0].split()[:40])
    one_clause = f'- {_ev(crit)[1]} ({_ev(crit)[0]}): "{quote}"'
    assert max(c.share for c in copied_documents(one_clause, room)) < 0.05
    assert pasted(one_clause, room) is None
    assert pasted(None, room) is None and pasted("  ", room) is None
