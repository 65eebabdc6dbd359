"""A first crawl beside webhook receivers that drip, against the same crawl with no
subscriptions.

The site is the PostgreSQL 15 manual (``bench.corpus``) served on loopback by
``bench.crawl.Site``; the jobs run in a real ``qcluster`` of two workers
(``bench.common.start_cluster``) on a fresh benchmark database, with the
``hashing`` embedder and only the periodic job that sends notifications (every
minute, as in use). The same crawl runs on a fresh database each time: with no
subscription, then with ``--receivers`` webhook subscriptions to the crawled
source whose receivers answer one byte every ``--every`` seconds (and never
finish). Each subscription has a notification due when the crawl starts and a
send runs then, so every receiver hangs from the first second; the crawl's own
changes go out as soon as they come (NOTIFY_QUIET_SECONDS=0), and every receiver
is tried again after each backoff, with the product's settings otherwise.

    .venv/bin/python -m bench.notify_drip [--limit 400] [--receivers 5] [--every 5]

Prints for each crawl: the site's requests a second while the crawl fetched, the
longest time with no request, and the time until every fetched page was
searchable (its delivery indexed); for the dripping one, the notification
attempts made during it and the worker time they took. The machine's load
average is printed with each: on a shared machine it moves the numbers more than
anything measured here, hence ``--pairs``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from dataclasses import dataclass
from datetime import timedelta
from statistics import median

from bench.common import cluster_ready, django_fresh, start_cluster, stop_cluster
from bench.corpus import POSTGRESQL
from bench.crawl import Site
from tests.fakes.hostile_receiver import OK, HostileReceiver, drip

SEND_TASK = "ingest.tasks.notifications_send_task"
# Seconds from the cluster's start (a few before the crawl's) to the periodic
# send's first run.
FIRST_SEND = 60


@dataclass
class Measured:
    name: str
    requests: int = 0
    fetch_seconds: float = 0.0
    searchable_seconds: float = 0.0
    longest_quiet: float = 0.0
    pages: int = 0

    @property
    def rate(self) -> float:
        return self.requests / self.fetch_seconds

    def __str__(self) -> str:
        return (
            f"{self.name:>16}: {self.requests} requests in {self.fetch_seconds:.1f} s "
            f"= {self.rate:.2f} requests/s (longest with none "
            f"{self.longest_quiet:.1f} s); every page searchable after "
            f"{self.searchable_seconds:.1f} s ({self.pages} pages); load average "
            f"{os.getloadavg()[0]:.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=400, help="most pages to crawl")
    parser.add_argument(
        "--receivers", type=int, default=5, help="dripping subscriptions (5)"
    )
    parser.add_argument(
        "--every", type=float, default=5.0, help="seconds between dripped bytes (5)"
    )
    parser.add_argument(
        "--pairs",
        type=int,
        default=1,
        help="pairs of crawls, in the order quiet, dripping, dripping, quiet, … so "
        "that a machine getting busier or quieter weighs on both alike (1)",
    )
    args = parser.parse_args()
    POSTGRESQL.pages()  # the package, downloaded and unpacked on first use
    site = Site(POSTGRESQL.root)
    os.environ.update(
        CRAWL_ALLOW_PRIVATE_ADDRESSES="true",
        CRAWL_DELAY="0",
        CRAWL_WORKERS="1",
        EMBEDDING_BACKEND="hashing",
        NOTIFY_QUIET_SECONDS="0",
    )
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    runs: dict[int, list[Measured]] = {0: [], args.receivers: []}
    for pair in range(args.pairs):
        order = [0, args.receivers] if pair % 2 == 0 else [args.receivers, 0]
        for receivers in order:
            measured = crawl_beside(site, args.limit, receivers, args.every)
            print(measured, flush=True)
            runs[receivers].append(measured)
    quiet, dripping = runs[0], runs[args.receivers]
    rate = median(m.rate for m in dripping) / median(m.rate for m in quiet)
    searchable = median(m.searchable_seconds for m in dripping) / median(
        m.searchable_seconds for m in quiet
    )
    print(
        f"with {args.receivers} dripping receivers (medians of {args.pairs}): "
        f"request rate {rate - 1:+.1%}, time to searchable {searchable - 1:+.1%}"
    )


def crawl_beside(site: Site, limit: int, receivers: int, every: float) -> Measured:
    """The crawl on a fresh database and cluster, beside ``receivers`` dripping
    webhook subscriptions to its source."""
    django_fresh()
    notifications_schedule()
    site.statuses.clear()
    site.paths.clear()
    name = f"{receivers} dripping" if receivers else "no subscription"
    with contextlib.ExitStack() as stack:
        hooks = [
            stack.enter_context(HostileReceiver(drip(OK * 1000, every=every)))
            for _ in range(receivers)
        ]
        cluster = start_cluster(workers=2)
        try:
            cluster_ready(cluster.pid)
            measured = crawl(site, limit, name, [hook.url() for hook in hooks])
        finally:
            stop_cluster(cluster)
    if receivers:
        attempts_report()
    return measured


def notifications_schedule() -> None:
    """The periodic send, the one schedule left (``django_fresh`` drops them),
    every minute from a minute after the crawl starts (the bench queues the
    first run itself)."""
    from django.utils import timezone
    from django_q.models import Schedule

    Schedule.objects.create(
        name="ingest: send notifications",
        func=SEND_TASK,
        schedule_type=Schedule.MINUTES,
        minutes=1,
        repeats=-1,
        next_run=timezone.now() + timedelta(seconds=FIRST_SEND),
    )


def crawl(site: Site, limit: int, name: str, hooks: list[str]) -> Measured:
    from ingest.crawl.progress import crawl_progress
    from ingest.crawl.services import crawl_start
    from ingest.crawl.setup import source_for_crawl
    from ingest.notify.models import Notification, Subscription
    from ingest.notify.services import notifications_send_soon

    source, _ = source_for_crawl(
        url=site.url + "index.html", max_pages=limit or None, max_depth=50
    )
    source.max_pages = limit
    for number, url in enumerate(hooks):
        subscription = Subscription.objects.create(
            source=source, name=f"Drip {number}", url=url
        )
        # Already one to send: every receiver hangs from the crawl's first second.
        Notification.objects.create(subscription=subscription, body="{}")
    measured = Measured(name)
    started = last_request = time.perf_counter()
    seen = 0
    crawl, _ = crawl_start(source=source)
    notifications_send_soon()  # a tick of the schedule, the next a minute later
    while not (progress := crawl_progress(crawl=crawl)).finished:
        now = time.perf_counter()
        requests = sum(site.statuses.values())
        if requests != seen:
            seen, last_request = requests, now
        elif not measured.fetch_seconds:
            measured.longest_quiet = max(measured.longest_quiet, now - last_request)
        if not measured.fetch_seconds and progress.state != "running":
            measured.fetch_seconds = now - started
        time.sleep(0.2)
    measured.searchable_seconds = time.perf_counter() - started
    measured.fetch_seconds = measured.fetch_seconds or measured.searchable_seconds
    measured.requests = sum(site.statuses.values())
    measured.pages = progress.indexed_count
    print(f"  {name}: {progress.counts()}; indexed: {progress.indexed()}")
    return measured


def attempts_report() -> None:
    """The attempts made during the crawl, and the worker time they took: the
    attempts of one round (one claim time) run at once."""
    from django.db.models import Max

    from ingest.notify.models import NotificationAttempt, Subscription

    attempts = NotificationAttempt.objects.all()
    rounds = attempts.values("attempted_at").annotate(longest=Max("duration_ms"))
    held = sum(row["longest"] for row in rounds) / 1000
    errors = sorted(set(attempts.values_list("error", flat=True)))
    failures = list(Subscription.objects.values_list("failures", flat=True))
    print(
        f"  notification attempts: {attempts.count()} in {len(rounds)} rounds, "
        f"holding a worker {held:.1f} s in all; errors {errors}; failures per "
        f"subscription {failures}"
    )


if __name__ == "__main__":
    main()
