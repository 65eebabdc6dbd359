"""Keyword retrieval: the question's words, weighed by how rare they are in the index.

PostgreSQL's websearch syntax ANDs every word, and a natural question rarely
matches a chunk whole. Here each content word, and each identifier as a phrase
(``max_connections``, ``os.path.join``, ``HB-4042``), is a term of its own. A
chunk's score adds, for each term it holds, the term's inverse document frequency
times its ``ts_rank`` (heading matches weigh more than text matches). Only rare
terms select chunks through the GIN index; common ones add to the score of chunks
selected otherwise (by a rare term or by the vector search), so a question made of
common words costs no more than one made of rare ones.

Words an editor gave synonyms for (``retrieval.synonyms``: "undo" → "reset,
revert") are one term searched by any of them, weighing as the chunks holding any
of them make it (``query_terms``).

The counts behind the weights (``Lexeme``) are refreshed with the index statistics,
never by a search; a word missing from them is one the index did not hold then: it
weighs most, and still selects, so a page ingested since is found by its new words.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from kbsite.text import STOPWORDS
from retrieval import sql
from retrieval.models import IndexStatistics
from retrieval.searchable import Searchable
from retrieval.sql import KeywordHit

# Chunks the selecting terms may match together before the commonest of them
# only score (see module docstring): above this, ranking is slow and the words
# carry little evidence. At 100,000 chunks 2,000 put a third on the slowest
# searches; on the golden sets 1,000 ranked as well.
KEYWORD_RANKED = 1000
# Hits returned, best first.
KEYWORD_HITS = 100
# A question word, or an identifier: letters and digits joined by _ . - : or /.
TOKEN = re.compile(r"\w+(?:[._:/-]+\w+)*")
# Where a sentence starts: a capital there names nothing.
SENTENCE_START = re.compile(r"(?:^|[.!?]\s)[\s\"'`(\[*_]*$")
# A file a tool reads its settings or code from ("pgbouncer.ini", "poetry.lock").
FILE_NAME = re.compile(
    r"[\w-]+\.(?:cfg|conf|ini|js|json|lock|py|sh|toml|ts|txt|xml|ya?ml)", re.IGNORECASE
)


@dataclass(frozen=True)
class Term:
    text: str  # as searched: a word, or an identifier searched as a phrase
    chunks: int  # live chunks holding it when counted (an upper bound for phrases)
    weight: float  # inverse document frequency
    # More than one: a phrase ("max_connections": max, connect); none: a word the
    # English configuration drops, searched by its alternatives only.
    lexemes: int = 1
    name: str = ""  # as the question wrote it, when it is a name (see names_in)
    # The documentation's words an editor said the reader's words mean: a chunk
    # holding any of them holds the term (see query_terms).
    alternatives: tuple[str, ...] = ()

    @property
    def searched(self) -> tuple[str, ...]:
        """The texts a chunk holds the term by: its own, and its alternatives."""
        own = (self.text,) if self.lexemes else ()
        return (*own, *self.alternatives)


@dataclass(frozen=True)
class Meant:
    """Reader's words a question holds, and what a source's documentation calls
    them (``retrieval.synonyms``)."""

    start: int  # the first of the question's tokens (``TOKEN``) they span
    length: int  # how many
    said: str  # those tokens as the question wrote them, lower-cased
    means: tuple[str, ...]  # the documentation's words, of every source searched


@dataclass(frozen=True)
class QueryTerms:
    terms: list[Term]
    total: int  # live chunks when counted; 0: never counted

    @property
    def counted(self) -> bool:
        return self.total > 0


# No terms: a vector-only search scores its candidates by nothing.
NO_TERMS = QueryTerms(terms=[], total=0)


def query_terms(query: str, meant: Sequence[Meant] = ()) -> QueryTerms:
    """The question's terms with their counts, in one query.

    Reader's words an editor gave synonyms for (``meant``: found in this same
    question by ``retrieval.synonyms.synonyms_in``) are one term, searched by
    their own text and by the documentation's words as alternatives: a chunk
    holding any of them holds the term, and the term weighs by the chunks holding
    any of them (the sum of their counts, an upper bound). So the question keeps
    the terms and the total weight it has without synonyms, a chunk holding only
    "reset" holds "undo" as fully as one holding "undo" itself, and the share of
    the question's weight it holds (``retrieval.evidence.held_share``) is the
    share it would hold of the question written in the documentation's words:
    added as terms of their own instead, the documentation's words would have
    left the reader's word unheld, at the weight of a word no chunk holds, and
    sunk every chunk's share. A question word that is also an alternative of such
    a term is that term, not one of its own: it is not counted twice."""
    words, alternatives = _question_words(query, meant)
    if not words:
        return QueryTerms(terms=[], total=_total())
    words = words[:32]
    texts = [*words, *(a for w in words for a in alternatives.get(w, ()))]
    counts, total = _counts(list(dict.fromkeys(texts))[:64])
    counted = {text: (chunks, lexemes) for text, chunks, lexemes in counts}
    names = {name.lower(): name for name in names_in(query)}
    terms = []
    for word in words:
        found = [a for a in alternatives.get(word, ()) if a in counted and a != word]
        chunks, lexemes = counted.get(word, (0, 0))
        if not lexemes and not found:
            continue  # nothing the index can hold
        if found:
            chunks = chunks + sum(counted[a][0] for a in found)
            chunks = min(chunks, total) if total else chunks
        terms.append(
            Term(text=word, chunks=chunks, weight=idf(chunks, total), lexemes=lexemes,
                 name=names.get(word, ""), alternatives=tuple(found))
        )  # fmt: skip
    return QueryTerms(terms=terms, total=total)


def _question_words(
    query: str, meant: Sequence[Meant]
) -> tuple[list[str], dict[str, tuple[str, ...]]]:
    """The question's words once each, in order, without stopwords; the reader's
    words of ``meant`` as one word each, with their alternatives."""
    tokens = TOKEN.findall(query)
    at = {m.start: m for m in meant}
    words: list[str] = []
    alternatives: dict[str, tuple[str, ...]] = {}
    i = 0
    while i < len(tokens):
        found = at.get(i)
        if found is not None:
            word = found.said
            alternatives[word] = (*alternatives.get(word, ()), *found.means)
            i += found.length
        else:
            word = tokens[i].lower()
            i += 1
            if word in STOPWORDS:
                continue
        if word not in words:
            words.append(word)
    meaning = {a for means in alternatives.values() for a in means}
    return [w for w in words if w in alternatives or w not in meaning], alternatives


def names_in(question: str) -> list[str]:
    """What the question calls by name: a product, a tool, a file. A word with a
    capital where no sentence starts ("on Heroku", "an IAM token"), a capital
    inside a word ("pgAdmin", "DocSearch"), a word all in capitals, or a file
    name ("pgbouncer.ini"). Not "I", numbers, nor the lower-case identifiers and
    compounds a user writes for their own things and in plain words ("my_field",
    "cross-link"): those may be names of nothing."""
    names: list[str] = []
    for match in TOKEN.finditer(question):
        token = match.group(0)
        if token == "I" or token in names or not re.search(r"[^\W\d_]", token):
            continue
        starts = SENTENCE_START.search(question, 0, match.start()) is not None
        if (
            (token[0].isupper() and not starts)
            or re.search(r"[a-z0-9][A-Z]", token)
            or (len(token) > 1 and token.isupper())
            or FILE_NAME.fullmatch(token)
        ):
            names.append(token)
    return names


def idf(chunks: int, total: int) -> float:
    """BM25's inverse document frequency (never negative)."""
    if total <= 0:
        return 1.0
    return math.log(1.0 + (total - chunks + 0.5) / (chunks + 0.5))


def _total() -> int:
    stats = IndexStatistics.objects.first()
    return stats.chunks if stats is not None else 0


def _counts(words: list[str]) -> tuple[list[tuple[str, int, int]], int]:
    """(word, chunks, lexemes) for the words the English configuration keeps, and
    the total (see ``retrieval.sql.term_counts``)."""
    rows = sql.term_counts(words)
    total = rows[0].total if rows else 0
    return [(row.term, row.chunks, row.lexemes) for row in rows], total


def selecting_terms(terms: QueryTerms) -> list[Term]:
    """The rarest terms, while together they match at most KEYWORD_RANKED chunks;
    every term while the index has not been counted yet. A term the counts lack
    selects too: it is either absent (the index lookup finds nothing, cheaply) or
    new since the counts, on pages ingested since, which must be found at once."""
    if not terms.counted:
        return list(terms.terms)
    chosen: list[Term] = []
    matched = 0
    for term in sorted(terms.terms, key=lambda t: t.chunks):
        if matched + term.chunks > KEYWORD_RANKED:
            break
        chosen.append(term)
        matched += term.chunks
    return chosen


def keyword_ranked(
    searchable: Searchable, terms: QueryTerms, *, limit: int = KEYWORD_HITS
) -> list[KeywordHit]:
    """The best ``limit`` searchable chunks holding a selecting term, best first."""
    selecting = selecting_terms(terms)
    if not selecting:
        return []
    return sql.keyword_ranked(searchable, terms.terms, selecting, limit=limit)
