from __future__ import annotations

from django.contrib.auth import get_user_model
from django.test import TestCase
from django.urls import reverse
from django_q.models import OrmQ

from ingest.models import Delivery
from retrieval.models import Chunk, Embedding, EmbeddingUsage, QueryLog
from sources.models import LineShape, Page, PageVersion, Push, Source


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
