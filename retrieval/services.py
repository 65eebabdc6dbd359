from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

from django.db import connection
from django.utils import timezone
from psycopg import sql

from ingest.chunking import ChunkDraft
from ingest.tokens import count_tokens
from retrieval.embeddings import Embedder
from retrieval.models import Chunk, Embedding, EmbeddingUsage
from sources.models import Page

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


def embedding_index_name(space: str) -> str:
    return f"embedding_hnsw_{hashlib.sha1(space.encode()).hexdigest()[:12]}"


def embedding_index_ensure(*, space: str, dimensions: int) -> str:
    """Create the HNSW cosine index for one embedding space if it is missing.

    The vector column has no fixed size, so the index is on the column cast to this
    space's size, limited to this space's rows. Queries use the same cast and filter
    (``Embedding.objects.nearest``) so that PostgreSQL picks this index.
    """
    name = embedding_index_name(space)
    statement = sql.SQL(
        "CREATE INDEX IF NOT EXISTS {name} ON {table} USING hnsw "
        "((vector::vector({dims})) vector_cosine_ops) WHERE space = {space}"
    ).format(
        name=sql.Identifier(name),
        table=sql.Identifier(Embedding._meta.db_table),
        dims=sql.Literal(int(dimensions)),
        space=sql.Literal(space),
    )
    with connection.cursor() as cursor:
        cursor.execute(statement.as_string(cursor.connection))
    return name


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
