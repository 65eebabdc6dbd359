"""Planning a due recrawl over many pages: one statement, no per-page round trips.

Fills the benchmark database with 100,000 pages of one Crawlbase source (half of
them due, a tenth of those with a push already in flight), then times the planner as
the schedule runs it (expire old pushes, select the due pages, queue one push each)
and counts its queries. Also times the adaptive re-plan of the source (its pages'
change rates into one price of a check).

    .venv/bin/python -m bench.recrawl_plan [--pages 100000]
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.common import django_fresh


def fill(pages: int) -> None:
    from django.db import connection
    from django.utils import timezone

    from ingest.pushing.models import Push
    from sources.models import HOUR, Page, Source

    source = Source.objects.create(
        name="Bench docs", fetcher="crawlbase", seed_urls="https://docs.example.com/"
    )
    # Rows made by the models (every default filled, whatever columns come
    # later), in batches: half due, checked 1 to 168 hours ago, at rates from
    # hourly to once in 500 hours.
    now = timezone.now()
    Page.objects.bulk_create(
        (
            Page(
                source=source, url=f"https://docs.example.com/p{n}/", status="live",
                next_crawl_at=now + (-1 if n % 2 == 0 else 1) * HOUR,
                last_verified_at=now - (1 + n % 168) * HOUR,
                change_rate=1.0 / (1 + n % 500),
            )
            for n in range(1, pages + 1)
        ),
        batch_size=5000,
    )  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {Push._meta.db_table} (page_id, url, state, queued_at, "
            "pushed_at, attempts, error) SELECT id, url, 'sent', now(), now(), 1, '' "
            f"FROM {Page._meta.db_table} WHERE id % 20 = 0"
        )
        cursor.execute("ANALYZE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    django_fresh()
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from ingest.planning.recrawl import recrawl_due
    from ingest.pushing.models import Push
    from sources.models import Source
    from sources.replan import source_schedule_replan

    fill(args.pages)
    print(f"{args.pages:,} pages, half of them due, a tenth of those in flight")
    seconds = []
    for _ in range(args.runs):
        with transaction.atomic():
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                plan = recrawl_due()
                seconds.append(time.perf_counter() - started)
            transaction.set_rollback(True)  # each run plans the same state
    print(f"plan: {plan}")
    print(
        f"planning the due recrawl: median {statistics.median(seconds):.2f} s "
        f"(min {min(seconds):.2f}, max {max(seconds):.2f}), "
        f"{len(queries.captured_queries)} queries"
    )
    assert not Push.objects.filter(state="queued").exists()
    source = Source.objects.get()
    started = time.perf_counter()
    source_schedule_replan(source=source)
    print(
        f"the day plan of the source and its pages re-timed: "
        f"{time.perf_counter() - started:.2f} s"
    )


if __name__ == "__main__":
    main()
