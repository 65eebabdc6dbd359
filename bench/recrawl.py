"""Ingest 1,169 real documentation pages, then redeliver them all unchanged.

Each delivery goes through the same path as production: stored and queued by the
webhook's service, then processed by a real ``qcluster`` with two workers; the time is
from the first delivery to the last job done. Embeddings go over HTTP to a local fake
of the OpenAI API, which counts every request.

    .venv/bin/python -m bench.recrawl [--limit N]
"""

from __future__ import annotations

import argparse

from bench.common import (
    deliver_all,
    django_with_fake_openai,
    start_cluster,
    stop_cluster,
)
from bench.corpus import BASE_URL, pages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=0, help="only the first N pages")
    args = parser.parse_args()

    corpus = [(url, html, 200) for url, html in pages()[: args.limit or None]]
    django_with_fake_openai()
    from sources.models import Source

    Source.objects.create(name="PostgreSQL 15 manual", seed_urls=BASE_URL)
    print(f"corpus: {len(corpus)} pages, {sum(len(h) for _, h, _ in corpus):,} bytes")
    cluster = start_cluster()
    try:
        print(deliver_all("first", corpus))
        print(deliver_all("unchanged", corpus))
    finally:
        stop_cluster(cluster)


if __name__ == "__main__":
    main()
