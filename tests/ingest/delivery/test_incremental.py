"""Only text never embedded with the active model is sent to the embedding API."""

from __future__ import annotations

import gzip

from django.conf import settings
from django.test import override_settings

from ingest.delivery.models import Delivery
from retrieval.models import Embedding, EmbeddingUsage
from sources.models import LineShape
from tests.fakes.openai_api import FakeOpenAI
from tests.world import (
    SITE,
    IngestWorld,
    embedder_space_serve,
    fake_openai_settings,
    ingest_delivery,
    run_queued,
)

SECTIONS = {
    "Requirements": "You need Python 3.11 and PostgreSQL 16 with pgvector.",
    "Install": "Run pip install example inside a virtual environment.",
    "Configure": "Set DATABASE_URL before the first start of the server.",
}
TOPICS = ["tables", "indexes", "views", "triggers", "roles", "schemas", "types",
          "functions", "queries", "backups", "replication", "extensions"]  # fmt: skip
FOOTER = "Last updated on 2026-11-01 by the documentation team."


def doc(title: str, sections: dict[str, str], footer: str = FOOTER) -> str:
    body = "".join(f"<h2>{h}</h2><p>{t}</p>" for h, t in sections.items())
    return (
        f"<html><head><title>{title}</title></head><body><main><h1>{title}</h1>"
        f"<p>Home · Guide · API reference · Changelog</p>{body}<p>{footer}</p>"
        "</main></body></html>"
    )


class IncrementalTests(IngestWorld):
    # The site is delivered once for the class, through one fake API; each test
    # starts from what the API had been sent by then.
    @classmethod
    def setUpClass(cls):
        cls.api = cls.enterClassContext(FakeOpenAI())
        cls.enterClassContext(override_settings(**fake_openai_settings(cls.api)))
        super().setUpClass()

    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        embedder_space_serve()
        # Other pages of the site teach it its menu and footer lines.
        pages = range(settings.BOILERPLATE_MIN_PAGES)
        cls.others = [f"{SITE}/other{n}/" for n in pages]
        for number, url in enumerate(cls.others):
            topic = TOPICS[number % len(TOPICS)] + " " * (number // len(TOPICS))
            ingest_delivery(url, doc(f"Other {number}", {"A": f"All about {topic}."}))
        cls.url = f"{SITE}/install/"
        cls.first = ingest_delivery(cls.url, doc("Install", SECTIONS))
        cls.sent = (cls.api.requests, cls.api.inputs, cls.api.tokens)

    def setUp(self):
        self.api.requests, self.api.inputs, self.api.tokens = self.sent
        self.api.seen.clear()

    def test_the_first_crawl_embeds_each_section_once_and_counts_it(self):
        page = self.page(self.url)
        tokens = sum(page.chunks.values_list("token_count", flat=True))

        assert page.chunks.count() == 3
        assert self.first.embedding_requests == 1
        assert self.first.embedding_tokens == tokens == page.embedding_tokens
        usage = EmbeddingUsage.objects.get(space="openai/text-embedding-3-small/64")
        assert usage.tokens == self.api.tokens
        assert usage.requests == self.api.requests == len(self.others) + 1

    def test_editing_one_section_embeds_exactly_that_sections_chunk(self):
        edited = dict(SECTIONS, Install="Run uv pip install example instead.")

        delivery = self.ingest(self.url, doc("Install", edited))

        assert delivery.outcome == Delivery.Outcome.EMBEDDED
        assert len(self.api.seen) == 1
        assert "Run uv pip install example instead." in self.api.seen[0]
        assert self.api.seen[0].startswith("Install › Install\n\n")
        assert delivery.embedding_tokens > 0
        assert "uv pip" in self.page(self.url).markdown

    def test_reordering_sections_embeds_nothing(self):
        reordered = dict(reversed(list(SECTIONS.items())))

        delivery = self.ingest(self.url, doc("Install", reordered))

        page = self.page(self.url)
        assert delivery.outcome == Delivery.Outcome.EMBEDDED  # new content, new order
        assert self.api.seen == []
        assert delivery.embedding_tokens == 0
        headings = list(
            page.chunks.order_by("position").values_list("heading", flat=True)
        )
        assert headings == [
            "Install › Configure",
            "Install › Install",
            "Install › Requirements",
        ]

    def test_a_footer_date_change_embeds_nothing_and_only_bumps_last_verified_at(self):
        before = self.page(self.url)

        delivery = self.ingest(
            self.url,
            doc("Install", SECTIONS, FOOTER.replace("2026-11-01", "2026-11-29")),
        )

        page = self.page(self.url)
        assert delivery.outcome == Delivery.Outcome.UNCHANGED
        assert self.api.seen == []
        assert page.last_verified_at == delivery.received_at > before.last_verified_at
        assert page.last_changed_at == before.last_changed_at
        assert page.content_hash == before.content_hash

    def test_learned_boilerplate_is_kept_out_of_the_index(self):
        page = self.page(self.url)

        assert "Home · Guide" not in page.markdown
        assert "Last updated" not in page.markdown
        assert "You need Python 3.11" in page.markdown
        menu = LineShape.objects.get(example__startswith="Home · Guide")
        assert menu.pages == len(self.others) + 1
        assert menu.shape in self.source.__class__.objects.get().common_shapes

    def test_pages_crawled_before_a_line_was_learned_are_derived_again(self):
        early = self.page(self.others[0])
        assert "Home · Guide" in early.markdown, "not yet known as boilerplate"
        changed_at = early.last_changed_at
        self.api.seen.clear()

        (changed,) = run_queued("ingest.tasks.source_pages_rederive_task")

        early = self.page(self.others[0])
        assert changed == len(self.others)  # all crawled before the line was learned
        assert "Home · Guide" not in early.markdown
        assert "Last updated" not in early.markdown
        assert "All about tables." in early.markdown
        assert early.last_changed_at == changed_at, "the site did not change"
        (version,) = early.versions.all()  # a new reading is not a new version
        assert version.markdown == early.markdown
        assert version.content_hash == early.content_hash
        assert len(self.api.seen) == len(self.others), "one new chunk text a page"

    def test_a_tombstone_takes_its_lines_out_of_the_counts(self):
        self.ingest(self.url, "gone", original_status=404)

        menu = LineShape.objects.get(example__startswith="Home · Guide")
        assert menu.pages == len(self.others)

    def test_identical_text_is_embedded_once_across_pages(self):
        # Not a mirror (one section more), but three sections word for word.
        sections = dict(SECTIONS, Upgrade="Run pip install --upgrade example.")
        delivery = self.ingest(f"{SITE}/install-copy/", doc("Install", sections))

        assert delivery.outcome == Delivery.Outcome.EMBEDDED
        assert len(self.api.seen) == 1, "only the new section"
        copy = set(self.page(f"{SITE}/install-copy/").chunks.values_list("embed_hash"))
        assert set(self.page(self.url).chunks.values_list("embed_hash")) < copy

    def test_a_mirror_of_a_page_is_indexed_once(self):
        delivery = self.ingest(f"{SITE}/install-copy/", doc("Install", SECTIONS))

        assert delivery.outcome == Delivery.Outcome.DUPLICATE
        assert self.api.seen == []
        mirror = self.page(f"{SITE}/install-copy/")
        assert mirror.duplicate_of == self.page(self.url)
        assert not mirror.chunks.exists()

    def test_the_latest_raw_body_is_kept_with_its_extractor_version(self):
        page = self.page(self.url)

        assert gzip.decompress(bytes(page.raw_body)).decode() == doc(
            "Install", SECTIONS
        )
        assert page.raw_content_type == "text/plain"
        assert page.extractor_version.startswith("selectolax+html-to-markdown")

    def test_after_a_model_change_new_text_lands_in_both_spaces(self):
        with override_settings(EMBEDDING_DIMENSIONS=32):
            self.ingest(self.url, doc("Install", dict(SECTIONS, Install="changed")))

        spaces = Embedding.objects.filter(space__startswith="openai/")
        assert set(spaces.values_list("space", flat=True)) == {
            "openai/text-embedding-3-small/64",
            "openai/text-embedding-3-small/32",
        }
        # The edited section for the serving space; the whole page for the new one.
        assert len(self.api.seen) == 1 + 3
