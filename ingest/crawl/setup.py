"""Which source a crawl asked for on the command line belongs to: an existing one,
or a new direct source for the URL's site and path prefix."""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction

from ingest.fetchers.kinds import BUILT_IN, fetcher_kind
from ingest.fetchers.safety import Refused, url_check
from kbsite.canonical import canonical_url
from kbsite.patterns import pattern_problem
from sources.models import Source
from sources.scope import ScopeMap


class CrawlRequestError(ValueError):
    """The crawl cannot start; the message says why, for the person who asked."""


def url_crawlable(url: str) -> str:
    """The canonical form of a URL the crawler may fetch; raises
    ``CrawlRequestError`` for anything else (bad scheme, private address)."""
    try:
        canonical = canonical_url(url)
        url_check(canonical, allow_private=settings.CRAWL_ALLOW_PRIVATE_ADDRESSES)
    except Refused as exc:
        raise CrawlRequestError(f"refused {url}: {exc}") from None
    except ValueError as exc:
        raise CrawlRequestError(f"{url} is not a usable URL: {exc}") from None
    return canonical


def source_for_crawl(
    *,
    url: str = "",
    source_name: str = "",
    allow: Sequence[str] = (),
    deny: Sequence[str] = (),
    max_pages: int | None = None,
    max_depth: int | None = None,
) -> tuple[Source, bool]:
    """The source to crawl (and whether it was created). With only a URL: the
    source covering it, or a new direct source for its site and path prefix."""
    if not url and not source_name:
        raise CrawlRequestError("give a URL to crawl, or --source NAME")
    for pattern in [*allow, *deny]:
        if problem := pattern_problem(pattern):
            raise CrawlRequestError(problem)
    canonical = url_crawlable(url) if url else ""
    with transaction.atomic():
        source = _existing(canonical, source_name)
        created = source is None
        if source is None:
            source = _create(canonical, max_pages=max_pages, max_depth=max_depth)
        _patterns_add(source, allow=allow, deny=deny)
    if not canonical:
        for seed in source.seeds:
            url_crawlable(seed)
    return source, created


def _existing(url: str, name: str) -> Source | None:
    if name:
        source = Source.objects.filter(name=name).first()
        if source is None:
            raise CrawlRequestError(f"there is no source named {name!r}")
    else:
        scope = ScopeMap()
        source = scope.source_for(url)
        denier = scope.denied_by(url) if source is None else None
        if denier is not None:
            raise CrawlRequestError(
                f"{url} is denied by the deny patterns of source {denier}: no "
                "source takes it but one whose allow pattern names it"
            )
    if source is None:
        return None
    if not fetcher_kind(source).crawled_here:
        raise CrawlRequestError(
            f"{source} is crawled by Crawlbase; change its fetcher to crawl it here"
        )
    if url and ScopeMap().source_id_for(url) != source.pk:
        raise CrawlRequestError(f"{url} is not in the scope of source {source}")
    return source


def _create(url: str, *, max_pages: int | None, max_depth: int | None) -> Source:
    parts = urlsplit(url)
    prefix = parts.path.rsplit("/", 1)[0] + "/"
    site = f"{parts.scheme}://{parts.netloc}"
    name = f"{parts.netloc}{prefix}"
    taken = set(
        Source.objects.filter(name__startswith=name).values_list("name", flat=True)
    )
    number = 2
    unique = name
    while unique in taken:
        unique, number = f"{name} ({number})", number + 1
    source = Source(
        name=unique,
        fetcher=BUILT_IN,
        seed_urls=url,
        allow_patterns="^" + re.escape(site + prefix),
    )
    if max_pages is not None:
        source.max_pages = max_pages
    if max_depth is not None:
        source.max_depth = max_depth
    source.save()
    return source


def _patterns_add(source: Source, *, allow: Sequence[str], deny: Sequence[str]) -> None:
    changed = False
    for field, patterns in [("allow_patterns", allow), ("deny_patterns", deny)]:
        lines = Source._lines(getattr(source, field))
        new = [p for p in patterns if p not in lines]
        if new:
            setattr(source, field, "\n".join([*lines, *new]))
            changed = True
    if changed:
        source.save()
