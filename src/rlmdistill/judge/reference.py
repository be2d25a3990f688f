"""Reference grader: deterministic, offline grading of a memo against gold clause evidence.

It needs no model. It grades criteria that carry ``evidence`` (document ids, a clause
category and the labelled clause spans, as built by :mod:`rlmdistill.rooms.cuad`); others are
UNGRADABLE. It is this project's own heuristic, meant to be hard to game by listing names,
not a substitute for a careful judge. Rules, in order (the verdict's reason names the rule):

1. **empty** - no memo, or only whitespace: FAIL.
1b. **copy** - the memo reproduces word for word at least half of one document's distinct
   8-word runs (and at least 300 of them; :mod:`rlmdistill.judge.copying`, thresholds
   measured there): FAIL every gradable criterion, whatever the rules below would say. A root
   with the documents in its REPL can otherwise "write" a memo by printing them.
2. **citation** - the memo is split into passages: paragraphs separated by blank lines (an
   indented paragraph under a list item stays with the item, as in markdown). A
   markdown heading (``#`` .. ``######``, or a line that is entirely ``**bold**``) starts a
   section; each paragraph is read together with the headings it sits under, so bullets under
   ``## Distribution/acme.txt`` cite that document. A passage cites a document when it
   contains the document id, its file name or (when at least 5 characters) its file stem,
   case-insensitively, with ``_``, ``-`` and whitespace treated alike. No citing passage:
   FAIL "document not cited".
3. **category** - a citing passage must mention the category: its name or a curated synonym
   (:data:`CATEGORY_TERMS`; e.g. change of control ~ "change in control", "merger",
   "acquisition of"). None: FAIL "category not discussed next to the citation".
4. **negation** - a mention whose sentence (split at ``. ! ? ;`` and newlines; quoted text
   ignored) denies the clause ("no ... clause/provision", "does not contain/include/have a
   ... provision", "not found", "none", "absent", "no such", "no mention", "not present",
   "is silent", ...) does not count. If every mention is denied: FAIL "memo says the clause is
   absent but the lawyers' label says it is present".
5. **substance** - the memo must share substance with one gold span *in the finding that
   names the category*, within +-600 characters (:data:`WINDOW_CHARS`) of a non-denied
   mention. A passage's body is cut into findings: a top-level bullet or numbered item, a
   table row or a ``Label:`` line starts one; wrapped lines, ``>`` quotes and indented
   sub-bullets continue it. A mention in a finding keeps that finding only; a mention in a
   heading keeps the findings under it. A finding whose label (the text before its first
   ``:``, dash or table bar) names another category (:data:`CATEGORY_TERMS`,
   :data:`OTHER_CUAD_CATEGORIES`) and not this one is attributed to that category: its
   quotes never count for this one, even when the quote itself mentions this category.
   Substance is either
   - a **quote**: a run of at least 8 (:data:`MIN_QUOTE_WORDS`) consecutive normalised
     words of one part of the span holding 2+ content words, or all of a part (a part of
     5 to 7 words, :data:`MIN_PART_WORDS`, needs one content word). Spans are split into
     parts at CUAD's ``<omitted>`` marker, which is never a word of the clause;
   - a **paraphrase**: at least ``max(min(MIN_SHARED, n), ceil(WORD_SHARE * n))`` of the
     span's ``n`` distinctive words (needs ``n >= MIN_DISTINCTIVE``). Distinctive words are
     lowercase alphabetic tokens of 4+ characters that are not stopwords, plus the span's
     numbers (digits; spelled-out numbers up to twenty and round tens count as digits),
     leaving out shared context: words of any category name or synonym, words of any
     document id, room-common words (in every document of a room of 3+ documents), and, per
     cited document (:func:`document_context`), its party names and defined terms (words
     written capitalised more often than not) and its boilerplate (words in at least
     :data:`FREQUENT_SHARE` of its sentences). The constants were tuned on the ``tune``
     half of the shared CUAD contracts (``benchmarks/tune_reference_grader.py``) and are
     reported on the other half (``rlmdistill judge-eval``, ``docs/judge.md``).

   Otherwise FAIL "no substance of the clause in the finding that names it".

PASS reasons name the evidence, e.g. "cites X; discusses change of control; 9-word quote of
the labelled clause".
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass

from rlmdistill.judge.copying import pasted
from rlmdistill.rooms.room import DataRoom
from rlmdistill.rooms.task import Criterion, Evidence, Task
from rlmdistill.rooms.text import ascii_fold, citation_regex, content_words, words
from rlmdistill.traces.schema import Verdict

__all__ = [
    "CATEGORY_TERMS",
    "MIN_QUOTE_WORDS",
    "WINDOW_CHARS",
    "Passage",
    "ReferenceGrader",
    "category_pattern",
    "split_passages",
]

VERSION = "ref-v5"
"""Grader version written into every verdict. ``ref-v4`` (until 2026-12-06): a list item
ending in a colon did not take the unindented paragraph after it. ``ref-v3`` (until
2026-12-05): an indented paragraph under a list item was a passage of its own. ``ref-v2``
(until 2026-12-04): no copy rule (a memo pasting the documents passed quote criteria).
``ref-v1`` (until 2026-12): 25% word share counting party names and boilerplate, +-600
characters across findings; verdicts of any version keep loading, and ``rlmdistill judge``
grades a run again under a new version."""
WINDOW_CHARS = 600
"""Characters on each side of a category mention searched for clause substance."""
MIN_QUOTE_WORDS = 8
"""Shortest run of consecutive span words that counts as a quote."""
MIN_PART_WORDS = 5
"""A clause part shorter than :data:`MIN_QUOTE_WORDS` counts as quoted when the memo holds
all of it and it has at least this many words."""
WORD_SHARE = 0.5
"""Share of a span's distinctive words that counts as a paraphrase (at least
:data:`MIN_SHARED`)."""
MIN_SHARED = 3
"""Fewest distinctive words a paraphrase must share (all of them when the span has fewer)."""
MIN_DISTINCTIVE = 2
"""Spans with fewer distinctive words than this can only be matched by a quote."""
FREQUENT_SHARE = 0.5
"""A word found in at least this share (most) of a document's segments is its boilerplate."""
MIN_SEGMENTS = 20
"""Documents with fewer segments have no boilerplate words (too few to count on)."""

# Synonym phrases per CUAD category. A trailing "*" lets the last word continue (assign* ->
# assignment, assigned); words are separated by any run of spaces, hyphens, underscores or "/".
CATEGORY_TERMS: dict[str, tuple[str, ...]] = {
    "Change Of Control": (
        "change of control",
        "change in control",
        "merger",
        "acquisition of",
        "acquired by",
        "acquirer",
        "controlling interest",
        "substantially all",
    ),
    "Anti-Assignment": ("anti assignment", "assign*", "non assignable", "transfer*"),
    "Exclusivity": ("exclusiv*", "sole and exclusive", "sole supplier", "sole distributor"),
    "Non-Compete": ("non compete", "compet*", "restrictive covenant*", "not to compete"),
    "Uncapped Liability": (
        "uncapped",
        "unlimited liability",
        "unlimited",
        "not capped",
        "carve out*",
        "carveout*",
        "not subject to the limitation",
        "excluded from the limitation",
        "exclusions from the limitation",
    ),
    "Cap On Liability": (
        "cap on liability",
        "liability cap",
        "cap",
        "caps",
        "capped",
        "limitation of liability",
        "limitation on liability",
        "limit* liability",
        "liability is limited",
        "liability shall be limited",
        "aggregate liability",
        "shall not exceed",
        "maximum liability",
    ),
    "Termination For Convenience": (
        "termination for convenience",
        "terminate for convenience",
        "convenience",
        "without cause",
        "for any reason",
        "at will",
    ),
    "Minimum Commitment": (
        "minimum commitment",
        "minimum*",
        "take or pay",
        "guaranteed purchase*",
        "purchase commitment",
    ),
    "Most Favored Nation": (
        "most favored nation",
        "most favoured nation",
        "most favo*",
        "mfn",
        "no less favo*",
        "best price",
    ),
    "Rofr/Rofo/Rofn": (
        "rofr",
        "rofo",
        "rofn",
        "first refusal",
        "first offer",
        "first negotiation",
        "right of first",
    ),
    "Liquidated Damages": ("liquidated damages", "liquidated", "termination fee", "break fee"),
    "Ip Ownership Assignment": (
        "ip ownership",
        "ownership of ip",
        "intellectual property",
        "ownership",
        "owns",
        "own all",
        "work made for hire",
        "work for hire",
        "right title and interest",
        "assign*",
    ),
    "Covenant Not To Sue": (
        "covenant not to sue",
        "not to sue",
        "not sue",
        "not to challenge",
        "not challenge",
        "contest",
    ),
    "Audit Rights": ("audit*", "inspect*", "books and records"),
    "Post-Termination Services": (
        "post termination",
        "transition services",
        "transition assistance",
        "transition period",
        "wind down",
        "after termination",
        "following termination",
        "after expiration",
        "sell off",
        "survive*",
    ),
    "Revenue/Profit Sharing": (
        "revenue sharing",
        "profit sharing",
        "revenue share",
        "profit share",
        "royalt*",
        "commission*",
        "revenue*",
        "profit*",
        "share of net",
    ),
}
"""Curated ways a memo names each CUAD category (besides the category name itself)."""

_SEP = r"[\s\-_/]+"
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_BOLD_LINE = re.compile(r"^\s*(\*\*|__)(?=\S)(.+?)(?<=\S)\1\s*:?\s*$")
_LIST_ITEM = re.compile(r"^\s{0,3}(?:[-*+\u2022]|\d{1,3}[.)])\s")
"""A markdown list item's first line (bullet or numbered)."""
_INDENTED = re.compile(r"^(?: {2,}|\t)\S")
"""A line indented as a list item's continuation paragraph."""
_SENTENCE_END = re.compile(r"[.!?;\n]")
_QUOTED = re.compile(r"\"[^\"\n]*\"|“[^”]*”|‘[^’\n]*’|`[^`\n]*`")
_NOUNS = r"(?:clause|provision|covenant|restriction|language|term|section|requirement)s?"
_NEGATIONS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        rf"\bno\s+(?:[\w/'-]+\s+){{0,6}}?{_NOUNS}\b",
        rf"\b(?:does|do|did)\s*n[o']t\s+(?:contain|include|have|provide\s+for|impose)\s+"
        rf"(?:any|an?)?\s*(?:[\w/'-]+\s+){{0,6}}?{_NOUNS}\b",
        r"\bnot\s+found\b",
        r"\bnone\b(?!\s+of)",
        r"\b(?:is|are|was|were|appears?|seems?)\s+absent\b",
        r"\babsent\s*(?:[.;:,)]|$)",
        r"\bno\s+such\b",
        r"\bno\s+mention",
        r"\bnot\s+present\b",
        r"\bnot\s+(?:mentioned|addressed|identified|included)\b",
        r"\bis\s+silent\b",
        r"\black(?:s|ing)?\s+(?:any|an?)\b",
        r"\bwithout\s+any\s+" + _NOUNS,
    )
)


def _phrase_regex(phrase: str) -> str:
    open_end = phrase.endswith("*")
    parts = [re.escape(p) for p in re.split(r"[\s\-_/]+", phrase.rstrip("*").lower()) if p]
    body = _SEP.join(parts)
    return rf"(?<![a-z0-9]){body}" + (r"[a-z]*" if open_end else r"(?![a-z0-9])")


def _category_phrases(category: str) -> list[str]:
    return [category, *CATEGORY_TERMS.get(category, ())]


def category_pattern(category: str) -> re.Pattern[str]:
    """Regex (over lowercased, accent-folded text) matching the category's name or any of its
    :data:`CATEGORY_TERMS` synonyms; unknown categories match their name only."""
    return re.compile("|".join(_phrase_regex(p) for p in _category_phrases(category)))


def _category_vocabulary() -> frozenset[str]:
    """Words of every category name and synonym (open-ended stems kept as prefixes)."""
    vocab: set[str] = set()
    for category in CATEGORY_TERMS:
        for phrase in _category_phrases(category):
            vocab.update(words(phrase.rstrip("*")))
    return frozenset(vocab)


_CATEGORY_VOCAB = _category_vocabulary()
_STEMS = tuple(
    w
    for phrases in CATEGORY_TERMS.values()
    for p in phrases
    if p.endswith("*")
    for w in words(p.rstrip("*"))[-1:]
)


def _is_category_word(word: str) -> bool:
    return word in _CATEGORY_VOCAB or word.startswith(_STEMS)


@dataclass(frozen=True)
class Passage:
    """One paragraph of a memo with the headings it sits under (``text`` includes them)."""

    text: str
    """Heading lines then the paragraph, newline-joined."""
    n_headings: int = 0
    """How many of the first lines of ``text`` are headings."""


def split_passages(memo: str) -> list[Passage]:
    """Split a memo into passages: paragraphs (separated by blank lines), each prefixed by
    the headings it sits under (markdown ``#`` headings or whole-line ``**bold**`` headings,
    which rank below ``######``). A heading with no paragraph under it is a passage alone.

    A blank line followed by an indented line (2+ spaces or a tab) inside a paragraph that
    holds a list item does not end the paragraph: in markdown that indented block is the
    item's next paragraph (a bullet whose quote of the clause sits on its own indented
    paragraph below it), so it is read with the bullet (since ``ref-v4``).

    Likewise, a paragraph holding a list item whose last line ends with a colon (a lead-in:
    "- Anti-assignment (doc-1): the clause reads:") takes the next paragraph when that one is
    neither a list item nor a heading (the quote it introduces, written unindented), and
    that paragraph's continuation lines with it (since ``ref-v5``)."""
    passages: list[Passage] = []
    stack: list[tuple[int, str]] = []
    para: list[str] = []
    pending_heading = False
    gap = False  # a blank line seen since the paragraph's last line

    def flush() -> None:
        nonlocal pending_heading, gap
        if para or pending_heading:
            passages.append(Passage("\n".join([h for _, h in stack] + para), len(stack)))
        para.clear()
        pending_heading = False
        gap = False

    for line in memo.splitlines():
        heading = _HEADING.match(line)
        bold = None if heading else _BOLD_LINE.match(line)
        if heading or bold:
            flush()
            level = len(heading.group(1)) if heading else 7
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, line.strip()))
            pending_heading = True
        elif not line.strip():
            gap = bool(para)
        else:
            if gap and not _continues_item(para, line):
                flush()
            gap = False
            para.append(line)
            pending_heading = False
    flush()
    return passages


def _continues_item(para: list[str], line: str) -> bool:
    """Whether ``line``, after a blank line, goes on the list item of ``para`` (see
    :func:`split_passages`): an indented line, or any non-item line after a lead-in colon."""
    if not any(_LIST_ITEM.match(x) for x in para):
        return False
    if _INDENTED.match(line):
        return True
    return para[-1].rstrip().endswith(":") and not _LIST_ITEM.match(line)


def _sentence(text: str, start: int, end: int) -> str:
    left = max((m.end() for m in _SENTENCE_END.finditer(text, 0, start)), default=0)
    right_match = _SENTENCE_END.search(text, end)
    right = right_match.start() if right_match else len(text)
    return text[left:right]


def _denies(sentence: str) -> bool:
    unquoted = _QUOTED.sub(" ", sentence)
    return any(p.search(unquoted) for p in _NEGATIONS)


@dataclass(frozen=True)
class _Gold:
    grams: dict[tuple[str, ...], list[tuple[int, int]]]
    """8-word runs of the span -> (part, offset) where they start."""
    parts: list[list[str]]
    """Tokens of each part of the span (parts are separated by CUAD's ``<omitted>``)."""
    distinctive: frozenset[str]


_NUMBERS_TEXT = """zero one two three four five six seven eight nine ten eleven twelve thirteen
fourteen fifteen sixteen seventeen eighteen nineteen twenty"""
_NUMBER_WORDS = {w: str(i) for i, w in enumerate(_NUMBERS_TEXT.split())} | {
    "thirty": "30",
    "forty": "40",
    "fifty": "50",
    "sixty": "60",
    "ninety": "90",
}
_OMITTED = re.compile(r"<\s*omitted\s*>", re.IGNORECASE)
"""CUAD's marker between the discontiguous parts of one labelled clause."""


def _tokens(text: str) -> list[str]:
    """:func:`words` with spelled-out numbers mapped to digits (``"two"`` -> ``"2"``)."""
    return [_NUMBER_WORDS.get(w, w) for w in words(text)]


def span_parts(span: str) -> list[str]:
    """The parts of a CUAD gold span, split at its ``<omitted>`` markers (empty parts
    dropped): the marker is not clause text, and a quote never runs across it."""
    return [p.strip() for p in _OMITTED.split(span) if p.strip()]


def _gold(span: str, excluded: frozenset[str]) -> _Gold:
    parts = [_tokens(p) for p in span_parts(span)]
    grams: dict[tuple[str, ...], list[tuple[int, int]]] = {}
    for k, toks in enumerate(parts):
        for j in range(len(toks) - MIN_QUOTE_WORDS + 1):
            grams.setdefault(tuple(toks[j : j + MIN_QUOTE_WORDS]), []).append((k, j))
    distinctive = frozenset(
        w
        for toks in parts
        for w in toks
        if w not in excluded
        and (w.isdigit() or (w in content_words([w]) and not _is_category_word(w)))
    )
    return _Gold(grams, parts, distinctive)


def _longest_quote(window: list[str], gold: _Gold) -> int:
    """Longest run of ``window`` quoting one part of the span that counts as a quote: at
    least :data:`MIN_QUOTE_WORDS` words holding 2+ content words, or a whole part of at least
    :data:`MIN_PART_WORDS` words holding a content word (short clauses, and clauses of
    boilerplate words such as "may be terminated by either party upon 90 days notice")."""
    best = 0
    for i in range(len(window) - MIN_QUOTE_WORDS + 1):
        for k, j in gold.grams.get(tuple(window[i : i + MIN_QUOTE_WORDS]), ()):
            part = gold.parts[k]
            n = MIN_QUOTE_WORDS
            while i + n < len(window) and j + n < len(part) and window[i + n] == part[j + n]:
                n += 1
            if n == len(part) or len(content_words(part[j : j + n])) >= 2:
                best = max(best, n)
    if best:
        return best
    joined = " " + " ".join(window) + " "
    for part in gold.parts:
        short = MIN_PART_WORDS <= len(part) < MIN_QUOTE_WORDS and content_words(part)
        if short and " " + " ".join(part) + " " in joined:
            best = max(best, len(part))
    return best


def _needed_words(n: int) -> int | None:
    if n < MIN_DISTINCTIVE:
        return None
    return max(min(MIN_SHARED, n), math.ceil(WORD_SHARE * n))


_WORD_CASED = re.compile(r"[A-Za-z][A-Za-z']*")
_AFTER_SENTENCE = re.compile(r"(?:^|[.!?:;\n\"“(]|\(\w\)|\d\.)\s*$")
_SEGMENT_SPLIT = re.compile(r"(?<=[.;:])\s+|\n\s*\n|\n(?=\s*(?:\(?[0-9a-z]{1,3}[.)]|[A-Z]))")


def document_context(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """Words of one document that are shared context, not a clause's substance:
    ``(names, frequent)``.

    - ``names``: party names and defined terms, i.e. words written with a capital initial
      (not all capitals) more often than in lower case, at least twice, outside the start of
      a sentence (``"Distributor"``, ``"Territory"``, ``"Erchonia"``).
    - ``frequent``: words found in at least :data:`FREQUENT_SHARE` of the document's
      segments (sentences and list items of 5+ words; split at ``. ; :`` and line starts
      that open an item) - the document's boilerplate.

    Both are lowercase, as :func:`~rlmdistill.rooms.text.words` gives them.
    """
    capital: dict[str, int] = {}
    lower: dict[str, int] = {}
    for m in _WORD_CASED.finditer(text):
        w = m.group(0)
        if w.islower():
            key = ascii_fold(w).lower()
            lower[key] = lower.get(key, 0) + 1
        elif w[0].isupper() and not w.isupper():
            if _AFTER_SENTENCE.search(text, max(0, m.start() - 6), m.start()):
                continue
            key = ascii_fold(w).lower()
            capital[key] = capital.get(key, 0) + 1
    names = frozenset(w for w, n in capital.items() if n >= 2 and n > lower.get(w, 0))
    segments = [set(_tokens(s)) for s in _SEGMENT_SPLIT.split(text)]
    segments = [s for s in segments if len(s) >= 5]
    frequent: frozenset[str] = frozenset()
    if len(segments) >= MIN_SEGMENTS:
        df: dict[str, int] = {}
        for seg in segments:
            for w in seg:
                df[w] = df.get(w, 0) + 1
        cut = FREQUENT_SHARE * len(segments)
        frequent = frozenset(w for w, n in df.items() if n >= cut)
    return names, frequent


class ReferenceGrader:
    """Deterministic reference grader (see the module docstring for the rules).

    ``grader_id`` is ``"reference"``, ``version`` :data:`VERSION`. Room-common words and
    each document's names, defined terms and boilerplate words are cached per ``room_hash``,
    so one instance can grade many episodes of the same rooms cheaply (not thread-safe to
    share across threads while the caches fill; the judge stage grades in turn).
    """

    grader_id: str = "reference"
    version: str = VERSION

    def __init__(self) -> None:
        self._room_words: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
        self._doc_words: dict[tuple[str, str], frozenset[str]] = {}

    # ------------------------------------------------------------------ public
    def grade(
        self,
        memo: str | None,
        task: Task,
        room: DataRoom | None,
        *,
        episode_id: str,
        memo_sha256: str | None,
    ) -> list[Verdict]:
        """One :class:`Verdict` per criterion of ``task``, in task order.

        ``room`` supplies room-common words, all document ids and the cited documents'
        names, defined terms and boilerplate (all excluded from distinctive words); with
        ``room=None`` only the criterion's own document ids are excluded. Never raises for a
        bad memo; ``None`` or blank memos FAIL every gradable criterion.
        """
        copy = pasted(memo, room)  # rule 1b: a paste of the data room is not a review
        common, id_words = self._room_vocab(room)
        passages = split_passages(memo) if memo and memo.strip() else []
        norm = [(ascii_fold(p.text).lower(), p.n_headings) for p in passages]
        verdicts = []
        for criterion in task.criteria:
            doc_words = self._document_vocab(room, criterion)
            label, reason = self._grade_one(criterion, memo, norm, common | doc_words, id_words)
            if copy is not None and label != "UNGRADABLE":
                label = "FAIL"
                reason = (
                    f"copy: the memo reproduces {copy.share:.0%} of {copy.document_id} "
                    "word for word; a paste of the data room is not a review"
                )
            verdicts.append(
                Verdict(
                    episode_id=episode_id,
                    grader=self.grader_id,
                    grader_version=self.version,
                    criterion_id=criterion.id,
                    criterion_type=criterion.type,
                    weight=criterion.weight,
                    verdict=label,
                    reason=reason,
                    memo_sha256=memo_sha256,
                )
            )
        return verdicts

    # ----------------------------------------------------------------- private
    def _room_vocab(self, room: DataRoom | None) -> tuple[frozenset[str], frozenset[str]]:
        if room is None:
            return frozenset(), frozenset()
        cached = self._room_words.get(room.room_hash)
        if cached is None:
            id_words = frozenset(w for d in room.documents for w in words(d.id))
            common: frozenset[str] = frozenset()
            if len(room.documents) >= 3:
                sets = [set(content_words(d.text)) for d in room.documents]
                common = frozenset(set.intersection(*sets))
            cached = (common, id_words)
            self._room_words[room.room_hash] = cached
        return cached

    def _document_vocab(self, room: DataRoom | None, criterion: Criterion) -> frozenset[str]:
        """Names, defined terms and boilerplate of the criterion's documents in ``room``."""
        ev = criterion.evidence
        if room is None or ev is None:
            return frozenset()
        out: set[str] = set()
        for doc_id in ev.documents:
            if doc_id not in room:
                continue
            key = (room.room_hash, doc_id)
            cached = self._doc_words.get(key)
            if cached is None:
                names, frequent = document_context(room.get(doc_id).text)
                cached = self._doc_words[key] = names | frequent
            out |= cached
        return frozenset(out)

    def _grade_one(
        self,
        criterion: Criterion,
        memo: str | None,
        norm: list[tuple[str, int]],
        common: frozenset[str],
        id_words: frozenset[str],
    ) -> tuple[str, str]:
        ev: Evidence | None = criterion.evidence
        if ev is None:
            return "UNGRADABLE", "criterion carries no machine-checkable evidence"
        if not ev.documents or not ev.category or not ev.spans:
            return "UNGRADABLE", "evidence lacks documents, category or spans"
        if not memo or not memo.strip():
            return "FAIL", "empty: no memo"

        # Rule 2: citation.
        cite_res = {doc: citation_regex(doc) for doc in ev.documents}
        citing: list[tuple[int, str]] = []
        masked: dict[int, str] = {}
        for k, (text, _) in enumerate(norm):
            for doc, cite_re in cite_res.items():
                if cite_re.search(text):
                    citing.append((k, doc))
                    break
            if citing and citing[-1][0] == k:
                # Words inside a citation (file names often hold "exclusive", "license", ...)
                # are not a discussion of the category: blank them out, keeping offsets.
                for cite_re in cite_res.values():
                    text = cite_re.sub(lambda m: " " * len(m.group(0)), text)
                masked[k] = text
        docs = ", ".join(ev.documents)
        if not citing:
            return "FAIL", f"citation: document not cited ({docs})"

        # Rule 3: category mentions in citing passages.
        regex = category_pattern(ev.category)
        mentions: list[tuple[int, str, int, int]] = []
        for k, doc in citing:
            mentions.extend((k, doc, m.start(), m.end()) for m in regex.finditer(masked[k]))
        if not mentions:
            return "FAIL", (
                f"category: category not discussed next to the citation "
                f"({ev.category}; {len(citing)} passage(s) cite {docs})"
            )

        # Rule 4: negation.
        live = [m for m in mentions if not _denies(_sentence(masked[m[0]], m[2], m[3]))]
        if not live:
            k, _, s, e = mentions[0]
            said = " ".join(_sentence(masked[k], s, e).split())[:160]
            return "FAIL", (
                "negation: memo says the clause is absent but the lawyers' label says it is "
                f"present ({ev.category} in {docs}; memo: {said!r})"
            )

        # Rule 5: substance in the finding that names the category, near the mention.
        excluded = common | id_words | frozenset(w for d in ev.documents for w in words(d))
        golds = [_gold(span, excluded) for span in ev.spans]
        other = _other_category_pattern(ev.category)
        best_quote, best_share = 0, (0, 0, 0)
        for k, doc, s, e in live:
            text = _finding_scope(masked[k], norm[k][0], norm[k][1], s, regex, other)
            if not text[s:e].strip():  # the mention sits in a finding of another category
                continue
            window_words = _tokens(text[max(0, s - WINDOW_CHARS) : e + WINDOW_CHARS])
            window_set = set(window_words)
            said = text[s:e]
            for gold in golds:
                quote = _longest_quote(window_words, gold)
                if quote:
                    return "PASS", (
                        f"cites {doc}; discusses {ev.category} ({said!r}); "
                        f"{quote}-word quote of the labelled clause"
                    )
                best_quote = max(best_quote, quote)
                need = _needed_words(len(gold.distinctive))
                shared = len(gold.distinctive & window_set)
                if need is not None and shared >= need:
                    return "PASS", (
                        f"cites {doc}; discusses {ev.category} ({said!r}); shares {shared} of "
                        f"{len(gold.distinctive)} distinctive words of the labelled clause"
                    )
                if need is not None and shared / need > _ratio(best_share):
                    best_share = (shared, len(gold.distinctive), need)
        shared, total, need = best_share
        return "FAIL", (
            f"substance: no substance of the clause in the finding that names it "
            f"({ev.category} in {docs}; best {shared} of {total} distinctive words, needed "
            f"{need}; no {MIN_QUOTE_WORDS}-word quote)"
        )


_ITEM_START = re.compile(
    r"^(?:\s{0,1}(?:[-*+\u2022]|\d{1,3}[.)]|\(?[a-z0-9]{1,3}\))\s"
    r"|\s*\|"
    r"|\s*[*_]{0,2}[a-z][\w&'/().-]*(?:[ \t]+[\w&'/().-]+){0,5}[*_]{0,2}\s*:[*_]{0,2}(?:\s|$))"
)
"""A body line that opens a new finding: a top-level bullet or numbered item, a table row,
or a ``Label:`` line (up to 6 words before the colon); other lines continue the finding
above them (wrapped prose, ``>`` quotes, indented sub-bullets)."""
_LABEL_END = re.compile(r":|\s[-\u2013\u2014]\s|\|")


def _items(text: str, n_headings: int) -> list[tuple[int, int, bool]]:
    """``(start, end, is_heading)`` character ranges of a passage's findings: each heading
    line alone, then the body lines grouped as :data:`_ITEM_START` says."""
    out: list[tuple[int, int, bool]] = []
    pos = 0
    for i, line in enumerate(text.split("\n")):
        end = pos + len(line)
        if i < n_headings:
            out.append((pos, end, True))
        elif not out or out[-1][2] or _ITEM_START.match(line):
            out.append((pos, end, False))
        else:
            out[-1] = (out[-1][0], end, False)
        pos = end + 1
    return out


def _label(item: str) -> str:
    """Unquoted head of a finding: text before its first ``:``, dash or table bar (within
    80 characters), else its first 80 characters."""
    head = _QUOTED.sub(" ", item).lstrip(" \t-*+|#>:\u2022")
    cut = _LABEL_END.search(head, 0, 80)
    return head[: cut.start()] if cut else head[:80]


def _finding_scope(
    text: str,
    lines: str,
    n_headings: int,
    at: int,
    own: re.Pattern[str],
    other: re.Pattern[str],
) -> str:
    """``text`` (a passage with citations blanked) with everything outside the finding that
    holds offset ``at`` blanked too (offsets kept); ``lines`` is the same passage unblanked,
    whose lines decide where findings start. A finding is attributed to another category
    when its label (:func:`_label`) names another category and not this one. A mention in a
    body finding keeps that finding only, or nothing when the finding is attributed to
    another category (the mention is then inside, e.g., a quote filed under another
    heading). A mention in a heading keeps the heading and every body finding not attributed
    to another category."""
    items = _items(lines, n_headings)

    def elsewhere(s: int, e: int) -> bool:
        label = _label(text[s:e])
        others = [m.span() for m in other.finditer(label)]
        if not others:
            return False
        # "anti-assignment" names Anti-Assignment, though "assignment" alone could be IP
        # ownership: an own match inside a longer match of another category does not count
        return all(
            any(a <= m.start() and m.end() <= b and b - a > m.end() - m.start() for a, b in others)
            for m in own.finditer(label)
        )

    keep: list[tuple[int, int]] = []
    for start, end, heading in items:
        if start <= at <= end:
            if not heading:
                keep = [] if elsewhere(start, end) else [(start, end)]
                break
            keep = [(start, end)] + [(s, e) for s, e, h in items if not h and not elsewhere(s, e)]
            break
    out = [" "] * len(text)
    for s, e in keep:
        out[s:e] = text[s:e]
    return "".join(out)


OTHER_CUAD_CATEGORIES: tuple[str, ...] = (
    "Document Name",
    "Parties",
    "Agreement Date",
    "Effective Date",
    "Expiration Date",
    "Renewal Term",
    "Notice Period To Terminate Renewal",
    "Governing Law",
    "Competitive Restriction Exception",
    "Non-Solicit Of Customers",
    "No-Solicit Of Employees",
    "Non-Disparagement",
    "License Grant",
    "Non-Transferable License",
    "Affiliate License",
    "Unlimited License",
    "All-You-Can-Eat License",
    "Irrevocable Or Perpetual License",
    "Source Code Escrow",
    "Joint Ip Ownership",
    "Volume Restriction",
    "Price Restrictions",
    "Warranty Duration",
    "Insurance",
    "Third Party Beneficiary",
    "Term",
    "Termination",
    "Confidentiality",
    "Indemnification",
    "Warranty",
)
"""CUAD categories with no criterion here, plus common memo headings, whose name in a
finding's label attributes it to another category."""


@functools.lru_cache(maxsize=64)
def _other_category_pattern(category: str) -> re.Pattern[str]:
    """Names and synonyms of every category but ``category`` (see :func:`_finding_scope`)."""
    phrases = [
        p
        for c in (*CATEGORY_TERMS, *OTHER_CUAD_CATEGORIES)
        if c != category
        for p in _category_phrases(c)
    ]
    phrases.sort(key=len, reverse=True)  # at one position the longest phrase wins
    return re.compile("|".join(_phrase_regex(p) for p in phrases))


def _ratio(best: tuple[int, int, int]) -> float:
    shared, _, need = best
    return shared / need if need else -1.0
