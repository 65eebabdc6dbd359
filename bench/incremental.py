"""What a recrawl costs in embedding tokens: full rebuild, page gating, this product.

Every page of the PostgreSQL 15 manual (1,169 pages) gets a "Last updated on <date>"
line, and is ingested. Then a recrawl in which, chosen with a fixed seed, 4% of the
pages have one paragraph edited, 1% answer 404, 1% only change the footer date, and
the rest are identical. Reported, from the same run:

(a) full rebuild: every chunk of the recrawled index embedded again;
(b) page-level gating: every chunk of each page whose delivered body changed
    (what re-embedding whole changed pages costs, footer-only pages included);
(c) this product: the tokens it sent to the (fake) embedding API, by its own counts.

Also the chunking throughput: HTML to Markdown, normalize, chunk, with no database.

    .venv/bin/python -m bench.incremental [--limit N] [--seed 7]
"""

from __future__ import annotations

import argparse
import random
import re
import time

from bench.common import (
    deliver_all,
    django_with_fake_openai,
    start_cluster,
    stop_cluster,
)
from bench.corpus import BASE_URL, pages

FOOTER = '<p class="stamp">Last updated on {date}.</p></body>'
PARAGRAPH_END = re.compile(r"</p>")


def with_footer(html: str, date: str) -> str:
    return html.replace("</body>", FOOTER.format(date=date), 1)


def edit_one_paragraph(html: str, rng: random.Random) -> str:
    ends = [m.start() for m in PARAGRAPH_END.finditer(html)]
    at = rng.choice(ends[:-1] or ends)  # not the footer stamp
    return f"{html[:at]} This sentence was added by the recrawl.{html[at:]}"


def recrawl(first: list, rng: random.Random):
    """The second crawl: 4% edited, 1% gone, 1% footer date only, the rest identical."""
    order = list(range(len(first)))
    rng.shuffle(order)
    cut = [round(len(first) * share) for share in (0.04, 0.01, 0.01)]
    edited = set(order[: cut[0]])
    gone = set(order[cut[0] : cut[0] + cut[1]])
    footer = set(order[cut[0] + cut[1] : sum(cut)])
    pages = []
    for index, (url, html, _) in enumerate(first):
        if index in edited:
            html = edit_one_paragraph(html, rng)
        elif index in footer:
            html = html.replace("2026-11-01", "2026-11-29")
        pages.append((url, html, 404 if index in gone else 200))
    second = deliver_all("recrawl", pages)
    print(second)
    second.groups = (edited, gone, footer)
    return second


def chunking_throughput(corpus: list[tuple[str, str]]) -> str:
    from ingest.reading.extract import html_to_page
    from ingest.reading.normalize import normalize
    from retrieval.chunking import chunk_markdown

    started = time.perf_counter()
    chunks = 0
    for _, html in corpus:
        title, markdown = html_to_page(html)
        chunks += len(chunk_markdown(normalize(markdown), title=title))
    elapsed = time.perf_counter() - started
    return (
        f"chunking: {len(corpus)} pages in {elapsed:.1f} s = "
        f"{len(corpus) / elapsed:.0f} pages/s (extract + normalize + chunk), "
        f"{chunks} chunks"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=0, help="only the first N pages")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    corpus = pages()[: args.limit or None]
    print(chunking_throughput(corpus))
    django_with_fake_openai()
    from django.db.models import Sum

    from ingest.delivery.models import Delivery
    from retrieval.models import Chunk
    from sources.models import Page, Source

    Source.objects.create(name="PostgreSQL 15 manual", seed_urls=BASE_URL)
    first = [(url, with_footer(html, "2026-11-01"), 200) for url, html in corpus]
    cluster = start_cluster()
    try:
        print(deliver_all("first crawl", first))
        second = recrawl(first, rng)
    finally:
        stop_cluster(cluster)

    edited, gone, footer = second.groups
    n = len(first)

    def tokens_of(urls: list[str]) -> int:
        live = Chunk.objects.filter(page__url__in=urls, page__status=Page.Status.LIVE)
        return live.aggregate(total=Sum("token_count"))["total"] or 0

    live = Chunk.objects.filter(page__status=Page.Status.LIVE)
    full = live.aggregate(total=Sum("token_count"))["total"]
    changed_urls = [first[i][0] for i in edited | footer]
    gated = tokens_of(changed_urls)
    footer_ids = [second.delivery_ids[first[i][0]] for i in footer]
    footer_tokens = Delivery.objects.filter(pk__in=footer_ids).aggregate(
        total=Sum("embedding_tokens")
    )["total"]
    print(
        f"pages: {len(edited)} edited, {len(gone)} gone, "
        f"{len(footer)} footer-date only, "
        f"{n - len(edited) - len(gone) - len(footer)} identical"
    )
    print(f"(a) full rebuild:      {full:>10,} tokens")
    print(f"(b) page-level gating: {gated:>10,} tokens")
    print(
        f"(c) this product:      {second.tokens:>10,} tokens "
        f"= {_share(second.tokens, gated, 3)} of (b), "
        f"{_share(second.tokens, full, 4)} of (a)"
    )
    print(f"footer-date-only pages: {footer_tokens or 0} tokens embedded")


def _share(part: int, whole: int, places: int) -> str:
    """``part`` of ``whole``; a dash for none (a site too small to edit a page)."""
    return f"{part / whole:.{places}f}" if whole else "—"


if __name__ == "__main__":
    main()
