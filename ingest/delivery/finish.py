"""How a run of the delivery job ends: finished with an outcome, cut short by a
``Skip``, retried after a ``Retry``, or superseded.

A run may change a page only if the page shows no newer crawl, checked under the
page's row lock, and only if the delivery is still its to finish: the outcome is
recorded by a conditional update in the transaction that changed the page, which
rolls back if another run of the delivery finished it first. So two runs of one
delivery, or deliveries of two crawls of one page, never both apply.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from ingest.delivery.steps import page_lock
from ingest.models import Delivery, Push
from sources.models import Page

Outcome = Delivery.Outcome


class Retry(Exception):
    """Worth running again: the job is retried like any failed one."""


class Superseded(Exception):
    """Another run of this delivery recorded its outcome first: what this run
    changed in the transaction is rolled back."""


class Skip(Exception):
    """The delivery ends here with this outcome; the page may record a failure."""

    def __init__(
        self, outcome: Outcome, reason: str, *, page_failure: bool = False
    ) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.page_failure = page_failure


def skip_finish(delivery: Delivery, page: Page, skip: Skip) -> Outcome:
    with transaction.atomic():
        locked = page_lock(page)
        if skip.page_failure and not locked.is_newer_than(delivery.crawled_at):
            locked.mark_failed(
                at=delivery.received_at,
                error=str(skip),
                original_status=delivery.original_status,
            )
            locked.save()
        return delivery_finish(delivery, locked, skip.outcome, str(skip))


def page_lock_for(
    delivery: Delivery, page: Page, *, original_of: bool = False
) -> Page | None:
    """The page, locked (``page_lock``), if this delivery may change it; else the
    delivery is finished as superseded (the page shows a newer crawl)."""
    locked = page_lock(page, original_of=original_of)
    if locked.is_newer_than(delivery.crawled_at):
        _superseded(delivery, locked)
        return None
    return locked


def _superseded(delivery: Delivery, page: Page) -> Outcome:
    return delivery_finish(
        delivery, page, Outcome.SKIPPED, "superseded: the page shows a newer crawl"
    )


def delivery_finish(
    delivery: Delivery, page: Page | None, outcome: Outcome, note: str = ""
) -> Outcome:
    """Record the outcome. Raises ``Superseded`` if another run of the delivery
    recorded one first (inside a transaction, what this run changed rolls back)."""
    if not delivery.mark_done(
        outcome=outcome, note=note, page_id=page.pk if page else None
    ):
        raise Superseded(f"delivery {delivery.pk} was finished by another run")
    if delivery.push_id:
        Push.objects.filter(pk=delivery.push_id).update(
            state=Push.State.DELIVERED, delivered_at=timezone.now()
        )
    return outcome
