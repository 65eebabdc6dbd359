from __future__ import annotations

import operator
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import reduce

from django.db import connection
from django.db.models import Q
from django.utils import timezone

from kbsite.text import clean_inline, count_tokens
from retrieval.answer import Passage, answer_compose
from retrieval.chunking import ChunkDraft
from retrieval.embeddings import Embedder
from retrieval.models import Caller, Chunk, Embedding, EmbeddingUsage, QueryLog
from retrieval.search import (
    NO_FILTERS,
    Hit,
    SearchFilters,
    SearchMode,
    SearchResult,
    chunks_search,
)
from sources.models import Page

EXCERPT_CHARS = 300
# Inputs per embedding request; OpenAI accepts up to 2,048 but smaller batches fail
# (and retry) more cheaply. Tokens per request stay under OpenAI's 300,000.
EMBED_BATCH = 256
EMBED_BATCH_TOKENS = 250_000


@dataclass(frozen=True)
class EmbedReport:
    embedded: int
    reused: int
    tokens: int
    requests: int

    @classmethod
    def total(cls, reports: list[EmbedReport]) -> EmbedReport:
        return cls(
            embedded=sum(r.embedded for r in reports),
            reused=sum(r.reused for r in reports),
            tokens=sum(r.tokens for r in reports),
            requests=sum(r.requests for r in reports),
        )


def embeddings_missing(*, space: str, hashes: set[str]) -> set[str]:
    """Which of these text hashes have no vector in this space yet."""
    present = Embedding.objects.filter(space=space, text_hash__in=hashes).values_list(
        "text_hash", flat=True
    )
    return hashes - set(present)


def embeddings_ensure(*, texts: dict[str, str], embedder: Embedder) -> EmbedReport:
    """Embed the texts (keyed by hash) that have no vector in the embedder's space.

    Runs outside any transaction: it may call a remote API. Rows are inserted with
    ON CONFLICT DO NOTHING, so two jobs embedding the same text at once are harmless.
    Each request is added to the day's usage as soon as it is answered.
    """
    missing = sorted(embeddings_missing(space=embedder.space, hashes=set(texts)))
    tokens = requests = 0
    for batch in _batches(missing, texts):
        vectors = embedder.embed([texts[text_hash] for text_hash, _ in batch])
        Embedding.objects.bulk_create(
            [
                Embedding(space=embedder.space, text_hash=h, vector=v, token_count=n)
                for (h, n), v in zip(batch, vectors, strict=True)
            ],
            ignore_conflicts=True,
        )
        sent = sum(n for _, n in batch)
        usage_record(space=embedder.space, requests=1, inputs=len(batch), tokens=sent)
        tokens += sent
        requests += 1
    return EmbedReport(
        embedded=len(missing),
        reused=len(texts) - len(missing),
        tokens=tokens,
        requests=requests,
    )


def _batches(
    hashes: list[str], texts: dict[str, str]
) -> Iterator[list[tuple[str, int]]]:
    """(hash, tokens) in batches within the input and token limits of one request."""
    batch: list[tuple[str, int]] = []
    size = 0
    for text_hash in hashes:
        tokens = count_tokens(texts[text_hash])
        if batch and (len(batch) == EMBED_BATCH or size + tokens > EMBED_BATCH_TOKENS):
            yield batch
            batch, size = [], 0
        batch.append((text_hash, tokens))
        size += tokens
    if batch:
        yield batch


def usage_record(*, space: str, requests: int, inputs: int, tokens: int) -> None:
    """Add to today's embedding usage (one upsert; concurrent jobs add up)."""
    table = EmbeddingUsage._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (day, space, requests, inputs, tokens) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (day, space) DO UPDATE SET "
            f"requests = {table}.requests + EXCLUDED.requests, "
            f"inputs = {table}.inputs + EXCLUDED.inputs, "
            f"tokens = {table}.tokens + EXCLUDED.tokens",
            [timezone.localdate(), space, requests, inputs, tokens],
        )


def page_chunks_replace(*, page: Page, drafts: list[ChunkDraft]) -> None:
    """Swap the page's chunks for these. Call inside the transaction that records the
    new version, so readers see the old set or the new one, never a mix."""
    page.chunks.all().delete()
    Chunk.objects.bulk_create(
        Chunk(
            page=page,
            position=draft.position,
            heading=draft.heading[:1000],
            text=draft.text,
            embed_hash=draft.embed_hash,
            token_count=draft.token_count,
        )
        for draft in drafts
    )


# -- questions ---------------------------------------------------------------------


@dataclass(frozen=True)
class Citation:
    chunk: Chunk
    score: float

    @property
    def page(self) -> Page:
        return self.chunk.page

    @property
    def excerpt(self) -> str:
        """The chunk as plain text without its heading line (the heading path is shown
        on its own), cut at a word near EXCERPT_CHARS."""
        lines = clean_inline(self.chunk.text).split("\n")
        body = [line for line in lines if not line.startswith("#")]
        text = " ".join(" ".join(body).split())
        if len(text) <= EXCERPT_CHARS:
            return text
        return text[:EXCERPT_CHARS].rsplit(" ", 1)[0] + " …"


@dataclass(frozen=True)
class QueryResult:
    answer: str
    abstained: bool
    citations: list[Citation]
    chunk_ids: list[int]


def search_run(
    *,
    query: str,
    user: Caller,
    k: int,
    filters: SearchFilters = NO_FILTERS,
    mode: SearchMode = SearchMode.HYBRID,
    log: bool = True,
) -> list[Citation]:
    """Search results: the best chunk of each page, best first, logged."""
    started = time.perf_counter()
    result = chunks_search(query=query, user=user, k=k, filters=filters, mode=mode)
    citations = _one_per_page(result.hits)
    if log:
        _log(QueryLog.Kind.SEARCH, query, user, result, started)
    return citations


def question_answer(
    *,
    question: str,
    user: Caller,
    k: int,
    filters: SearchFilters = NO_FILTERS,
    log: bool = True,
) -> QueryResult:
    """An answer grounded in retrieved passages, citing the pages it used."""
    started = time.perf_counter()
    result = chunks_search(query=question, user=user, k=k, filters=filters)
    citations = _one_per_page(result.hits)
    following = _following_chunks([c.chunk for c in citations])
    passages = [
        Passage(
            number=number,
            title=c.page.title,
            url=c.page.url,
            heading=c.chunk.heading,
            text=_with_neighbour(c.chunk, following),
        )
        for number, c in enumerate(citations, start=1)
    ]
    answer = answer_compose(question=question, passages=passages)
    if log:
        _log(QueryLog.Kind.QUERY, question, user, result, started, answer.text)
    return QueryResult(
        answer=answer.text,
        abstained=result.abstained,
        citations=[citations[n - 1] for n in answer.cited],
        chunk_ids=result.chunk_ids,
    )


def _one_per_page(hits: list[Hit]) -> list[Citation]:
    seen: set[int] = set()
    citations = []
    for hit in hits:
        if hit.chunk.page_id not in seen:
            seen.add(hit.chunk.page_id)
            citations.append(Citation(chunk=hit.chunk, score=hit.score))
    return citations


def _following_chunks(chunks: list[Chunk]) -> dict[tuple[int, int], Chunk]:
    """The chunk after each of these on its page, in one query, by (page, position)."""
    if not chunks:
        return {}
    wanted = reduce(
        operator.or_,
        (Q(page_id=c.page_id, position=c.position + 1) for c in chunks),
    )
    rows = Chunk.objects.filter(wanted).only("page_id", "position", "text", "heading")
    return {(row.page_id, row.position): row for row in rows}


def _with_neighbour(chunk: Chunk, following: dict[tuple[int, int], Chunk]) -> str:
    """The chunk and, when the section goes on, the next chunk of that section, so
    that a procedure cut in two reaches the answer whole."""
    after = following.get((chunk.page_id, chunk.position + 1))
    if after is not None and after.heading == chunk.heading:
        return f"{chunk.text}\n\n{after.text}"
    return chunk.text


def _log(
    kind: str,
    text: str,
    user: Caller,
    result: SearchResult,
    started: float,
    answer: str = "",
) -> None:
    QueryLog.objects.create(
        kind=kind,
        text=text[:5000],
        answer=answer,
        user_id=user.pk if user is not None and user.is_authenticated else None,
        chunk_ids=result.chunk_ids,
        scores=[round(h.score, 6) for h in result.hits],
        abstained=result.abstained,
        latency_ms=round((time.perf_counter() - started) * 1000),
    )
