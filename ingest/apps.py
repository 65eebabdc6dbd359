from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.db.models.signals import post_migrate, post_save

from kbsite.schedules import schedules_ensure


def _ensure_schedules(sender: AppConfig, **kwargs: Any) -> None:
    """The periodic jobs ingest needs; each runs in one cluster at a time."""
    schedules_ensure(
        prefix="ingest: ",
        schedules={
            # Every minute: how long a delivery whose job was lost waits for it.
            "ingest: re-queue stalled deliveries": (
                "ingest.tasks.deliveries_requeue_stalled_task",
                1,
            ),
            "ingest: drop kept bodies of out-of-scope deliveries": (
                "ingest.tasks.deliveries_bodies_expire_task",
                60,
            ),
            "ingest: refresh learned boilerplate": (
                "ingest.tasks.sources_boilerplate_refresh_task",
                10,
            ),
            "ingest: recrawl due pages": (
                "ingest.tasks.recrawl_due_task",
                settings.RECRAWL_SCHEDULE_MINUTES,
            ),
            "ingest: resume crawls and checks": (
                "ingest.tasks.running_resume_task",
                10,
            ),
            # A backstop: pushes are also sent as soon as they are queued.
            "ingest: send queued pushes": ("ingest.tasks.pushes_send_task", 1),
            # Bursts of changes settle for NOTIFY_QUIET_SECONDS before they go out.
            "ingest: send notifications": ("ingest.tasks.notifications_send_task", 1),
            "ingest: prune the notification log": (
                "ingest.tasks.notifications_prune_task",
                60,
            ),
        },
    )


# What decides which source a URL belongs to (sources.scope).
SCOPE_FIELDS = frozenset({"seed_urls", "allow_patterns", "deny_patterns"})


def _source_saved(
    sender: type, created: bool, update_fields: frozenset[str] | None, **kwargs: Any
) -> None:
    """A new source, or new seeds or patterns, may give pages to another source or
    to none: every page is checked again once the change commits, whichever screen,
    command or job made it."""
    if created or update_fields is None or update_fields & SCOPE_FIELDS:
        from ingest.delivery.rescope import pages_rescope_soon

        pages_rescope_soon()


def _change_recorded(
    sender: type, instance: Any, created: bool, raw: bool = False, **kwargs: Any
) -> None:
    """A change just recorded goes to the subscriptions that want it, in the
    transaction that records it (``ingest.notify``), whichever code recorded it."""
    if created and not raw:
        from ingest.notify.services import change_route

        change_route(change=instance)


def _worker_started(sender: Any, **kwargs: Any) -> None:
    # Imported when a worker starts, not with the app in every process.
    from ingest.resume import worker_started

    worker_started(sender, **kwargs)


def _database_back(sender: Any, **kwargs: Any) -> None:
    from ingest.resume import database_back

    database_back(sender, **kwargs)


class IngestConfig(AppConfig):
    name = "ingest"
    verbose_name = "Ingest"

    def ready(self) -> None:
        from django_q.signals import post_spawn  # imports models: not before now

        from ingest import checks  # noqa: F401  (registered on import)
        from ingest.delivery import schema  # noqa: F401  (registered on import)
        from ingest.delivery.job import content_indexed
        from ingest.planning import discovery
        from kbsite.queue_broker import database_back

        post_migrate.connect(_ensure_schedules, sender=self)
        post_save.connect(_source_saved, sender="sources.Source")
        post_save.connect(_change_recorded, sender="sources.PageVersion")
        # The links of new content go to a crawler that only fetches what it is given.
        content_indexed.connect(
            discovery.content_indexed, dispatch_uid="ingest.discovery"
        )
        # Each worker process django-q2 starts resumes the running crawls at once.
        post_spawn.connect(_worker_started, dispatch_uid="ingest.worker_started")
        # The cluster queues again what a database outage stranded, once it is back.
        database_back.connect(_database_back, dispatch_uid="ingest.database_back")
