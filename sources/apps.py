from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate

from kbsite.schedules import schedules_ensure


def _ensure_schedules(sender: AppConfig, **kwargs: Any) -> None:
    schedules_ensure(
        prefix="sources: ",
        schedules={
            # Each adaptive source is planned once its plan is a day old.
            "sources: plan the day's checks": (
                "sources.tasks.sources_schedule_replan_task",
                60,
            ),
        },
    )


class SourcesConfig(AppConfig):
    name = "sources"
    verbose_name = "Sources and pages"

    def ready(self) -> None:
        from sources import checks  # noqa: F401  (registered on import)

        post_migrate.connect(_ensure_schedules, sender=self)
