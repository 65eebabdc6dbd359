"""Every statement the retrieval app writes by hand, in one place.

A search's queries are written by hand, because compiling the ORM's took longer
than running them (see docs/benchmarks.md); so are the question's log row, the
embedding usage's upsert and the HNSW indexes' DDL. (The app's advisory locks are
taken by ``kbsite.locks``.) So that a model change breaks them in a test and not
at run time, they are composed here only: table and column names from the models'
``_meta`` through ``psycopg.sql``, values always as parameters, and rows returned
by name (dataclasses built from ``cursor.description``). Callers give values (a
:class:`~retrieval.searchable.Searchable`, a question's terms, a vector) and never
SQL.

The chunk is ``c`` and its page ``p`` in every statement. A search's statements
read from the database the router reads chunks from (a replica inside
``kbsite.replicas.replica_reads()``, see ``retrieval.routers``); every other
statement runs on the primary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from functools import cache
from typing import Protocol, TypeVar

from django.db import connection, connections, router, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from pgvector import Vector
from psycopg.sql import SQL, Composable, Composed, Identifier, Literal

from kbsite.sqlrows import Columns, Insert, Row, column, table
from retrieval.codes import CODE_BITS
from retrieval.models import (
    Chunk,
    Embedding,
    EmbeddingSpace,
    EmbeddingUsage,
    IndexStatistics,
    Lexeme,
    QueryLog,
    Synonym,
)
from retrieval.searchable import Searchable
from sources.models import Page

T = TypeVar("T")

# The type the HNSW indexes hold vectors as, and every search casts to: half
# precision (see ``retrieval.spaces.embedding_index_ensure``); "vector" is single.
INDEX_PRECISION = "halfvec"
INDEX_OPERATORS = {"halfvec": "halfvec_cosine_ops", "vector": "vector_cosine_ops"}

# ts_rank's weights for D (text), C, B, A (heading path) matches.
RANK_WEIGHTS = [0.4, 0.4, 0.6, 1.0]
# ts_rank normalization 1: divide by 1 + log(length), so that long chunks do not
# win by size alone.
RANK_NORMALIZATION = 1
# Saturation of a term's rank: rank / (rank + this). On both golden sets with the
# local model (docs/quality.md), 0.2 against 0.1 moved hybrid MRR from 0.792 to
# 0.809 (pg) and 0.777 to 0.788 (py), recall@5 unchanged; 0.05 and 0.3 did worse.
RANK_SATURATION = 0.2
# The share of a term's weight a chunk gets for holding it at all, the rest going
# by its saturated rank. ts_rank divides by the chunk's length, so a rare
# identifier in a long table ("23505" in the error-code appendix) scored near
# nothing; BM25 gives a single occurrence about half the term's weight. With the
# local model, 0.2 against none: hybrid recall@5 0.914 to 0.931 on the manual
# (MRR 0.809 to 0.805); on the Python docs 0.960 unchanged (MRR 0.788 to 0.777),
# keyword-only 0.860 to 0.880. 0.3 to 0.6 gave the same recall and lower MRR.
RANK_PRESENCE = 0.2


class RankedTerm(Protocol):
    """A term of a question as the keyword score uses it."""

    @property
    def text(self) -> str: ...  # a word, or an identifier searched as a phrase

    @property
    def weight(self) -> float: ...  # its inverse document frequency

    @property
    def lexemes(self) -> int: ...  # more than one: a phrase

    @property
    def searched(self) -> tuple[str, ...]: ...  # the texts a chunk holds it by


@dataclass(frozen=True)
class KeywordHit:
    pk: int
    page_id: int
    embed_hash: str
    score: float
    matched: int  # a bit per term of the question the chunk holds
    release_notes: bool  # of a page of release notes (ranked down)


@dataclass(frozen=True)
class VectorCandidate:
    """A searchable chunk whose text has one of the nearest vectors."""

    pk: int
    page_id: int
    embed_hash: str
    score: float  # its keyword score
    matched: int
    release_notes: bool
    similarity: float  # cosine, of the text's nearest window

    @property
    def keyword_hit(self) -> KeywordHit:
        return KeywordHit(self.pk, self.page_id, self.embed_hash, self.score,
                          self.matched, self.release_notes)  # fmt: skip


@dataclass(frozen=True)
class Nearest:
    text_hash: str
    distance: float  # cosine distance of one of the text's windows


@dataclass(frozen=True)
class TermCount:
    term: str
    chunks: int  # live chunks holding it when counted (its rarest lexeme)
    lexemes: int
    total: int  # live chunks when counted (0: never counted)


def _rows(cursor, row_type: type[T]) -> list[T]:
    """The cursor's rows as ``row_type``, each value by its column's name."""
    names = [column.name for column in cursor.description]
    expected = [f.name for f in fields(row_type)]  # type: ignore[arg-type]
    if sorted(names) != sorted(expected):
        raise ValueError(f"columns {names} are not the fields {expected}")
    return [row_type(**dict(zip(names, row, strict=True))) for row in cursor]


def _reading() -> BaseDatabaseWrapper:
    """The connection a search reads the index through, as the ORM would."""
    return connections[router.db_for_read(Chunk)]


def _c(name: str) -> Identifier:
    return column(Chunk, name, "c")


def _p(name: str) -> Identifier:
    return column(Page, name, "p")


_CHUNKS_WITH_PAGES = SQL("{} c JOIN {} p ON {} = {}").format(
    table(Chunk), table(Page), _p("pk"), _c("page")
)
_AND = SQL(" AND ")


def _where(searchable: Searchable) -> tuple[Composed, list]:
    """The condition on ``c`` and ``p`` that a chunk is searchable."""
    parts = [SQL("{} = %s").format(_p("status"))]
    params: list = [Page.Status.LIVE]
    if searchable.source_ids is not None:
        parts.append(SQL("{} = ANY(%s)").format(_p("source")))
        params.append(list(searchable.source_ids))
    if searchable.verified_since is not None:
        parts.append(SQL("{} >= %s").format(_p("last_verified_at")))
        params.append(searchable.verified_since)
    return _AND.join(parts), params


# -- keywords ---------------------------------------------------------------------

_TSQUERY = SQL("phraseto_tsquery('english', %s)")


def _term_query(term: RankedTerm) -> tuple[Composable, list[str]]:
    """The tsquery a chunk holds the term by: its text, or any of its
    alternatives (``retrieval.keywords.Term.searched``)."""
    texts = list(term.searched)
    if len(texts) == 1:
        return _TSQUERY, texts
    return SQL("({})").format(SQL(" || ").join([_TSQUERY] * len(texts))), texts


def _rank(query: Composable) -> Composed:
    return SQL("ts_rank({}::real[], {}, {}, {})").format(
        Literal("{" + ",".join(map(str, RANK_WEIGHTS)) + "}"),
        _c("search_document"),
        query,
        Literal(int(RANK_NORMALIZATION)),
    )


def _whole(term: RankedTerm) -> bool:
    """Whether a chunk holds the term only when its document matches the term's
    query: a phrase (``ts_rank`` also counts its words apart), or a term with
    alternatives (one of which may be a phrase)."""
    return term.lexemes > 1 or term.searched != (term.text,)


def term_counts(words: Sequence[str]) -> list[TermCount]:
    """For each word, in order, the live chunks holding it (a word of several
    lexemes counts as its rarest; one the counts lack, 0) and the total, as
    counted by the statistics job."""
    statement = SQL(
        "SELECT t.term AS term, "
        "CASE WHEN count(s.{word}) < count(lx.lexeme) THEN 0 "
        "ELSE coalesce(min(s.{chunks}), 0) END AS chunks, "
        "count(lx.lexeme) AS lexemes, "
        "coalesce((SELECT {total} FROM {stats} LIMIT 1), 0) AS total "
        "FROM unnest(%s::text[]) WITH ORDINALITY AS t(term, i) "
        "CROSS JOIN LATERAL unnest(to_tsvector('english', t.term)) AS lx "
        "LEFT JOIN {lexemes} s ON s.{word} = lx.lexeme "
        "GROUP BY t.term, t.i ORDER BY t.i"
    ).format(
        word=column(Lexeme, "word"),
        chunks=column(Lexeme, "chunks"),
        total=column(IndexStatistics, "chunks"),
        stats=table(IndexStatistics),
        lexemes=table(Lexeme),
    )
    with _reading().cursor() as cursor:
        cursor.execute(statement.as_string(), [list(words)])
        return _rows(cursor, TermCount)


def terms_held(searchable: Searchable, texts: Sequence[str]) -> set[str]:
    """Those of the texts (words or phrases) that a searchable chunk holds, each
    looked up through the GIN index."""
    where, params = _where(searchable)
    statement = SQL(
        "SELECT t.term FROM unnest(%s::text[]) AS t(term) WHERE EXISTS "
        "(SELECT 1 FROM {chunks} WHERE {where} AND {document} @@ "
        "phraseto_tsquery('english', t.term))"
    ).format(chunks=_CHUNKS_WITH_PAGES, where=where, document=_c("search_document"))
    with _reading().cursor() as cursor:
        cursor.execute(statement.as_string(), [list(texts), *params])
        return {row[0] for row in cursor.fetchall()}


def keyword_ranked(
    searchable: Searchable,
    terms: Sequence[RankedTerm],
    selecting: Sequence[RankedTerm],
    *,
    limit: int,
) -> list[KeywordHit]:
    """The best ``limit`` searchable chunks whose document matches one of the
    ``selecting`` terms (through the GIN index), scored by all ``terms``."""
    queries = [_term_query(term) for term in selecting]
    held = SQL(" || ").join([query for query, _ in queries])
    condition = SQL("{} @@ ({})").format(_c("search_document"), held)
    scored, params = _scored(
        searchable, terms, condition, [text for _, texts in queries for text in texts]
    )
    statement = SQL("{} ORDER BY score DESC, s.pk LIMIT %s").format(scored)
    with _reading().cursor() as cursor:
        cursor.execute(statement.as_string(), [*params, limit])
        return _rows(cursor, KeywordHit)


def _scored(
    searchable: Searchable,
    terms: Sequence[RankedTerm],
    condition: Composable,
    condition_params: list,
) -> tuple[Composed, list]:
    """Each searchable chunk that meets ``condition`` as a :class:`KeywordHit`
    row (pk, page_id, embed_hash, score, matched, release_notes), in no order; the
    score is 0 for a chunk that holds no term.

    The inner query ranks each row once per term; the outer one adds the ranks up,
    so no rank is computed twice. A term of one lexeme is held when its rank is
    positive; a phrase, or a term with alternatives, when the document matches it
    (``ts_rank`` also counts a phrase's words apart). Bit i of ``matched`` is
    term i.
    """
    columns = [
        SQL("{} AS pk").format(_c("pk")),
        SQL("{} AS page_id").format(_c("page")),
        SQL("{} AS embed_hash").format(_c("embed_hash")),
        SQL("{} AS release_notes").format(_p("release_notes")),
    ]
    column_params: list[str] = []
    for i, term in enumerate(terms):
        query, texts = _term_query(term)
        columns.append(SQL("{} AS {}").format(_rank(query), Identifier(f"r{i}")))
        column_params += texts
        if _whole(term):
            columns.append(
                SQL("({} @@ {})::int AS {}").format(
                    _c("search_document"), query, Identifier(f"m{i}")
                )
            )
            column_params += texts
    where, where_params = _where(searchable)
    score, score_params = _score(terms)
    held = [
        SQL("(CASE WHEN {} THEN {} ELSE 0 END)").format(_held(t, i), Literal(1 << i))
        for i, t in enumerate(terms)
    ]
    statement = SQL(
        "SELECT s.pk, s.page_id, s.embed_hash, {score} AS score, {held} AS matched, "
        "s.release_notes "
        # OFFSET 0 keeps the inner query whole: inlined, each rank would be
        # computed again in every expression that uses it.
        "FROM (SELECT {columns} FROM {chunks} WHERE {where} AND ({condition}) "
        "OFFSET 0) s"
    ).format(
        score=score or SQL("0"),
        held=SQL(" + ").join(held) if held else SQL("0"),
        columns=SQL(", ").join(columns),
        chunks=_CHUNKS_WITH_PAGES,
        where=where,
        condition=condition,
    )
    return statement, [*score_params, *column_params, *where_params,
                       *condition_params]  # fmt: skip


def _score(terms: Sequence[RankedTerm]) -> tuple[Composable | None, list[float]]:
    """Each term's weight, part for holding the term and part times its saturated
    rank, summed: a second mention of a word adds less than the first, as in BM25."""
    parts: list[Composable] = []
    params: list[float] = []
    for i, term in enumerate(terms):
        rank = Identifier("s", f"r{i}")
        parts.append(SQL("(CASE WHEN {} THEN %s ELSE 0 END)").format(_held(term, i)))
        params.append(term.weight * RANK_PRESENCE)
        if RANK_SATURATION:
            parts.append(SQL("{} * %s / ({} + %s)").format(rank, rank))
            params += [term.weight * (1 - RANK_PRESENCE), RANK_SATURATION]
        else:
            parts.append(SQL("{} * %s").format(rank))
            params.append(term.weight * (1 - RANK_PRESENCE))
    return (SQL(" + ").join(parts) if parts else None), params


def _held(term: RankedTerm, i: int) -> Composable:
    """True when the ranked row holds term ``i``: a word when its rank is
    positive, a phrase or a term with alternatives when the document matches it."""
    name = f"{'m' if _whole(term) else 'r'}{i}"
    return SQL("{} > 0").format(Identifier("s", name))


@dataclass(frozen=True)
class SynonymRow:
    words: str
    means: list[str]


def synonyms_matching(
    *, source_ids: Sequence[int] | None, words: Sequence[str]
) -> list[SynonymRow]:
    """The synonyms of these sources (None: of every source) whose reader's words
    are one of ``words``, read through their unique index (words, source). On the
    primary: an editor's word, as a pin, counts from the moment it is saved."""
    params: list = [list(words)]
    if source_ids is not None:
        params.append(list(source_ids))
    with connection.cursor() as cursor:
        cursor.execute(_synonyms_statement(source_ids is not None), params)
        return _rows(cursor, SynonymRow)


@cache
def _synonyms_statement(of_sources: bool) -> str:
    parts = [SQL("{} = ANY(%s)").format(column(Synonym, "words", "s"))]
    if of_sources:
        parts.append(SQL("{} = ANY(%s)").format(column(Synonym, "source", "s")))
    return (
        SQL("SELECT {} AS words, {} AS means FROM {} s WHERE {} ORDER BY {}")
        .format(
            column(Synonym, "words", "s"),
            column(Synonym, "means", "s"),
            table(Synonym),
            _AND.join(parts),
            column(Synonym, "pk", "s"),
        )
        .as_string()
    )


# -- vectors ----------------------------------------------------------------------


@dataclass(frozen=True)
class CodedPass:
    """A search's first pass by sign codes (``retrieval.codes``): the ``first``
    searchable chunks whose codes in the serving space (``space_id``) differ
    least from the question's ``code`` have their vectors read exactly."""

    space_id: int
    code: str
    first: int


def nearest_statement(
    space: str,
    dimensions: int,
    vector: list[float],
    *,
    limit: int,
    searchable: Searchable,
    coded: CodedPass | None = None,
) -> tuple[str, list]:
    """(text hash, cosine distance) of the ``limit`` nearest vectors in one space
    whose text a searchable chunk has, nearest first.

    The condition is part of the scan, so the vectors a caller may not see, of
    pages gone or filtered out, or of texts no chunk uses any more, never take a
    candidate's place. Two plans serve it, and PostgreSQL's planner picks one by
    its estimate of the searchable share (see ``retrieval.searchable``): through
    the space's HNSW index (the same cast and filter as the index, see
    ``retrieval.spaces.embedding_index_ensure``), which pgvector's iterative scan
    walks on until ``limit`` vectors pass the condition; or, for a small share,
    the searchable chunks' vectors read by their hash and sorted exactly.

    With ``coded`` (a share where both cost most, chosen by the caller), a third:
    the best ``coded.first`` searchable chunk rows by their codes, and every
    searchable chunk whose code is not of this space, have their vectors read
    and sorted exactly.
    """
    statement, params = _nearest(space, dimensions, vector, searchable, coded)
    return SQL("{} LIMIT %s").format(statement).as_string(), [*params, limit]


def _nearest(
    space: str,
    dimensions: int,
    vector: list[float],
    searchable: Searchable,
    coded: CodedPass | None = None,
) -> tuple[Composed, list]:
    where, where_params = _where(searchable)
    names = {
        "text_hash": column(Embedding, "text_hash"),
        "distance": SQL(
            "(e.{vector}::{precision}({dims}) <=> %s::{precision}({dims}))"
        ).format(
            vector=column(Embedding, "vector"),
            precision=SQL(INDEX_PRECISION),
            dims=Literal(int(dimensions)),
        ),
        "embeddings": table(Embedding),
        "space": column(Embedding, "space"),
        "chunks": _CHUNKS_WITH_PAGES,
        "embed_hash": _c("embed_hash"),
        "where": where,
    }
    query = Vector(vector).to_text()
    if coded is not None:
        return _CODED.format(
            **names,
            code=_c("code"),
            code_space=_c("code_space"),
            bits=Literal(CODE_BITS),
        ), [
            *where_params, coded.space_id, coded.code, coded.first,
            *where_params, coded.space_id, query, space,
        ]  # fmt: skip
    statement = SQL(
        "SELECT e.{text_hash} AS text_hash, {distance} AS distance "
        "FROM {embeddings} e WHERE e.{space} = %s AND EXISTS "
        "(SELECT 1 FROM {chunks} WHERE {embed_hash} = e.{text_hash} AND {where}) "
        "ORDER BY distance"
    ).format(**names)
    return statement, [query, space, *where_params]


# The best chunk rows by code, and every searched chunk with no code of this
# space; then their texts' vectors are read. Materialized, both: no ordered scan
# of the HNSW index can stand in for sorting the distances of the texts chosen.
_CODED = SQL(
    "WITH first AS MATERIALIZED ("
    "(SELECT {embed_hash} AS text_hash FROM {chunks} WHERE {where} "
    "AND {code_space} = %s ORDER BY {code} <~> %s::bit({bits}) LIMIT %s) "
    "UNION SELECT {embed_hash} FROM {chunks} WHERE {where} "
    "AND {code_space} IS DISTINCT FROM %s), "
    "read AS MATERIALIZED (SELECT e.{text_hash} AS text_hash, "
    "{distance} AS distance FROM first f JOIN {embeddings} e "
    "ON e.{space} = %s AND e.{text_hash} = f.text_hash) "
    "SELECT text_hash, distance FROM read ORDER BY distance"
)


def nearest(
    space: str,
    dimensions: int,
    vector: list[float],
    *,
    limit: int,
    searchable: Searchable,
    coded: CodedPass | None = None,
) -> list[Nearest]:
    """The rows of :func:`nearest_statement`."""
    statement, params = nearest_statement(
        space, dimensions, vector, limit=limit, searchable=searchable, coded=coded
    )
    with _reading().cursor() as cursor:
        cursor.execute(statement, params)
        return _rows(cursor, Nearest)


def vector_candidates(
    space: str,
    dimensions: int,
    vector: list[float],
    *,
    limit: int,
    searchable: Searchable,
    terms: Sequence[RankedTerm],
    coded: CodedPass | None = None,
) -> list[VectorCandidate]:
    """The searchable chunks whose text has one of the ``limit`` nearest
    searchable vectors, with their keyword scores by ``terms``, in no order.

    One statement: the nearest vectors, then their texts' chunks with their
    scores (a text with several windows counts by its nearest).
    """
    near, near_params = _nearest(space, dimensions, vector, searchable, coded)
    condition = SQL("{} IN (SELECT text_hash FROM nearest_text)").format(
        _c("embed_hash")
    )
    scored, scored_params = _scored(searchable, terms, condition, [])
    statement = SQL(
        "WITH nearest AS MATERIALIZED ({near} LIMIT %s), "
        "nearest_text AS (SELECT text_hash, 1 - min(distance) AS similarity "
        "FROM nearest GROUP BY text_hash) "
        "SELECT c.pk, c.page_id, c.embed_hash, c.score, c.matched, c.release_notes, "
        "n.similarity "
        "FROM ({scored}) c JOIN nearest_text n ON n.text_hash = c.embed_hash"
    ).format(near=near, scored=scored)
    with _reading().cursor() as cursor:
        cursor.execute(statement.as_string(), [*near_params, limit, *scored_params])
        return _rows(cursor, VectorCandidate)


# -- the chosen chunks ------------------------------------------------------------

# What results show of a page: the rest (its body, fingerprints and crawl history)
# costs more to read and decode than the search's own query.
CITED_PAGE_FIELDS = (
    "id", "url", "title", "last_verified_at", "last_changed_at", "last_failure_at",
    "source",
)  # fmt: skip
# Not the search document, nor the code (1,024 characters a hit).
_CHUNK = Columns(
    Chunk,
    [
        f
        for f in Chunk._meta.concrete_fields
        if f.name not in ("search_document", "code", "code_space")
    ],
    "c",
)
_PAGE = Columns(
    Page, [f for f in Page._meta.concrete_fields if f.name in CITED_PAGE_FIELDS], "p"
)
_FULL_ROW = Row(_CHUNK, _PAGE)


@cache
def _full_rows_statement() -> str:
    return (
        SQL("SELECT {} FROM {} WHERE {} = ANY(%s)")
        .format(_FULL_ROW.sql, _CHUNKS_WITH_PAGES, _c("pk"))
        .as_string()
    )


def chunks_with_pages(ids: Sequence[int]) -> dict[int, Chunk]:
    """The chunks of these ids, whole but for their search document, each with
    what is cited of its page; a chunk deleted since is missing."""
    with _reading().cursor() as cursor:
        cursor.execute(_full_rows_statement(), [list(ids)])
        fetched = cursor.fetchall()
    chunks: dict[int, Chunk] = {}
    for row in fetched:
        chunk = _FULL_ROW.made(_CHUNK, row)
        chunk.page = _FULL_ROW.made(_PAGE, row)
        chunks[chunk.pk] = chunk
    return chunks


# -- what the index learns about itself, and keeps tidy -----------------------------

# Every stem of the live chunks' search documents, with the number holding it. The
# documents query is ts_stat's parameter, as text: it is composed here, with the
# live status as a literal.
LEXEMES_INSERT = Insert(
    Lexeme,
    ("word", "chunks"),
    "INSERT INTO {table} ({columns}) "
    "SELECT word, ndoc FROM ts_stat(%s) WHERE length(word) <= 300",
)


@cache
def _live_documents() -> str:
    return (
        SQL("SELECT {} FROM {} WHERE {} = {}")
        .format(
            _c("search_document"),
            _CHUNKS_WITH_PAGES,
            _p("status"),
            Literal(str(Page.Status.LIVE)),
        )
        .as_string()
    )


def lexemes_replace() -> int:
    """The word counts made again from the live chunks; returns how many stems.
    Call in a transaction: readers see the old counts until it commits."""
    with connection.cursor() as cursor:
        cursor.execute(SQL("DELETE FROM {}").format(table(Lexeme)).as_string())
        cursor.execute(LEXEMES_INSERT.sql, [_live_documents()])
        return cursor.rowcount


def unused_vectors_delete(*, made_before) -> int:
    """Delete the vectors, in every space, of texts no chunk has, made before
    then; returns how many."""
    statement = SQL(
        "DELETE FROM {embeddings} e WHERE e.{created} < %s AND NOT EXISTS "
        "(SELECT 1 FROM {chunks} c WHERE {embed_hash} = e.{text_hash})"
    ).format(
        embeddings=table(Embedding),
        created=column(Embedding, "created_at"),
        chunks=table(Chunk),
        embed_hash=_c("embed_hash"),
        text_hash=column(Embedding, "text_hash"),
    )
    with connection.cursor() as cursor:
        cursor.execute(statement.as_string(), [made_before])
        return cursor.rowcount


@cache
def _space_in_state_statement() -> str:
    return (
        SQL("SELECT * FROM {} WHERE {} = %s")
        .format(table(EmbeddingSpace), column(EmbeddingSpace, "state"))
        .as_string()
    )


def space_in_state(state: str) -> EmbeddingSpace | None:
    """The embedding space in ``state``: one at most for serving (a unique
    constraint). Read by every search: raw, 0.35 ms against the ORM's 0.9 ms
    (round trip included), most of which was compiling the query."""
    spaces = EmbeddingSpace.objects.raw(_space_in_state_statement(), [state])
    return next(iter(spaces), None)


# -- writes on the hot paths -----------------------------------------------------

# A question's log row; the asker's feedback comes later.
QUERY_LOG_INSERT = Insert(
    QueryLog,
    ("kind", "text", "answer", "user", "chunk_ids", "scores", "abstained",
     "latency_ms", "created_at", "cited_hashes", "cited_pages", "recheck_of",
     "similarity", "floor", "held", "lead"),
    "INSERT INTO {table} ({columns}) VALUES {values} RETURNING {id}",
)  # fmt: skip


def commit_waits(wait: bool) -> None:
    """Whether the transaction under way, as it commits, waits for the write-ahead
    log to reach the disk, whatever the session's setting."""
    with connection.cursor() as cursor:
        cursor.execute(_COMMIT_WAITS if wait else _COMMIT_DOES_NOT_WAIT)


_COMMIT_WAITS = "SET LOCAL synchronous_commit = on"
_COMMIT_DOES_NOT_WAIT = "SET LOCAL synchronous_commit = off"


def query_log_insert(**row: object) -> int:
    """Write a question's log row (its fields by name); returns its id. Its commit
    does not wait for the WAL to reach the disk: a crash of the server may lose
    the last fraction of a second of the log, and no asker waits for an fsync.
    On the primary, as every write, also for a search read from a replica."""
    params = QUERY_LOG_INSERT.params(**row)
    with transaction.atomic(), connection.cursor() as cursor:
        commit_waits(False)
        cursor.execute(QUERY_LOG_INSERT.sql, params)
        return cursor.fetchone()[0]


@dataclass(frozen=True)
class Cleared:
    """What clearing a page's chunks found: the text hashes they held, and codes
    in the serving space (its id; None: no space serves) of texts asked for."""

    old: set[str]
    space_id: int | None
    codes: dict[str, str]


@dataclass(frozen=True)
class _ClearedRow:
    text_hash: str
    code: str | None  # in the serving space
    old: bool  # of a chunk deleted, not of a text asked for
    space_id: int | None


@cache
def _chunks_clear_statement() -> str:
    return (
        SQL(
            "WITH serving AS (SELECT {id}, {name} FROM {spaces} WHERE {state} = %s), "
            "old AS (DELETE FROM {chunks} WHERE {page} = %s "
            "RETURNING {embed_hash}, {chunk_code}, {code_space}) "
            "SELECT o.{embed_hash} AS text_hash, CASE WHEN o.{code_space} = s.{id} "
            "THEN o.{chunk_code}::text END AS code, true AS old, s.{id} AS space_id "
            "FROM old o LEFT JOIN serving s ON true "
            "UNION ALL SELECT e.{text_hash}, e.{code}::text, false, s.{id} "
            "FROM {embeddings} e JOIN serving s ON s.{name} = e.{space} "
            "WHERE e.{window} = 0 AND e.{code} IS NOT NULL "
            "AND e.{text_hash} = ANY(%s)"
        )
        .format(
            chunks=table(Chunk),
            page=column(Chunk, "page"),
            embed_hash=column(Chunk, "embed_hash"),
            chunk_code=column(Chunk, "code"),
            code_space=column(Chunk, "code_space"),
            embeddings=table(Embedding),
            text_hash=column(Embedding, "text_hash"),
            code=column(Embedding, "code"),
            space=column(Embedding, "space"),
            window=column(Embedding, "window"),
            spaces=table(EmbeddingSpace),
            id=column(EmbeddingSpace, "id"),
            name=column(EmbeddingSpace, "name"),
            state=column(EmbeddingSpace, "state"),
        )
        .as_string()
    )


def page_chunks_clear(*, page_id: int, coded: Sequence[str]) -> Cleared:
    """Delete the page's chunks, and read the serving space's codes of the texts
    ``coded`` (by hash): those written with their vectors, and those the deleted
    chunks carried (a text embedded before codes were has none stored). One
    statement, one round trip."""
    with connection.cursor() as cursor:
        cursor.execute(
            _chunks_clear_statement(),
            [EmbeddingSpace.State.SERVING, page_id, list(coded)],
        )
        rows = _rows(cursor, _ClearedRow)
    return Cleared(
        old={row.text_hash for row in rows if row.old},
        space_id=next((r.space_id for r in rows if r.space_id is not None), None),
        codes={row.text_hash: row.code for row in rows if row.code is not None},
    )


# -- codes ------------------------------------------------------------------------


@dataclass(frozen=True)
class StaleChunk:
    """A chunk whose code is not of the serving space (``space_id``, ``space``)."""

    space_id: int
    space: str
    pk: int
    embed_hash: str


@cache
def _stale_chunks_statement() -> str:
    return (
        SQL(
            "SELECT s.{space_id} AS space_id, s.{space_name} AS space, c.{id} AS pk, "
            "c.{embed_hash} AS embed_hash FROM {chunks} c, "
            "(SELECT {space_id}, {space_name} FROM {spaces} WHERE {state} = %s) s "
            "WHERE c.{id} > %s AND c.{code_space} IS DISTINCT FROM s.{space_id} "
            "ORDER BY c.{id} LIMIT %s"
        )
        .format(
            space_id=column(EmbeddingSpace, "id"),
            space_name=column(EmbeddingSpace, "name"),
            state=column(EmbeddingSpace, "state"),
            spaces=table(EmbeddingSpace),
            chunks=table(Chunk),
            id=column(Chunk, "id"),
            embed_hash=column(Chunk, "embed_hash"),
            code_space=column(Chunk, "code_space"),
        )
        .as_string()
    )


def stale_chunks(*, after: int, limit: int) -> list[StaleChunk]:
    """The next ``limit`` chunks after id ``after`` whose code is missing or not
    of the serving space (none while no space serves), in the order of their id."""
    with connection.cursor() as cursor:
        cursor.execute(
            _stale_chunks_statement(), [EmbeddingSpace.State.SERVING, after, limit]
        )
        return _rows(cursor, StaleChunk)


@dataclass(frozen=True)
class TextVectors:
    text_hash: str
    code: str | None  # as written with its vectors (none before codes were)
    windows: list[list[float]] | None  # its vectors, where it has no code


@cache
def _text_vectors_statement() -> str:
    return (
        SQL(
            "SELECT {text_hash} AS text_hash, min({code}::text) AS code, "
            "CASE WHEN bool_and({code} IS NULL) "
            "THEN array_agg({vector}::real[] ORDER BY {window}) END AS windows "
            "FROM {embeddings} WHERE {space} = %s AND {text_hash} = ANY(%s) "
            "GROUP BY {text_hash}"
        )
        .format(
            text_hash=column(Embedding, "text_hash"),
            code=column(Embedding, "code"),
            window=column(Embedding, "window"),
            vector=column(Embedding, "vector"),
            embeddings=table(Embedding),
            space=column(Embedding, "space"),
        )
        .as_string()
    )


def text_vectors(*, space: str, hashes: Sequence[str]) -> list[TextVectors]:
    """The codes of these texts in one space, and the vectors of its windows in
    order for a text with none."""
    with connection.cursor() as cursor:
        cursor.execute(_text_vectors_statement(), [space, list(hashes)])
        return _rows(cursor, TextVectors)


@cache
def _chunk_codes_statement() -> str:
    return (
        SQL(
            "UPDATE {chunks} c SET {code} = v.code::bit({bits}), {code_space} = %s "
            "FROM unnest(%s::bigint[], %s::text[]) AS v(id, code) WHERE c.{id} = v.id "
            "AND c.{id} IN (SELECT {id} FROM {chunks} WHERE {id} = ANY(%s) "
            "FOR UPDATE SKIP LOCKED)"
        )
        .format(
            chunks=table(Chunk),
            code=column(Chunk, "code"),
            code_space=column(Chunk, "code_space"),
            id=column(Chunk, "id"),
            bits=Literal(CODE_BITS),
        )
        .as_string()
    )


def chunk_codes_set(*, space_id: int, codes: dict[int, str]) -> int:
    """Give chunks (by id) these codes of the space ``space_id``; returns how many.
    A chunk a swap holds is left alone (it is being deleted), and no deadlock
    with the swap can abort it."""
    ids = list(codes)
    with connection.cursor() as cursor:
        cursor.execute(
            _chunk_codes_statement(), [space_id, ids, list(codes.values()), ids]
        )
        return cursor.rowcount


# Today's usage of a space, added to by each job (concurrent jobs add up).
USAGE_INSERT = Insert(
    EmbeddingUsage,
    ("day", "space", "requests", "inputs", "tokens"),
    "INSERT INTO {table} ({columns}) VALUES {values} "
    "ON CONFLICT ({day}, {space}) DO UPDATE SET "
    "{requests} = {table}.{requests} + EXCLUDED.{requests}, "
    "{inputs} = {table}.{inputs} + EXCLUDED.{inputs}, "
    "{tokens} = {table}.{tokens} + EXCLUDED.{tokens}",
)


def usage_add(**row: object) -> None:
    """Add a day's and space's counts to its usage row (one upsert)."""
    with connection.cursor() as cursor:
        cursor.execute(USAGE_INSERT.sql, USAGE_INSERT.params(**row))


# -- session settings -------------------------------------------------------------


def search_settings_apply(cursor, *, ef_search: int) -> None:
    """pgvector's scan settings for the session: the HNSW breadth, and iterative
    scans in relaxed order (the search sorts its candidates itself)."""
    cursor.execute(
        SQL("SET hnsw.ef_search = {}; SET hnsw.iterative_scan = relaxed_order")
        .format(Literal(int(ef_search)))
        .as_string()
    )


# -- the HNSW indexes ---------------------------------------------------------------


def hnsw_index_create(*, name: str, space: str, dimensions: int) -> None:
    """The HNSW cosine index ``name`` on one space's vectors, cast to this size at
    INDEX_PRECISION and limited to the space's rows, unless it exists; built in
    the session's ``maintenance_work_mem`` (see :func:`build_memory_set`)."""
    statement = SQL(
        "CREATE INDEX IF NOT EXISTS {name} ON {table} USING hnsw "
        "(({vector}::{precision}({dims})) {operators}) "
        "WITH (m = 16, ef_construction = 128) WHERE {space} = {value}"
    ).format(
        name=Identifier(name),
        table=table(Embedding),
        vector=column(Embedding, "vector"),
        precision=SQL(INDEX_PRECISION),
        operators=SQL(INDEX_OPERATORS[INDEX_PRECISION]),
        dims=Literal(int(dimensions)),
        space=column(Embedding, "space"),
        value=Literal(space),
    )
    with connection.cursor() as cursor:
        cursor.execute(statement.as_string())


def index_drop(*, name: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            SQL("DROP INDEX IF EXISTS {}").format(Identifier(name)).as_string()
        )


def build_memory_set(cursor, memory: str | None) -> None:
    """The session's ``maintenance_work_mem``: ``memory`` (PostgreSQL's units), or
    the server's own for None."""
    if memory is None:
        cursor.execute("RESET maintenance_work_mem")
    else:
        cursor.execute(
            SQL("SET maintenance_work_mem = {}").format(Literal(memory)).as_string()
        )
