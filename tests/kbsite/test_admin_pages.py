"""Every page of the admin, for every kind of visitor: it loads for staff, sends
strangers to the login page, escapes what was scraped, and fits the screen."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

from django.contrib import admin
from django.test import override_settings
from django.urls import reverse

from ingest.delivery.models import Delivery
from sources.models import Page
from tests.admin_world import ESCAPED, XSS, AdminWorld

EDITORS_APPS = {"sources", "ingest", "retrieval"}


def admin_urls(apps: set[str] | None = None) -> list[str]:
    """The changelist of every registered model (of ``apps``), and the change view
    of its first row when it has one."""
    urls = []
    for model in admin.site._registry:
        meta = model._meta
        if apps is not None and meta.app_label not in apps:
            continue
        urls.append(reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"))
        first = model._default_manager.order_by("pk").first()
        if first is not None:
            name = f"admin:{meta.app_label}_{meta.model_name}_change"
            urls.append(reverse(name, args=[first.pk]))
    return urls


class AdminPagesTests(AdminWorld):
    def extra_urls(self) -> list[str]:
        return [
            reverse("admin:index"),
            reverse("admin-dashboard"),
            reverse("admin:sources_page_diff", args=[self.page.pk]),
            reverse("admin:sources_page_diff", args=[self.page.pk])
            + f"?a={self.v1.pk}&b={self.v2.pk}",
            reverse("admin:sources_page_change", args=[self.page.pk]),
            reverse("admin:sources_source_change", args=[self.source.pk]),
            reverse("admin:retrieval_querylog_change", args=[self.answered.pk]),
            reverse("admin:ingest_delivery_change", args=[self.delivery.pk]),
        ]

    def test_every_changelist_and_change_view_loads_for_an_editor(self):
        self.client.force_login(self.editor)
        for url in admin_urls(EDITORS_APPS) + self.extra_urls():
            with self.subTest(url=url):
                assert self.client.get(url).status_code == 200

    def test_every_changelist_and_change_view_loads_for_a_superuser(self):
        self.client.force_login(self.root)
        for url in admin_urls() + self.extra_urls():
            with self.subTest(url=url):
                assert self.client.get(url).status_code == 200

    def test_anonymous_visitors_are_sent_to_the_login_page(self):
        for url in admin_urls() + self.extra_urls():
            with self.subTest(url=url):
                response = self.client.get(url)
                assert response.status_code == 302
                assert response["Location"].startswith("/admin/login/")

    def test_stored_script_text_is_escaped_in_every_view(self):
        self.client.force_login(self.root)
        for url in admin_urls() + self.extra_urls():
            with self.subTest(url=url):
                content = self.client.get(url).content.decode()
                assert XSS not in content
                assert "<script>alert" not in content

    def test_the_script_text_shows_as_text_where_it_is_stored(self):
        self.client.force_login(self.editor)
        for url in [
            reverse("admin:sources_page_changelist"),
            reverse("admin:sources_page_diff", args=[self.page.pk]),
            reverse("admin:sources_lineshape_changelist"),
            reverse("admin:retrieval_querylog_change", args=[self.answered.pk]),
            reverse("admin-dashboard"),
        ]:
            with self.subTest(url=url):
                assert ESCAPED in self.client.get(url).content.decode()

    def test_the_job_queue_and_api_tokens_are_for_superusers_only(self):
        self.client.force_login(self.editor)
        index = self.client.get(reverse("admin:index")).content.decode()
        assert "Django Q" not in index and "Auth Token" not in index
        for name in ["django_q_schedule", "django_q_failure", "authtoken_tokenproxy"]:
            with self.subTest(name=name):
                url = reverse(f"admin:{name}_changelist")
                assert self.client.get(url).status_code == 403

        self.client.force_login(self.root)
        index = self.client.get(reverse("admin:index")).content.decode()
        assert "Django Q" in index and "Auth Token" in index

    def test_the_editors_apps_come_first_in_the_order_of_their_work(self):
        self.client.force_login(self.root)

        apps = self.client.get(reverse("admin:index")).context["app_list"]

        labels = [app["app_label"] for app in apps]
        assert labels[:4] == ["sources", "ingest", "retrieval", "auth"]
        models = [m["object_name"] for m in apps[0]["models"]]
        assert models == ["Source", "Page", "PageVersion", "LineShape"]
        models = [m["object_name"] for m in apps[1]["models"]]
        assert models[:2] == ["Delivery", "Push"]

    def test_the_old_addresses_of_pushes_lead_to_their_new_ones(self):
        self.client.force_login(self.editor)
        pk = self.push.pk

        listed = self.client.get("/admin/sources/push/?state__exact=queued")
        shown = self.client.get(f"/admin/sources/push/{pk}/change/", follow=True)

        assert (listed.status_code, listed["Location"]) == (
            301,
            reverse("admin:ingest_push_changelist") + "?state__exact=queued",
        )
        assert shown.redirect_chain == [
            (reverse("admin:ingest_push_change", args=[pk]), 301)
        ]
        assert shown.status_code == 200 and self.push.url in shown.content.decode()

    def test_no_list_shows_more_than_seven_columns_by_default(self):
        for model, model_admin in admin.site._registry.items():
            if model._meta.app_label in EDITORS_APPS:
                with self.subTest(model=model._meta.model_name):
                    assert len(model_admin.list_display) <= 7

    def test_lists_show_titles_and_short_paths_rather_than_whole_urls(self):
        self.client.force_login(self.editor)

        response = self.client.get(reverse("admin:sources_page_changelist"))

        content = response.content.decode()
        assert f"Guide {ESCAPED}" in content
        assert '<small class="kb-path" title="https://docs.example.com/guide/">' in (
            content
        )
        assert ">/guide/</small>" in content

    def test_big_tables_count_at_most_a_cap(self):
        for n in range(3):
            Delivery.objects.create(rid=f"more-{n}", url=self.page.url)
        self.client.force_login(self.editor)

        with mock.patch("kbsite.admin_utils.COUNT_CAP", 2):
            response = self.client.get(reverse("admin:ingest_delivery_changelist"))

        assert b"more than 2 deliveries" in response.content

    def test_page_lists_leave_the_stored_markdown_and_body_out(self):
        self.client.force_login(self.editor)

        response = self.client.get(reverse("admin:sources_page_changelist"))

        page = response.context["cl"].result_list[0]
        assert {"markdown", "raw_body"} <= page.get_deferred_fields()

    def test_page_filters_answer_failing_stale_and_tombstoned(self):
        self.client.force_login(self.editor)
        url = reverse("admin:sources_page_changelist")
        expected = {
            "failing": [self.page.pk],
            "stale": [self.page.pk],  # verified 10 days ago, checked every 7
            "tombstoned": [self.gone.pk],
            "pending": [],
        }
        for condition, pks in expected.items():
            with self.subTest(condition=condition):
                response = self.client.get(url, {"condition": condition})
                shown = [page.pk for page in response.context["cl"].result_list]
                assert shown == pks

    def test_a_page_verified_within_its_own_interval_is_not_stale(self):
        Page.objects.filter(pk=self.page.pk).update(recrawl_every=timedelta(days=30))
        self.client.force_login(self.editor)

        response = self.client.get(
            reverse("admin:sources_page_changelist"), {"condition": "stale"}
        )

        assert list(response.context["cl"].result_list) == []

    @override_settings(EMBEDDING_COST_PER_MILLION_TOKENS=0.02)
    def test_embedding_usage_shows_thousands_cost_and_per_source_totals(self):
        self.client.force_login(self.editor)

        response = self.client.get(reverse("admin:retrieval_embeddingusage_changelist"))

        content = response.content.decode()
        assert "1,234,567" in content  # the day's tokens
        assert "0.0247" in content  # at 0.02 per million
        assert f"Example docs {ESCAPED}" in content  # per source: 1,234 tokens
        assert "1,234" in content
