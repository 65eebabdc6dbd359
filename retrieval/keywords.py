"""Keyword retrieval: the question's words, weighed by how rare they are in the index.

PostgreSQL's websearch syntax ANDs every word, and a natural question rarely
matches a chunk whole. Here each content word, and each identifier as a phrase
(``max_connections``, ``os.path.join``, ``HB-4042``), is a term of its own. A
chunk's score adds, for each term it holds, the term's inverse document frequency
times its ``ts_rank`` (heading matches weigh more than text matches). Only rare
terms select chunks through the GIN index; common ones add to the score of chunks
selected otherwise (by a rare term or by the vector search), so a question made of
common words costs no more than one made of rare ones.

The counts behind the weights (``Lexeme``) are refreshed with the index statistics,
never by a search; a word missing from them is one the index did not hold then.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any

from django.contrib.postgres.search import SearchQuery, SearchRank
from django.db import connection
from django.db.models import Case, F, FloatField, IntegerField, Q, QuerySet, Value, When
from django.db.models.functions import Cast

from kbsite.text import STOPWORDS
from retrieval.models import Chunk, IndexStatistics, Lexeme

# Chunks the selecting terms may match together before the commonest of them
# only score (see module docstring): above this, ranking is slow and the words
# carry little evidence.
KEYWORD_RANKED = 2000
# Hits returned, best first.
KEYWORD_HITS = 100
# ts_rank's weights for D (text), C, B, A (heading path) matches.
RANK_WEIGHTS = [0.4, 0.4, 0.6, 1.0]
# ts_rank normalization 1: divide by 1 + log(length), so that long chunks do not
# win by size alone.
RANK_NORMALIZATION = 1
# Saturation of a term's rank: rank / (rank + this).
RANK_SATURATION = 0.1
# A question word, or an identifier: letters and digits joined by _ . - : or /.
TOKEN = re.compile(r"\w+(?:[._:/-]+\w+)*")


@dataclass(frozen=True)
class Term:
    text: str  # as searched: a word, or an identifier searched as a phrase
    chunks: int  # live chunks holding it when counted (an upper bound for phrases)
    weight: float  # inverse document frequency


@dataclass(frozen=True)
class QueryTerms:
    terms: list[Term]
    total: int  # live chunks when counted; 0: never counted

    @property
    def counted(self) -> bool:
        return self.total > 0


def query_terms(query: str) -> QueryTerms:
    """The question's terms with their counts, in one query."""
    words: list[str] = []
    for token in TOKEN.findall(query):
        word = token.lower()
        if word not in STOPWORDS and word not in words:
            words.append(word)
    if not words:
        return QueryTerms(terms=[], total=_total())
    counts, total = _counts(words[:32])
    terms = [
        Term(text=word, chunks=chunks, weight=idf(chunks, total))
        for word, chunks in counts
    ]
    return QueryTerms(terms=terms, total=total)


def idf(chunks: int, total: int) -> float:
    """BM25's inverse document frequency (never negative)."""
    if total <= 0:
        return 1.0
    return math.log(1.0 + (total - chunks + 0.5) / (chunks + 0.5))


def _total() -> int:
    stats = IndexStatistics.objects.first()
    return stats.chunks if stats is not None else 0


def _counts(words: list[str]) -> tuple[list[tuple[str, int]], int]:
    """(word, chunks) for the words the English configuration keeps (a word of
    several lexemes counts as its rarest; one the counts lack, 0), and the total."""
    sql = f"""
        SELECT t.term,
               CASE WHEN count(s.word) < count(lx.lexeme) THEN 0
                    ELSE coalesce(min(s.chunks), 0) END,
               (SELECT chunks FROM {IndexStatistics._meta.db_table} LIMIT 1)
        FROM unnest(%s::text[]) WITH ORDINALITY AS t(term, i)
        CROSS JOIN LATERAL unnest(to_tsvector('english', t.term)) AS lx
        LEFT JOIN {Lexeme._meta.db_table} s ON s.word = lx.lexeme
        GROUP BY t.term, t.i
        ORDER BY t.i
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [words])
        rows = cursor.fetchall()
    total = rows[0][2] if rows and rows[0][2] else 0
    return [(word, chunks) for word, chunks, _ in rows], total


def _search_query(term: Term) -> SearchQuery:
    return SearchQuery(term.text, search_type="phrase", config="english")


def selecting_terms(terms: QueryTerms) -> list[Term]:
    """The rarest terms, while together they match at most KEYWORD_RANKED chunks;
    every term while the index has not been counted yet."""
    if not terms.counted:
        return list(terms.terms)
    chosen: list[Term] = []
    matched = 0
    for term in sorted(terms.terms, key=lambda t: t.chunks):
        if term.chunks == 0:
            continue  # matches nothing
        if matched + term.chunks > KEYWORD_RANKED:
            break
        chosen.append(term)
        matched += term.chunks
    return chosen


def keyword_ranked(
    candidates: QuerySet[Chunk], terms: QueryTerms, *, also: Sequence[int] = ()
) -> QuerySet[Chunk]:
    """Chunks holding a selecting term, or among ``also`` (the vector candidates)
    holding any term, with ``keyword_score`` and ``matched`` (a bit per term, in
    the order of ``terms.terms``), best first."""
    present = [t for t in terms.terms if not terms.counted or t.chunks > 0]
    if not present:
        return candidates.none()
    selecting = selecting_terms(terms)
    queries = {t.text: _search_query(t) for t in present}
    conditions = Q()
    if selecting:
        conditions |= Q(search_document=_any(queries[t.text] for t in selecting))
    if also:
        conditions |= Q(pk__in=list(also), search_document=_any(queries.values()))
    if not conditions:
        return candidates.none()
    score = _sum([_term_score(queries[t.text], t) for t in present])
    matched = _sum(
        [
            Case(
                When(search_document=queries[t.text], then=Value(1 << bit)),
                default=Value(0),
                output_field=IntegerField(),
            )
            for bit, t in enumerate(terms.terms)
            if t in present
        ]
    )
    return (
        candidates.filter(conditions)
        .annotate(
            keyword_score=Cast(score, FloatField()),
            matched=matched,
        )
        .order_by("-keyword_score", "pk")
    )


def _term_score(query: SearchQuery, term: Term):
    """The term's weight times its saturated rank: a second mention of a word
    adds less than the first, as in BM25."""
    rank = SearchRank(F("search_document"), query, weights=RANK_WEIGHTS,
                      normalization=Value(RANK_NORMALIZATION))  # fmt: skip
    if not RANK_SATURATION:
        return rank * Value(term.weight)
    return rank * Value(term.weight) / (rank + Value(RANK_SATURATION))


def _sum(parts: list[Any]) -> Any:
    return reduce(operator.add, parts)


def _any(queries) -> SearchQuery:
    return reduce(lambda a, b: a | b, queries)
