"""Database work beside the caller's: its own connection, or the caller's inside a
transaction."""

from __future__ import annotations

import time

import pytest
from django.db import connection

from kbsite.parallel import after, beside, connections_close, settle
from sources.models import Source


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def backend_alive(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
        return cursor.fetchone()[0] == 1


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_the_work_has_its_own_connection_until_closed():
    Source.objects.create(name="Committed", seed_urls="https://example.com/")

    pid = beside(backend_pid)()
    seen = beside(lambda: list(Source.objects.values_list("name", flat=True)))()

    assert pid != backend_pid()
    assert seen == ["Committed"]
    assert backend_alive(pid), "kept for the next piece of work"
    connections_close()
    assert backend_gone(pid)


def backend_gone(pid: int, seconds: float = 10) -> bool:
    """Whether the server process of ``pid`` ends within ``seconds``: it ends on
    its own time once its client has closed the connection."""
    deadline = time.monotonic() + seconds
    while backend_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.django_db
def test_inside_a_transaction_the_work_sees_its_writes():
    Source.objects.create(name="Uncommitted", seed_urls="https://example.com/")

    pid = beside(backend_pid)()
    seen = beside(lambda: list(Source.objects.values_list("name", flat=True)))()

    assert pid == backend_pid()
    assert seen == ["Uncommitted"]


@pytest.mark.django_db(transaction=True)
def test_an_error_in_the_work_reaches_the_caller():
    def fails():
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 / 0")

    waited = beside(fails)
    with pytest.raises(Exception, match="division by zero"):
        waited()
    assert beside(backend_pid)() != backend_pid(), "the pool thread serves on"


@pytest.mark.django_db(transaction=True)
def test_work_after_is_not_waited_for_and_its_error_is_logged(caplog):
    def create(name: str) -> None:
        Source.objects.create(name=name, seed_urls="https://example.com/")

    def fails() -> None:
        raise RuntimeError("the log table is gone")

    after(create, "Later")
    after(fails)
    settle()

    assert Source.objects.filter(name="Later").exists()
    assert any(
        "the log table is gone" in str(r.exc_info[1])
        for r in caplog.records
        if r.exc_info
    )


@pytest.mark.django_db
def test_inside_a_transaction_work_after_runs_at_once_on_this_connection():
    pids = []
    after(lambda: pids.append(backend_pid()))

    assert pids == [backend_pid()]
