"""django-q2 entry points of sources: they call one service."""

from __future__ import annotations

from django_q.tasks import async_task

from sources.pushing import PushingUnavailable, pushes_send
from sources.replan import sources_schedule_replan

# One run sends for at most this long, then hands over to a fresh job, so that a
# long queue never runs into the job timeout (Q_TIMEOUT).
SEND_SECONDS = 120


def pushes_send_task() -> str:
    try:
        report = pushes_send(seconds=SEND_SECONDS)
    except PushingUnavailable as exc:
        return str(exc)
    if report is None:
        return "another sender is at work"
    if report.waiting:
        async_task("sources.tasks.pushes_send_task", task_name="send queued pushes")
    return str(report)


def sources_schedule_replan_task() -> int:
    return sources_schedule_replan()
