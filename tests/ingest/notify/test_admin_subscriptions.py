"""Subscriptions in the admin: made and edited by the editors who see their
source, the webhook's secret shown once, the reason a subscription was disabled
and the action that enables it again, and the delivery log."""

from __future__ import annotations

from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from ingest.notify.models import Notification, NotificationAttempt, Subscription
from tests.admin_world import BETA_MARKS, TwoGroupsWorld

HOOK = "http://127.0.0.1:9/hook"


def form(source, **fields) -> dict:
    return {
        "source": source.pk, "name": "Docs team", "channel": "webhook", "url": HOOK,
        "emails": "", "active": "on", "url_patterns": "", "headings": "",
        "min_lines": "0", **fields,
    }  # fmt: skip


@override_settings(CRAWL_ALLOW_PRIVATE_ADDRESSES=True)
class SubscriptionAdminTests(TwoGroupsWorld):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.alpha = Subscription.objects.create(
            source=cls.a.source,
            name="Alpha hook",
            url="https://hooks.alpha.example.com/",
        )
        cls.beta = Subscription.objects.create(
            source=cls.b.source, name="Beta hook", url="https://hooks.beta.example.net/"
        )
        for subscription in (cls.alpha, cls.beta):
            notification = Notification.objects.create(
                subscription=subscription, body="{}", changes_count=1,
                state=Notification.State.SENT, attempts=1,
            )  # fmt: skip
            NotificationAttempt.objects.create(
                subscription=subscription, notification=notification, number=1,
                ok=False, status=503, error=f"HTTP 503: {subscription.name} busy",
                duration_ms=42,
            )  # fmt: skip

    def setUp(self):
        self.client.force_login(self.alice)

    def url(self, view: str, *args) -> str:
        return reverse(f"admin:ingest_subscription_{view}", args=args)

    def test_a_webhook_made_in_the_admin_shows_its_secret_this_once(self):
        response = self.client.post(
            self.url("add"), form(self.a.source, kinds=["changed", "deleted"])
        )

        made = Subscription.objects.get(name="Docs team")
        assert response.status_code == 200
        assert "no-store" in response["Cache-Control"]
        content = response.content.decode()
        assert made.secret.startswith("kbw_") and made.secret in content
        assert "Copy the signing secret now" in content
        assert made.kinds == ["changed", "deleted"] and made.source == self.a.source
        for page in [self.url("change", made.pk), self.url("changelist")]:
            assert made.secret not in self.client.get(page).content.decode()

    def test_an_email_subscription_goes_back_to_the_list(self):
        response = self.client.post(
            self.url("add"),
            form(self.a.source, channel="email", url="", emails="docs@example.com"),
        )

        assert response.status_code == 302
        assert Subscription.objects.get(name="Docs team").addresses() == [
            "docs@example.com"
        ]

    def test_an_editor_sees_and_edits_only_the_subscriptions_of_her_sources(self):
        listed = self.client.get(self.url("changelist")).content.decode()
        assert "Alpha hook" in listed
        for mark in [*BETA_MARKS, "Beta hook"]:
            assert mark not in listed
        assert self.client.get(self.url("change", self.beta.pk)).status_code == 404
        assert self.client.get(self.url("change", self.alpha.pk)).status_code == 200

        response = self.client.post(self.url("add"), form(self.b.source))

        assert "Select a valid choice" in response.content.decode()
        assert not Subscription.objects.filter(name="Docs team").exists()

    def test_the_delivery_logs_show_only_her_sources_rows(self):
        for name in ["notificationattempt", "notification"]:
            url = reverse(f"admin:ingest_{name}_changelist")
            with self.subTest(list=name):
                content = self.client.get(url).content.decode()
                assert "Alpha hook" in content and "Beta hook" not in content

    def test_the_change_page_lists_recent_attempts(self):
        content = self.client.get(self.url("change", self.alpha.pk)).content.decode()

        assert "HTTP 503: Alpha hook busy" in content
        assert "42 ms" in content

    def test_bad_patterns_and_private_addresses_are_form_errors(self):
        response = self.client.post(
            self.url("add"), form(self.a.source, url_patterns="re:(unclosed")
        )
        assert "is not a regular expression" in response.content.decode()

        with override_settings(CRAWL_ALLOW_PRIVATE_ADDRESSES=False):
            response = self.client.post(self.url("add"), form(self.a.source))
        assert "a loopback address" in response.content.decode()
        assert not Subscription.objects.filter(name="Docs team").exists()

    def test_a_disabled_subscription_says_why_and_the_action_enables_it(self):
        Subscription.objects.filter(pk=self.alpha.pk).update(
            disabled_at=timezone.now(), failures=10,
            disabled_reason="10 attempts in a row failed; the last: HTTP 502",
        )  # fmt: skip
        page = self.client.get(self.url("change", self.alpha.pk)).content.decode()
        assert "10 attempts in a row failed; the last: HTTP 502" in page

        response = self.client.post(
            self.url("changelist"),
            {"action": "enable", "_selected_action": [self.alpha.pk, self.beta.pk]},
            follow=True,
        )

        assert "Enabled 1 disabled subscriptions again." in response.content.decode()
        self.alpha.refresh_from_db()
        assert not self.alpha.is_disabled and self.alpha.failures == 0

    def test_a_new_secret_is_shown_once_and_the_old_one_stops(self):
        old = self.alpha.secret

        response = self.client.post(
            self.url("changelist"),
            {"action": "renew_secret",
             "_selected_action": [self.alpha.pk, self.beta.pk]},
        )  # fmt: skip

        self.alpha.refresh_from_db()
        self.beta.refresh_from_db()
        content = response.content.decode()
        assert self.alpha.secret != old and self.alpha.secret in content
        assert self.beta.secret not in content and "Beta hook" not in content

    def test_a_sources_overview_counts_its_subscriptions_and_links_to_add_one(self):
        Subscription.objects.filter(pk=self.alpha.pk).update(disabled_at=timezone.now())
        url = reverse("admin:sources_source_change", args=[self.a.source.pk])

        content = self.client.get(url).content.decode()

        assert "1 subscription</a>" in content
        assert "1 disabled" in content
        add = reverse("admin:ingest_subscription_add") + f"?source={self.a.source.pk}"
        assert f'<a href="{add}">add one</a>' in content
        form = self.client.get(add).content.decode()
        assert f'<option value="{self.a.source.pk}" selected>' in form
