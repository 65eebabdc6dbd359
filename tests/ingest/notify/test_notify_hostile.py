"""Receivers that hang or drip: an attempt ends by NOTIFY_TIMEOUT whatever the
receiver does, and is logged and counted toward disabling like an HTTP error;
notifications hold at most NOTIFY_MAX_WORKERS workers, in every process
together."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import connection
from django.test import override_settings
from django_q.models import OrmQ

from ingest.notify.models import Notification, NotificationAttempt, Subscription
from ingest.notify.services import SENDS_AT_ONCE
from ingest.notify.services import TASK as SEND_TASK
from ingest.tasks import notifications_send_task
from kbsite.locks import NOTIFY_SENDERS
from tests.fakes.hostile_receiver import (
    OK,
    HostileReceiver,
    drip,
    flood,
    hang,
    send,
)
from tests.ingest.notify.test_notifications import URL, NotifyWorld
from tests.world import INSTALL, run_queued

# Each attempt waits out NOTIFY_TIMEOUT on a receiver that hangs or drips.
pytestmark = pytest.mark.slow

TIMED_OUT = "no answer within {} s (NOTIFY_TIMEOUT, for the whole exchange)"
TIMED_OUT_1 = re.escape(TIMED_OUT.format(1))


@contextlib.contextmanager
def slot_taken_elsewhere(slot: int) -> Iterator[None]:
    """A sending slot held by another database session, as a sender in another
    worker process or node holds it."""
    other = connection.copy()
    try:
        with other.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_lock(%s, %s)", [NOTIFY_SENDERS.number, slot]
            )
        yield
    finally:
        other.close()


@override_settings(NOTIFY_TIMEOUT=2, NOTIFY_MAX_FAILURES=3, NOTIFY_RETRY_SECONDS=1)
class DrippingReceiverTests(NotifyWorld):
    def test_a_receiver_dripping_its_answer_is_cut_counted_and_disabled(self):
        with HostileReceiver(drip(OK, every=1)) as hook:
            subscription = self.subscribe(url=hook.url())
            self.ingest(URL, body=INSTALL)
            took = []
            with self.assertLogs("ingest.notify.services", "WARNING") as logs:
                for hour in range(4):
                    started = time.monotonic()
                    report = self.send(after=hour * 3600)
                    took.append(time.monotonic() - started)
                    assert report.failed == (1 if hour < 3 else 0)

        # The whole run, making the notification and recording it included.
        assert all(1.9 < seconds < 4.0 for seconds in took[:3]), took
        log = list(NotificationAttempt.objects.order_by("number"))
        assert [(a.number, a.ok, a.status) for a in log] == [
            (1, False, None),
            (2, False, None),
            (3, False, None),
        ]
        assert {a.error for a in log} == {TIMED_OUT.format(2)}
        assert all(1900 <= a.duration_ms < 2500 for a in log), "near the deadline"
        subscription.refresh_from_db()
        assert subscription.failures == 3 and subscription.is_disabled
        assert subscription.disabled_reason.endswith(TIMED_OUT.format(2))
        notification = Notification.objects.get()
        assert notification.state == Notification.State.WAITING, "kept, unclaimed"
        # The next try follows the backoff (1 s, doubled per attempt), not the
        # queue's redelivery of a job that ran too long.
        assert notification.next_attempt_at - log[-1].attempted_at == timedelta(
            seconds=4
        )
        failed = [line for line in logs.output if "failed: no answer within" in line]
        assert len(failed) == 3
        assert len(hook.connections) == 3, "nothing sent once disabled"


# What the receiver does; then the attempt: sent, its status, its error (a
# pattern), and the most seconds it may take (NOTIFY_TIMEOUT is 1 s). Each drip
# is a byte every 0.3 s, so that no single read ever waits a second.
STATUS_503 = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 80\r\n\r\nbusy"
HOSTILE = [
    ("never answers", [hang], False, None, TIMED_OUT_1, 1.5),
    (
        "drips its headers",
        [send(b"HTTP/1.1 200 OK\r\n"), drip(b"X-Slow: " + b"y" * 40, every=0.3)],
        False, None, TIMED_OUT_1, 1.5,
    ),
    (
        "answers 503, then drips the body",
        [send(STATUS_503), drip(b"." * 76, every=0.3)],
        False, 503, r"HTTP 503: busy\.* \(cut at NOTIFY_TIMEOUT, 1 s\)", 1.5,
    ),
    (
        "answers 200, then drips the body",
        [send(OK[:-2]), drip(b"ok", every=5)],
        True, 200, "", 0.5,
    ),
    (
        "answers 500 with a body without end",
        [send(b"HTTP/1.1 500 Oops\r\nContent-Length: 1000000000\r\n\r\n"),
         flood(1_000_000_000)],
        False, 500, "HTTP 500: x{300}", 0.5,
    ),
    (
        "closes in the middle of its headers",
        [send(b"HTTP/1.1 200 OK\r\nContent-Le")],
        False, None, "RemoteProtocolError: .+", 0.5,
    ),
    (
        "answers 503 and closes in the middle of the body",
        [send(STATUS_503)],
        False, 503, r"HTTP 503: busy \(broken off: RemoteProtocolError\)", 0.5,
    ),
    (
        "answers 200 and closes in the middle of the body",
        [send(OK[:-1])],
        True, 200, "", 0.5,
    ),
]  # fmt: skip


@override_settings(NOTIFY_TIMEOUT=1)
class HostileReceiverTests(NotifyWorld):
    def test_every_attempt_ends_by_the_deadline_and_is_judged_by_what_came(self):
        for number, (does, script, ok, status, error, most) in enumerate(HOSTILE):
            with self.subTest(does), HostileReceiver(*script) as hook:
                Subscription.objects.update(active=False)
                subscription = self.subscribe(name=does, url=hook.url())
                self.ingest(URL, body=INSTALL.replace("3.11", f"3.{number}"))
                started = time.monotonic()

                report = self.send()

                took = time.monotonic() - started
                (attempt,) = subscription.attempts.all()
                assert (attempt.ok, attempt.status) == (ok, status)
                assert re.fullmatch(error, attempt.error), attempt.error
                assert took < most, f"{does}: {took:.1f} s"
                assert (report.sent, report.failed) == (int(ok), int(not ok))
                subscription.refresh_from_db()
                assert subscription.failures == int(not ok)


class WorkerShareTests(NotifyWorld):
    def test_senders_past_the_most_workers_leave_at_once_and_send_nothing(self):
        self.subscribe()
        self.ingest(URL, body=INSTALL)

        with slot_taken_elsewhere(0):
            started = time.monotonic()
            said = notifications_send_task()
            took = time.monotonic() - started
            assert said == (
                "every sending slot is taken (NOTIFY_MAX_WORKERS=1): left to the "
                "sender at work"
            )
            assert took < 0.5
            assert self.hook.received == []
            assert not Notification.objects.exists(), "nothing made either"

            with override_settings(NOTIFY_MAX_WORKERS=2):
                assert self.send().sent == 1, "a second slot"

        self.ingest(URL, body=INSTALL.replace("3.11", "3.13"))
        assert self.send().sent == 1, "free again"

    @override_settings(Q_TIMEOUT=4, NOTIFY_TIMEOUT=1)
    def test_slow_receivers_are_tried_together_and_the_run_then_hands_over(self):
        # A run begins attempts for SEND_SECONDS, or less so that its last ones
        # end within half of Q_TIMEOUT: here 1 s, one round of attempts.
        with HostileReceiver(drip(OK, every=0.3)) as hook:
            for number in range(SENDS_AT_ONCE + 1):
                self.subscribe(name=f"Dripping {number}", url=hook.url())
            self.ingest(URL, body=INSTALL)
            started = time.monotonic()

            said = notifications_send_task()

            took = time.monotonic() - started
            assert said == (
                f"{SENDS_AT_ONCE + 1} notifications made, 0 sent, {SENDS_AT_ONCE} "
                "failed (more due)"
            )
            assert took < 2, f"{SENDS_AT_ONCE} attempts of 1 s took {took:.1f} s"
            queued = [job.func() for job in OrmQ.objects.all()]
            assert queued.count(SEND_TASK) == 1, "the rest at the back of the queue"

            assert run_queued(SEND_TASK) == ["0 notifications made, 0 sent, 1 failed"]
