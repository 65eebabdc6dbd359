from __future__ import annotations

from django.contrib.auth import get_user_model
from django.test import TestCase, override_settings
from django.urls import reverse
from django_q.models import OrmQ

from ingest.delivery.models import Delivery
from ingest.pushing.models import Push
from retrieval.models import Chunk, Embedding, EmbeddingUsage, QueryLog
from sources.models import LineShape, Page, PageVersion, Source


class AdminPagesTests(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.editor = get_user_model().objects.create_superuser(
            "editor", "editor@example.com", "a long test password"
        )
        cls.source = Source.objects.create(name="Example docs")
        cls.page = Page.objects.create(
            source=cls.source,
            url="https://docs.example.com/",
            title="<script>alert(1)</script>",
            status=Page.Status.LIVE,
            content_hash="ab" * 32,
        )
        PageVersion.objects.create(
            page=cls.page, kind=PageVersion.Kind.CHANGED, content_hash="ab" * 32
        )
        Chunk.objects.create(
            page=cls.page, position=0, text="Hello", embed_hash="cd" * 32
        )
        Embedding.objects.create(
            space="test/x/3", text_hash="cd" * 32, vector=[1, 0, 0]
        )
        Delivery.objects.create(rid="r1", url=cls.page.url, page=cls.page)

    def setUp(self):
        self.client.force_login(self.editor)

    def test_every_changelist_renders(self):
        models = [Source, Page, PageVersion, Delivery, Push, LineShape]
        for model in [*models, Chunk, Embedding, EmbeddingUsage, QueryLog]:
            meta = model._meta
            url = reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
            with self.subTest(model=meta.model_name):
                response = self.client.get(url)
                assert response.status_code == 200

    def test_a_page_shows_its_versions_and_chunks_with_short_hashes(self):
        response = self.client.get(
            reverse("admin:sources_page_change", args=[self.page.pk])
        )

        assert response.status_code == 200
        assert (
            b'title="' + b"ab" * 32 + b'">' + b"ab" * 6 + b"</code>" in response.content
        )
        assert b"cdcdcdcdcdcd" in response.content
        assert b"<script>alert(1)</script>" not in response.content

    def test_machine_written_rows_cannot_be_added_by_hand(self):
        for name in ["ingest_delivery_add", "retrieval_chunk_add"]:
            with self.subTest(name=name):
                assert self.client.get(reverse(f"admin:{name}")).status_code == 403

    def test_failed_deliveries_can_be_requeued_from_the_admin(self):
        failed = Delivery.objects.create(
            rid="r2", url=self.page.url, body=b"x", state=Delivery.State.FAILED
        )
        done = Delivery.objects.get(rid="r1")
        done.state = Delivery.State.DONE
        done.save()

        response = self.client.post(
            reverse("admin:ingest_delivery_changelist"),
            {"action": "requeue", "_selected_action": [failed.pk, done.pk]},
            follow=True,
        )

        failed.refresh_from_db()
        assert failed.state == Delivery.State.QUEUED
        assert OrmQ.objects.count() == 1
        assert b"Re-queued 1 deliveries. 1 were left alone" in response.content

    def test_the_source_form_explains_its_fields(self):
        response = self.client.get(reverse("admin:sources_source_add"))

        assert response.status_code == 200
        assert b"One URL per line" in response.content

    def test_the_api_docs_render_without_a_cdn(self):
        response = self.client.get("/api/docs/")

        assert response.status_code == 200
        assert b"cdn.jsdelivr" not in response.content
        assert b"swagger-ui" in response.content


@override_settings(
    WEBHOOK_TOKEN="secret-webhook-token", CRAWLBASE_TOKEN="", CRAWLBASE_CRAWLER=""
)
class CrawlAdminTests(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.editor = get_user_model().objects.create_superuser(
            "editor", "editor@example.com", "a long test password"
        )

    def setUp(self):
        self.client.force_login(self.editor)

    def add_source(self, **fields) -> Source:
        data = {
            "name": "Example docs", "fetcher": "crawlbase",
            "seed_urls": "https://docs.example.com/\nhttps://docs.example.com/faq/",
            "recrawl_every": "7 00:00:00", "max_pages": "100",
            "crawlbase_format": "html", "adaptive_recrawl": "on",
            "recrawl_min": "01:00:00", "recrawl_max": "30 00:00:00",
            "max_depth": "10",
        } | fields  # fmt: skip
        response = self.client.post(
            reverse("admin:sources_source_add"), data, follow=True
        )
        assert response.status_code == 200, response.content[:2000]
        self.last = response
        return Source.objects.get(name=data["name"])

    def test_saving_a_new_source_queues_its_seeds(self):
        source = self.add_source()

        pushes = Push.objects.filter(page__source=source)
        assert sorted(pushes.values_list("url", flat=True)) == [
            "https://docs.example.com/",
            "https://docs.example.com/faq/",
        ]
        assert b"2 queued for Crawlbase" in self.last.content

    def test_adding_a_page_by_hand_queues_its_first_crawl(self):
        source = self.add_source()
        Push.objects.all().delete()

        self.client.post(
            reverse("admin:sources_page_add"),
            {"source": source.pk, "url": "https://docs.example.com/new/",
             "versions-TOTAL_FORMS": "0", "versions-INITIAL_FORMS": "0"},
        )  # fmt: skip

        assert Push.objects.get().url == "https://docs.example.com/new/"

    def test_the_source_page_shows_the_callback_url_masked_and_missing_settings(self):
        source = self.add_source()

        response = self.client.get(
            reverse("admin:sources_source_change", args=[source.pk])
        )

        assert b"/webhooks/crawlbase/?token=secr\xe2\x80\xa6" in response.content
        assert b"secret-webhook-token" not in response.content
        assert b"Missing: CRAWLBASE_TOKEN is not set" in response.content

    def test_actions_push_sources_and_pages_and_report_counts(self):
        source = self.add_source()
        Push.objects.all().delete()

        response = self.client.post(
            reverse("admin:sources_source_changelist"),
            {"action": "crawl_now", "_selected_action": [source.pk]},
            follow=True,
        )
        assert b"2 queued for Crawlbase" in response.content

        page = source.pages.first()
        response = self.client.post(
            reverse("admin:sources_page_changelist"),
            {"action": "crawl_now", "_selected_action": [page.pk]},
            follow=True,
        )
        assert b"1 skipped (a push in flight)" in response.content
        assert Push.objects.count() == 2
