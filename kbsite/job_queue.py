"""django-q2's cluster configuration: an ORM broker on the product's own database,
with attempts and kept results chosen for deliveries that record their own outcome."""

from __future__ import annotations

from typing import Any


def q_cluster(
    *, workers: int, timeout: int, retry: int, max_attempts: int
) -> dict[str, Any]:
    """The Q_CLUSTER setting; ``retry``: seconds before a job not acknowledged (its
    worker died) goes back on the queue."""
    return {
        "name": "kb",
        "orm": "default",
        # The ORM broker, riding out a database outage (kbsite.queue_broker).
        "broker_class": "kbsite.queue_broker.Broker",
        "workers": workers,
        "timeout": timeout,
        "retry": retry,
        "max_attempts": max_attempts,
        "catch_up": False,
        # Successful jobs are not kept (each delivery records its own outcome);
        # keeping and trimming them cost two thirds of an unchanged recrawl's time.
        # Failures are.
        "save_limit": -1,
        "ack_failures": True,
        "poll": 0.5,
    }
