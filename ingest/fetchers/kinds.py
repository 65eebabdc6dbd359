"""The kinds of fetcher a source can have (``Source.fetcher``), each with what it
can do, declared once. Code asks a kind what it can do, never which kind a source
has (``tests/ingest/fetchers/test_fetcher_kinds.py`` holds the tree to that), so a
new fetcher is a choice on the model and one entry in ``FETCHERS``.

- The built-in fetcher and Nstproxy are crawled here: the crawl engine
  (``ingest.crawl``) requests each URL through the kind's client, and, whatever
  the client, keeps to robots.txt, reads the sitemaps and follows links itself.
- Crawlbase's Enterprise Crawler fetches only the URLs it is pushed
  (``ingest.pushing``) and delivers each page to the webhook; the links of the pages
  it delivers are pushed (``ingest.planning.discovery``), and its source's sitemaps
  are read by a job (``ingest.planning.sitemap_seeds``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ingest.fetchers.http import DirectFetcher, Fetcher
from ingest.fetchers.nstproxy import NstproxyFetcher
from sources.models import Source


@dataclass(frozen=True)
class FetcherKind:
    """What one kind of fetcher can do, and what it needs."""

    # How editors' sentences name it: "Queued for the built-in fetcher".
    name: str
    # The client a crawl's jobs request each URL with; None for a crawler elsewhere,
    # which is pushed URLs and delivers the pages to the webhook.
    client: type[Fetcher] | None = None
    # A page fetched again is asked for with its validators (If-None-Match,
    # If-Modified-Since): when it is unchanged, a 304 downloads nothing.
    conditional_requests: bool = False
    # Each push is a paid crawl: a check for changes does not push the pages a
    # sitemap dates before their last check.
    paid_pushes: bool = False
    # Settings it cannot work without (the source's overview says which are
    # missing), and settings it works better with, each with what setting it does.
    settings_needed: tuple[str, ...] = ()
    settings_advised: tuple[tuple[str, str], ...] = ()

    @property
    def crawled_here(self) -> bool:
        """Whether this product fetches the pages itself (with its client)."""
        return self.client is not None

    @property
    def delivers_by_webhook(self) -> bool:
        """Its pages arrive at the webhook: it needs WEBHOOK_TOKEN and the
        callback URL pasted into the crawler's settings."""
        return not self.crawled_here

    @property
    def hosted(self) -> bool:
        """Its client connects from the provider's network: the address guard
        checks only addresses written in the URL (names resolve over there)."""
        return self.client is not None and self.client.hosted

    # The crawl engine does these for every client; a crawler elsewhere does
    # what it does, and is pushed the links and sitemap URLs found here.
    @property
    def obeys_robots(self) -> bool:
        return self.crawled_here

    @property
    def reads_sitemaps(self) -> bool:
        return self.crawled_here

    @property
    def follows_links(self) -> bool:
        return self.crawled_here


FETCHERS: dict[str, FetcherKind] = {
    Source.Fetcher.DIRECT: FetcherKind(
        name="built-in fetcher",
        client=DirectFetcher,
        conditional_requests=True,
        settings_advised=(
            (
                "CRAWL_CONTACT_URL",
                "sites the crawler visits can then tell who runs it "
                "(it goes into the User-Agent)",
            ),
        ),
    ),
    # Nstproxy's API takes no validators: pages come whole, and unchanged text is
    # not embedded again.
    Source.Fetcher.NSTPROXY: FetcherKind(
        name="Nstproxy crawl API",
        client=NstproxyFetcher,
        settings_needed=("NSTPROXY_API_KEY",),
    ),
    Source.Fetcher.CRAWLBASE: FetcherKind(
        name="Crawlbase",
        paid_pushes=True,
        settings_needed=("CRAWLBASE_TOKEN", "CRAWLBASE_CRAWLER", "WEBHOOK_TOKEN"),
    ),
}

# The fetcher of a source that ``manage.py crawl URL`` makes for a site: this
# product's own.
BUILT_IN = Source.Fetcher.DIRECT


def fetcher_kind(source: Source) -> FetcherKind:
    """The kind of the source's fetcher."""
    try:
        return FETCHERS[source.fetcher]
    except KeyError:
        raise ValueError(
            f"source {source} has a fetcher this product does not know: "
            f"{source.fetcher!r} (not one of: {', '.join(FETCHERS)})"
        ) from None


def kinds_where(test: Callable[[FetcherKind], bool]) -> list[str]:
    """The kinds (``Source.fetcher`` values) that pass ``test``, for queries:
    ``Page.objects.filter(source__fetcher__in=kinds_where(...))``."""
    return [key for key, kind in FETCHERS.items() if test(kind)]
