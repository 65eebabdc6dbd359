"""Receivers that hang, with real worker processes: two sending jobs and a crawl
on a cluster of two workers; one job sends (each attempt cut at NOTIFY_TIMEOUT),
the other finds the only slot taken in another process and leaves at once, and
the crawl goes on beside them."""

from __future__ import annotations

import pytest

from ingest.crawl.services import crawl_start
from ingest.notify.models import Notification, NotificationAttempt, Subscription
from ingest.notify.services import notifications_send_soon
from ingest.notify.slots import slots_taken
from sources.models import Page, Source
from tests.fakes.hostile_receiver import OK, HostileReceiver, drip
from tests.fakes.site import FakeSite
from tests.ingest.crawl.test_crawl_worker import all_done, cluster, docs_site
from tests.ingest.delivery.test_worker import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RECEIVERS = 3


def test_receivers_that_drip_hold_one_worker_and_the_crawl_goes_on():
    with FakeSite() as site, HostileReceiver(drip(OK, every=1)) as hook:
        paths = docs_site(site, 10)
        hooked = Source.objects.create(name="Hooked", seed_urls="https://a.example/")
        for number in range(RECEIVERS):
            subscription = Subscription.objects.create(
                source=hooked, name=f"Dripping {number}", url=hook.url()
            )
            Notification.objects.create(subscription=subscription, body="{}")
        # Two sending jobs, as two ticks of the schedule queue while a send is
        # still going; then another source's crawl.
        notifications_send_soon()
        notifications_send_soon()
        crawled = Source.objects.create(name="Docs", seed_urls=site.url("/docs/"))
        crawl, _ = crawl_start(source=crawled)

        # A job may run a minute (Q_TIMEOUT), about as long as the drip lasts.
        with cluster(NOTIFY_TIMEOUT="2", Q_TIMEOUT="60", Q_RETRY="61"):
            wait_until(lambda: all_done(crawl), 30, "the crawl and its indexing")
            wait_until(
                lambda: NotificationAttempt.objects.count() == RECEIVERS,
                30,
                "an attempt per receiver",
            )

    assert Page.objects.filter(source=crawled).count() == len(paths)
    attempts = NotificationAttempt.objects.all()
    assert {(a.ok, a.error) for a in attempts} == {
        (False, "no answer within 2 s (NOTIFY_TIMEOUT, for the whole exchange)")
    }
    assert all(a.duration_ms < 2500 for a in attempts)
    assert set(Notification.objects.values_list("state", flat=True)) == {"waiting"}
    assert slots_taken() == set(), "the slot went with the run"
