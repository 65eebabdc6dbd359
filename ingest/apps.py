from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate

# name → task; each runs every 10 minutes, in one cluster at a time.
SCHEDULES = {
    "ingest: re-queue stalled deliveries": "deliveries_requeue_stalled_task",
    "ingest: refresh learned boilerplate": "sources_boilerplate_refresh_task",
    "ingest: resume crawls": "crawls_resume_task",
}


def _ensure_schedules(sender: AppConfig, **kwargs) -> None:
    """The periodic jobs ingest needs, created or repaired after every migrate."""
    from django_q.models import Schedule

    stale = Schedule.objects.filter(name__startswith="ingest: ")
    stale.exclude(name__in=SCHEDULES).delete()
    for name, func in SCHEDULES.items():
        Schedule.objects.update_or_create(
            name=name,
            defaults={
                "func": f"ingest.tasks.{func}",
                "schedule_type": Schedule.MINUTES,
                "minutes": 10,
                "repeats": -1,
            },
        )


class IngestConfig(AppConfig):
    name = "ingest"
    verbose_name = "Ingest"

    def ready(self) -> None:
        from ingest import checks, schema  # noqa: F401  (registered on import)

        post_migrate.connect(_ensure_schedules, sender=self)
