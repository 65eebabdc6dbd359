"""The cluster's broker through a database outage: its pusher keeps asking, and
says once when the database answers again."""

from __future__ import annotations

from unittest import mock

import pytest
from django.db import OperationalError
from django_q.brokers.orm import ORM

from kbsite.queue_broker import Broker, database_back

DOWN = OperationalError("connection to server on socket failed")


@pytest.fixture(autouse=True)
def no_other_receivers():
    """Only the test's own: ingest's sweeps the database."""
    with mock.patch.object(database_back, "receivers", []):
        yield


@pytest.mark.parametrize(
    ("reads", "announced"),
    [
        (["answers", "answers"], 0),
        (["fails", "answers", "answers"], 1),
        (["fails", "fails", "fails", "answers"], 1),
        (["fails", "answers", "fails", "answers"], 2),
        (["fails", "fails"], 0),
    ],
)
def test_the_pusher_rides_out_an_outage_and_says_when_the_database_is_back(
    reads, announced
):
    heard: list[type] = []
    now: dict[str, str] = {}

    def listen(sender: type, **kwargs: object) -> None:
        heard.append(sender)

    def read(*args: object) -> list:  # the queue's table, or its connection
        if now["read"] == "fails":
            raise DOWN
        return []

    database = mock.MagicMock()
    database.__getitem__.return_value.ensure_connection.side_effect = read
    database_back.connect(listen)
    try:
        with (
            mock.patch.object(ORM, "dequeue", side_effect=read),
            mock.patch.object(ORM, "get_connection"),
            mock.patch("kbsite.queue_broker.connections", database),
            mock.patch("kbsite.queue_broker.time.sleep") as slept,
        ):
            broker = Broker.__new__(Broker)  # no connection needed: reads are faked
            answers = []
            for now["read"] in reads:
                answers.append(broker.dequeue())
    finally:
        database_back.disconnect(listen)

    # Every read returns, none raises: django-q2's pusher would exit on one.
    assert answers == [None if read == "fails" else [] for read in reads]
    assert heard == [Broker] * announced
    assert slept.call_count == reads.count("fails")


def test_a_failing_receiver_does_not_stop_the_pusher(caplog):
    def broken(sender: type, **kwargs: object) -> None:
        raise OperationalError("the database went away again")

    database_back.connect(broken)
    try:
        with (
            mock.patch.object(ORM, "dequeue", side_effect=[DOWN, [(1, "job")]]),
            mock.patch.object(ORM, "get_connection"),
            mock.patch("kbsite.queue_broker.connections"),
            mock.patch("kbsite.queue_broker.time.sleep"),
        ):
            broker = Broker.__new__(Broker)
            assert broker.dequeue() is None
            assert broker.dequeue() == [(1, "job")]
    finally:
        database_back.disconnect(broken)

    assert "recovery after the outage failed" in caplog.text
