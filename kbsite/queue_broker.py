"""django-q2's ORM broker, kept polling through a database outage, and saying when
the database answers again or has restarted (``database_back``), so that work the
outage stranded is queued again at once rather than at the next run of a
schedule."""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any

from django.db import Error, connections
from django.dispatch import Signal
from django_q.brokers.orm import ORM
from django_q.conf import Conf

logger = logging.getLogger(__name__)

# Sent by the cluster's pusher the first time it reads the queue after failing to:
# jobs the workers ran in the outage could not be acknowledged (the queue would
# offer them again only after Q_RETRY), and runs cut off hold no claim any more.
database_back = Signal()

# How often the pusher asks again while the database is down. django-q2's own
# pusher sleeps 10 s and exits, and the cluster starts a new one, Django and all.
OUTAGE_POLL_SECONDS = 1.0


class Broker(ORM):
    """The queue as django-q2 keeps it in the product's database."""

    # Class defaults: the cluster hands its broker to the pusher pickled, and
    # django-q2's brokers pickle their queue's name alone.
    outage = False
    # The database session last seen, and when its server started.
    session: object = None
    started: datetime | None = None

    def dequeue(self) -> list[tuple[int, Any]] | None:
        try:
            if self.outage:
                # Raises while the database is still down.
                self.get_connection()
                connections[Conf.ORM].ensure_connection()
            if self._restarted() or self.outage:
                self.outage = False
                # Before taking the next job: what it queues goes to the workers
                # with the rest.
                self._announce_database_back()
            return super().dequeue()
        except Error:
            if not self.outage:
                logger.warning("the job queue cannot be read: database unavailable")
            self.outage = True
            time.sleep(OUTAGE_POLL_SECONDS)
            return None

    def _restarted(self) -> bool:
        """Whether the server restarted since this process last asked, asked once
        per new session. The embedded server is started again by the first
        process that connects, which waits for it: that reader sees no error, only
        a new session (Django's health check replaces a dead one unasked)."""
        database = connections[Conf.ORM]
        if database.connection is None or database.connection is self.session:
            return False
        self.session = database.connection
        with database.cursor() as cursor:
            cursor.execute("SELECT pg_postmaster_start_time()")
            started = cursor.fetchone()[0]
        restarted = self.started is not None and started != self.started
        self.started = started
        return restarted

    def _announce_database_back(self) -> None:
        logger.warning("the job queue can be read again: recovering stranded work")
        for receiver, result in database_back.send_robust(sender=type(self)):
            if isinstance(result, Exception):
                # The schedules do the same work a little later.
                logger.error(
                    "recovery after the outage failed in %r: %s", receiver, result
                )
