"""Move the index to another embedding model, or another chunking, without crawling.

Every live page is chunked again from its stored Markdown, and the chunk texts with no
vector in the target space are embedded. While the target is not yet serving, the old
space answers every query; the switch happens once every page is done. Pages whose
chunks differ (chunking changed) get their new chunk set at once when the target
already serves, else just before the switch. Running it again after an interruption
skips what is already embedded.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from django.db import transaction

from retrieval.chunking import ChunkDraft, chunk_markdown, embed_texts
from retrieval.embedder import Embedder
from retrieval.indexing import codes_fill, embeddings_ensure, page_chunks_replace
from retrieval.models import EmbeddingSpace
from retrieval.pins import pin_vectors_fill
from retrieval.spaces import embedder_register, space_switch
from retrieval.statistics import index_statistics_refresh
from sources.models import Page

# Pinned questions embedded per request once the new space serves.
PIN_FILL_BATCH = 500


@dataclass
class Progress:
    pages_total: int
    pages_done: int = 0
    texts_embedded: int = 0
    tokens: int = 0
    rechunked: int = 0
    switched_from: str = ""


def index_rebuild(*, target: Embedder, keep_old: bool = False) -> Iterator[Progress]:
    """Yield progress after each page, then once more after the switch."""
    space = embedder_register(target)
    # Pages kept out of answers (generated indexes, listings) have no chunks.
    answered = Page.objects.filter(status=Page.Status.LIVE, not_indexed_reason="")
    pages = answered.order_by("pk")
    progress = Progress(pages_total=pages.count())
    waiting: list[int] = []
    for page in pages.only("pk", "title", "markdown").iterator():
        drafts, report = _embedded_drafts(page, target)
        progress.texts_embedded += report.embedded
        progress.tokens += report.tokens
        if _chunks_differ(page, drafts):
            if space.state == EmbeddingSpace.State.SERVING:
                progress.rechunked += _rechunk(page, drafts)
            else:
                waiting.append(page.pk)
        progress.pages_done += 1
        yield progress
    if space.state != EmbeddingSpace.State.SERVING:
        # Read again: a page may have changed since (ingest fills this space too).
        for page in Page.objects.filter(pk__in=waiting).only("pk", "title", "markdown"):
            drafts, _ = _embedded_drafts(page, target)
            progress.rechunked += _rechunk(page, drafts)
        old = space_switch(to=space, keep_old=keep_old)
        progress.switched_from = old.name if old else ""
        # Pinned questions answer in the new space from now, not from the next
        # periodic run.
        while pin_vectors_fill(limit=PIN_FILL_BATCH):
            pass
        # The chunks' codes are of the old space: read exactly until then.
        codes_fill()
    # New chunks or a new space: new word counts, and a floor for the new space.
    index_statistics_refresh(force=bool(progress.rechunked or progress.switched_from))
    yield progress


def _embedded_drafts(page: Page, target: Embedder):
    """The page's chunks under the current chunking, each with a vector in
    ``target``."""
    drafts = chunk_markdown(page.markdown, title=page.title)
    return drafts, embeddings_ensure(texts=embed_texts(drafts), embedder=target)


def _chunks_differ(page: Page, drafts: list[ChunkDraft]) -> bool:
    current = page.chunks.order_by("position").values_list("embed_hash", flat=True)
    return list(current) != [d.embed_hash for d in drafts]


def _rechunk(page: Page, drafts: list[ChunkDraft]) -> int:
    """Swap in the new chunk set, unless the page changed since it was read."""
    with transaction.atomic():
        locked = Page.objects.select_for_update().get(pk=page.pk)
        if (
            locked.markdown != page.markdown
            or locked.status != Page.Status.LIVE
            or locked.not_indexed_reason
        ):
            return 0
        page_chunks_replace(page=locked, drafts=drafts)
    return 1
