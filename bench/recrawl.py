"""Ingest 1,168 real documentation pages, then redeliver them all unchanged; then
count the database round trips of one delivery of each kind.

Each delivery of the two timed rounds goes through the same path as production:
stored and queued by the webhook's service, then processed by a real ``qcluster``
with two workers, started and idle before the clock starts (as ``make run``'s are
long before an editor saves a source); the time is from the first delivery to the
last job done. With ``--embedder openai`` embeddings go over HTTP to a local fake
of the OpenAI API (in a process of its own); the default, ``hashing``, embeds in
the worker. Each round also prints what its pages cost the machine's cores, by
role (the workers, the database server, this process storing the deliveries),
and the rate at which those cores would be saturated.

The round trips are counted in this process, delivery by delivery, on pages the
timed rounds left out (first), then on the same pages again (unchanged), edited
(changed) and answered 404 (gone): every statement sent, BEGIN and COMMIT
included, since each one waits for the database. Before the 404s, the edited pages
are delivered once more, unchanged, and one run records them all together (a
batch, ``DELIVERY_BATCH``): its round trips are printed for the batch.

With ``--live N`` the source holds N live pages more before the first round (rows
only: no body, no chunks, vacuumed and analyzed), as a large site does part way
through its first crawl, so that what grows with a source's size shows in a
delivery's cost.

    .venv/bin/python -m bench.recrawl [--limit N] [--embedder hashing|openai]
                                      [--live N]
"""

from __future__ import annotations

import argparse
import re
import statistics
from collections import Counter
from datetime import timedelta

from bench.common import (
    cluster_ready,
    cpu_by_role,
    cpu_per_page,
    deliver_all,
    django_fresh,
    django_with_fake_openai,
    queue_deliveries,
    start_cluster,
    stop_cluster,
)
from bench.corpus import BASE_URL, pages

# "together": the changed pages delivered again unchanged, their jobs left on the
# queue, and one run (the first job's) records them all.
KINDS = ("first", "unchanged", "changed", "together", "gone")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=0, help="only the first N pages")
    parser.add_argument(
        "--embedder",
        choices=("hashing", "openai"),
        default="hashing",
        help="hashing: the built-in test embedder, in the worker (default); "
        "openai: the OpenAI client against a local fake of the API",
    )
    parser.add_argument(
        "--sample",
        type=int,
        default=30,
        help="pages whose deliveries' round trips are counted, per kind (default 30)",
    )
    parser.add_argument(
        "--live",
        type=int,
        default=0,
        help="live pages the source holds before the first round (default 0)",
    )
    args = parser.parse_args()

    corpus = [(url, html, 200) for url, html in pages()[: args.limit or None]]
    timed, counted = corpus[: -args.sample], corpus[-args.sample :]
    if args.embedder == "openai":
        django_with_fake_openai()
    else:
        django_fresh(EMBEDDING_BACKEND="hashing")
    from sources.models import Source

    source = Source.objects.create(name="PostgreSQL 15 manual", seed_urls=BASE_URL)
    if args.live:
        held_pages(source, args.live)
    print(
        f"corpus: {len(timed)} pages timed, {sum(len(h) for _, h, _ in timed):,} "
        f"bytes; {len(counted)} counted; embedder {args.embedder}; "
        f"{args.live:,} live pages held before"
    )
    cluster = start_cluster()
    try:
        cluster_ready(cluster.pid)
        for name in ("first", "unchanged"):
            before = cpu_by_role(cluster.pid)
            measured = deliver_all(name, timed)
            print(measured, flush=True)
            print(cpu_per_page(before, cpu_by_role(cluster.pid), measured), flush=True)
    finally:
        stop_cluster(cluster)
    counts, recorded = round_trips(counted)
    together = counts.pop("together")[0]
    print(
        "round trips per delivery (median; min-max): "
        + ", ".join(
            f"{kind} {statistics.median(n):.0f} ({min(n)}-{max(n)})"
            for kind, n in counts.items()
        )
    )
    print(
        f"round trips of one run that recorded {recorded} of {len(counted)} waiting "
        f"unchanged deliveries: {together} ({together / recorded:.1f} a delivery)"
    )


def held_pages(source, count: int) -> None:
    """``count`` live pages of ``source`` as a crawl leaves them, as far as the
    look-ups by page go: each with its own content hash and near-duplicate bands
    (random: no two alike), so that the planner sees what a real site gives it.
    They count no line shapes: with many of them no line of the corpus reaches
    the boilerplate share, so nothing is stripped or derived again, and the check
    of the source's stripped lines is timed without its moves."""
    import hashlib
    import random

    from django.db import connection

    from ingest.reading.similarity import bands_layout
    from sources.models import Page

    bands, _ = bands_layout()
    draw = random.Random(20261207)
    Page.objects.bulk_create(
        (
            Page(
                source=source,
                url=f"{BASE_URL}held/{number}.html",
                status=Page.Status.LIVE,
                content_hash=hashlib.sha256(str(number).encode()).hexdigest(),
                minhash_bands=[draw.getrandbits(64) - 2**63 for _ in range(bands)],
            )
            for number in range(count)
        ),
        batch_size=5_000,
    )
    # As autovacuum would have done long since on a site this large: without it
    # the planner takes the table for the few rows it last saw.
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {Page._meta.db_table}")


def round_trips(
    corpus: list[tuple[str, str, int]],
) -> tuple[dict[str, list[int]], int]:
    """Statements each delivery of each kind sends, processed here one by one
    (``together``: the one run's), and how many deliveries that run recorded."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django_q.models import OrmQ

    from ingest.delivery.job import delivery_process
    from ingest.delivery.models import Delivery

    heading_end = re.compile(r"</h[1-3]>")
    edited = [
        (url, heading_end.sub(r"\g<0><p>A sentence added today.</p>", html, 1), 200)
        for url, html, _ in corpus
    ]
    rounds = {
        "first": corpus,
        "unchanged": corpus,
        "changed": edited,
        "together": edited,
        "gone": [(url, "Not Found", 404) for url, _, _ in corpus],
    }
    counts: dict[str, list[int]] = {}
    recorded = 0
    for kind in KINDS:
        ids = queue_deliveries(f"count-{kind}", rounds[kind])
        runs = list(ids.values())
        if kind == "together":
            # The first job taken by a worker, as the cluster does; the others
            # wait on the queue for a run to take them.
            runs = runs[:1]
            job = next(j for j in OrmQ.objects.all() if j.task["args"] == (runs[0],))
            OrmQ.objects.filter(pk=job.pk).update(lock=job.lock + timedelta(hours=1))
        else:
            OrmQ.objects.all().delete()  # run here, not by a cluster
        counts[kind] = []
        for delivery_id in runs:
            with CaptureQueriesContext(connection) as queries:
                delivery_process(delivery_id=delivery_id)
            counts[kind].append(len(queries))
        OrmQ.objects.all().delete()
        outcomes = Delivery.objects.filter(pk__in=ids.values())
        tally = Counter(outcomes.values_list("outcome", flat=True))
        if kind == "together":
            recorded = tally[Delivery.Outcome.UNCHANGED]
        print(f"{kind:>10}: outcomes {dict(tally)}")
    return counts, recorded


if __name__ == "__main__":
    main()
