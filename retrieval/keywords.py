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
never by a search; a word missing from them is one the index did not hold then: it
weighs most, and still selects, so a page ingested since is found by its new words.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from django.db import connection

from kbsite.text import STOPWORDS
from retrieval.models import IndexStatistics, Lexeme
from retrieval.searchable import Searchable

# Chunks the selecting terms may match together before the commonest of them
# only score (see module docstring): above this, ranking is slow and the words
# carry little evidence. At 100,000 chunks 2,000 put a third on the slowest
# searches; on the golden sets 1,000 ranked as well.
KEYWORD_RANKED = 1000
# Hits returned, best first.
KEYWORD_HITS = 100
# ts_rank's weights for D (text), C, B, A (heading path) matches.
RANK_WEIGHTS = [0.4, 0.4, 0.6, 1.0]
# ts_rank normalization 1: divide by 1 + log(length), so that long chunks do not
# win by size alone.
RANK_NORMALIZATION = 1
# Saturation of a term's rank: rank / (rank + this). On both golden sets with the
# local model (README), 0.2 against 0.1 moved hybrid MRR from 0.792 to 0.809 (pg)
# and 0.777 to 0.788 (py), recall@5 unchanged; 0.05 and 0.3 did worse.
RANK_SATURATION = 0.2
# The share of a term's weight a chunk gets for holding it at all, the rest going
# by its saturated rank. ts_rank divides by the chunk's length, so a rare
# identifier in a long table ("23505" in the error-code appendix) scored near
# nothing; BM25 gives a single occurrence about half the term's weight. With the
# local model, 0.2 against none: hybrid recall@5 0.914 to 0.931 on the manual
# (MRR 0.809 to 0.805); on the Python docs 0.960 unchanged (MRR 0.788 to 0.777),
# keyword-only 0.860 to 0.880. 0.3 to 0.6 gave the same recall and lower MRR.
RANK_PRESENCE = 0.2
# A question word, or an identifier: letters and digits joined by _ . - : or /.
TOKEN = re.compile(r"\w+(?:[._:/-]+\w+)*")


@dataclass(frozen=True)
class Term:
    text: str  # as searched: a word, or an identifier searched as a phrase
    chunks: int  # live chunks holding it when counted (an upper bound for phrases)
    weight: float  # inverse document frequency
    lexemes: int = 1  # more than one: a phrase ("max_connections": max, connect)


@dataclass(frozen=True)
class KeywordHit:
    pk: int
    page_id: int
    embed_hash: str
    score: float
    matched: int  # a bit per term of the question the chunk holds


@dataclass(frozen=True)
class QueryTerms:
    terms: list[Term]
    total: int  # live chunks when counted; 0: never counted

    @property
    def counted(self) -> bool:
        return self.total > 0


# No terms: a vector-only search scores its candidates by nothing.
NO_TERMS = QueryTerms(terms=[], total=0)


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
        Term(text=word, chunks=chunks, weight=idf(chunks, total), lexemes=lexemes)
        for word, chunks, lexemes in counts
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


def _counts(words: list[str]) -> tuple[list[tuple[str, int, int]], int]:
    """(word, chunks, lexemes) for the words the English configuration keeps (a
    word of several lexemes counts as its rarest; one the counts lack, 0), and the
    total."""
    sql = f"""
        SELECT t.term,
               CASE WHEN count(s.word) < count(lx.lexeme) THEN 0
                    ELSE coalesce(min(s.chunks), 0) END,
               count(lx.lexeme),
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
    total = rows[0][3] if rows and rows[0][3] else 0
    return [(word, chunks, lexemes) for word, chunks, lexemes, _ in rows], total


# A term as searched: a phrase of its words, English stemming.
_TSQUERY = "phraseto_tsquery('english', %s)"
_RANK = (
    f"ts_rank('{{{','.join(map(str, RANK_WEIGHTS))}}}'::real[], c.search_document, "
    f"{_TSQUERY}, {int(RANK_NORMALIZATION)})"
)


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
    # Through the GIN index: the document matches any of the selecting terms.
    held = " || ".join(_TSQUERY for _ in selecting)
    sql, params = scored_sql(
        searchable, terms, f"c.search_document @@ ({held})", [t.text for t in selecting]
    )
    with connection.cursor() as cursor:
        cursor.execute(f"{sql} ORDER BY score DESC, s.pk LIMIT %s", [*params, limit])
        return [KeywordHit(*row) for row in cursor.fetchall()]


def scored_sql(
    searchable: Searchable,
    terms: QueryTerms,
    condition: str = "",
    params: list | tuple = (),
) -> tuple[str, list]:
    """SQL selecting each searchable chunk that meets ``condition`` as a
    ``KeywordHit`` row (pk, page_id, embed_hash, score, matched), in no order; the
    score is 0 for a chunk that holds no term. Other queries rank chunks selected
    otherwise with it, such as the vector candidates, which any term may add to.

    The inner query ranks each row once per term; the outer one adds the ranks up,
    so no rank is computed twice. A term of one lexeme is held when its rank is
    positive; a phrase, when the document matches it (``ts_rank`` also counts its
    words apart).
    """
    present = terms.terms  # bit i of ``matched`` is term i
    columns = ["c.id AS pk", "c.page_id", "c.embed_hash"]
    column_params: list[str] = []
    for i, term in enumerate(present):
        columns.append(f"{_RANK} AS r{i}")
        column_params.append(term.text)
        if term.lexemes > 1:
            columns.append(f"(c.search_document @@ {_TSQUERY})::int AS m{i}")
            column_params.append(term.text)
    inner_sql, inner_params = searchable.chunks_sql(
        ", ".join(columns), condition, params
    )
    score, score_params = _score_sql(present)
    held = " + ".join(
        f"(CASE WHEN {_held(t, i)} THEN {1 << i} ELSE 0 END)"
        for i, t in enumerate(present)
    )
    sql = (
        f"SELECT s.pk, s.page_id, s.embed_hash, {score or '0'} AS score, "
        # OFFSET 0 keeps the inner query whole: inlined, each rank would be
        # computed again in every expression that uses it.
        f"{held or '0'} AS matched FROM ({inner_sql} OFFSET 0) s"
    )
    return sql, [*score_params, *column_params, *inner_params]


def _score_sql(present: list[Term]) -> tuple[str, list[float]]:
    """Each term's weight, part for holding the term and part times its saturated
    rank, summed: a second mention of a word adds less than the first, as in BM25."""
    parts: list[str] = []
    params: list[float] = []
    for i, term in enumerate(present):
        parts.append(f"(CASE WHEN {_held(term, i)} THEN %s ELSE 0 END)")
        params.append(term.weight * RANK_PRESENCE)
        if RANK_SATURATION:
            parts.append(f"s.r{i} * %s / (s.r{i} + %s)")
            params += [term.weight * (1 - RANK_PRESENCE), RANK_SATURATION]
        else:
            parts.append(f"s.r{i} * %s")
            params.append(term.weight * (1 - RANK_PRESENCE))
    return " + ".join(parts), params


def _held(term: Term, i: int) -> str:
    """SQL true when the ranked row holds term ``i``: a word when its rank is
    positive, a phrase when the document matches it."""
    return f"s.{'m' if term.lexemes > 1 else 'r'}{i} > 0"
