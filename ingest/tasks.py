"""django-q2 entry points: they take ids, never payloads, and call one service."""

from __future__ import annotations

from ingest.services import (
    deliveries_fail_stalled,
    delivery_process,
    source_pages_rederive,
    sources_boilerplate_refresh,
)
from sources.models import Source


def delivery_process_task(delivery_id: int) -> str | None:
    return delivery_process(delivery_id=delivery_id)


def deliveries_fail_stalled_task() -> int:
    return deliveries_fail_stalled()


def source_pages_rederive_task(source_id: int, shapes: list[int]) -> int:
    source = Source.objects.filter(pk=source_id).first()
    return source_pages_rederive(source=source, shapes=shapes) if source else 0


def sources_boilerplate_refresh_task() -> int:
    return sources_boilerplate_refresh()
