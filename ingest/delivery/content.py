"""New content for a page: its chunk texts embedded (and paid for) before the page is
locked, then, under the page's row lock (``page_lock``), its body kept and its
nearest near-duplicate flagged. The delivery job, re-derivation and rescoping
change pages through these."""

from __future__ import annotations

from contextlib import nullcontext

from django.db import transaction
from django.db.models import Exists, F, OuterRef

from ingest.delivery.models import Delivery
from ingest.reading import similarity
from ingest.reading.content import Content
from ingest.reading.extract import EXTRACTOR_VERSION
from ingest.reading.rules import content_kept_out
from retrieval.chunking import ChunkDraft, chunk_markdown, embed_texts
from retrieval.indexing import EmbedReport, embeddings_ensure
from retrieval.spaces import ingest_embedders
from retrieval.sql import commit_waits
from sources import sql as sources_sql
from sources.models import Page, PageQuerySet
from sources.services import page_shapes_record

# Pages sharing a band a new reading is compared with, at most: a site of many
# identical pages makes that many candidates, all alike.
NEAR_DUPLICATE_CANDIDATES = 200


def content_embed(
    *, content: Content, page: Page, delivery: Delivery | None = None
) -> tuple[list[ChunkDraft], EmbedReport]:
    """Chunk the content and embed the chunk texts new to the index's spaces; no
    chunks for content kept out of answers.

    The spend is recorded at once: tokens are paid for even if the swap never comes.
    """
    if content_kept_out(content=content, source=page.source):
        return [], EmbedReport(embedded=0, reused=0, tokens=0, requests=0)
    drafts = chunk_markdown(content.markdown, title=content.title)
    texts = embed_texts(drafts)
    embedders = ingest_embedders()
    reports = [embeddings_ensure(texts=texts, embedder=e) for e in embedders]
    report = EmbedReport.total(reports)
    if not report.requests:
        return drafts, report
    # Paid for: counted on the disk, as the request's vectors and usage were
    # (``retrieval.indexing``); a run made again finds the vectors and pays nothing.
    paid = any(e.billed and r.requests for e, r in zip(embedders, reports, strict=True))
    with transaction.atomic() if paid else nullcontext():
        if paid:
            commit_waits(True)
        if delivery is not None:
            Delivery.objects.filter(pk=delivery.pk).update(
                embedding_requests=F("embedding_requests") + report.requests,
                embedding_tokens=F("embedding_tokens") + report.tokens,
            )
        Page.objects.filter(pk=page.pk).update(
            embedding_tokens=F("embedding_tokens") + report.tokens
        )
    return drafts, report


def page_keep_body(*, page: Page, content: Content) -> None:
    """The page keeps the body it was derived from, and counts its line shapes.
    Call inside the transaction that saves the page."""
    page_shapes_record(page=page, shapes=content.shapes)
    page.raw_body = content.raw_body
    page.raw_content_type = content.content_type
    page.reading_key = content.reading_key
    page.extractor_version = EXTRACTOR_VERSION
    page.release_notes = content.release_notes


def page_similarity_record(*, page: Page, sig: bytes) -> None:
    """Keep the signature of the page's new Markdown (``similarity.signature``,
    made before the page is locked: it is the costly part) and flag the most
    similar live page of the same source at or above the near-duplicate
    threshold. Both stay indexed: an editor decides. Call inside the transaction
    that saves the page."""
    page.minhash = sig
    page.minhash_bands = similarity.bands(sig)
    candidates = sources_sql.near_duplicate_candidates(
        page_id=page.pk,
        source_id=page.source_id,
        bands=page.minhash_bands,
        limit=NEAR_DUPLICATE_CANDIDATES,
    )
    best, score = None, 0.0
    for pk, other in candidates:
        value = similarity.similarity(sig, other or b"")
        if value > score:
            best, score = pk, value
    if best is not None and score >= similarity.THRESHOLD:
        page.near_duplicate_of_id, page.near_duplicate_score = best, round(score, 3)
    else:
        page.near_duplicate_of_id, page.near_duplicate_score = None, None


def page_lock(page: Page, *, original_of: bool = False) -> Page:
    """The page, its row locked. With ``original_of``, ``has_original`` says
    whether an older live page of its source holds its content (read in the same
    statement)."""
    return pages_locking(original_of=original_of).get(pk=page.pk)


def pages_locking(
    *, original_of: bool = False, skip_locked: bool = False
) -> PageQuerySet:
    """Pages read with their rows locked, and their sources (``page_lock``);
    ``skip_locked``: those another transaction holds are left out, not waited for."""
    # The page's row only: its source is read, not locked, so deliveries of one
    # source run side by side (line shape counts take their own ordered locks).
    pages = Page.objects.light().select_for_update(
        of=("self",), skip_locked=skip_locked
    )
    if original_of:
        older = Page.objects.filter(
            source_id=OuterRef("source_id"),
            status=Page.Status.LIVE,
            content_hash=OuterRef("content_hash"),
            pk__lt=OuterRef("pk"),
        )
        pages = pages.annotate(has_original=Exists(older))
    return pages.select_related("source")
