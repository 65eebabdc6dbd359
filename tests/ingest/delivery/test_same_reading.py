"""A delivery of the very body a live page was read from, under the very rules that
read it, is unchanged without being read again; anything that could read it
differently reads it again."""

from __future__ import annotations

import gzip
from unittest import mock

from ingest.delivery.models import Delivery
from ingest.reading import content, rules
from sources.models import Page, Source
from tests.world import INSTALL, INSTALL_EDITED, SITE, IngestWorld

Outcome = Delivery.Outcome


class SameReadingTests(IngestWorld):
    def setUp(self):
        self.first = self.ingest()
        assert self.first.outcome == Outcome.EMBEDDED
        self.reads = mock.patch(
            "ingest.reading.rules.content_derive", wraps=rules.content_derive
        )

    def redeliver(self, body: str = INSTALL, **kwargs) -> tuple[Delivery, int]:
        """Deliver again; the delivery and how many times a body was read."""
        with self.reads as read:
            delivery = self.ingest(body=body, **kwargs)
        return delivery, read.call_count

    def test_the_same_body_is_unchanged_without_being_read(self):
        before = self.page()

        delivery, reads = self.redeliver()

        page = self.page()
        assert (delivery.outcome, reads) == (Outcome.UNCHANGED, 0)
        assert page.last_verified_at == delivery.received_at > before.last_verified_at
        assert page.last_changed_at == before.last_changed_at
        assert page.reading_key == before.reading_key != ""

    def test_the_same_body_gzipped_at_another_time_is_the_same_body(self):
        # gzip writes the time into its header: Crawlbase's bytes differ each time.
        raw = gzip.compress(INSTALL.encode(), mtime=1)
        again = gzip.compress(INSTALL.encode(), mtime=2)
        assert raw != again
        key = self.page().reading_key

        for body in (raw, again):
            assert self.key_of(body) == key

    def key_of(self, raw: bytes) -> str:
        page = Page.objects.select_related("source").get(pk=self.page().pk)
        return rules.source_reading_key(
            source=page.source, url=page.url, raw=raw, content_type="text/plain"
        )

    def test_anything_that_reads_the_body_differently_reads_it_again(self):
        # Each one after the body was read, and read again, as it is now.
        changes = {
            "a content selector": lambda: self.source_set(content_selector="main"),
            "a boilerplate pattern": lambda: self.source_set(
                boilerplate_patterns="^Nothing matches this$"
            ),
            "learned boilerplate": lambda: self.source_set(common_shapes=[12345]),
            "source listings let in": lambda: self.source_set(
                index_source_listings=True
            ),
            "a new extractor": lambda: self.enterContext(
                mock.patch("ingest.reading.rules.EXTRACTOR_VERSION", "next")
            ),
            "a new reading version (an upgrade)": lambda: self.enterContext(
                mock.patch(
                    "ingest.reading.content.READING_VERSION",
                    content.READING_VERSION + 1,
                )
            ),
            "a lower body limit": lambda: self.enterContext(
                self.settings(WEBHOOK_MAX_BODY_BYTES=1_000_000)
            ),
            "another body": lambda: None,
        }
        for change, make in changes.items():
            with self.subTest(change):
                make()
                body = INSTALL_EDITED if change == "another body" else INSTALL

                delivery, reads = self.redeliver(body=body)

                assert reads == 1, f"{change}: the body was not read again"
                assert delivery.outcome in (Outcome.UNCHANGED, Outcome.EMBEDDED)
                # Read once, the same body and rules are not read a second time.
                assert self.redeliver(body=body)[1] == 0, change

    def source_set(self, **fields: object) -> None:
        Source.objects.filter(pk=self.source.pk).update(**fields)

    def test_a_page_out_of_search_is_read_again(self):
        for status in (Page.Status.GONE, Page.Status.DUPLICATE):
            with self.subTest(status):
                Page.objects.filter(pk=self.page().pk).update(status=status)

                delivery, reads = self.redeliver()

                assert (reads, delivery.outcome) == (1, Outcome.EMBEDDED)
                assert self.page().is_live

    def test_a_younger_copy_of_an_older_page_is_found_a_duplicate(self):
        # Two copies indexed at once by two workers: the next crawl of the younger
        # one settles it, even though its body and rules are the same as before.
        young = Page.objects.create(url=f"{SITE}/install/copy/", source=self.source)
        Page.objects.filter(pk=young.pk).update(
            status=Page.Status.LIVE,
            content_hash=self.page().content_hash,
            reading_key=self.key_of_copy(),
        )

        delivery, reads = self.redeliver(url=f"{SITE}/install/copy/")

        assert (delivery.outcome, reads) == (Outcome.DUPLICATE, 1)
        assert Page.objects.get(pk=young.pk).duplicate_of == self.page()

    def key_of_copy(self) -> str:
        return rules.source_reading_key(
            source=Source.objects.get(pk=self.source.pk),
            url=f"{SITE}/install/copy/",
            raw=gzip.compress(INSTALL.encode()),
            content_type="text/plain",
        )


def test_a_page_read_before_the_reading_version_keeps_its_reading_key(settings):
    # This key was made by the code before READING_VERSION (a hash of the reading
    # modules' source text in the key): version 1 stands for that code, so the
    # upgrade does not read every page again.
    settings.WEBHOOK_MAX_BODY_BYTES = 5_000_000
    source = Source(content_selector="main", boilerplate_patterns="^Copyright")
    with (
        mock.patch.object(content, "READING_VERSION", 1),
        mock.patch(
            "ingest.reading.rules.EXTRACTOR_VERSION", "selectolax+html-to-markdown-3/3"
        ),
    ):
        key = rules.source_reading_key(
            source=source,
            url="https://harbor.example/docs/install/",
            raw=b"# Install\n\nRun `harbor init`.\n",
            content_type="text/markdown",
        )

    assert key == "48f09b3adcd6a8ef4f3141ce001c861f881ca1aadcc79b695c945126a625a995"
