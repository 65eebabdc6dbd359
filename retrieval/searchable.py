"""The chunks one search may return: of live pages, of the sources the caller may
search (``Source.objects.searchable_by``: an anonymous reader the public sources
only), within the caller's filters.

A search runs several queries over the same chunks (keyword ranking, the vector
candidates). What may be searched is decided once per search, as values, and
written into each statement by ``retrieval.sql``; building the same filters with
the ORM in every query cost more Python time than some of the queries themselves.

Who may see what is resolved first, to the list of sources searched: the condition
names them as ``p.source_id = ANY(…)``, which PostgreSQL's planner estimates from
the pages' statistics. It then reads a small source's vectors exactly instead of
walking the whole HNSW graph for them, and walks the graph when most of the index
is searchable (see ``retrieval.sql.nearest_statement``). Written as subqueries over
the groups, the condition was opaque to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from sources.models import Caller, source_ids_searchable_by


@dataclass(frozen=True)
class SearchFilters:
    source_ids: tuple[int, ...] = ()
    max_age_days: int | None = None


NO_FILTERS = SearchFilters()


@dataclass(frozen=True)
class Searchable:
    """Which chunks a search may return, as values: those of live pages, of these
    sources (None: every source), verified since then (None: whenever). The
    statements that search them are composed in ``retrieval.sql``."""

    source_ids: tuple[int, ...] | None = None
    verified_since: datetime | None = None


def searchable_chunks(user: Caller, filters: SearchFilters = NO_FILTERS) -> Searchable:
    """Chunks of live pages of the sources ``user`` may search, within ``filters``."""
    sources = searched_sources(user, filters)
    since = None
    if filters.max_age_days is not None:
        since = timezone.now() - timedelta(days=filters.max_age_days)
    return Searchable(
        source_ids=None if sources is None else tuple(sources),
        verified_since=since,
    )


def searched_sources(user: Caller, filters: SearchFilters) -> list[int] | None:
    """The ids of the sources searched: those asked for that ``user`` may search,
    or all those they may search; None for every source."""
    visible = source_ids_searchable_by(user)
    if not filters.source_ids:
        return visible
    asked = sorted(set(filters.source_ids))
    if visible is None:
        return asked
    allowed = set(visible)
    return [pk for pk in asked if pk in allowed]
