from __future__ import annotations

import operator
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import reduce

from django.contrib.auth.models import Group
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from kbsite.text import count_tokens
from retrieval.answer import Answer, Passage, answer_compose
from retrieval.chunking import SEPARATOR, ChunkDraft
from retrieval.embedder import Embedder
from retrieval.models import Caller, Chunk, Embedding, EmbeddingUsage, QueryLog
from retrieval.search import (
    NO_FILTERS,
    Hit,
    SearchFilters,
    SearchMode,
    SearchResult,
    chunks_search,
)
from retrieval.spans import cut, excerpt, unmark
from retrieval.windows import text_windows
from sources.models import Page, Source

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
    """Embed the texts (keyed by hash) that have no vector in the embedder's space;
    a text longer than the model reads gets one vector per window.

    Runs outside any transaction: it may call a remote API. Rows are inserted with
    ON CONFLICT DO NOTHING, so two jobs embedding the same text at once are harmless.
    Each request is added to the day's usage as soon as it is answered.
    """
    missing = sorted(embeddings_missing(space=embedder.space, hashes=set(texts)))
    tokens = requests = 0
    for batch in _batches(missing, texts, embedder):
        inputs = [window for _, windows in batch for window in windows]
        vectors = iter(embedder.embed(inputs))
        rows = []
        for text_hash, windows in batch:
            for number, window in enumerate(windows):
                rows.append(
                    Embedding(space=embedder.space, text_hash=text_hash,
                              window=number, vector=next(vectors),
                              token_count=count_tokens(window))
                )  # fmt: skip
        # All windows of a text in one insert: a text is embedded whole or not at all.
        Embedding.objects.bulk_create(rows, ignore_conflicts=True)
        sent = sum(row.token_count for row in rows)
        usage_record(space=embedder.space, requests=1, inputs=len(rows), tokens=sent)
        tokens += sent
        requests += 1
    return EmbedReport(
        embedded=len(missing),
        reused=len(texts) - len(missing),
        tokens=tokens,
        requests=requests,
    )


def _batches(
    hashes: list[str], texts: dict[str, str], embedder: Embedder
) -> Iterator[list[tuple[str, list[str]]]]:
    """(hash, windows) in batches within the input and token limits of one request;
    the windows of one text never straddle two requests."""
    batch: list[tuple[str, list[str]]] = []
    inputs = size = 0
    for text_hash in hashes:
        windows = text_windows(embedder, texts[text_hash])
        tokens = sum(count_tokens(window) for window in windows)
        if batch and (
            inputs + len(windows) > EMBED_BATCH or size + tokens > EMBED_BATCH_TOKENS
        ):
            yield batch
            batch, inputs, size = [], 0, 0
        batch.append((text_hash, windows))
        inputs += len(windows)
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
            anchor=draft.anchor[:200],
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
    # Plain text of the part of the chunk that was quoted or matched the question.
    excerpt: str = ""

    @property
    def page(self) -> Page:
        return self.chunk.page

    @property
    def section_url(self) -> str:
        return self.chunk.section_url

    @property
    def section(self) -> str:
        """The heading path without a first heading that only repeats the title."""
        parts = self.chunk.heading.split(SEPARATOR) if self.chunk.heading else []
        title = " ".join(self.page.title.split())
        if parts and title and " ".join(parts[0].split()) in title:
            parts = parts[1:]
        return unmark(SEPARATOR.join(parts))

    @property
    def failed_since_verified(self) -> bool:
        """The page's latest crawl failed: what is shown may be out of date."""
        failed, verified = self.page.last_failure_at, self.page.last_verified_at
        return failed is not None and (verified is None or failed > verified)


@dataclass(frozen=True)
class QueryResult:
    answer: str  # Markdown
    abstained: bool
    citations: list[Citation]
    chunk_ids: list[int]
    log_id: int | None = None  # the question's QueryLog row, for feedback


def search_run(
    *,
    query: str,
    user: Caller,
    k: int,
    filters: SearchFilters = NO_FILTERS,
    mode: SearchMode = SearchMode.HYBRID,
    log: bool = True,
) -> list[Citation]:
    """Search results: the best chunk of each of ``k`` pages, best first, logged."""
    started = time.perf_counter()
    result = chunks_search(
        query=query, user=user, k=k, filters=filters, mode=mode, per_page=1
    )
    citations = [
        replace(c, excerpt=excerpt(query, c.chunk.text, limit=EXCERPT_CHARS))
        for c in citations_of(result.hits)
    ]
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
    citations = citations_of(result.hits)
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
    log_id = (
        _log(QueryLog.Kind.QUERY, question, user, result, started, answer.text)
        if log
        else None
    )
    cited = [
        replace(citations[n - 1], excerpt=_quoted(answer, n, passages, question))
        for n in answer.cited
    ]
    return QueryResult(
        answer=answer.text,
        abstained=result.abstained,
        citations=cited,
        chunk_ids=result.chunk_ids,
        log_id=log_id,
    )


def _quoted(answer: Answer, number: int, passages: list[Passage], question: str):
    """The excerpt of a cited passage: what the answer quoted of it, with what
    follows; for a chat answer, the part that matches the question best."""
    span = answer.quoted.get(number)
    if span is not None:
        return cut(f"{span.plain} {span.after}", EXCERPT_CHARS)
    return excerpt(question, passages[number - 1].text, limit=EXCERPT_CHARS)


def citations_of(hits: list[Hit]) -> list[Citation]:
    """The best hit of each page, in order."""
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
) -> int:
    return QueryLog.objects.create(
        kind=kind,
        text=text[:5000],
        answer=answer,
        user_id=user.pk if user is not None and user.is_authenticated else None,
        chunk_ids=result.chunk_ids,
        scores=[round(h.score, 6) for h in result.hits],
        abstained=result.abstained,
        latency_ms=round((time.perf_counter() - started) * 1000),
    ).pk


def query_feedback_record(*, log_id: int, user: Caller, helpful: bool) -> bool:
    """Store the asker's thumbs up or down on their own question; False if the
    question is not theirs (or not a question)."""
    if user is None or not user.is_authenticated:
        return False
    log = QueryLog.objects.filter(
        pk=log_id, user_id=user.pk, kind=QueryLog.Kind.QUERY
    ).first()
    if log is None:
        return False
    log.record_feedback(helpful=helpful, at=timezone.now())
    log.save(update_fields=["feedback", "feedback_at"])
    return True


def sources_for(user: Caller) -> list[Source]:
    """The sources this user may search, by name (for the Ask page's filter)."""
    sources = Source.objects.order_by("name")
    if user is None or getattr(user, "is_superuser", False):
        return list(sources)
    groups = Group.objects.filter(user__pk=user.pk) if user.is_authenticated else []
    return list(
        sources.filter(Q(allowed_groups=None) | Q(allowed_groups__in=groups)).distinct()
    )
