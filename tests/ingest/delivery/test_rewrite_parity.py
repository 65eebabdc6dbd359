"""What the delivery job's rewrite (read before the lock, decide under it, one
transaction writes) must keep from the job it replaced: a delivery found unchanged
before the lock verifies the page under it and leaves alone what another run
changed on the page meanwhile.

Runs on both layouts of the code (before and after the split into packages): the
page lock is patched where each one takes it.
"""

from __future__ import annotations

import importlib
import threading
from unittest import mock

import pytest
from django.db import connection

from retrieval.models import Chunk
from sources.models import Page, Source
from tests.world import SITE, receive_delivery, run_queued

pytestmark = pytest.mark.django_db(transaction=True)
TASK = "ingest.tasks.delivery_process_task"
KEPT_OUT = "kept out by a re-derivation under the source's new rules"

try:
    finish = importlib.import_module("ingest.delivery.finish")
except ImportError:  # the code before the split: ingest/finish.py
    finish = importlib.import_module("ingest.finish")


@pytest.fixture(autouse=True)
def world(transactional_db, settings):
    settings.DELIVERY_RETRY_SECONDS = 0
    Source.objects.create(name="Example docs", seed_urls=f"{SITE}/")


def kept_out_by_another_run_before_the_lock(page_pk: int):
    """``page_lock`` as a run meets it after another session (a re-derivation)
    committed the page kept out of answers, its chunks dropped, with no newer
    crawl."""
    real = finish.page_lock
    done: list[bool] = []

    def other_run() -> None:
        try:
            Page.objects.filter(pk=page_pk).update(not_indexed_reason=KEPT_OUT)
            Chunk.objects.filter(page_id=page_pk).delete()
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

    with kept_out_by_another_run_before_the_lock(page.pk):
        assert run_queued(TASK) == ["unchanged"]

    page.refresh_from_db()
    assert page.not_indexed_reason == KEPT_OUT, "the other run's decision was undone"
    assert not Chunk.objects.filter(page_id=page.pk).exists()
