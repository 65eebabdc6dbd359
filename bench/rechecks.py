"""What a recrawl does to answers already given, and to the change feed.

The PostgreSQL 15 manual (1,169 pages) is ingested; 1,000 questions are answered
and logged (each "What does the manual say about <a section's heading>?", for
headings chosen with a fixed seed, asked by one reader); then the recrawl of
``bench.incremental`` (4 % of the pages with one paragraph edited, 1 % gone, 1 %
with only a footer date changed) runs through a real worker cluster. Printed: how
many answers the recrawl made stale, how long asking them all again took and what
came of it, how many changes the recrawl recorded, and how many feed entries and
notifications that makes.

    .venv/bin/python -m bench.rechecks [--questions 1000] [--seed 7]
"""

from __future__ import annotations

import argparse
import random
import time
from datetime import timedelta

from bench.common import deliver_all, django_fresh, start_cluster, stop_cluster
from bench.corpus import BASE_URL, pages
from bench.incremental import recrawl, with_footer

DATABASE = "kb_bench_rechecks"


def questions(count: int, rng: random.Random) -> list[str]:
    from retrieval.models import Chunk

    headings = sorted(
        {
            h.split(" › ")[-1]
            for h in Chunk.objects.values_list("heading", flat=True)
            if h and len(h.split(" › ")[-1]) > 8
        }
    )
    picked = rng.sample(headings, min(count, len(headings)))
    return [f"What does the manual say about {h}?" for h in picked]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    django_fresh(database=DATABASE, EMBEDDING_BACKEND="hashing")
    from django.contrib.auth.models import User
    from django.core import mail
    from django.test import Client, override_settings
    from django.utils import timezone

    from ingest.notify.models import Notification, Subscription, SubscriptionChange
    from ingest.notify.services import notifications_send
    from retrieval.models import QueryLog
    from retrieval.questions import question_answer
    from retrieval.rechecks import answers_recheck
    from sources.models import PageVersion, Source

    source = Source.objects.create(name="PostgreSQL 15 manual", seed_urls=BASE_URL)
    first = [(url, with_footer(html, "2026-11-01"), 200) for url, html in pages()]
    cluster = start_cluster()
    try:
        print(deliver_all("first crawl", first))
        reader = User.objects.create_user("reader")
        started = time.perf_counter()
        asked = questions(args.questions, rng)
        for question in asked:
            question_answer(question=question, user=reader, k=5)
        answered = QueryLog.objects.filter(abstained=False).count()
        print(
            f"{len(asked)} questions answered and logged in "
            f"{time.perf_counter() - started:.1f} s ({answered} with citations)"
        )
        before = PageVersion.objects.count()
        # Subscribed after the first crawl, as people do: they hear of the recrawl.
        Subscription.objects.create(
            source=source, name="docs team", channel=Subscription.Channel.EMAIL,
            emails="docs@example.com",
        )  # fmt: skip
        second = recrawl(first, rng)
    finally:
        stop_cluster(cluster)
    edited, gone, footer = second.groups
    print(f"recrawl: {len(edited)} edited, {len(gone)} gone, {len(footer)} footer only")
    changes = PageVersion.objects.count() - before
    stale = QueryLog.objects.filter(status=QueryLog.Status.STALE).count()
    print(f"changes recorded: {changes}; answers marked stale: {stale} of {answered}")

    done = answers_recheck(budget=100_000)
    print(
        f"asked again: {done.asked} in {done.seconds:.1f} s "
        f"({done.seconds / max(done.asked, 1) * 1000:.0f} ms each): "
        f"{done.held} still hold, {done.changed} changed; {done.left} left"
    )
    admin = User.objects.create_superuser("bench-admin")
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(admin)
    entries, url = 0, "/feeds/changes.json?limit=200"
    while url:
        page = client.get(url).json()
        entries += len(page["changes"])
        url = page["next"]
    print(f"feed entries: {entries} (of which the recrawl's {changes})")
    routed = SubscriptionChange.objects.count()
    with override_settings(
        EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend"
    ):
        sent = notifications_send(now=timezone.now() + timedelta(hours=1))
        outbox = getattr(mail, "outbox", [])
    print(
        f"notifications: {routed} changes routed to the e-mail subscription, "
        f"{sent.made} digest made, {sent.sent} sent ({len(outbox)} e-mail, "
        f"{Notification.objects.count()} notification rows)"
    )


if __name__ == "__main__":
    main()
