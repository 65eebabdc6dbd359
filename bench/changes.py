"""The change feed's JSON and Atom pages at many changes, timed over HTTP.

    .venv/bin/python -m bench.changes [--changes 100000] [--requests 200] [--reuse]

Fills a database of its own with ``--changes`` page changes (steps of
``PageVersion``) spread over 10 sources and 20,000 pages, a year of them, then
times requests to the running product (``manage.py runserver`` is not used: the
same WSGI server as ``serve``, on loopback, one request at a time) for:

- the newest page of every source, as a superuser (no visibility filter),
- the same as an editor who may read 3 of the 10 sources (the visibility filter),
- one source's feed,
- a page far back (``before`` a cursor 90 % of the way down),
- a poll with ``since`` the latest cursor (nothing new: the common case),
- the Atom feed (100 entries).

Prints p50, p95 and the maximum in milliseconds for each.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import urllib.request
from datetime import timedelta

from bench.common import django_fresh, start_server

DATABASE = "kb_bench_changes"
SOURCES = 10
PAGES = 20_000
BATCH = 10_000
PORT = 8767


def filled(changes: int, reuse: bool) -> None:
    from django.contrib.auth.models import Group, User
    from django.utils import timezone

    from sources.models import Page, PageVersion, Source

    if reuse and PageVersion.objects.count() == changes:
        return
    PageVersion.objects.all().delete()
    Page.objects.all().delete()
    Source.objects.all().delete()
    User.objects.all().delete()
    Group.objects.all().delete()
    group = Group.objects.create(name="three sources")
    sources = [
        Source.objects.create(name=f"Site {n}", seed_urls=f"https://site{n}.example/")
        for n in range(SOURCES)
    ]
    for source in sources:  # each source open to its group only
        source.allowed_groups.add(
            group if source in sources[:3] else Group.objects.create(name=source.name)
        )
    now = timezone.now()
    pages = Page.objects.bulk_create(
        Page(
            source=sources[n % SOURCES],
            url=f"https://site{n % SOURCES}.example/p{n}/",
            title=f"Page {n}",
            status=Page.Status.LIVE,
            last_verified_at=now,
        )
        for n in range(PAGES)
    )
    rng = random.Random(7)
    kinds = [PageVersion.Kind.CHANGED] * 8 + [PageVersion.Kind.NEW,
                                               PageVersion.Kind.DELETED]  # fmt: skip
    started = time.perf_counter()
    for first in range(0, changes, BATCH):
        rows = []
        for _ in range(min(BATCH, changes - first)):
            page = rng.choice(pages)
            rows.append(
                PageVersion(
                    page=page,
                    source_id=page.source_id,
                    kind=rng.choice(kinds),
                    recorded_at=now - timedelta(seconds=rng.randrange(365 * 86400)),
                    lines_added=rng.randrange(1, 40),
                    lines_removed=rng.randrange(0, 40),
                    words_added=rng.randrange(1, 300),
                    words_removed=rng.randrange(0, 300),
                    sections=[f"Guide › Section {rng.randrange(30)}"],
                    chunks_embedded=rng.randrange(0, 5),
                    content_hash="0" * 64,
                    markdown="x" * 2000,  # what a feed must not read
                )
            )
        PageVersion.objects.bulk_create(rows)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    print(f"filled {changes:,} changes in {time.perf_counter() - started:.0f} s")


def timed(url: str, headers: dict[str, str], count: int) -> list[float]:
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request) as response:  # warm up, and check
        assert response.status == 200, response.status
    times = []
    for _ in range(count):
        started = time.perf_counter()
        with urllib.request.urlopen(request) as response:
            response.read()
        times.append((time.perf_counter() - started) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument(
        "--port", type=int, default=PORT, help=f"the server's loopback port ({PORT})"
    )
    args = parser.parse_args()
    django_fresh(keep=args.reuse, database=DATABASE, EMBEDDING_BACKEND="hashing")
    from django.contrib.auth.models import Group, User
    from rest_framework.authtoken.models import Token

    from sources.models import PageVersion, Source

    filled(args.changes, args.reuse)
    admin = User.objects.get_or_create(username="bench-admin", is_superuser=True)[0]
    editor = User.objects.get_or_create(username="bench-editor")[0]
    editor.groups.add(Group.objects.get(name="three sources"))
    keys = {user: Token.objects.get_or_create(user=user)[0].key
            for user in (admin, editor)}  # fmt: skip
    steps = PageVersion.objects.order_by("-recorded_at", "-id")
    deep = steps.only("recorded_at")[int(args.changes * 0.9)]
    latest = steps.only("recorded_at")[0]
    from sources.feeds import Cursor

    source = Source.objects.earliest("pk")
    server = start_server(DATABASE, args.port)
    base = f"http://127.0.0.1:{args.port}"
    try:
        cases = [
            ("every source, superuser", admin, "/feeds/changes.json"),
            ("every source, editor of 3", editor, "/feeds/changes.json"),
            ("one source", admin, f"/feeds/sources/{source.pk}/changes.json"),
            ("a page 90% back", admin,
             f"/feeds/changes.json?before={Cursor.of(deep)}"),
            ("poll: since the latest", editor,
             f"/feeds/changes.json?since={Cursor.of(latest)}"),
            ("Atom, 100 entries", editor, "/feeds/changes.atom"),
        ]  # fmt: skip
        print(f"{args.changes:,} changes; {args.requests} requests each, ms:")
        print(f"{'case':>28} {'p50':>7} {'p95':>7} {'max':>7}")
        for name, user, path in cases:
            times = timed(base + path, {"Authorization": f"Token {keys[user]}"},
                          args.requests)  # fmt: skip
            p95 = statistics.quantiles(times, n=20)[18]
            print(f"{name:>28} {statistics.median(times):7.1f} {p95:7.1f} "
                  f"{max(times):7.1f}")  # fmt: skip
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
