"""Ingest 1,169 real documentation pages, then redeliver them all unchanged.

Each delivery goes through the same path as production: stored and queued by the
webhook's service, then processed by the ingest job (run here in-process, one after
another, so the numbers are the job's own cost). Embeddings go over HTTP to a local
fake of the OpenAI API, which counts every request.

    .venv/bin/python -m bench.recrawl [--limit N]
"""

from __future__ import annotations

import argparse
import gzip
import time

from bench.corpus import BASE_URL, pages
from bench.setup import django_with_fake_openai


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=0, help="only the first N pages")
    args = parser.parse_args()

    corpus = pages()[: args.limit or None]
    fake = django_with_fake_openai()
    from collections import Counter

    from django_q.models import OrmQ

    from ingest import wire
    from ingest.services import delivery_process, delivery_receive
    from sources.models import Source

    Source.objects.create(name="PostgreSQL 15 manual", seed_urls=BASE_URL)
    bodies = [(url, gzip.compress(html.encode())) for url, html in corpus]

    def crawl(round_name: str) -> None:
        requests, tokens = fake.requests, fake.tokens
        outcomes: Counter[str] = Counter()
        started = time.perf_counter()
        for number, (url, raw) in enumerate(bodies):
            parsed = wire.ParsedDelivery(
                rid=f"{round_name}-{number}", url=url, original_status=200,
                crawler_status=200, body_format="html", text="",
            )  # fmt: skip
            delivery, _ = delivery_receive(
                parsed=parsed, raw=raw, content_type="text/plain"
            )
            outcomes[str(delivery_process(delivery_id=delivery.pk))] += 1
        elapsed = time.perf_counter() - started
        OrmQ.objects.all().delete()  # the jobs ran here, not in a cluster
        print(
            f"{round_name:>10}: {len(bodies)} pages in {elapsed:.1f} s = "
            f"{len(bodies) / elapsed:.0f} pages/s; outcomes {dict(outcomes)}; "
            f"embedding requests {fake.requests - requests}, "
            f"tokens embedded {fake.tokens - tokens:,}"
        )

    print(f"corpus: {len(bodies)} pages, {sum(len(r) for _, r in bodies):,} bytes gzip")
    crawl("first")
    crawl("unchanged")
    fake.__exit__(None, None, None)


if __name__ == "__main__":
    main()
