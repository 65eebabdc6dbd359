"""The chunks one search may return: of live pages, of the sources the caller may
see, within the caller's filters.

A search runs several queries over the same chunks (keyword ranking, the vector
candidates). The condition is written once per search, as SQL over the chunk ``c``
and its page ``p``; building the same filters with the ORM in every query cost more
Python time than some of the queries themselves.

Who may see what is resolved first, to the list of sources searched: the condition
names them as ``p.source_id = ANY(…)``, which PostgreSQL's planner estimates from
the pages' statistics. It then reads a small source's vectors exactly instead of
walking the whole HNSW graph for them, and walks the graph when most of the index
is searchable (see ``retrieval.spaces.nearest_sql``). Written as subqueries over
the groups, the condition was opaque to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone

from retrieval.models import Chunk
from sources.models import Caller, Page, source_ids_visible_to


@dataclass(frozen=True)
class SearchFilters:
    source_ids: tuple[int, ...] = ()
    max_age_days: int | None = None


NO_FILTERS = SearchFilters()

# Chunk ``c`` with its page ``p``: what every query of a search reads.
CHUNKS_WITH_PAGES = (
    f"{Chunk._meta.db_table} c JOIN {Page._meta.db_table} p ON p.id = c.page_id"
)


@dataclass(frozen=True)
class Searchable:
    """The searchable chunks: a SQL condition over chunk ``c`` and its page ``p``,
    with its parameters."""

    where: str
    params: tuple

    def chunks_sql(
        self, columns: str, condition: str = "", params: tuple | list = ()
    ) -> tuple[str, list]:
        """SELECT ``columns`` of the searchable chunks (and meeting ``condition``)."""
        where = f"{self.where} AND ({condition})" if condition else self.where
        return (
            f"SELECT {columns} FROM {CHUNKS_WITH_PAGES} WHERE {where}",
            [*self.params, *params],
        )


def searchable_chunks(user: Caller, filters: SearchFilters = NO_FILTERS) -> Searchable:
    """Chunks of live pages of the sources ``user`` may see, within ``filters``."""
    where = ["p.status = %s"]
    params: list = [Page.Status.LIVE]
    sources = searched_sources(user, filters)
    if sources is not None:
        where.append("p.source_id = ANY(%s)")
        params.append(sources)
    if filters.max_age_days is not None:
        where.append("p.last_verified_at >= %s")
        params.append(timezone.now() - timedelta(days=filters.max_age_days))
    return Searchable(where=" AND ".join(where), params=tuple(params))


def searched_sources(user: Caller, filters: SearchFilters) -> list[int] | None:
    """The ids of the sources searched: those asked for that ``user`` may see, or
    all those they may see; None for every source."""
    visible = source_ids_visible_to(user)
    if not filters.source_ids:
        return visible
    asked = sorted(set(filters.source_ids))
    if visible is None:
        return asked
    allowed = set(visible)
    return [pk for pk in asked if pk in allowed]
