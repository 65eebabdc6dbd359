"""django-q2 entry points of sources: they call one service."""

from __future__ import annotations

from sources.replan import sources_schedule_replan


def sources_schedule_replan_task() -> int:
    return sources_schedule_replan()
