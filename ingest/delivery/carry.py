"""A delivery's job may carry the waiting deliveries after its own.

Each delivery has a job on the queue, and taking a job through the cluster (its
pusher reading and locking the row, handing the job to a worker through a pipe,
its monitor deleting the row after) takes about 2 ms of a two-core machine's
time (2,000 empty jobs went through at 506 a second). So a job, once its
delivery has run, may take the next waiting delivery's job itself, as a worker
of the cluster would take it (the row's lock moved on, so that it runs again
should this run die), run it, and take it off the queue: up to
``DELIVERY_CARRY`` deliveries a job (50 by default; 1: none carried), for at most
``CARRY_SECONDS`` and a tenth of ``Q_TIMEOUT``. Each delivery keeps its own run
(its claim, its transaction, its retry); a job of another task at the head of the
queue ends the carrying, and is left to the cluster.
"""

from __future__ import annotations

import logging
import time

from django.conf import settings

from ingest.delivery.job import delivery_process
from ingest.delivery.models import Delivery
from ingest.delivery.queue import delivery_job_done, delivery_job_take

logger = logging.getLogger(__name__)

# The cluster's pusher takes jobs ahead of its workers (up to workers² of them wait
# in its pipe), and a job it holds waits while the workers carry: no delivery is
# taken after this long, so a publish check or a crawl queued behind a stream of
# deliveries waits this long (and the run under way) for each delivery job ahead
# of it in the pipe, shared among the workers: about 4 s with two. At about 20 ms a
# new page with the hashing embedder, two seconds carry the 50.
CARRY_SECONDS = 2.0


def deliveries_carry(*, delivery_id: int) -> Delivery.Outcome | Delivery.State | None:
    """Run the delivery, then the waiting ones after it; the first's result (as
    ``delivery_process`` gives it)."""
    deadline = time.monotonic() + min(CARRY_SECONDS, settings.Q_TIMEOUT / 10)
    result = delivery_process(delivery_id=delivery_id)
    # The job of the delivery last carried, taken off the queue in the statement
    # that takes the next (one commit, which waits for the disk, the fewer).
    done: int | None = None
    for _ in range(settings.DELIVERY_CARRY - 1):
        if time.monotonic() >= deadline:
            break
        taken = delivery_job_take(done=done)
        done = None
        if taken is None:
            break
        job_id, carried = taken
        # An error escaping the run (the database gone while it recorded a
        # retry) ends the carrying; the job, still on the queue, runs again
        # after Q_RETRY, or the sweep queues its delivery again sooner if the
        # run had claimed it. The failed job is the first delivery's: its
        # record says which delivery the error came from.
        try:
            delivery_process(delivery_id=carried)
        except Exception as error:
            error.add_note(
                f"in the run of delivery {carried}, carried by the job of "
                f"delivery {delivery_id} (whose own run had ended)"
            )
            raise
        done = job_id
    if done is not None:
        delivery_job_done(done)
    return result
