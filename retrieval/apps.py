from __future__ import annotations

import logging

from django.apps import AppConfig
from django.db.backends.signals import connection_created
from django.db.models.signals import post_migrate

from kbsite.schedules import schedules_ensure
from kbsite.schema import schema_current

logger = logging.getLogger(__name__)

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


def _ensure_active_index(sender: AppConfig, using: str = "default", **kwargs) -> None:
    """The configured space is registered (serving, if it is the first) with its
    index, and the serving space keeps its index; texts and chunks written
    before codes were get theirs; the word counts and the floor are refreshed
    when the index changed, and periodic jobs keep them so and embed readers'
    questions."""
    # Not after migrating back to an older migration of this app: the models are
    # ahead of the tables then.
    if not schema_current(using, app="retrieval"):
        return
    from retrieval.indexing import codes_fill
    from retrieval.spaces import (
        configured_space_register,
        embedding_index_ensure,
        space_serving,
        unmarked_serving_repair,
    )
    from retrieval.statistics import index_statistics_refresh

    configured_space_register()
    unmarked_serving_repair()
    serving = space_serving()
    if serving is not None:
        embedding_index_ensure(space=serving.name, dimensions=serving.dimensions)
    codes_fill()
    schedules_ensure(prefix="retrieval: ", schedules=SCHEDULES)
    index_statistics_refresh()


def _worker_spawned(sender: object, **kwargs: object) -> None:
    """A job worker computes beside the cluster's other workers: the local model
    takes its share of the cores (EMBEDDING_THREADS), not a thread for each.

    The embedder is built before the first job, not by it: the local model's
    libraries take seconds to import, which the first page of a first crawl
    waited for while the cluster sat idle. A worker that cannot build it starts
    all the same; the first job that embeds fails and retries with the reason."""
    from django.conf import settings

    from retrieval.backends import threads_limit
    from retrieval.embeddings import get_embedder

    threads_limit(settings.EMBEDDING_THREADS)
    try:
        get_embedder()
    except Exception:
        logger.exception("could not build the embedder as the worker started")


class RetrievalConfig(AppConfig):
    name = "retrieval"
    verbose_name = "Search index"

    def ready(self) -> None:
        from django_q.signals import post_spawn  # imports models: not before now

        from retrieval.search import search_breadth_set

        post_migrate.connect(_ensure_active_index, sender=self)
        connection_created.connect(search_breadth_set)
        # Each worker process django-q2 starts.
        post_spawn.connect(_worker_spawned, dispatch_uid="retrieval.worker_spawned")
