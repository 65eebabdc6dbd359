from __future__ import annotations

from django.apps import AppConfig
from django.db.backends.signals import connection_created
from django.db.models.signals import post_migrate

SCHEDULE = "retrieval: refresh index statistics"


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
    are refreshed when the index changed, and a periodic job keeps them so."""
    from django_q.models import Schedule

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
    Schedule.objects.update_or_create(
        name=SCHEDULE,
        defaults={
            "func": "retrieval.tasks.index_statistics_refresh_task",
            "schedule_type": Schedule.MINUTES,
            "minutes": 10,
            "repeats": -1,
        },
    )
    index_statistics_refresh()


class RetrievalConfig(AppConfig):
    name = "retrieval"
    verbose_name = "Search index"

    def ready(self) -> None:
        from retrieval.search import search_breadth_set

        post_migrate.connect(_ensure_active_index, sender=self)
        connection_created.connect(search_breadth_set)
