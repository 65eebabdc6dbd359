"""The ingest job's decisions, one delivery at a time."""

from __future__ import annotations

import gzip
from datetime import timedelta
from unittest import mock

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q.models import OrmQ, Schedule

from ingest.delivery.claim import delivery_held
from ingest.delivery.job import delivery_process
from ingest.delivery.models import Delivery
from ingest.delivery.queue import deliveries_requeue_stalled, delivery_requeue
from kbsite.text import count_tokens
from retrieval.backends import MAX_INPUT_TOKENS
from retrieval.models import Chunk, Embedding
from retrieval.packing import MAX_TOKENS
from retrieval.search import SearchMode, chunks_search
from sources.models import SYSTEM, Page, PageVersion, Source
from tests.world import (
    INSTALL,
    INSTALL_EDITED,
    SITE,
    IngestWorld,
    receive_delivery,
    run_queued,
)

URL = f"{SITE}/install/"


class FirstCrawlTests(IngestWorld):
    def test_a_new_page_is_embedded_and_goes_live(self):
        delivery = self.ingest()

        page = self.page()
        assert delivery.outcome == Delivery.Outcome.EMBEDDED
        assert delivery.state == Delivery.State.DONE
        assert delivery.body is None, "the raw body is dropped once processed"
        assert page.status == Page.Status.LIVE
        assert page.title == "Install"
        assert "You need Python 3.11" in page.markdown
        assert "Home · Guide" not in page.markdown, "navigation is not content"
        assert page.last_verified_at == page.last_changed_at == delivery.received_at
        assert page.next_crawl_at == delivery.received_at + page.source.recrawl_every
        assert page.chunks.count() >= 2
        hashes = set(page.chunks.values_list("embed_hash", flat=True))
        assert set(Embedding.objects.values_list("text_hash", flat=True)) == hashes
        assert page.versions.get().kind == PageVersion.Kind.NEW

    def test_a_markdown_delivery_is_taken_as_it_comes(self):
        self.ingest(body="# Guide\n\nRead this.\r\n", content_type="text/markdown")

        assert self.page().markdown == "# Guide\n\nRead this.\n"
        assert self.page().title == "Guide"

    def test_a_url_no_source_covers_is_out_of_scope_and_keeps_its_body(self):
        delivery = self.ingest("https://elsewhere.example.org/")

        assert delivery.outcome == Delivery.Outcome.OUT_OF_SCOPE
        assert delivery.error == "no source covers this host"
        assert delivery.body is not None
        assert not Page.objects.exists()

    def test_a_finished_delivery_is_not_processed_again(self):
        delivery = self.ingest()

        assert delivery_process(delivery_id=delivery.pk) is None
        assert PageVersion.objects.count() == 1


class RecrawlTests(IngestWorld):
    def setUp(self):
        self.first = self.ingest()

    def test_identical_content_only_bumps_last_verified_at(self):
        before = self.page()
        embeddings = Embedding.objects.count()

        second = self.ingest()

        page = self.page()
        assert second.outcome == Delivery.Outcome.UNCHANGED
        assert page.last_verified_at == second.received_at > before.last_verified_at
        assert page.last_changed_at == before.last_changed_at
        assert Embedding.objects.count() == embeddings
        assert PageVersion.objects.count() == 1

    def test_an_unchanged_check_neither_reads_nor_writes_the_stored_markdown(self):
        delivery = self.receive()
        markdown = self.page().markdown

        with CaptureQueriesContext(connection) as queries:
            delivery_process(delivery_id=delivery.pk)

        page_sql = [q["sql"] for q in queries if '"sources_page"' in q["sql"]]
        assert page_sql and not any('"markdown"' in sql for sql in page_sql)
        assert not any('"raw_body"' in sql for sql in page_sql), "the same body"
        assert self.page().markdown == markdown
        stored, delivered = bytes(self.page().raw_body), bytes(delivery.body)
        assert gzip.decompress(stored) == gzip.decompress(delivered)

    def test_changed_content_swaps_chunks_and_records_a_version(self):
        old_chunks = set(self.page().chunks.values_list("embed_hash", flat=True))

        second = self.ingest(body=INSTALL_EDITED)

        page = self.page()
        new_chunks = set(page.chunks.values_list("embed_hash", flat=True))
        assert second.outcome == Delivery.Outcome.EMBEDDED
        assert "Python 3.12" in page.markdown
        assert page.last_changed_at == second.received_at
        assert new_chunks != old_chunks
        assert len(new_chunks & old_chunks) >= 1, "the untouched section kept its chunk"
        steps = page.versions.order_by("recorded_at")
        kinds = list(steps.values_list("kind", flat=True))
        assert kinds == [PageVersion.Kind.NEW, PageVersion.Kind.CHANGED]
        change = page.versions.get(kind=PageVersion.Kind.CHANGED)
        assert change.sections and change.lines_added and change.words_added
        assert change.chunks_embedded == len(new_chunks - old_chunks)
        assert change.source_id == page.source_id

    def test_404_tombstones_and_a_later_200_brings_the_page_back(self):
        gone = self.ingest(original_status=404, body="Not found")

        page = self.page()
        assert gone.outcome == Delivery.Outcome.DELETED
        assert page.status == Page.Status.GONE
        assert page.deleted_at == gone.received_at
        assert page.content_hash == ""
        assert not Chunk.objects.filter(page=page).exists()
        assert not Chunk.objects.live().exists()

        back = self.ingest()

        page = self.page()
        assert back.outcome == Delivery.Outcome.EMBEDDED
        assert page.status == Page.Status.LIVE
        assert page.deleted_at is None
        assert page.chunks.exists()
        kinds = list(
            page.versions.order_by("recorded_at").values_list("kind", flat=True)
        )
        assert kinds == ["new", "deleted", "restored"]

    def test_410_also_tombstones(self):
        assert self.ingest(original_status=410).outcome == Delivery.Outcome.DELETED

    def test_a_captcha_page_embeds_nothing_and_keeps_the_old_version(self):
        before = self.page()
        embeddings = Embedding.objects.count()

        captcha = self.ingest(body="<p>Are you a robot?</p>", crawler_status=503)

        page = self.page()
        assert captcha.outcome == Delivery.Outcome.SKIPPED
        assert "crawler status 503" in captcha.error
        assert Embedding.objects.count() == embeddings
        assert page.content_hash == before.content_hash
        assert page.last_verified_at == before.last_verified_at
        assert page.failure_count == 1
        assert page.last_error == "crawler status 503"
        assert page.next_crawl_at < captcha.received_at + page.interval

    def test_site_errors_keep_the_current_version(self):
        for status in [500, 503, 403, 429]:
            with self.subTest(status=status):
                delivery = self.ingest(original_status=status, body="error page")
                assert delivery.outcome == Delivery.Outcome.SKIPPED
                assert self.page().is_live
        assert self.page().failure_count == 4

    def test_an_empty_page_is_a_failure_not_an_empty_page(self):
        delivery = self.ingest(body="<html><body><main> </main></body></html>")

        assert delivery.outcome == Delivery.Outcome.SKIPPED
        assert self.page().chunks.exists()

    def test_a_good_crawl_clears_the_failure_count(self):
        self.ingest(crawler_status=503)
        self.ingest()

        assert self.page().failure_count == 0
        assert self.page().last_error == ""


class OrderingTests(IngestWorld):
    def test_an_older_crawl_arriving_later_changes_nothing(self):
        older = self.push(URL)
        newer = self.push(URL)
        newer.pushed_at = older.pushed_at + timedelta(minutes=5)
        newer.save()
        self.ingest(rid=newer.rid, body=INSTALL_EDITED)

        late = self.ingest(rid=older.rid, body=INSTALL)

        assert late.outcome == Delivery.Outcome.SKIPPED
        assert "superseded" in late.error
        assert "Python 3.12" in self.page().markdown

    def test_an_older_200_never_resurrects_a_newer_tombstone(self):
        older = self.push(URL)
        newer = self.push(URL)
        newer.pushed_at = older.pushed_at + timedelta(minutes=5)
        newer.save()
        self.ingest(rid=newer.rid, original_status=404, body="gone")

        late = self.ingest(rid=older.rid)

        assert late.outcome == Delivery.Outcome.SKIPPED
        assert self.page().status == Page.Status.GONE
        assert not Chunk.objects.exists()

    def test_without_push_records_arrival_order_decides(self):
        first = self.receive(body=INSTALL)
        second = self.receive(body=INSTALL_EDITED)
        delivery_process(delivery_id=second.pk)

        delivery_process(delivery_id=first.pk)

        first.refresh_from_db()
        assert first.outcome == Delivery.Outcome.SKIPPED
        assert "Python 3.12" in self.page().markdown


class RedirectTests(IngestWorld):
    def test_a_redirect_makes_the_final_url_canonical_and_points_the_pushed_one_to_it(
        self,
    ):
        old_url, new_url = f"{SITE}/old-install/", f"{SITE}/install/"
        push = self.push(old_url)

        delivery = self.ingest(new_url, rid=push.rid)

        pushed, final = self.page(old_url), self.page(new_url)
        assert delivery.outcome == Delivery.Outcome.EMBEDDED
        assert final.status == Page.Status.LIVE and final.chunks.exists()
        assert pushed.status == Page.Status.REDIRECTED
        assert pushed.redirect_to == final
        assert pushed.final_url == new_url
        assert not pushed.chunks.exists()

    def test_a_redirect_to_an_existing_page_updates_it_without_clobbering(self):
        self.ingest(f"{SITE}/install/", body=INSTALL)
        push = self.push(f"{SITE}/setup/")

        self.ingest(f"{SITE}/install/", rid=push.rid, body=INSTALL)

        assert self.page(f"{SITE}/install/").is_live
        assert self.page(f"{SITE}/setup/").redirect_to == self.page(f"{SITE}/install/")
        assert Page.objects.filter(status=Page.Status.LIVE).count() == 1


class ProviderFailureTests(IngestWorld):
    """The embedding provider is the fake OpenAI API, serving the index."""

    def setUp(self):
        self.api = self.serve_from_fake_openai(OPENAI_MAX_RETRIES=0)
        self.ingest()

    def test_provider_errors_are_retried_and_old_chunks_keep_serving(self):
        chunks = list(Chunk.objects.values_list("pk", flat=True))
        self.api.fail_next(1, status=503)

        delivery = self.receive(body=INSTALL_EDITED)
        OrmQ.objects.all().delete()
        with override_settings(DELIVERY_RETRY_SECONDS=30):
            result = delivery_process(delivery_id=delivery.pk)

        delivery.refresh_from_db()
        assert result == Delivery.State.QUEUED
        assert delivery.state == Delivery.State.QUEUED
        assert "503" in delivery.error
        assert delivery.next_attempt_at > delivery.received_at
        assert (
            Schedule.objects.filter(func="ingest.tasks.delivery_process_task").count()
            == 1
        )
        assert list(Chunk.objects.values_list("pk", flat=True)) == chunks
        assert "Python 3.11" in self.page().markdown

    def test_a_delivery_that_keeps_failing_ends_failed_and_can_be_requeued(self):
        self.api.fail_next(10, status=500)
        delivery = self.receive(body=INSTALL_EDITED)
        with override_settings(DELIVERY_MAX_ATTEMPTS=3):
            results = [delivery_process(delivery_id=delivery.pk) for _ in range(4)]

        delivery.refresh_from_db()
        assert results == ["queued", "queued", "failed", None]
        assert delivery.state == Delivery.State.FAILED
        assert delivery.outcome == Delivery.Outcome.FAILED
        assert delivery.body is not None, "the body is kept so it can be retried"

        OrmQ.objects.all().delete()
        assert delivery_requeue(delivery=delivery)
        delivery.refresh_from_db()
        assert (delivery.state, delivery.attempts) == (Delivery.State.QUEUED, 0)
        assert OrmQ.objects.count() == 1

    def test_the_retry_after_recovery_completes_the_delivery(self):
        self.api.fail_next(1, status=500)
        delivery = self.receive(body=INSTALL_EDITED)
        delivery_process(delivery_id=delivery.pk)

        delivery_process(delivery_id=delivery.pk)

        delivery.refresh_from_db()
        assert (delivery.outcome, delivery.attempts) == (Delivery.Outcome.EMBEDDED, 2)
        assert "Python 3.12" in self.page().markdown


class FailureTextTests(IngestWorld):
    """A failed attempt is recorded and logged without the page text its error
    message quotes."""

    def test_a_database_error_quoting_page_text_is_recorded_without_it(self):
        def cast_to_int(*, page, drafts, **options):  # a real DataError quoting it
            with connection.cursor() as cursor:
                cursor.execute("SELECT %s::int", ["\n".join(d.text for d in drafts)])

        with (
            mock.patch("ingest.delivery.finish.page_chunks_replace", cast_to_int),
            self.assertLogs("ingest.delivery.job", "ERROR") as logs,
        ):
            delivery = self.ingest()

        assert delivery.state == Delivery.State.QUEUED
        assert delivery.error == (
            'django.db.utils.DataError: invalid input syntax for type integer: "…"'
        )
        assert "Python" not in "\n".join(logs.output)
        assert "cast_to_int" in "\n".join(logs.output), "the stack is logged"


@pytest.mark.slow
class HugePageTests(IngestWorld):
    """A page far longer than a chunk, as scraped pages sometimes are: a paragraph
    of a megabyte with no sentence end, and a <pre> block of half a megabyte."""

    def setUp(self):
        self.api = self.serve_from_fake_openai(OPENAI_MAX_RETRIES=0)

    def test_a_megabyte_paragraph_and_a_huge_pre_block_are_embedded_and_found(self):
        # Distinct words: a tsvector of one chunk holding them all passes 1 MB.
        words = " ".join(f"w{i:06d}x" for i in range(130_000))
        listing = "\n".join(f"row_{i} = fetch({i})" for i in range(30_000))
        html = (
            "<html><head><title>Dump</title></head><body><main><h1>Dump</h1>"
            f"<h2>Words</h2><p>{words}</p><h2>Listing</h2><pre>{listing}</pre>"
            "</main></body></html>"
        )

        delivery = self.ingest(f"{SITE}/dump/", html)

        assert delivery.outcome == Delivery.Outcome.EMBEDDED, delivery.error
        chunks = self.page(f"{SITE}/dump/").chunks.all()
        assert chunks.count() > 200
        assert max(count_tokens(c.text) for c in chunks) <= MAX_TOKENS
        assert max(c.token_count for c in chunks) <= MAX_TOKENS
        assert max(count_tokens(text) for text in self.api.seen) <= MAX_INPUT_TOKENS
        for query in ("w064999x", "row_29999"):
            found = chunks_search(
                query=query, user=SYSTEM, k=1, mode=SearchMode.KEYWORD
            )
            assert query in found.hits[0].chunk.text


class StalledDeliveryTests(IngestWorld):
    def test_a_claimed_delivery_whose_run_is_gone_is_queued_again(self):
        stalled, running = self.receive(), self.receive()
        OrmQ.objects.all().delete()
        Delivery.objects.filter(pk=stalled.pk).update(
            state=Delivery.State.PROCESSING, claimed_at=timezone.now(), attempts=1
        )

        with delivery_held(running.pk) as claimed:  # a run of it is alive
            assert claimed
            assert deliveries_requeue_stalled() == 1

        stalled.refresh_from_db()
        running.refresh_from_db()
        assert (stalled.state, stalled.attempts) == (Delivery.State.QUEUED, 1)
        assert running.state == Delivery.State.PROCESSING
        assert run_queued("ingest.tasks.delivery_process_task") == ["embedded"]

    def test_a_queued_delivery_whose_job_was_dropped_is_queued_again(self):
        lost, waiting = self.receive(), self.receive()
        a_while_ago = timezone.now() - timedelta(minutes=5)
        Delivery.objects.update(queued_at=a_while_ago)
        for job in OrmQ.objects.all():
            if job.task["args"] == (lost.pk,):
                job.delete()

        assert deliveries_requeue_stalled() == 1
        assert deliveries_requeue_stalled() == 0, "its job is back on the queue"

        # The first job run carries the other (ingest.delivery.carry).
        assert run_queued("ingest.tasks.delivery_process_task")
        assert not OrmQ.objects.exists()
        states = Delivery.objects.filter(pk__in=[lost.pk, waiting.pk])
        assert set(states.values_list("state", flat=True)) == {Delivery.State.DONE}

    def test_a_stalled_delivery_out_of_attempts_is_marked_failed(self):
        stalled = self.receive()
        OrmQ.objects.all().delete()
        Delivery.objects.filter(pk=stalled.pk).update(
            state=Delivery.State.PROCESSING,
            claimed_at=timezone.now() - timedelta(hours=3),
            attempts=5,
        )

        with override_settings(DELIVERY_MAX_ATTEMPTS=5):
            assert deliveries_requeue_stalled() == 0

        stalled.refresh_from_db()
        assert (stalled.state, stalled.outcome) == ("failed", "failed")

    def test_the_sweep_is_scheduled_after_every_migrate(self):
        sweep = Schedule.objects.get(
            func="ingest.tasks.deliveries_requeue_stalled_task"
        )

        assert (sweep.schedule_type, sweep.minutes, sweep.repeats) == ("I", 1, -1)


@pytest.mark.django_db(transaction=True)
def test_a_job_whose_connection_was_cut_records_its_retry_on_a_new_one(settings):
    settings.DELIVERY_RETRY_SECONDS = 0
    Source.objects.create(name="Example docs", seed_urls=f"{SITE}/")
    delivery = receive_delivery()
    OrmQ.objects.all().delete()  # taken by the worker that runs it below

    def lose_the_connection(delivery: Delivery) -> None:  # as a database restart does
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    with mock.patch("ingest.delivery.job._process", lose_the_connection):
        result = delivery_process(delivery_id=delivery.pk)

    delivery.refresh_from_db()
    assert result == delivery.state == Delivery.State.QUEUED
    assert delivery.error.startswith("django.db.utils.OperationalError: ")
    assert run_queued("ingest.tasks.delivery_process_task") == ["embedded"]
