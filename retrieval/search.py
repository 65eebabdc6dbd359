"""Hybrid retrieval: nearest vectors and keyword matches, fused by reciprocal rank.

Both lists come from chunks of live pages the caller may see, filtered in the query
itself. A search ranks whatever it finds; whether that is evidence enough to answer
from (``retrieval.evidence``) is the answer's decision, and each hit says whether
it holds evidence by itself (``Hit.confident``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import partial

from django.conf import settings

from kbsite.parallel import beside
from retrieval import sql
from retrieval.codes import vector_code
from retrieval.embedder import Embedder
from retrieval.evidence import (
    LEXICAL_COVERAGE,
    Evidence,
    evidence_weigh,
    held_share,
    holds_own_word,
    names_unknown,
    own_terms,
)
from retrieval.keywords import (
    KEYWORD_HITS,
    NO_TERMS,
    Meant,
    QueryTerms,
    keyword_ranked,
    query_terms,
)
from retrieval.models import Chunk, EmbeddingSpace
from retrieval.pins import PinMatch, pin_match
from retrieval.searchable import (
    NO_FILTERS,
    Searchable,
    SearchFilters,
    searchable_chunks,
)
from retrieval.spaces import floor_in_force, serving
from retrieval.sql import KeywordHit
from retrieval.synonyms import question_widened, synonyms_in
from sources.models import Caller

# Reciprocal rank fusion: each list adds weight / (RRF_K + rank). The constant and
# the weights were tuned on the PostgreSQL manual's golden set and checked on the
# Python documentation's (see docs/quality.md). The vector list counts less when its
# best hit is under the floor (its order is then about as telling as that of
# unrelated words), and least in a space with no floor (hashed words: the keyword
# list says the same, better).
RRF_K = 20
VECTOR_WEIGHT = 1.5
VECTOR_WEIGHT_BELOW_FLOOR = 0.5
VECTOR_WEIGHT_NO_FLOOR = 0.25
KEYWORD_WEIGHT = 1.0
# Searchable vectors taken, nearest first, before fusion.
CANDIDATES = 100
# A search of part of the index ranks its chunks by their codes first when that
# reads less (``coded_pass``): it reads every searched chunk row, and then the
# vectors of CODED_FIRST times the vectors it wants. The HNSW walk visits about
# as many vectors as it wants divided by the searched share, each costing about
# WALK_COST chunk rows read by code. Measured at 100,000 chunks of hashed
# vectors (docs/benchmarks.md): a tenth searched took 20 ms by code against 40
# by the walk, a fifth 37 against 20; 1,000 of 10,000 by 1,024-sign codes held
# 0.997 of the exact nearest 10 and 0.951 of the nearest 100.
CODED_FIRST = 10
WALK_COST = 20
# A page of release notes mentions what other pages define: its fused score counts
# this much unless the question asks about a version or a change. Any weight under
# 1 puts the defining page first when both lists rank the two pages alike; at a
# half, a page both lists rank in their first twenty outranks release notes both
# rank first. Not tuned on a golden set: a changelog's mention is no definition.
RELEASE_NOTES_WEIGHT = 0.5
# A question about a version or a change, in its own words: not "a new table" or
# "change the port", but "what's new", "changed in", "deprecated", "since 5.1".
ABOUT_CHANGE = re.compile(
    r"\bwhat(?:['’]s| is| are) new\b|\bnew in\b|\bwhat changed\b"
    r"|\bchange[sd]? (?:in|since|between)\b|\b(?:added|removed|introduced) in\b"
    r"|\bdeprecat\w*|\bchangelog\b|\brelease notes?\b|\bversion \d"
    r"|\b(?:in|since|before|after|from|to|until) v?\d+\.\d+\b(?!\.\d)",
    re.IGNORECASE,
)
# HNSW search breadth: the SEARCH_HNSW_EF setting, 200 by default. Recall@10
# against an exact scan: at 100,000 chunks of hashed vectors (bench.query latency,
# 200 questions) 400 0.992, 300 0.985, 200 0.968; over the 33,273 local-model
# vectors of both golden sites (their 124 questions) 400 0.990, 300 0.988, 200
# 0.984, 100 0.966. The golden sets scored the same at 200 as at 300, and a search
# over HTTP took about 4 ms less at p50 and p95. A million vectors want more
# (bench.vectors: 0.84 at 200, 0.89 at 400 with hashed vectors). With iterative
# scans the breadth is the first batch, not a cap on the candidates.


class SearchMode(StrEnum):
    HYBRID = "hybrid"
    VECTOR = "vector"
    KEYWORD = "keyword"


@dataclass
class Hit:
    pk: int  # the chunk's
    page_id: int
    score: float = 0.0  # the page's fused score: what orders pages
    chunk_score: float = 0.0  # the chunk's own: what orders a page's chunks
    similarity: float | None = None  # cosine similarity, from the vector list
    vector_rank: int | None = None
    keyword_rank: int | None = None
    matched: int = 0  # a bit per query term the chunk holds
    release_notes: bool = False  # of a page of release notes
    # The chunk by itself is evidence: its meaning reaches the floor, or it holds
    # most of the question's weight (and the question names nothing unknown).
    confident: bool = False
    # An editor pinned this chunk's section to answer questions like this one.
    pin: PinMatch | None = None
    # The whole row, read for the hits chosen only.
    chunk: Chunk = field(init=False, repr=False, compare=False)


@dataclass
class SearchResult:
    hits: list[Hit]  # ranked, whether or not they are evidence enough
    abstained: bool  # they are not: an answer from them would be a guess
    evidence: Evidence
    # The chunks it could return (who may read what cost a query).
    searchable: Searchable
    chunk_ids: list[int] = field(default_factory=list)
    candidates: int = 0  # chunks the vector side found among the searchable ones
    # The embedder that ranked by vectors and its vector of the query, widened by
    # the synonyms it holds (None in a keyword search).
    embedder: Embedder | None = None
    query_vector: list[float] | None = None
    # The vector of the question as asked, what pins are matched with: the same
    # as query_vector unless synonyms widened it.
    question_vector: list[float] | None = None
    # The question's reader's words that synonyms gave the documentation's words
    # for (``retrieval.synonyms``), and the text embedded.
    meant: tuple[Meant, ...] = ()
    widened: str = ""
    # How far the first page's fused score is ahead of the next page's, as a share
    # of it (``page_lead``); None when no page came.
    lead: float | None = None
    # The question's terms as this search weighed them (their counts cost a query).
    terms: QueryTerms = NO_TERMS


def chunks_search(
    *,
    query: str,
    user: Caller,
    k: int,
    per_page: int | None = None,
    filters: SearchFilters = NO_FILTERS,
    mode: SearchMode = SearchMode.HYBRID,
    embedder: Embedder | None = None,
) -> SearchResult:
    """The ``k`` best chunks for ``query``: by vectors, keywords or both fused.

    A narrower scope never abstains where the whole index would answer from that
    scope's pages: when a filtered search finds no evidence, the same question
    is asked of everything the caller may search, and if that search has evidence
    and its best page is within the filters, the filtered search has it too (the
    nearest chunk of all, or the one holding most of the question's words, may be
    another source's). One abstention stands: a question naming what the scope
    never names is not about the scope's pages, even where another source names
    it and the whole index answers from the scope. It costs a second search for
    the filtered questions that would abstain, and nothing for the others.

    Reader's words an editor gave synonyms for, in the sources searched, are
    searched as the documentation's words too (``retrieval.synonyms``).

    A section an editor pinned to answer questions like this one comes first
    (``retrieval.pins``), whatever the ranking says: matched by the question as
    asked, as its pinned questions were."""
    per_page = per_page or settings.SEARCH_CHUNKS_PER_PAGE
    result = _scoped(query, user, k, per_page, filters, mode, embedder)
    if result.question_vector is None or result.embedder is None:
        return result
    match = pin_match(
        vector=result.question_vector,
        space=result.embedder.space,
        searchable=result.searchable,
        floor=result.evidence.floor,
    )
    return result if match is None else _pinned(result, match, k=k, per_page=per_page)


def _scoped(
    query: str,
    user: Caller,
    k: int,
    per_page: int,
    filters: SearchFilters,
    mode: SearchMode,
    embedder: Embedder | None,
) -> SearchResult:
    result = _search(query, user, k, per_page, filters, mode, embedder)
    if not result.abstained or filters == NO_FILTERS or result.evidence.off_subject:
        # A scope that never names what the question asks about is right to say
        # so, whatever another source names: its pages cannot be about it.
        return result
    wide = _search(
        query, user, 1, 1, NO_FILTERS, mode, result.embedder, _vectors(result, query)
    )
    if wide.abstained or not wide.hits or not _within(wide.hits[0], result.searchable):
        return result
    for hit in result.hits:
        hit.confident = _confident(hit, wide.evidence, result.terms)
    return replace(result, abstained=False, evidence=wide.evidence)


def _pinned(
    result: SearchResult, match: PinMatch, *, k: int, per_page: int
) -> SearchResult:
    """The result with the pinned chunk first, as evidence: an editor read it
    and said it answers this question; the ranked hits follow, each page at most
    ``per_page`` times, ``k`` in all."""
    found = _with_full_rows([Hit(pk=match.chunk_id, page_id=0)])
    if not found:  # the page was read again since the match: no longer that text
        return result
    pinned = found[0]
    pinned.page_id = pinned.chunk.page_id
    top = result.hits[0].score if result.hits else 0.0
    pinned.score = pinned.chunk_score = top
    pinned.confident = True
    pinned.pin = match
    hits = [pinned]
    per: dict[int, int] = {pinned.page_id: 1}
    for hit in result.hits:
        if hit.pk == pinned.pk or per.get(hit.page_id, 0) >= per_page:
            continue
        per[hit.page_id] = per.get(hit.page_id, 0) + 1
        hits.append(hit)
    hits = hits[:k]
    return replace(result, hits=hits, abstained=False, chunk_ids=[h.pk for h in hits])


def _within(hit: Hit, searchable: Searchable) -> bool:
    """Whether the hit's page is among those ``searchable`` may return."""
    page = hit.chunk.page
    if searchable.source_ids is not None and page.source_id not in (
        searchable.source_ids
    ):
        return False
    since = searchable.verified_since
    return since is None or (
        page.last_verified_at is not None and page.last_verified_at >= since
    )


def _vectors(result: SearchResult, query: str) -> dict[str, list[float]]:
    """The texts a search of ``query`` embedded, with their vectors."""
    if result.query_vector is None or result.question_vector is None:
        return {}
    return {query: result.question_vector, result.widened: result.query_vector}


def _search(
    query: str,
    user: Caller,
    k: int,
    per_page: int | None,
    filters: SearchFilters,
    mode: SearchMode,
    embedder: Embedder | None,
    embedded: Mapping[str, list[float]] | None = None,
) -> SearchResult:
    """``embedded``: texts embedded already (by the same embedder), by text."""
    per_page = per_page or settings.SEARCH_CHUNKS_PER_PAGE
    searchable = searchable_chunks(user, filters)
    meant = synonyms_in(query, source_ids=searchable.source_ids)
    terms = query_terms(query, meant)
    # The keyword query runs beside the embedding and the vector scan.
    selected = (
        beside(keyword_ranked, searchable, terms)
        if mode != SearchMode.VECTOR
        else lambda: []
    )
    space: EmbeddingSpace | None = None
    vector_hits: list[Hit] = []
    scored: list[KeywordHit] = []
    widened = question_widened(query, meant)
    vector: list[float] | None = None
    asked: list[float] | None = None
    if mode != SearchMode.KEYWORD:
        served, space = serving()
        embedder = embedder or served
        vector, asked = _embedded(embedder, [widened, query], embedded or {})
        vector_hits, scored = _vector_hits(
            vector,
            searchable,
            embedder,
            terms if mode == SearchMode.HYBRID else NO_TERMS,
            coded_pass(space, embedder, vector, searchable, limit=CANDIDATES),
        )
    keyword_hits = _keyword_hits(selected(), scored)
    matched = [h.matched for h in keyword_hits]
    keywords = mode != SearchMode.VECTOR
    evidence = evidence_weigh(
        similarity=max((h.similarity or 0.0 for h in vector_hits), default=0.0),
        floor=floor_in_force(space, searchable.source_ids),
        terms=terms,
        matched=matched,
        keywords=keywords,
        unknown=(
            names_unknown(terms, matched, partial(sql.terms_held, searchable))
            if keywords
            else ()
        ),
    )
    fused = _fuse(
        vector_hits,
        keyword_hits,
        vector_weight=_vector_weight(evidence),
        release_notes_weight=(
            1.0 if ABOUT_CHANGE.search(query) else RELEASE_NOTES_WEIGHT
        ),
        first=_pages_with_own_words(terms, keyword_hits),
    )
    hits = _with_full_rows(_diverse(fused, k=k, per_page=per_page))
    for hit in hits:
        hit.confident = _confident(hit, evidence, terms)
    return SearchResult(
        hits=hits,
        abstained=not evidence.enough,
        evidence=evidence,
        chunk_ids=[h.pk for h in hits],
        candidates=len(vector_hits),
        embedder=embedder if vector is not None else None,
        query_vector=vector,
        question_vector=asked,
        meant=tuple(meant),
        widened=widened,
        lead=page_lead(fused),
        terms=terms,
        searchable=searchable,
    )


def _embedded(
    embedder: Embedder, texts: list[str], known: Mapping[str, list[float]]
) -> list[list[float]]:
    """The vectors of ``texts``, those not ``known`` embedded in one call."""
    wanted = [text for text in dict.fromkeys(texts) if text not in known]
    vectors = dict(known)
    if wanted:
        vectors.update(zip(wanted, embedder.embed_queries(wanted), strict=True))
    return [vectors[text] for text in texts]


def page_lead(fused: list[Hit]) -> float | None:
    """How far the first page's fused score is ahead of the next page's, as a
    share of it, over every page ranked (not only the ``k`` returned): 1 when no
    other page came, and below 0 when the first page holds a word of the
    question's own that put it before a page both lists liked more. None when no
    page came."""
    scores: dict[int, float] = {}
    for hit in fused:
        scores.setdefault(hit.page_id, hit.score)
        if len(scores) == 2:
            break
    if not scores:
        return None
    first, second = [*scores.values(), 0.0][:2]
    return round((first - second) / first, 4) if first > 0 else None


def _confident(hit: Hit, evidence: Evidence, terms: QueryTerms) -> bool:
    """Whether this hit by itself is evidence (``Evidence.enough`` for its own
    similarity and words)."""
    if evidence.off_subject:
        return False
    near = evidence.floor is not None and (hit.similarity or 0.0) >= evidence.floor
    return near or (
        evidence.keywords and held_share(terms, hit.matched) >= LEXICAL_COVERAGE
    )


def _vector_weight(evidence: Evidence) -> float:
    if evidence.floor is None:
        return VECTOR_WEIGHT_NO_FLOOR
    return VECTOR_WEIGHT if evidence.vector else VECTOR_WEIGHT_BELOW_FLOOR


def _pages_with_own_words(terms: QueryTerms, keyword_hits: list[Hit]) -> set[int]:
    """Pages of a keyword hit holding a word of the question's own and most of its
    weight (``retrieval.evidence.own_terms``): ranked first, as the vector list
    cannot weigh that word."""
    own = own_terms(terms, [h.matched for h in keyword_hits])
    if not own:
        return set()
    return {h.page_id for h in keyword_hits if holds_own_word(terms, h.matched, own)}


def _with_full_rows(hits: list[Hit]) -> list[Hit]:
    """The chosen hits with their text and what is cited of their page."""
    rows = sql.chunks_with_pages([h.pk for h in hits])
    # A page re-chunked since the ranking read its rows has lost those chunks.
    hits = [hit for hit in hits if hit.pk in rows]
    for hit in hits:
        hit.chunk = rows[hit.pk]
    return hits


def coded_pass(
    space: EmbeddingSpace | None,
    embedder: Embedder,
    vector: list[float],
    searchable: Searchable,
    *,
    limit: int,
) -> sql.CodedPass | None:
    """The first pass by codes (``retrieval.codes``) for a search of the nearest
    ``limit`` vectors, when it reads less than the database's own plans: the
    searched sources, counted with the space's floor, hold more chunks than it
    reads exactly, and too small a share of the index for the HNSW walk
    (searched chunks × share < WALK_COST × limit). A source the count does not
    name had no live chunk then, or has fewer than a tenth of the index now (a
    tenth more refreshes the count): it counts as none. It reads exactly the
    texts of the best CODED_FIRST × limit chunks, or of a tenth of the chunks
    searched if more (the share its recall was measured at). None: every
    source, no count yet, or an embedder other than the serving space's, whose
    codes the chunks do not hold."""
    if (
        space is None
        or space.name != embedder.space
        or searchable.source_ids is None
        or not space.floor_chunks
        or not space.source_chunks
    ):
        return None
    counted = space.source_chunks
    searched = sum(counted.get(str(pk), 0) for pk in searchable.source_ids)
    first = max(CODED_FIRST * limit, searched // 10)
    share = searched / space.floor_chunks
    if searched <= first or searched * share >= WALK_COST * limit:
        return None
    return sql.CodedPass(space_id=space.pk, code=vector_code(vector), first=first)


def _vector_hits(
    vector: list[float],
    searchable: Searchable,
    embedder: Embedder,
    terms: QueryTerms,
    coded: sql.CodedPass | None = None,
) -> tuple[list[Hit], list[KeywordHit]]:
    """Searchable chunks whose text has one of the vectors nearest ``vector`` (the
    query's), nearest first, and those of them that hold a term of the question,
    with their keyword scores (one statement, ``retrieval.sql.vector_candidates``)."""
    rows = sql.vector_candidates(
        embedder.space,
        embedder.dimensions,
        vector,
        limit=CANDIDATES,
        searchable=searchable,
        terms=terms.terms,
        coded=coded,
    )
    hits = [
        Hit(pk=r.pk, page_id=r.page_id, similarity=r.similarity,
            release_notes=r.release_notes)
        for r in rows
    ]  # fmt: skip
    hits.sort(key=lambda h: (-(h.similarity or 0.0), h.pk))
    for rank, hit in enumerate(hits, start=1):
        hit.vector_rank = rank
    return hits, [r.keyword_hit for r in rows if r.matched]


def search_breadth_set(sender, connection, **kwargs) -> None:
    """pgvector's scan settings for the whole session, set once when Django opens
    a connection rather than in a transaction around every search.

    An HNSW scan first gathers ``hnsw.ef_search`` vectors; with an iterative scan
    (relaxed order: the search sorts its candidates itself) it goes on through
    the graph while fewer than CANDIDATES of them pass the search's condition,
    up to ``hnsw.max_scan_tuples`` vectors (pgvector's default, 20,000).
    """
    with connection.cursor() as cursor:
        sql.search_settings_apply(cursor, ef_search=settings.SEARCH_HNSW_EF)


def _keyword_hits(selected: list[KeywordHit], scored: list[KeywordHit]) -> list[Hit]:
    """The best keyword hits among the chunks a selecting term found and the vector
    candidates holding any term, best first."""
    rows = {row.pk: row for row in scored}
    rows.update((row.pk, row) for row in selected)
    ranked = sorted(rows.values(), key=lambda r: (-r.score, r.pk))[:KEYWORD_HITS]
    return [
        Hit(pk=row.pk, page_id=row.page_id, matched=row.matched, keyword_rank=rank,
            release_notes=row.release_notes)
        for rank, row in enumerate(ranked, start=1)
    ]  # fmt: skip


def _fuse(
    vector_hits: list[Hit],
    keyword_hits: list[Hit],
    *,
    vector_weight: float,
    release_notes_weight: float = 1.0,
    first: set[int] | frozenset[int] = frozenset(),
) -> list[Hit]:
    """Chunks by fused score. Pages are what gets cited, so each list votes for
    pages (by their best chunk's rank in it) as well as for chunks: a page whose
    best vector chunk and best keyword chunk differ still gets both votes. A page
    of release notes gets ``release_notes_weight`` of its votes. The pages in
    ``first`` come before the others, each group by fused score."""
    by_chunk: dict[int, Hit] = {}
    for hit in vector_hits + keyword_hits:
        fused = by_chunk.setdefault(
            hit.pk,
            Hit(pk=hit.pk, page_id=hit.page_id, release_notes=hit.release_notes),
        )
        if hit.vector_rank is not None:
            fused.vector_rank, fused.similarity = hit.vector_rank, hit.similarity
        if hit.keyword_rank is not None:
            fused.keyword_rank, fused.matched = hit.keyword_rank, hit.matched
    weights = {"vector_rank": vector_weight, "keyword_rank": KEYWORD_WEIGHT}
    page_score: dict[int, float] = defaultdict(float)
    for rank_of, weight in weights.items():
        ranked = sorted(
            (h for h in by_chunk.values() if getattr(h, rank_of) is not None),
            key=lambda h: getattr(h, rank_of),
        )
        pages = list(dict.fromkeys(h.page_id for h in ranked))
        for page_rank, page_id in enumerate(pages, start=1):
            page_score[page_id] += weight / (RRF_K + page_rank)
    for hit in by_chunk.values():
        hit.score = page_score[hit.page_id]
        if hit.release_notes:
            hit.score *= release_notes_weight
        hit.chunk_score = sum(
            weight / (RRF_K + getattr(hit, rank_of))
            for rank_of, weight in weights.items()
            if getattr(hit, rank_of) is not None
        )
    return sorted(
        by_chunk.values(),
        key=lambda h: (h.page_id not in first, -h.score, -h.chunk_score, h.pk),
    )


def _diverse(hits: list[Hit], *, k: int, per_page: int) -> list[Hit]:
    """The best ``k`` hits with at most ``per_page`` from any one page."""
    taken: list[Hit] = []
    per: dict[int, int] = {}
    for hit in hits:
        page_id = hit.page_id
        if per.get(page_id, 0) < per_page:
            taken.append(hit)
            per[page_id] = per.get(page_id, 0) + 1
            if len(taken) == k:
                break
    return taken
