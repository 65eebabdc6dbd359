"""Which source a URL belongs to: the most specific one whose scope covers it.

A source covers a URL when no deny pattern matches it and either one of its allow
patterns matches it or, with no allow patterns, it is on a seed's host. Among the
sources covering a URL, the one with the longest seed prefix of it wins, so
``/hr/salaries`` belongs to the source seeded at ``/hr/``, never to its neighbour
seeded at ``/eng/`` on the same host. A URL no source covers belongs to none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from sources.models import Source


def _site(url: str) -> str:
    parts = urlsplit(url.strip())
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


def _prefix(seed: str) -> str:
    """The seed's site and directory: ``https://a.example/docs/index.html`` gives
    ``https://a.example/docs/``."""
    parts = urlsplit(seed.strip())
    directory = parts.path.rsplit("/", 1)[0] + "/" if parts.path else "/"
    return _site(seed) + directory


def scope_rank(
    url: str,
    *,
    seeds: Sequence[str],
    allow: Iterable[re.Pattern],
    deny: Iterable[re.Pattern],
) -> tuple[int, int] | None:
    """How specifically a scope covers ``url`` (greater is more specific), or None
    if it does not: (an allow pattern matched, length of the longest seed prefix)."""
    if any(pattern.search(url) for pattern in deny):
        return None
    allow = list(allow)
    allowed = any(pattern.search(url) for pattern in allow)
    site = _site(url)
    on_seed_host = any(_site(seed) == site for seed in seeds)
    if not (allowed or (not allow and on_seed_host)):
        return None
    normalized = site + (urlsplit(url).path or "/")
    prefixes = [len(p) for p in map(_prefix, seeds) if normalized.startswith(p)]
    return int(allowed), max(prefixes, default=0)


def source_covers(source: Source, url: str) -> bool:
    return (
        scope_rank(
            url,
            seeds=source.seeds,
            allow=source.allow_regexes,
            deny=source.deny_regexes,
        )
        is not None
    )


def source_for_url(url: str) -> Source | None:
    """The most specific source covering ``url`` (the oldest on a tie), or None."""
    best: tuple[tuple[int, int], int] | None = None
    chosen = None
    for source in Source.objects.order_by("pk"):
        rank = scope_rank(
            url,
            seeds=source.seeds,
            allow=source.allow_regexes,
            deny=source.deny_regexes,
        )
        if rank is not None and (best is None or (rank, -source.pk) > best):
            best, chosen = (rank, -source.pk), source
    return chosen


class ScopeMap:
    """Every source's scope compiled once, for code that asks about many URLs (a
    crawler sorting the links of each page it fetches)."""

    def __init__(self, sources: Iterable[Source] | None = None) -> None:
        chosen = Source.objects.order_by("pk") if sources is None else sources
        self.scopes = [
            (source.pk, source.seeds, source.allow_regexes, source.deny_regexes)
            for source in chosen
        ]

    def source_id_for(self, url: str) -> int | None:
        """The id of the most specific source covering ``url`` (the oldest on a
        tie), as ``source_for_url`` decides, or None."""
        best: tuple[tuple[int, int], int] | None = None
        chosen = None
        for pk, seeds, allow, deny in self.scopes:
            rank = scope_rank(url, seeds=seeds, allow=allow, deny=deny)
            if rank is not None and (best is None or (rank, -pk) > best):
                best, chosen = (rank, -pk), pk
        return chosen
