"""django-q2 entry points of the index."""

from __future__ import annotations

from retrieval.statistics import index_statistics_refresh


def index_statistics_refresh_task() -> str:
    refresh = index_statistics_refresh()
    return "fresh" if refresh is None else f"{refresh.chunks} chunks, {refresh.floors}"
