"""Periodic django-q2 jobs, declared by each app and written after every migrate."""

from __future__ import annotations


def schedules_ensure(*, prefix: str, schedules: dict[str, tuple[str, int]]) -> None:
    """Create or repair the app's schedules (name → (function path, minutes)); its
    schedules no longer declared (names starting with ``prefix``) are removed."""
    from django_q.models import Schedule

    stale = Schedule.objects.filter(name__startswith=prefix)
    stale.exclude(name__in=schedules).delete()
    for name, (func, minutes) in schedules.items():
        Schedule.objects.update_or_create(
            name=name,
            defaults={
                "func": func,
                "schedule_type": Schedule.MINUTES,
                "minutes": minutes,
                "repeats": -1,
            },
        )
