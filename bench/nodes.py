"""Two worker nodes first-crawl the PostgreSQL 15 manual, on one PostgreSQL server
reached over TCP, as a deployment past one machine runs them.

The server is the embedded binaries run as a plain server on 127.0.0.1 (as in
``tests/kbsite/test_nodes.py``); the site is the manual's HTML (``bench.corpus``) served
on loopback, counting the requests it answers and the most it had in flight at
once; each worker node is ``manage.py serve --worker`` with its own processes and
the shared ``DATABASE_URL``, ``SECRET_KEY`` and cluster name. This process creates
the source and starts the crawl, as an editor's "Crawl now" does, then waits
until every page is indexed.

    .venv/bin/python -m bench.nodes [--limit N] [--embedder hashing|openai]

Prints the time and pages/s, the deliveries each node ran, and the counts that
must agree: one request per page, one delivery per page, each with one outcome,
one version per page, and vectors stored equal to texts embedded (none twice).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.common import (
    ROOT,
    fake_openai_env,
    start_fake_openai_process,
    stop_fake_openai_process,
)
from bench.corpus import POSTGRESQL
from bench.crawl import Site

SECRET = "bench-nodes-secret-key-shared-by-every-node"
PROCESSED = re.compile(r" INFO ingest\.process delivery \d+ \(rid [^)]+\): (\w+)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=0, help="most pages to crawl")
    parser.add_argument(
        "--embedder",
        choices=("hashing", "openai"),
        default="hashing",
        help="hashing (default): the built-in test embedder, in the workers; "
        "openai: the OpenAI client against a local fake of the API",
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="job workers per node (default 2)"
    )
    args = parser.parse_args()
    POSTGRESQL.pages()  # the package, downloaded and unpacked on first use
    site = Site(POSTGRESQL.root)
    sys.path.insert(0, str(ROOT))
    from tests.conftest import free_port
    from tests.tcp_postgres import TcpPostgres, die_with_parent

    with tempfile.TemporaryDirectory(prefix="kb-nodes-") as tmp:
        root = Path(tmp)
        with TcpPostgres(root / "pg", port=free_port()) as db:
            env = node_env(db.url, root, args)
            fake = None
            if args.embedder == "openai":
                fake, base_url = start_fake_openai_process()
                env.update(fake_openai_env(base_url))
            os.environ.update(env)
            run(site, env, root, args.limit, die_with_parent(signal.SIGTERM))
            if fake is not None:
                stop_fake_openai_process(fake)


def node_env(url: str, root: Path, args: argparse.Namespace) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "EMBEDDED_DB_NAME"}
    env.update(
        DJANGO_SETTINGS_MODULE="kbsite.settings",
        PYTHONUNBUFFERED="1",
        DATABASE_URL=url,
        SECRET_KEY=SECRET,
        KB_VAR_DIR=str(root / "var"),
        EMBEDDING_BACKEND=args.embedder,
        LOG_LEVEL="INFO",
        Q_WORKERS=str(args.workers),
        CRAWL_ALLOW_PRIVATE_ADDRESSES="true",
        CRAWL_HOST_CONCURRENCY="1",
        CRAWL_DELAY="0",
        CRAWL_CONTACT_URL="http://127.0.0.1/bot",
    )
    return env


def run(site: Site, env: dict[str, str], root: Path, limit: int, preexec) -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django_q.models import OrmQ, Schedule

    call_command("migrate", verbosity=0)
    # Only the crawl's own jobs: the periodic ones would be measured with it.
    Schedule.objects.all().delete()
    nodes = []
    for name in ("worker-1", "worker-2"):
        log = open(root / f"{name}.log", "w")  # noqa: SIM115 (closed below)
        process = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--worker"],
            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=preexec,
        )  # fmt: skip
        nodes.append((name, process, log))
    try:
        time.sleep(8)  # the nodes' workers start: not timed
        seconds = crawl(site, limit)
        from ingest.delivery.models import Delivery

        running = [Delivery.State.QUEUED, Delivery.State.PROCESSING]
        while OrmQ.objects.exists() or Delivery.objects.filter(state__in=running):
            time.sleep(0.5)
    finally:
        for _, process, log in nodes:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
            log.close()
    report(site, root, seconds, [name for name, _, _ in nodes])


def crawl(site: Site, limit: int) -> float:
    """Start a crawl of the manual as an editor does; seconds until every page it
    found is indexed (its deliveries done)."""
    from ingest.crawl.progress import crawl_progress
    from ingest.crawl.services import crawl_start
    from ingest.crawl.setup import source_for_crawl

    source, _ = source_for_crawl(
        url=site.url + "index.html", max_pages=limit or None, max_depth=50
    )
    started = time.perf_counter()
    crawl, _ = crawl_start(source=source)
    last = 0.0
    while not (progress := crawl_progress(crawl=crawl)).finished:
        if time.perf_counter() - last > 15:
            last = time.perf_counter()
            print(f"  {last - started:5.0f} s: {progress.counts()}", flush=True)
        time.sleep(0.5)
    return time.perf_counter() - started


def report(site: Site, root: Path, seconds: float, names: list[str]) -> None:
    from django.db.models import Count, Sum

    from ingest.delivery.models import Delivery
    from retrieval.models import Chunk, Embedding, EmbeddingUsage
    from sources.models import Page, PageVersion

    live = Page.objects.filter(status=Page.Status.LIVE).count()
    pages = Page.objects.count()
    print(
        f"first crawl by {len(names)} worker nodes: {pages} pages ({live} live) in "
        f"{seconds:.1f} s = {pages / seconds:.1f} pages/s; load average "
        f"{os.getloadavg()[0]:.1f}"
    )
    for name in names:
        outcomes = Counter(PROCESSED.findall((root / f"{name}.log").read_text()))
        print(f"  {name} ran {sum(outcomes.values())} deliveries: {dict(outcomes)}")
    requested = Counter(site.paths.values())
    deliveries = Delivery.objects.values("url").annotate(n=Count("pk"))
    per_page = Counter(row["n"] for row in deliveries)
    open_ = Delivery.objects.exclude(state=Delivery.State.DONE).count()
    versions = Counter(
        PageVersion.objects.values("page")
        .annotate(n=Count("pk"))
        .values_list("n", flat=True)
    )
    usage = EmbeddingUsage.objects.aggregate(inputs=Sum("inputs"))["inputs"] or 0
    print(
        f"  site: {sum(site.statuses.values())} requests {dict(site.statuses)}, "
        f"requests per path {dict(requested)}, most in flight at once "
        f"{site.most_in_flight}\n"
        f"  deliveries per page {dict(per_page)}, not done {open_}; outcomes "
        f"{dict(Counter(Delivery.objects.values_list('outcome', flat=True)))}\n"
        f"  versions per page {dict(versions)}; chunks {Chunk.objects.count():,}; "
        f"vectors stored {Embedding.objects.count():,}, inputs embedded {usage:,}"
    )


if __name__ == "__main__":
    main()
