"""django-q2 entry points: they take ids, never payloads, and call one service."""

from __future__ import annotations

from ingest.services import deliveries_fail_stalled, delivery_process


def delivery_process_task(delivery_id: int) -> str | None:
    return delivery_process(delivery_id=delivery_id)


def deliveries_fail_stalled_task() -> int:
    return deliveries_fail_stalled()
