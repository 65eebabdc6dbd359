from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate

SWEEP = "ingest: fail stalled deliveries"


def _ensure_schedules(sender: AppConfig, **kwargs) -> None:
    """The periodic jobs ingest needs, created or repaired after every migrate."""
    from django_q.models import Schedule

    Schedule.objects.update_or_create(
        name=SWEEP,
        defaults={
            "func": "ingest.tasks.deliveries_fail_stalled_task",
            "schedule_type": Schedule.MINUTES,
            "minutes": 10,
            "repeats": -1,
        },
    )


class IngestConfig(AppConfig):
    name = "ingest"
    verbose_name = "Ingest"

    def ready(self) -> None:
        from ingest import checks  # noqa: F401  (registers the system checks)

        post_migrate.connect(_ensure_schedules, sender=self)
