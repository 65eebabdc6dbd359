from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.db.models.signals import post_migrate

from kbsite.schedules import schedules_ensure


def _ensure_schedules(sender: AppConfig, **kwargs: Any) -> None:
    """The periodic jobs ingest needs; each runs in one cluster at a time."""
    schedules_ensure(
        prefix="ingest: ",
        schedules={
            "ingest: re-queue stalled deliveries": (
                "ingest.tasks.deliveries_requeue_stalled_task",
                10,
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
            "ingest: resume crawls": ("ingest.tasks.crawls_resume_task", 10),
        },
    )


class IngestConfig(AppConfig):
    name = "ingest"
    verbose_name = "Ingest"

    def ready(self) -> None:
        from ingest import checks, schema  # noqa: F401  (registered on import)

        post_migrate.connect(_ensure_schedules, sender=self)
