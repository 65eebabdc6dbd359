"""What became of each URL of a crawl: done with a result, or back in the queue
to be tried again later."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from ingest.crawl.models import Crawl, CrawlUrl
from ingest.crawl.robots import origin_of


def url_finish(
    *,
    row: CrawlUrl,
    result: str,
    site_status: int | None = None,
    error: str = "",
    delivery_id: int | None = None,
) -> None:
    CrawlUrl.objects.filter(pk=row.pk).update(
        state=CrawlUrl.State.DONE,
        result=result,
        site_status=site_status,
        error=error[:2000],
        delivery_id=delivery_id,
        done_at=timezone.now(),
    )


def url_retry_later(*, row: CrawlUrl, seconds: float, error: str) -> None:
    CrawlUrl.objects.filter(pk=row.pk).update(
        state=CrawlUrl.State.QUEUED,
        not_before=timezone.now() + timedelta(seconds=seconds),
        error=error[:2000],
        claimed_at=None,
    )


def url_reached(*, crawl: Crawl, url: str, result: str, delivery_id: int) -> None:
    """A URL reached by a redirect (or as a page's canonical URL) is done too: it is
    not fetched again by this crawl."""
    now = timezone.now()
    updated = CrawlUrl.objects.filter(
        crawl=crawl, url=url, state=CrawlUrl.State.QUEUED
    ).update(
        state=CrawlUrl.State.DONE, result=result, delivery_id=delivery_id, done_at=now
    )
    if not updated:
        CrawlUrl.objects.bulk_create(
            [
                CrawlUrl(
                    crawl=crawl,
                    url=url,
                    origin=origin_of(url)[:300],
                    state=CrawlUrl.State.DONE,
                    result=result,
                    delivery_id=delivery_id,
                    done_at=now,
                )
            ],
            ignore_conflicts=True,
        )
