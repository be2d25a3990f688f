"""Small text helpers shared by room builders and graders.

Everything here is deterministic and dependency-free: whitespace normalisation, word
tokenisation, a stopword list (English function words plus contract boilerplate) and slugs.
Graders and builders import these so that "a word" means the same thing everywhere.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable

__all__ = [
    "STOPWORDS",
    "ascii_fold",
    "content_words",
    "normalise_ws",
    "slugify",
    "words",
]

_WS = re.compile(r"\s+")
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")

_STOPWORDS_TEXT = """
a about above after again against all also am an and any are as at be because been before
being below between both but by can could did do does doing down during each either else etc
every few for from further had has have having he her here hers herself him himself his how
however i if in into is it its itself just may me might more most must my myself neither no
nor not now of off on once only or other otherwise our ours ourselves out over own same
shall she should so some such than that the their theirs them themselves then there thereby
therefore therein thereof thereon thereto these they this those through thus to too under
until unless up upon very was we were what when where whereas whether which while who whom
whose why will with within without would you your yours yourself yourselves hereby herein
hereof hereto hereunder thereunder wherein whereby hereinafter foregoing agreement
agreements party parties section sections clause clauses provision provisions contract
contracts article articles paragraph paragraphs term terms date dates including include
includes included respect respective respectively pursuant accordance applicable subject
following means mean meaning defined set forth said written notice company companies make
made time times days year years period
"""

STOPWORDS: frozenset[str] = frozenset(_STOPWORDS_TEXT.split())
"""English function words plus contract boilerplate that carries no substance on its own."""


def ascii_fold(text: str) -> str:
    """Return ``text`` with accents removed (NFKD, combining marks dropped)."""
    if text.isascii():  # nothing to fold (the common case; NFKD is the identity on ASCII)
        return text
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def normalise_ws(text: str) -> str:
    """Collapse every run of whitespace to one space and strip the ends."""
    return _WS.sub(" ", text).strip()


def words(text: str) -> list[str]:
    """Lowercase alphanumeric tokens of ``text`` (accents folded), in order.

    Punctuation separates tokens, so ``"non-compete"`` gives ``["non", "compete"]``.
    """
    return _WORD.findall(ascii_fold(text).lower())


def content_words(text: str | Iterable[str], *, min_len: int = 4) -> list[str]:
    """Alphabetic tokens of at least ``min_len`` characters that are not :data:`STOPWORDS`.

    ``text`` is either a string or already tokenised words; order and repeats are kept.
    """
    tokens = words(text) if isinstance(text, str) else text
    return [w for w in tokens if len(w) >= min_len and w.isalpha() and w not in STOPWORDS]


def slugify(text: str, sep: str = "-") -> str:
    """Lowercase ASCII slug: runs of non-alphanumerics become ``sep`` (``"Rofr/Rofo"`` ->
    ``"rofr-rofo"``)."""
    folded = ascii_fold(text).lower()
    return re.sub(r"[^a-z0-9]+", sep, folded).strip(sep)


MIN_STEM_CHARS = 5
"""File stems shorter than this do not count as a citation on their own."""


@functools.lru_cache(maxsize=4096)
def citation_regex(doc_id: str) -> re.Pattern[str]:
    """Regex over lowercased, accent-folded text matching the id, file name or stem of a
    document, with ``_``, ``-`` and whitespace runs treated alike (built once per id: the
    grader, the credit of sub-calls and the report ask for the same ids many times)."""
    name = doc_id.rsplit("/", 1)[-1]
    stem = name.rsplit(".", 1)[0] if "." in name else name
    forms = {doc_id, name}
    if len(stem) >= MIN_STEM_CHARS:
        forms.add(stem)
    alternatives = []
    for form in sorted(forms, key=len, reverse=True):
        parts = [re.escape(p) for p in re.split(r"[\s_\-]+", ascii_fold(form).lower()) if p]
        alternatives.append(r"[\s_\-]+".join(parts))
    return re.compile(r"(?<![a-z0-9])(?:" + "|".join(alternatives) + r")(?![a-z0-9])")


def cited_documents(text: str | None, doc_ids: Iterable[str]) -> list[str]:
    """The ``doc_ids`` that ``text`` cites (see :func:`citation_regex`), in the given order."""
    if not text:
        return []
    folded = ascii_fold(text).lower()
    return [d for d in doc_ids if citation_regex(d).search(folded)]
