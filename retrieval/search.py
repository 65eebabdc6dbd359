"""Hybrid retrieval: nearest vectors and full-text matches, fused by reciprocal rank.

Both lists come from chunks of live pages the caller may see, filtered in the query
itself. A question abstains when neither list holds real evidence: the best cosine
similarity is under the relevance floor and no chunk contains every query term.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum

from django.conf import settings
from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from retrieval.embeddings import Embedder
from retrieval.models import Caller, Chunk, Embedding
from retrieval.spaces import serving_embedder

# Reciprocal rank fusion's constant: large enough that rank 1 and 2 stay close.
RRF_K = 60
# Candidates taken from each list before filtering and fusion.
CANDIDATES = 100
# HNSW search breadth: at 100,000 chunks (bench.query) 400 gave recall@10 0.98
# against an exact scan, 200 and 300 0.94; pgvector's default, 40, would also starve
# the filters that come after the index scan.
HNSW_EF_SEARCH = 400
# Full-text matches ranked at most (see _keyword_hits).
KEYWORD_RANKED = 2000


class SearchMode(StrEnum):
    HYBRID = "hybrid"
    VECTOR = "vector"
    KEYWORD = "keyword"


@dataclass
class Hit:
    chunk: Chunk
    score: float = 0.0
    similarity: float | None = None  # cosine similarity, from the vector list
    vector_rank: int | None = None
    keyword_rank: int | None = None


@dataclass
class SearchResult:
    hits: list[Hit]
    abstained: bool
    best_similarity: float
    keyword_matches: int
    chunk_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class SearchFilters:
    source_ids: tuple[int, ...] = ()
    max_age_days: int | None = None


NO_FILTERS = SearchFilters()


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
    """The ``k`` best chunks for ``query``: by vectors, keywords or both fused."""
    per_page = per_page or settings.SEARCH_CHUNKS_PER_PAGE
    candidates = _candidates(user, filters)
    vector_hits = (
        _vector_hits(query, candidates, embedder or serving_embedder())
        if mode != SearchMode.KEYWORD
        else []
    )
    keyword_hits = (
        _keyword_hits(query, candidates, vector_hits)
        if mode != SearchMode.VECTOR
        else []
    )
    fused = _fuse(vector_hits, keyword_hits)
    hits = _with_full_rows(_diverse(fused, k=k, per_page=per_page))
    best = max((h.similarity or 0.0 for h in vector_hits), default=0.0)
    abstained = best < settings.RELEVANCE_FLOOR and not keyword_hits
    return SearchResult(
        hits=[] if abstained else hits,
        abstained=abstained,
        best_similarity=best,
        keyword_matches=len(keyword_hits),
        chunk_ids=[] if abstained else [h.chunk.pk for h in hits],
    )


def _candidates(user: Caller, filters: SearchFilters) -> QuerySet[Chunk]:
    chunks = Chunk.objects.live().visible_to(user)
    if filters.source_ids:
        chunks = chunks.filter(page__source_id__in=filters.source_ids)
    if filters.max_age_days is not None:
        oldest = timezone.now() - timedelta(days=filters.max_age_days)
        chunks = chunks.filter(page__last_verified_at__gte=oldest)
    # Narrow rows while ranking; the k chosen are read whole afterwards.
    return chunks.only("pk", "page_id", "position", "embed_hash")


def _with_full_rows(hits: list[Hit]) -> list[Hit]:
    """The chosen hits with their text and page (without the page's big fields)."""
    rows = (
        Chunk.objects.select_related("page")
        .defer(
            "search_document", "page__markdown", "page__raw_body", "page__line_shapes"
        )
        .in_bulk([h.chunk.pk for h in hits])
    )
    for hit in hits:
        hit.chunk = rows[hit.chunk.pk]
    return hits


def _vector_hits(query: str, candidates, embedder: Embedder) -> list[Hit]:
    """Nearest texts from the HNSW index, then the visible chunks carrying them.

    pgvector 0.6 filters after the index scan, which returns at most
    ``hnsw.ef_search`` rows, so that setting is kept above the number fetched.
    """
    (vector,) = embedder.embed([query])
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL hnsw.ef_search = %s", [HNSW_EF_SEARCH])
        nearest = list(nearest_texts(embedder, vector))
    distance = dict(nearest)
    chunks = candidates.filter(embed_hash__in=distance)
    hits = [Hit(chunk=c, similarity=1.0 - distance[c.embed_hash]) for c in chunks]
    hits.sort(key=lambda h: (-(h.similarity or 0.0), h.chunk.pk))
    for rank, hit in enumerate(hits, start=1):
        hit.vector_rank = rank
    return hits


def nearest_texts(embedder: Embedder, vector: list[float]) -> QuerySet:
    """(text hash, cosine distance) of the nearest vectors in the embedder's space,
    through that space's HNSW index."""
    return Embedding.objects.nearest(
        space=embedder.space, dimensions=embedder.dimensions, vector=vector
    ).values_list("text_hash", "distance")[:CANDIDATES]


def _keyword_hits(query: str, candidates, vector_hits: list[Hit]) -> list[Hit]:
    """Full-text matches, best first. A query matching more than KEYWORD_RANKED
    chunks (common words) carries little keyword evidence, and ranking every match
    is slow: then only the vector candidates are ranked by it."""
    matches = candidates.matching(query)
    if matches.values("pk")[KEYWORD_RANKED : KEYWORD_RANKED + 1].exists():
        matches = matches.filter(pk__in=[h.chunk.pk for h in vector_hits])
    hits = [Hit(chunk=c) for c in matches[:CANDIDATES]]
    for rank, hit in enumerate(hits, start=1):
        hit.keyword_rank = rank
    return hits


def _fuse(vector_hits: list[Hit], keyword_hits: list[Hit]) -> list[Hit]:
    by_chunk: dict[int, Hit] = {}
    for hit in vector_hits + keyword_hits:
        fused = by_chunk.setdefault(hit.chunk.pk, Hit(chunk=hit.chunk))
        if hit.vector_rank is not None:
            fused.vector_rank, fused.similarity = hit.vector_rank, hit.similarity
        if hit.keyword_rank is not None:
            fused.keyword_rank = hit.keyword_rank
    for hit in by_chunk.values():
        ranks = [r for r in (hit.vector_rank, hit.keyword_rank) if r is not None]
        hit.score = sum(1.0 / (RRF_K + rank) for rank in ranks)
    return sorted(by_chunk.values(), key=lambda h: (-h.score, h.chunk.pk))


def _diverse(hits: list[Hit], *, k: int, per_page: int) -> list[Hit]:
    """The best ``k`` hits with at most ``per_page`` from any one page."""
    taken: list[Hit] = []
    per: dict[int, int] = {}
    for hit in hits:
        page_id = hit.chunk.page_id
        if per.get(page_id, 0) < per_page:
            taken.append(hit)
            per[page_id] = per.get(page_id, 0) + 1
            if len(taken) == k:
                break
    return taken
