"""django-q2 entry points of the index."""

from __future__ import annotations

from retrieval.indexing import embeddings_prune
from retrieval.statistics import index_statistics_refresh


def index_statistics_refresh_task() -> str:
    """Every ten minutes: unused vectors pruned, and the statistics refreshed if
    the index changed by a tenth."""
    pruned = embeddings_prune()
    refresh = index_statistics_refresh()
    done = "fresh" if refresh is None else f"{refresh.chunks} chunks, {refresh.floors}"
    return f"{done}; {pruned} unused vectors pruned"
