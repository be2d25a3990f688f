"""Reference grader: deterministic, offline grading of a memo against gold clause evidence.

It needs no model. It grades criteria that carry ``evidence`` (document ids, a clause
category and the labelled clause spans, as built by :mod:`rlmdistill.rooms.cuad`); others are
UNGRADABLE. It is this project's own heuristic, meant to be hard to game by listing names,
not a substitute for a careful judge. Rules, in order (the verdict's reason names the rule):

1. **empty** - no memo, or only whitespace: FAIL.
2. **citation** - the memo is split into passages: paragraphs separated by blank lines. A
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
5. **substance** - within +-600 characters (:data:`WINDOW_CHARS`) of a non-denied mention in
   a citing passage, the memo must share substance with one gold span: either a run of at
   least 8 (:data:`MIN_QUOTE_WORDS`) consecutive normalised words of the span (holding at
   least 2 content words), or at least ``max(min(3, n), ceil(25% of n))`` of the span's
   ``n`` distinctive words (needs ``n >= 2``). Distinctive words are lowercase alphabetic
   tokens of 4+ characters that are not stopwords, not words of any category name or
   synonym, not words of any document id, and not "room-common" (present in every document
   of the room; computed once per room, only for rooms of 3+ documents), plus the numbers of
   the span (digits; spelled-out numbers up to twenty and round tens count as digits). Spans
   with fewer than 2 distinctive words can only be matched by a quote. Otherwise FAIL
   "no substance of the clause near the citation".

PASS reasons name the evidence, e.g. "cites X; discusses change of control; 9-word quote of
the labelled clause".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

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

WINDOW_CHARS = 600
"""Characters on each side of a category mention searched for clause substance."""
MIN_QUOTE_WORDS = 8
"""Shortest run of consecutive span words that counts as a quote."""
WORD_SHARE = 0.25
"""Share of a span's distinctive words that counts as a paraphrase (at least 3)."""

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


def split_passages(memo: str) -> list[Passage]:
    """Split a memo into passages: paragraphs (separated by blank lines), each prefixed by
    the headings it sits under (markdown ``#`` headings or whole-line ``**bold**`` headings,
    which rank below ``######``). A heading with no paragraph under it is a passage alone."""
    passages: list[Passage] = []
    stack: list[tuple[int, str]] = []
    para: list[str] = []
    pending_heading = False

    def flush() -> None:
        nonlocal pending_heading
        if para or pending_heading:
            passages.append(Passage("\n".join([h for _, h in stack] + para)))
        para.clear()
        pending_heading = False

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
            if para:
                flush()
        else:
            para.append(line)
            pending_heading = False
    flush()
    return passages


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
    grams: dict[tuple[str, ...], list[int]]
    span_words: list[str]
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


def _tokens(text: str) -> list[str]:
    """:func:`words` with spelled-out numbers mapped to digits (``"two"`` -> ``"2"``)."""
    return [_NUMBER_WORDS.get(w, w) for w in words(text)]


def _gold(span: str, excluded: frozenset[str]) -> _Gold:
    toks = _tokens(span)
    grams: dict[tuple[str, ...], list[int]] = {}
    for j in range(len(toks) - MIN_QUOTE_WORDS + 1):
        gram = tuple(toks[j : j + MIN_QUOTE_WORDS])
        if len(content_words(gram)) >= 2:
            grams.setdefault(gram, []).append(j)
    distinctive = frozenset(
        w
        for w in toks
        if w not in excluded
        and (w.isdigit() or (w in content_words([w]) and not _is_category_word(w)))
    )
    return _Gold(grams, toks, distinctive)


def _longest_quote(window: list[str], gold: _Gold) -> int:
    best = 0
    for i in range(len(window) - MIN_QUOTE_WORDS + 1):
        for j in gold.grams.get(tuple(window[i : i + MIN_QUOTE_WORDS]), ()):
            n = MIN_QUOTE_WORDS
            while (
                i + n < len(window)
                and j + n < len(gold.span_words)
                and window[i + n] == gold.span_words[j + n]
            ):
                n += 1
            best = max(best, n)
    return best


def _needed_words(n: int) -> int | None:
    if n < 2:
        return None
    return max(min(3, n), math.ceil(WORD_SHARE * n))


class ReferenceGrader:
    """Deterministic reference grader (see the module docstring for the rules).

    ``grader_id`` is ``"reference"``, ``version`` ``"ref-v1"``. Room-common words are cached
    per ``room_hash``, so one instance can grade many episodes of the same rooms cheaply.
    """

    grader_id: str = "reference"
    version: str = "ref-v1"

    def __init__(self) -> None:
        self._room_words: dict[str, tuple[frozenset[str], frozenset[str]]] = {}

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

        ``room`` supplies room-common words and all document ids (excluded from distinctive
        words); with ``room=None`` only the criterion's own document ids are excluded.
        Never raises for a bad memo; ``None`` or blank memos FAIL every gradable criterion.
        """
        common, id_words = self._room_vocab(room)
        passages = split_passages(memo) if memo and memo.strip() else []
        norm = [ascii_fold(p.text).lower() for p in passages]
        verdicts = []
        for criterion in task.criteria:
            label, reason = self._grade_one(criterion, memo, norm, common, id_words)
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

    def _grade_one(
        self,
        criterion: Criterion,
        memo: str | None,
        norm: list[str],
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
        for k, text in enumerate(norm):
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

        # Rule 5: substance near a live mention.
        excluded = common | id_words | frozenset(w for d in ev.documents for w in words(d))
        golds = [_gold(span, excluded) for span in ev.spans]
        best_quote, best_share = 0, (0, 0, 0)
        for k, doc, s, e in live:
            text = masked[k]
            window_words = _tokens(text[max(0, s - WINDOW_CHARS) : e + WINDOW_CHARS])
            window_set = set(window_words)
            said = text[s:e]
            for gold in golds:
                quote = _longest_quote(window_words, gold)
                if quote >= MIN_QUOTE_WORDS:
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
            f"substance: no substance of the clause near the citation ({ev.category} in {docs}; "
            f"best {shared} of {total} distinctive words, needed {need}; no "
            f"{MIN_QUOTE_WORDS}-word quote)"
        )


def _ratio(best: tuple[int, int, int]) -> float:
    shared, _, need = best
    return shared / need if need else -1.0
