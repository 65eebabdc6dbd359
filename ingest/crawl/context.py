"""What the steps of one fetch share: the worker run's context, where the hops
ended, and the two ways a fetch ends early."""

from __future__ import annotations

from dataclasses import dataclass, field

from ingest.crawl.links import PageFacts
from ingest.crawl.models import Crawl
from ingest.crawl.robots import RobotsCache
from ingest.fetchers.http import Fetcher, Response
from sources.scope import ScopeMap


class Stop(Exception):
    """The URL is done, with this result and no delivery."""

    def __init__(self, result: str, message: str, site_status: int | None = None):
        super().__init__(message)
        self.result = result
        self.site_status = site_status


class Again(Exception):
    """Worth trying again later (a timeout, a 429, a 5xx, robots.txt unreachable)."""

    def __init__(
        self,
        message: str,
        *,
        after: float | None = None,
        site_status: int | None = None,
        crawler_status: int = 200,
    ) -> None:
        super().__init__(message)
        self.after = after
        self.site_status = site_status
        self.crawler_status = crawler_status


@dataclass
class Context:
    """What one worker run shares across the URLs it fetches."""

    crawl: Crawl
    fetcher: Fetcher
    scope: ScopeMap
    robots: RobotsCache
    rid_prefix: str
    origins_seen: set[str] = field(default_factory=set)
    known: set[str] = field(default_factory=set)  # URLs seen in the frontier


@dataclass
class Reached:
    url: str  # where the hops ended, canonical
    response: Response
    chain: list[str]  # every URL asked for, the frontier's first
    text: str = ""
    is_html: bool = False
    facts: PageFacts = field(default_factory=PageFacts)
