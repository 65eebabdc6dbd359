from __future__ import annotations

import hashlib
from dataclasses import dataclass

from django.db import connection
from psycopg import sql

from ingest.chunking import ChunkDraft
from ingest.tokens import count_tokens
from retrieval.embeddings import Embedder
from retrieval.models import Chunk, Embedding
from sources.models import Page

# Inputs per embedding request; OpenAI accepts up to 2,048 but smaller batches fail
# (and retry) more cheaply.
EMBED_BATCH = 256


@dataclass(frozen=True)
class EmbedReport:
    embedded: int
    reused: int
    tokens: int


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
    """
    missing = sorted(embeddings_missing(space=embedder.space, hashes=set(texts)))
    tokens = 0
    for start in range(0, len(missing), EMBED_BATCH):
        batch = missing[start : start + EMBED_BATCH]
        vectors = embedder.embed([texts[h] for h in batch])
        rows = []
        for text_hash, vector in zip(batch, vectors, strict=True):
            count = count_tokens(texts[text_hash])
            tokens += count
            rows.append(
                Embedding(
                    space=embedder.space,
                    text_hash=text_hash,
                    vector=vector,
                    token_count=count,
                )
            )
        Embedding.objects.bulk_create(rows, ignore_conflicts=True)
    return EmbedReport(
        embedded=len(missing), reused=len(texts) - len(missing), tokens=tokens
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
