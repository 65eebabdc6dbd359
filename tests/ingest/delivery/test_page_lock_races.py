"""What another run changes between a delivery's reading (before the page lock)
and its decision (under it): a delivery found unchanged leaves alone what the
other run set; a duplicate whose original changed meanwhile is retried, and read
again it is new content.
"""

from __future__ import annotations

import threading
from unittest import mock

import pytest
from django.db import connection

from ingest.delivery import finish
from ingest.delivery.models import Delivery
from retrieval.models import Chunk
from sources.models import Page, Source
from tests.world import SITE, receive_delivery, run_queued

pytestmark = pytest.mark.django_db(transaction=True)
TASK = "ingest.tasks.delivery_process_task"
KEPT_OUT = "kept out by a re-derivation under the source's new rules"


@pytest.fixture(autouse=True)
def world(transactional_db, settings):
    settings.DELIVERY_RETRY_SECONDS = 0
    Source.objects.create(name="Example docs", seed_urls=f"{SITE}/")


def before_the_lock(change):
    """``page_lock`` as a run meets it after another session committed
    ``change()``, the first time only."""
    real = finish.page_lock
    done: list[bool] = []

    def other_run() -> None:
        try:
            change()
        finally:
            connection.close()

    def lock(page, **options):
        if not done:
            done.append(True)
            thread = threading.Thread(target=other_run)  # a session of its own
            thread.start()
            thread.join(30)
        return real(page, **options)

    return mock.patch.object(finish, "page_lock", lock)


def test_an_unchanged_delivery_keeps_what_another_run_changed_before_the_lock():
    receive_delivery()
    assert run_queued(TASK) == ["embedded"]
    page = Page.objects.get(url=f"{SITE}/install/")
    # A rule that reads the same content from the body: no same-reading shortcut,
    # the body is read, and its content is the page's (unchanged before the lock).
    Source.objects.update(boilerplate_patterns="^Nothing matches this$")
    receive_delivery()

    def kept_out() -> None:  # a re-derivation under the source's new rules
        Page.objects.filter(pk=page.pk).update(not_indexed_reason=KEPT_OUT)
        Chunk.objects.filter(page_id=page.pk).delete()

    with before_the_lock(kept_out):
        assert run_queued(TASK) == ["unchanged"]

    page.refresh_from_db()
    assert page.not_indexed_reason == KEPT_OUT, "the other run's decision was undone"
    assert not Chunk.objects.filter(page_id=page.pk).exists()


def test_a_duplicate_whose_original_changed_before_the_lock_is_read_again_as_new():
    receive_delivery()
    assert run_queued(TASK) == ["embedded"]
    original = Page.objects.get(url=f"{SITE}/install/")
    receive_delivery(url=f"{SITE}/install/copy/", rid="mirror")

    def original_changed() -> None:
        Page.objects.filter(pk=original.pk).update(content_hash="0" * 64)

    with before_the_lock(original_changed):
        assert run_queued(TASK) == ["queued"]
    mirror = Delivery.objects.get(rid="mirror")
    assert "the original page changed" in mirror.error
    assert run_queued(TASK) == ["embedded"]
    assert Page.objects.get(url=f"{SITE}/install/copy/").is_live
