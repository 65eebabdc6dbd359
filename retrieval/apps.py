from __future__ import annotations

from django.apps import AppConfig
from django.db.backends.signals import connection_created
from django.db.models.signals import post_migrate

from kbsite.schedules import schedules_ensure

SCHEDULES = {
    "retrieval: refresh index statistics": (
        "retrieval.tasks.index_statistics_refresh_task",
        10,
    ),
    # Questions the docs owner's page groups, embedded a few minutes after they
    # were asked (the page embeds what this has not reached yet).
    "retrieval: embed readers' questions": (
        "retrieval.tasks.question_vectors_fill_task",
        10,
    ),
    # Answers whose quoted text changed, asked again (within their hourly budget).
    "retrieval: recheck stale answers": ("retrieval.tasks.answers_recheck_task", 10),
    # Rows past QUERY_LOG_DAYS, a batch at a time (retrieval.retention).
    "retrieval: prune the query log": ("retrieval.tasks.query_log_prune_task", 60),
}


def _fully_migrated(using: str) -> bool:
    """Whether every migration of this app is applied (not so after migrating
    back to an older one: then the models are ahead of the tables)."""
    from django.db import connections
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connections[using])
    return not executor.migration_plan(executor.loader.graph.leaf_nodes("retrieval"))


def _ensure_active_index(sender: AppConfig, using: str = "default", **kwargs) -> None:
    """The configured space is registered (serving, if it is the first) with its
    index, and the serving space keeps its index; the word counts and the floor
    are refreshed when the index changed, and periodic jobs keep them so and
    embed readers' questions."""
    if not _fully_migrated(using):
        return
    from retrieval.spaces import (
        configured_space_register,
        embedding_index_ensure,
        space_serving,
    )
    from retrieval.statistics import index_statistics_refresh

    configured_space_register()
    serving = space_serving()
    if serving is not None:
        embedding_index_ensure(space=serving.name, dimensions=serving.dimensions)
    schedules_ensure(prefix="retrieval: ", schedules=SCHEDULES)
    index_statistics_refresh()


class RetrievalConfig(AppConfig):
    name = "retrieval"
    verbose_name = "Search index"

    def ready(self) -> None:
        from retrieval.search import search_breadth_set

        post_migrate.connect(_ensure_active_index, sender=self)
        connection_created.connect(search_breadth_set)
