"""The delivery job: one delivery, one change to the index, in this order:

1. the URL belongs to no source (``sources.scope``): out of scope, or rejected and
   out of search if it was a page; a page whose URL belongs to another source now
   moves there first;
2. ``Original-Status`` 404 or 410: tombstone (and the URL asked for, if it led
   there, points to it and leaves search, as in 5);
3. the crawler's status is not 200, or the site's is 4xx/5xx: a failure on the page,
   its content kept;
4. ``Original-Status`` 304 (the built-in crawler's conditional request): a live page
   is verified unchanged, with nothing read, hashed or embedded;
5. the URL asked for (pushed to Crawlbase, or requested by the built-in crawler) led
   elsewhere (a redirect): the final URL is the page, the one asked for points to it
   (recorded in 6 to 8);
6. the body and the rules reading it are those the live page's Markdown was read
   from (its ``reading_key``), and no older live page of its source holds that
   content: unchanged without being read again;
7. read, the content equals an older live page's of the same source (a mirror, a
   parameter variant): a duplicate of that page, which stays the one indexed; else
   the content hash equals the live page's: unchanged; ``last_verified_at`` moves;
8. otherwise new content: chunked, new chunk texts embedded, swapped in; a page of
   the same source with almost the same text is flagged, never removed.

The job reads top to bottom: the delivery claimed (``ingest.delivery.claim``), the
page it is for found here, what was delivered read before any lock
(``ingest.delivery.outcome``), then applied under the page's lock and recorded in
one transaction (``ingest.delivery.finish``); a run that fails is retried
(``ingest.delivery.queue``). Safe to run again after a crash, or twice at once:
every change to a page happens under its row lock, and only while the delivery is
still this run's to finish.
"""

from __future__ import annotations

import logging
import traceback
from contextlib import nullcontext

from django.conf import settings
from django.db import (
    IntegrityError,
    InterfaceError,
    OperationalError,
    connection,
    transaction,
)
from django.dispatch import Signal

from ingest.delivery.batch import batch_eligible, deliveries_settle
from ingest.delivery.claim import delivery_held
from ingest.delivery.finish import Superseded, delivery_apply
from ingest.delivery.models import Delivery
from ingest.delivery.outcome import Reading, delivery_read
from ingest.delivery.queue import connection_lost, delivery_retry_later, error_summary
from ingest.delivery.rescope import page_rescope, pages_rescope
from ingest.delivery.sql import commits_unflushed
from sources.models import Page, Source
from sources.scope import ScopeMap

# Sent once a delivery's new content is in the index, outside its transaction, with
# ``source``, ``page`` and ``content``: what follows new content (its links given
# to a crawler that only fetches what it is given) is recrawl planning's to do
# (``ingest.planning.discovery``, connected by the app), not the job's. A receiver
# that raises fails the run, which is retried.
content_indexed = Signal()

logger = logging.getLogger(__name__)

Outcome = Delivery.Outcome


def delivery_process(*, delivery_id: int) -> Outcome | Delivery.State | None:
    """Run one delivery to its outcome. Returns the outcome; or the state it was left
    in when it will be retried (queued) or was given up (failed); or None if it was
    not this run's to take."""
    with delivery_held(delivery_id) as delivery:
        if delivery is None:
            return None
        if delivery.attempts > settings.DELIVERY_MAX_ATTEMPTS:
            # Every run so far was cut short (a worker killed mid-job, again and
            # again).
            delivery.mark_failed(error="no attempts left: no run of it ever finished")
            return Delivery.State.FAILED
        try:
            outcome = _process(delivery)
        except Superseded:
            return None
        except Exception as exc:  # anything unexpected is retried, then shown failed
            error = error_summary(exc)
            # The database went away under the run? Asked now: letting go of
            # the delivery below opens a new connection.
            cut_off = (
                isinstance(exc, OperationalError | InterfaceError) and connection_lost()
            )
            # The stack, but of the message only the summary: it may quote page text.
            logger.error(
                "delivery %s (rid %s) failed: %s\n%s",
                delivery.pk,
                delivery.rid,
                error,
                "".join(traceback.format_tb(exc.__traceback__)).rstrip(),
            )
        else:
            logger.info("delivery %s (rid %s): %s", delivery.pk, delivery.rid, outcome)
            return outcome
    # Let go first: the job queued for the retry may start at once. Outside the
    # handler, so that an error while scheduling the retry (the database gone)
    # reaches the queue's failure record without this one, and its message,
    # chained to it.
    return delivery_retry_later(delivery=delivery, error=error, cut_off=cut_off)


def _process(delivery: Delivery) -> Outcome:
    scope = ScopeMap()
    outcome = _ingest(delivery, scope)
    # An unchanged page was in its source, live, before and after: a scope
    # change cannot have missed it.
    if outcome != Outcome.UNCHANGED and delivery.page_id and scope.changed_since():
        # A source's scope changed while this ran; the job that checks every page
        # may have read them before this page was saved.
        page = Page.objects.light().filter(pk=delivery.page_id).first()
        if page is not None:
            pages_rescope(pages=[page])
    return outcome


def _ingest(delivery: Delivery, scope: ScopeMap) -> Outcome:
    # Up to its outcome, the run's commits do not wait for the disk: running it
    # again writes them again. Its claim (the attempts counted) waited before,
    # and what follows the outcome waits after it (``commits_unflushed``).
    with commits_unflushed():
        outcome, page, reading = _outcome_record(delivery, scope)
    if outcome == Outcome.EMBEDDED:
        assert page is not None and reading is not None
        # New content may link to pages the crawler has not been given yet.
        content_indexed.send(
            sender=Delivery, source=page.source, page=page, content=reading.content
        )
    return outcome


def _outcome_record(
    delivery: Delivery, scope: ScopeMap
) -> tuple[Outcome, Page | None, Reading | None]:
    owner = scope.source_for(delivery.url)
    page, pushed = _resolve_page(delivery, owner)
    if page is not None and (owner is None or owner.pk != page.source_id):
        page = page_rescope(page=page, owner=owner)
    reading = delivery_read(delivery, page, owner=owner, scope=scope)
    if page is not None and pushed is None and batch_eligible(reading):
        # Recorded with the waiting deliveries like it, if it still is one.
        settled = deliveries_settle(delivery, page, reading, scope)
        if settled is not None:
            return settled, page, None
    outcome = delivery_apply(delivery, page, pushed, reading)
    if outcome is None:
        # The body read before under the same rules is no longer the page's.
        reading = delivery_read(delivery, page, owner=owner, scope=scope, again=True)
        outcome = delivery_apply(delivery, page, pushed, reading)
        assert outcome is not None
    return outcome, page, reading


def _resolve_page(
    delivery: Delivery, owner: Source | None
) -> tuple[Page | None, Page | None]:
    """The page this delivery is for (made for ``owner``, the source its URL
    belongs to, if it is new), and the page that was asked for if it led elsewhere:
    the one Crawlbase was pushed, or the one the built-in crawler requested."""
    pushed = _requested_page(delivery)
    if pushed is not None and pushed.url == delivery.url:
        return pushed, None
    page = (
        Page.objects.light().filter(url=delivery.url).select_related("source").first()
    )
    if page is not None:
        return page, pushed
    if owner is None:
        return None, None
    return _page_create(delivery.url, owner), pushed


def _page_create(url: str, owner: Source) -> Page:
    """A new page of ``owner`` at ``url``, or the one another run made first."""
    # One INSERT, committed on its own: a savepoint only where a failed statement
    # would spoil a transaction around it (get_or_create's would cost a SELECT, a
    # BEGIN and a COMMIT more on every new page).
    guard = transaction.atomic() if connection.in_atomic_block else nullcontext()
    try:
        with guard:
            return Page.objects.create(url=url, source=owner)
    except IntegrityError:
        return Page.objects.light().select_related("source").get(url=url)


def _requested_page(delivery: Delivery) -> Page | None:
    if delivery.push is not None:
        return delivery.push.page
    if delivery.requested_url:
        return Page.objects.light().filter(url=delivery.requested_url).first()
    return None
