"""Crawl a real documentation site served on loopback, then crawl it again unchanged.

The site is the HTML of a Debian documentation package, installed with
``apt-get install postgresql-doc-15`` (1,169 pages, the default) or
``apt-get install python3.11-doc`` (530 pages), served from /usr/share/doc by
Python's static file server (Last-Modified and If-Modified-Since, as most static
servers do). Everything is the production path: the crawl's fetch jobs and the
delivery jobs run in a real ``qcluster`` with two workers; embeddings go to a local
fake of the OpenAI API in a process of its own; embedding calls are the product's own
counts.

    .venv/bin/python -m bench.crawl [--site postgresql|python] [--limit N] [--local]

``--local`` embeds with the local model instead (a new docs owner's ``make run``),
and the first crawl then says when its first page became searchable.

Prints pages/s fetched and converted (from the start of the crawl to the last
delivery job done), the peak memory of the bench and worker processes, the share
of pages whose stored Markdown keeps every heading and code block of the page's
main content, then for the second crawl the share of requests answered 304 and the
embedding calls it made.
"""

from __future__ import annotations

import argparse
import os
import re
import threading
import time
from collections import Counter
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil

from bench.common import (
    cluster_ready,
    django_fresh,
    django_with_fake_openai,
    embedding_usage,
    start_cluster,
    stop_cluster,
)

SITES = {
    "postgresql": ("postgresql-doc-15", "/usr/share/doc/postgresql-doc-15/html"),
    "python": ("python3.11-doc", "/usr/share/doc/python3.11/html"),
}
SPACE = re.compile(r"\s+")
WORD = re.compile(r"\w+")
# A link target: "](url)" or "](url "title")", the title with escaped quotes.
TARGET = re.compile(r'\]\((?:[^()"\s]|\([^)]*\))*(?:\s+"(?:\\.|[^"\\])*")?\)')


class Site:
    """A directory on 127.0.0.1: the statuses it answered, how often each path was
    asked, and the most requests it held at once."""

    def __init__(self, root: Path) -> None:
        self.statuses: Counter[int] = Counter()
        self.paths: Counter[str] = Counter()
        self.in_flight = self.most_in_flight = 0
        lock = threading.Lock()
        site = self

        class Handler(SimpleHTTPRequestHandler):
            def handle_one_request(self) -> None:
                with lock:
                    site.in_flight += 1
                    site.most_in_flight = max(site.most_in_flight, site.in_flight)
                try:
                    super().handle_one_request()
                finally:
                    with lock:
                        site.in_flight -= 1

            def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
                site.statuses[int(getattr(code, "value", code))] += 1
                site.paths[self.path] += 1

            def log_message(self, *args: object) -> None:
                pass

        handler = partial(Handler, directory=str(root))
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"


class PeakMemory:
    """The largest resident memory seen, of this process and of the cluster's
    process tree, sampled every 0.2 s."""

    def __init__(self, cluster_pid: int) -> None:
        self.cluster = psutil.Process(cluster_pid)
        self.bench, self.workers = 0, 0
        self.stop = threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        me = psutil.Process()
        while not self.stop.wait(0.2):
            try:
                tree = [self.cluster, *self.cluster.children(recursive=True)]
                rss = sum(p.memory_info().rss for p in tree)
            except psutil.Error:
                continue
            self.workers = max(self.workers, rss)
            self.bench = max(self.bench, me.memory_info().rss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", choices=SITES, default="postgresql")
    parser.add_argument("--limit", type=int, default=0, help="most pages to crawl")
    parser.add_argument(
        "--root", help="a site's directory to serve instead (its index.html first)"
    )
    parser.add_argument(
        "--local",
        action="store_true",
        help="embed with the local model, as a new docs owner's `make run` does, "
        "instead of the fake OpenAI API",
    )
    args = parser.parse_args()
    package, root = SITES[args.site]
    root = args.root or root
    if not (Path(root) / "index.html").is_file():
        raise SystemExit(
            f"{root}/index.html is missing: install the site first, as root:\n"
            f"    apt-get update && apt-get install -y {package}"
        )
    site = Site(Path(root))
    os.environ.update(
        CRAWL_ALLOW_PRIVATE_ADDRESSES="true", CRAWL_DELAY="0", CRAWL_WORKERS="1"
    )
    if args.local:
        django_fresh(EMBEDDING_BACKEND="local")
    else:
        django_with_fake_openai()
    cluster = start_cluster(workers=2)
    memory = PeakMemory(cluster.pid)
    try:
        cluster_ready(cluster.pid)
        first = crawl_once(site, "first", args.limit)
        fidelity(Path(root), site.url)
        site.statuses.clear()
        crawl_once(site, "unchanged", args.limit)
        pages = sum(site.statuses.values()) - site.statuses[404]
        print(
            f"second crawl: {site.statuses[304]} of {pages} page requests answered "
            f"304 ({site.statuses[304] / max(pages, 1):.1%}); statuses "
            f"{dict(site.statuses)}"
        )
    finally:
        memory.stop.set()
        stop_cluster(cluster)
    mib = 1024 * 1024
    print(
        f"peak memory: bench process {memory.bench / mib:.0f} MiB, cluster (all "
        f"workers) {memory.workers / mib:.0f} MiB; first crawl {first:.1f} pages/s"
    )


def crawl_once(site: Site, name: str, limit: int) -> float:
    """One crawl, timed until every job it caused is done (delivery jobs, and the
    pages derived again once the site's boilerplate is learned)."""
    from django_q.models import OrmQ

    from ingest.crawl.progress import crawl_progress
    from ingest.crawl.services import crawl_start
    from ingest.crawl.setup import source_for_crawl

    requests, _ = embedding_usage()
    source, _ = source_for_crawl(
        url=site.url + "index.html", max_pages=limit or None, max_depth=50
    )
    if limit:
        source.max_pages = limit
    started = time.perf_counter()
    crawl, _ = crawl_start(source=source)
    fetched = 0.0
    # Only a first crawl has pages to make searchable: a later one finds them so.
    searchable: float | None = None if name == "first" else 0.0
    while not (progress := crawl_progress(crawl=crawl)).finished or (
        OrmQ.objects.exists()
    ):
        if not fetched and progress.state != "running":
            fetched = time.perf_counter() - started
        if searchable is None and _searchable(source):
            searchable = time.perf_counter() - started
        time.sleep(0.2)
    seconds = time.perf_counter() - started
    fetched = fetched or seconds
    if searchable is None and _searchable(source):
        searchable = seconds  # between the last look and the end
    pages = progress.pages["fetched"] + progress.pages["not_modified"]
    print(
        f"{name:>9} crawl: {pages} pages fetched in {fetched:.1f} s "
        f"({pages / fetched:.1f} pages/s), fetched and converted (every job done) "
        f"in {seconds:.1f} s = {pages / seconds:.1f} pages/s; load average "
        f"{os.getloadavg()[0]:.1f}\n  {progress.counts()}; indexed: "
        f"{progress.indexed()}; embedding calls {embedding_usage()[0] - requests}"
    )
    if name == "first":
        first = "no page" if searchable is None else f"{searchable:.1f} s"
        print(
            f"  from the crawl's start: a first page searchable at {first}, "
            f"every page at {seconds:.1f} s"
        )
    return pages / seconds


def _searchable(source) -> bool:
    """Whether a page of the source is searchable: live, with its chunks (which
    are written with their vectors, in one transaction)."""
    from retrieval.models import Chunk

    return Chunk.objects.filter(page__source=source, page__status="live").exists()


def fidelity(root: Path, base: str) -> None:
    """Share of live pages whose Markdown keeps every heading (as a heading) and
    every code block of the original page's main content."""
    from selectolax.lexbor import LexborHTMLParser

    from ingest.reading.extract import (
        ADMONITION_TITLES,
        CHROME,
        DEFAULT_SELECTORS,
        PERMALINK_TEXTS,
    )
    from kbsite.text import fenced, heading_id
    from sources.models import Page

    kept = headings_lost = code_lost = total = 0
    for url, markdown in Page.objects.filter(status=Page.Status.LIVE).values_list(
        "url", "markdown"
    ):
        path = root / url.removeprefix(base)
        if not path.is_file():
            continue
        tree = LexborHTMLParser(path.read_bytes().decode("utf-8", errors="replace"))
        main = next(filter(None, (tree.css_first(s) for s in DEFAULT_SELECTORS)))
        for node in main.css(CHROME):
            node.decompose()
        # An aside's "Note" or "Warning" is a bold line of its box, not a section.
        for title in main.css(ADMONITION_TITLES):
            title.decompose()
        for anchor in main.css("a"):
            if anchor.text(strip=True) in PERMALINK_TEXTS:
                anchor.decompose()
        # Headings inside list items are indented; lines of code are not headings;
        # a heading's {#id} is for links.
        heading_lines = {
            _plain(heading_id(line.lstrip().lstrip("#"))[0])
            for line, code in fenced(markdown.splitlines())
            if line.lstrip().startswith("#") and not code
        }
        flat = _flat(markdown)
        lost_h = [
            h for h in main.css("h1, h2, h3, h4, h5, h6")
            if _words(h.text()) and _words(h.text()) not in heading_lines
        ]  # fmt: skip
        lost_c = [c for c in main.css("pre") if not _code_kept(c.text(), flat)]
        total += 1
        kept += not lost_h and not lost_c
        headings_lost += bool(lost_h)
        code_lost += bool(lost_c)
    print(
        f"fidelity: {kept} of {total} pages ({kept / max(total, 1):.1%}) keep every "
        f"heading and code block; {headings_lost} lose a heading, {code_lost} a "
        "code block"
    )


def _flat(text: str) -> str:
    return SPACE.sub(" ", text.replace("\\", "")).strip()


def _code_kept(code: str, markdown: str) -> bool:
    """Every line of the code block is in the Markdown, line by line: Sphinx puts
    indented code in blockquotes, whose Markdown starts each line with "> "."""
    return all(_flat(line) in markdown for line in code.splitlines())


def _plain(markdown: str) -> str:
    """A Markdown heading's words, without link targets (whose titles may hold
    quotes and brackets) or markup, to compare with the HTML heading's words."""
    return _words(TARGET.sub("]", markdown))


def _words(text: str) -> str:
    return " ".join(WORD.findall(text.lower()))


if __name__ == "__main__":
    main()
