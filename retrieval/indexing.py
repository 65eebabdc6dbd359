"""Writing the index: chunk texts embedded where a space has no vector for them yet,
the day's embedding usage added up, and a page's chunks swapped for new ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from kbsite import locks
from kbsite.text import count_tokens
from retrieval import sql
from retrieval.chunking import ChunkDraft, embed_texts
from retrieval.codes import text_code
from retrieval.embedder import Embedder
from retrieval.models import Chunk, Embedding
from retrieval.pins import pins_review
from retrieval.rechecks import answers_mark_stale
from retrieval.spaces import ingest_embedders, usage_record
from retrieval.windows import text_windows
from sources.models import Page, PageVersion

# Inputs per embedding request; OpenAI accepts up to 2,048 but smaller batches fail
# (and retry) more cheaply. Tokens per request stay under OpenAI's 300,000.
EMBED_BATCH = 256
EMBED_BATCH_TOKENS = 250_000
# Vectors younger than this are never pruned: a delivery embeds its new texts
# before it swaps its chunks in, and a job runs at most Q_TIMEOUT (5 minutes).
PRUNE_AFTER = timedelta(hours=1)


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
    a text longer than the model reads gets one vector per window, and its first
    window's row the text's code (``retrieval.codes``).

    Runs outside any transaction: it may call a remote API. Rows are inserted with
    ON CONFLICT DO NOTHING, so two jobs embedding the same text at once are harmless
    (both requests are paid for, and counted). Each request is added to the day's
    usage as soon as it is answered, in the transaction that stores its vectors.
    """
    missing = sorted(embeddings_missing(space=embedder.space, hashes=set(texts)))
    tokens = requests = 0
    for batch in _batches(missing, texts, embedder):
        inputs = [window for _, windows, _ in batch for window in windows]
        vectors = iter(embedder.embed(inputs))
        windows = [[next(vectors) for _ in counts] for _, _, counts in batch]
        codes = [text_code(text) for text in windows]
        rows = [
            Embedding(space=embedder.space, text_hash=text_hash, window=number,
                      vector=vector, token_count=count,
                      code=code if number == 0 else None)
            for (text_hash, _, counts), text, code in zip(batch, windows, codes,
                                                          strict=True)
            for number, (vector, count) in enumerate(zip(text, counts, strict=True))
        ]  # fmt: skip
        sent = sum(row.token_count for row in rows)
        # All windows of a text in one insert: a text is embedded whole or not at
        # all. The usage is committed with the vectors: a job killed between two
        # commits would leave vectors that no usage counts. A paid request's
        # commit waits for the disk even in a run that commits without waiting
        # (``ingest.delivery.sql.commits_unflushed``): running it again would
        # pay again.
        with transaction.atomic():
            if embedder.billed:
                sql.commit_waits(True)
            Embedding.objects.bulk_create(rows, ignore_conflicts=True)
            usage_record(
                space=embedder.space, requests=1, inputs=len(rows), tokens=sent
            )
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
) -> Iterator[list[tuple[str, list[str], list[int]]]]:
    """(hash, windows, their token counts) in batches within the input and token
    limits of one request; the windows of one text never straddle two requests."""
    batch: list[tuple[str, list[str], list[int]]] = []
    inputs = size = 0
    for text_hash in hashes:
        windows = text_windows(embedder, texts[text_hash])
        counts = [count_tokens(window) for window in windows]
        tokens = sum(counts)
        if batch and (
            inputs + len(windows) > EMBED_BATCH or size + tokens > EMBED_BATCH_TOKENS
        ):
            yield batch
            batch, inputs, size = [], 0, 0
        batch.append((text_hash, windows, counts))
        inputs += len(windows)
        size += tokens
    if batch:
        yield batch


def page_chunks_replace(
    *,
    page: Page,
    drafts: list[ChunkDraft],
    change: PageVersion | None = None,
    vectors_fresh: bool = False,
) -> set[str]:
    """Swap the page's chunks for these, each with its text's code in the serving
    space (``retrieval.codes``). Call inside the transaction that records the
    new version, so readers see the old set or the new one, never a mix; answers
    that quoted a text the page no longer holds become stale, by ``change`` if
    given. ``vectors_fresh``: every vector of the drafts was made by this run, so
    no prune can have taken one (it takes vectors older than ``PRUNE_AFTER``).
    Returns the text hashes the page held and holds no more."""
    if drafts and not vectors_fresh:
        _vectors_hold(drafts)
    cleared = sql.page_chunks_clear(
        page_id=page.pk, coded=sorted({draft.embed_hash for draft in drafts})
    )
    Chunk.objects.bulk_create(
        Chunk(
            page=page,
            position=draft.position,
            heading=draft.heading[:1000],
            anchor=draft.anchor[:200],
            text=draft.text,
            embed_hash=draft.embed_hash,
            token_count=draft.token_count,
            code=cleared.codes.get(draft.embed_hash),
            code_space=(
                cleared.space_id if draft.embed_hash in cleared.codes else None
            ),
        )
        for draft in drafts
    )
    removed = cleared.old - {draft.embed_hash for draft in drafts}
    answers_mark_stale(page_id=page.pk, removed=removed, change=change)
    pins_review(
        page_id=page.pk, removed=removed, headings={d.heading[:1000] for d in drafts}
    )
    return removed


def _vectors_hold(drafts: list[ChunkDraft]) -> None:
    """Keep a prune away until the transaction commits, and embed again any text
    of these drafts whose vector a prune took since it was embedded (it was then
    used by no chunk; rare, and paid for again rather than lost)."""
    locks.xact_lock_wait(lock=locks.VECTOR_PRUNE, shared=True)
    texts = embed_texts(drafts)
    for embedder in ingest_embedders():
        embeddings_ensure(texts=texts, embedder=embedder)  # none missing: one query


# Chunks given their code per statement by ``codes_fill``.
CODES_BATCH = 1000


def codes_fill(*, batch: int = CODES_BATCH) -> int:
    """Give every chunk whose code is missing or not of the serving space that
    space's code of its text: after a switch of spaces, and after an upgrade
    (texts embedded before codes were have none stored, and are coded from their
    vectors here). A batch a commit; until a chunk has its code, a search reads
    its vector exactly (``retrieval.codes``). The vectors' rows are never
    updated: each would be written into the HNSW index again. Returns how many
    chunks were coded (those whose text has no vector in the space stay as
    they are)."""
    coded = 0
    after = 0
    while stale := sql.stale_chunks(after=after, limit=batch):
        space = stale[0]
        found = sql.text_vectors(
            space=space.space, hashes=sorted({c.embed_hash for c in stale})
        )
        texts = {
            text.text_hash: text.code or text_code(text.windows or []) for text in found
        }
        codes = {c.pk: texts[c.embed_hash] for c in stale if c.embed_hash in texts}
        if codes:
            coded += sql.chunk_codes_set(space_id=space.space_id, codes=codes)
        after = stale[-1].pk
    return coded


def embeddings_prune(*, older_than: timedelta = PRUNE_AFTER) -> int:
    """Delete the vectors, in every space, of texts no chunk has any more (pages
    edited or gone, sources deleted) made more than ``older_than`` ago; returns
    how many. They would otherwise fill the HNSW index and its scans."""
    before = timezone.now() - older_than
    with transaction.atomic():
        locks.xact_lock_wait(lock=locks.VECTOR_PRUNE)
        return sql.unused_vectors_delete(made_before=before)
