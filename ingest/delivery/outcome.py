"""What a delivery does to its page, decided in two steps.

``delivery_read``, before the page is locked, reads what was delivered: a URL no
source covers, a status that settles it (gone, failed, not modified), a body read
before under the same rules, or content, read, compared with the page's and, when
new, embedded (which may call a remote API, so never under a lock). ``decide``,
under the page's lock (``ingest.delivery.finish``), turns that reading and the page
as it is now into a ``Decision``: another run may have changed the page meanwhile.
Neither writes the page (reading pays for new chunk texts' vectors, and may queue
the re-derivation of pages whose boilerplate moved); ``ingest.delivery.finish``
writes what the decision says.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ingest.delivery.content import content_embed
from ingest.delivery.models import Delivery
from ingest.delivery.rederive import source_boilerplate_catch_up
from ingest.reading import similarity, wire
from ingest.reading.content import Content, EmptyContent
from ingest.reading.rules import (
    content_kept_out,
    source_content,
    source_reading_key,
    source_restrip,
)
from retrieval.chunking import ChunkDraft
from retrieval.indexing import EmbedReport
from sources.models import Page, Source
from sources.scope import ScopeMap

Outcome = Delivery.Outcome
GONE_STATUSES = {404, 410}
NOT_MODIFIED = 304


class Read(enum.Enum):
    """What reading a delivery found, before the page is locked."""

    OUT_OF_SCOPE = "out of scope"  # no page, and no source covers the URL
    REJECTED = "rejected"  # a page whose URL its source's scope now leaves out
    GONE = "gone"  # 404 or 410: a tombstone
    FAILED = "failed"  # the crawl failed, or the body was empty or unreadable
    NOT_MODIFIED = "not modified"  # 304: the content the page holds
    SAME_READING = "same reading"  # the body and rules the page was read from
    DUPLICATE = "duplicate"  # an older live page of the source holds this content
    UNCHANGED = "unchanged"  # the content the page holds
    CONTENT = "content"  # new content, its new chunk texts embedded


@dataclass
class Reading:
    """A delivery as read before the lock (``delivery_read``)."""

    kind: Read
    # OUT_OF_SCOPE, REJECTED, FAILED: the outcome and why; FAILED: whether the page
    # records it as its failure.
    outcome: Outcome = Outcome.SKIPPED
    reason: str = ""
    page_failure: bool = False
    # SAME_READING: the key the body and rules hash to.
    reading_key: str = ""
    # DUPLICATE, UNCHANGED, CONTENT: what was read, and why it stays out of
    # answers ('' for content that is answered from).
    content: Content | None = None
    kept_out: str = ""
    # CONTENT: the chunks, what embedding them cost, the text's signature.
    drafts: list[ChunkDraft] = field(default_factory=list)
    report: EmbedReport | None = None
    signature: bytes = b""

    @property
    def asks_for_original(self) -> bool:
        """The shortcut holds only while no older live page has the page's content:
        read with the page's lock, in the same statement."""
        return self.kind == Read.SAME_READING


class Change(enum.Enum):
    """What a decision writes (``ingest.delivery.finish``)."""

    NOTHING = "nothing"  # the outcome is recorded, the page left as it is
    FAILURE = "failure"  # the page records a failed crawl
    GONE = "gone"  # a tombstone
    VERIFIED = "verified"  # checked: the content the page holds
    VERIFIED_READING = "verified reading"  # the same, with nothing read again
    VERIFIED_BODY = "verified body"  # the same content, from a newly kept body
    REINDEXED = "reindexed"  # the same text, now kept out of answers or let in
    REREAD = "reread"  # read again: boilerplate learned since
    CHANGED = "changed"  # new content
    DUPLICATE = "duplicate"  # a copy of an older page, which stays indexed
    RETRY = "retry"  # the older page changed meanwhile: the run is retried


@dataclass(frozen=True)
class Decision:
    change: Change
    outcome: Outcome
    note: str = ""
    # DUPLICATE: the older page that stays the one indexed.
    original: Page | None = None


SUPERSEDED = "superseded: the page shows a newer crawl"


def delivery_read(
    delivery: Delivery,
    page: Page | None,
    *,
    owner: Source | None,
    scope: ScopeMap,
    again: bool = False,
) -> Reading:
    """What was delivered for ``page`` (None: the URL is no page, and ``owner``,
    the source its URL belongs to, is None too). ``again``: the page's lock showed
    that a body read before under the same rules is no longer the page's; read it."""
    if page is None:
        reason = _uncovered(delivery.url, scope)
        return Reading(Read.OUT_OF_SCOPE, outcome=Outcome.OUT_OF_SCOPE, reason=reason)
    if owner is None:
        reason = (
            f"out of the scope of source {page.source} (its deny or allow "
            "patterns, or its seeds' directories); the page left search"
        )
        return Reading(Read.REJECTED, outcome=Outcome.REJECTED, reason=reason)
    unread = delivery_read_unread(delivery, page, again=again)
    if unread is not None:
        return unread
    raw = bytes(delivery.body or b"")
    source_boilerplate_catch_up(source=page.source, reading=True)
    try:
        content = source_content(
            source=page.source,
            url=page.url,
            raw=raw,
            content_type=delivery.content_type,
        )
    except wire.DeliveryError as exc:
        return Reading(Read.FAILED, outcome=Outcome.REJECTED, reason=str(exc))
    except EmptyContent as exc:
        return _failed(str(exc))
    kept_out = content_kept_out(content=content, source=page.source)
    if _original_of(page, content) is not None:
        return Reading(Read.DUPLICATE, content=content, kept_out=kept_out)
    if _same(page, content, kept_out):
        return Reading(Read.UNCHANGED, content=content, kept_out=kept_out)
    drafts, report = content_embed(content=content, page=page, delivery=delivery)
    return Reading(
        Read.CONTENT,
        content=content,
        kept_out=kept_out,
        drafts=drafts,
        report=report,
        signature=similarity.signature(content.markdown),
    )


def delivery_read_unread(
    delivery: Delivery, page: Page, *, again: bool = False
) -> Reading | None:
    """What the delivery does to ``page`` (its source's, by its URL) that needs
    nothing read: a status that settles it, or the body and rules the live page
    was read from (``again``: not that). None: the content is to be read."""
    crawler, site = delivery.crawler_status, delivery.original_status
    if site in GONE_STATUSES:
        return Reading(Read.GONE)
    if crawler is not None and crawler != 200:
        return _failed(f"crawler status {crawler}")
    if site is not None and site >= 400:
        return _failed(f"site status {site}")
    if site == NOT_MODIFIED:
        return Reading(Read.NOT_MODIFIED)
    if not again and page.is_live and page.reading_key:
        key = source_reading_key(
            source=page.source,
            url=page.url,
            raw=bytes(delivery.body or b""),
            content_type=delivery.content_type,
        )
        if key == page.reading_key:
            return Reading(Read.SAME_READING, reading_key=key)
    return None


def decide(delivery: Delivery, page: Page, reading: Reading) -> Decision | None:
    """What the delivery does to ``page``, locked, as it is now. None: the body
    read before under the same rules is no longer the page's (``delivery_read``
    with ``again``)."""
    if reading.kind == Read.FAILED:
        # A failure is recorded whatever the page shows; the page takes it as its
        # own only if it shows no newer crawl.
        failure = reading.page_failure and not page.is_newer_than(delivery.crawled_at)
        change = Change.FAILURE if failure else Change.NOTHING
        return Decision(change, reading.outcome, reading.reason)
    if page.is_newer_than(delivery.crawled_at):
        return Decision(Change.NOTHING, Outcome.SKIPPED, SUPERSEDED)
    match reading.kind:
        case Read.GONE:
            return Decision(Change.GONE, Outcome.DELETED)
        case Read.NOT_MODIFIED if not page.is_live:
            note = f"304 Not Modified for a page that is {page.status}"
            return Decision(Change.FAILURE, Outcome.SKIPPED, note)
        case Read.NOT_MODIFIED:
            return Decision(Change.VERIFIED, Outcome.UNCHANGED, "304 Not Modified")
        case Read.SAME_READING:
            original = getattr(page, "has_original", True)
            if original or not page.is_live or page.reading_key != reading.reading_key:
                return None
            return Decision(Change.VERIFIED_READING, Outcome.UNCHANGED)
    return _content_decide(page, reading)


def _content_decide(page: Page, reading: Reading) -> Decision:
    content, kept_out = reading.content, reading.kept_out
    assert content is not None
    if reading.kind == Read.DUPLICATE:
        original = _original_of(page, content)
        if original is None:
            note = "the original page changed while this delivery was read"
            return Decision(Change.RETRY, Outcome.SKIPPED, note)
        note = f"same content as {original}"
        return Decision(Change.DUPLICATE, Outcome.DUPLICATE, note, original)
    if reading.kind == Read.UNCHANGED or _same(page, content, kept_out):
        return Decision(Change.VERIFIED_BODY, Outcome.UNCHANGED)
    if page.is_live and page.content_hash == content.digest:
        note = f"kept out of answers: {kept_out}" if kept_out else "answered from"
        return Decision(Change.REINDEXED, Outcome.UNCHANGED, note)
    if page.is_live and _only_boilerplate_differs(page, content):
        note = "the page read again: boilerplate learned since its last crawl"
        return Decision(Change.REREAD, Outcome.UNCHANGED, note)
    assert reading.report is not None
    note = f"{reading.report.embedded} new chunk texts, {reading.report.reused} reused"
    if kept_out:
        note = f"kept out of answers: {kept_out}"
    return Decision(Change.CHANGED, Outcome.EMBEDDED, note)


def _uncovered(url: str, scope: ScopeMap) -> str:
    """Why no source takes the URL, for the editor who may add one (its body is kept
    REJECTED_BODY_KEEP_DAYS days, to be re-queued then)."""
    host = urlsplit(url).hostname
    for source in scope.sources.values():
        if any(urlsplit(seed).hostname == host for seed in source.seeds):
            return (
                "no source covers this URL (the sources of its host leave it out: "
                "their seeds' directories, allow or deny patterns)"
            )
    return "no source covers this host"


def _failed(reason: str) -> Reading:
    return Reading(Read.FAILED, reason=reason, page_failure=True)


def _same(page: Page, content: Content, kept_out: str) -> bool:
    """The page is live with this content, answered from (or not) as it should."""
    return (
        page.is_live
        and page.content_hash == content.digest
        and page.not_indexed_reason == kept_out
    )


def _only_boilerplate_differs(page: Page, content: Content) -> bool:
    """The page's Markdown, read under the source's current rules, is the new
    content: the lines that differ were learned as boilerplate (or matched a pattern
    added) after the page was last read, before its re-derivation came round."""
    restripped = source_restrip(source=page.source, markdown=page.markdown)
    return restripped == content.markdown


def _original_of(page: Page, content: Content) -> Page | None:
    """The oldest live page of the same source indexed with this content, if older
    than ``page``: it is the one kept. (Two copies indexed at once by two workers
    are settled at the next crawl of the younger one.)"""
    same = Page.objects.light().filter(
        source_id=page.source_id,
        status=Page.Status.LIVE,
        content_hash=content.digest,
        pk__lt=page.pk,
    )
    return same.order_by("pk").first()
