"""Outgoing notifications end to end: changes delivered to the index reach a
webhook receiver on loopback as signed batches (checked with the snippet the API
guide gives receivers), are retried, disable a failing subscription, and reach
e-mail subscribers as one digest per batch."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from django.conf import settings
from django.core import mail
from django.core.exceptions import ValidationError
from django.db import transaction
from django.test import override_settings
from django.utils import timezone
from django.utils.datastructures import CaseInsensitiveMapping

from ingest.notify.models import (
    Notification,
    NotificationAttempt,
    Subscription,
    SubscriptionChange,
)
from ingest.notify.sending import Attempt
from ingest.notify.services import (
    SendReport,
    notifications_prepare,
    notifications_prune,
    notifications_send,
    subscription_enable,
)
from ingest.tasks import notifications_send_task
from sources.models import PageVersion
from tests.conftest import ROOT
from tests.fakes.receiver import Answer, FakeReceiver
from tests.ingest.delivery.test_footer_scenario import (
    EDITED,
    GONE,
    PAGES,
    REDERIVE,
    doc,
)
from tests.world import INSTALL, SITE, IngestWorld, run_queued

URL = f"{SITE}/install/"
GUIDE_URL = f"{SITE}/guide/"
GUIDE = "# Guide\n\n## Setup\n\nRun the installer.\n\n## Use\n\nCall it twice.\n"
ONE_WORD = INSTALL.replace("latest release", "latest stable release")


def docs_signature_check():
    """The receiver's check as docs/api.md gives it, run as it is written."""
    text = (ROOT / "docs" / "api.md").read_text()
    section = text.split("### Checking the signature", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(code, namespace)  # noqa: S102 (the documentation's own snippet)
    return namespace["kb_signature_ok"]


@override_settings(
    CRAWL_ALLOW_PRIVATE_ADDRESSES=True,
    NOTIFY_QUIET_SECONDS=0,
    NOTIFY_RETRY_SECONDS=30,
    NOTIFY_RETRY_MAX_SECONDS=3600,
    NOTIFY_MAX_FAILURES=10,
    PUBLIC_URL="https://kb.example.com",
)
class NotifyWorld(IngestWorld):
    def setUp(self):
        self.hook = self.enterContext(FakeReceiver())

    def subscribe(self, **fields) -> Subscription:
        values = {"source": self.source, "name": "Docs team", "url": self.hook.url()}
        subscription = Subscription(**{**values, **fields})
        subscription.full_clean()
        subscription.save()
        return subscription

    def send(self, after: float = 0) -> SendReport:
        return notifications_send(now=timezone.now() + timedelta(seconds=after))

    def bodies(self) -> list[dict]:
        return [received.json() for received in self.hook.received]


class WebhookTests(NotifyWorld):
    def test_a_one_word_edit_is_one_signed_post_naming_its_section(self):
        self.ingest(URL, body=INSTALL)
        subscription = self.subscribe()
        self.ingest(URL, body=ONE_WORD)

        report = self.send()

        assert (report.made, report.sent, report.failed) == (1, 1, 0)
        (received,) = self.hook.received
        headers = CaseInsensitiveMapping(received.headers)
        check = docs_signature_check()
        assert check(subscription.secret, received.body, headers)
        assert not check("kbw_another", received.body, headers)
        assert not check(subscription.secret, received.body + b" ", headers)
        body = received.json()
        assert headers["X-KB-Delivery"] == body["id"]
        assert body["source"] == {
            "id": self.source.pk,
            "name": "Example docs",
            "feed_url": f"https://kb.example.com/feeds/sources/{self.source.pk}/"
            "changes.json",
        }
        (change,) = body["changes"]
        step = PageVersion.objects.get(kind="changed")
        assert change["id"] == step.pk and change["kind"] == "changed"
        assert change["sections"] == ["Install › With pip"]
        assert change["summary"] == "1 line changed in Install › With pip"
        assert change["diff_url"].startswith("https://kb.example.com/admin/sources/")
        assert self.send().made == 0 and len(self.hook.received) == 1, "sent once"

    def test_an_old_timestamp_fails_the_check_however_well_signed(self):
        self.subscribe()
        self.ingest(URL, body=INSTALL)
        self.send()
        (received,) = self.hook.received
        headers = dict(received.headers)
        secret = Subscription.objects.get().secret

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("time.time", lambda: int(headers["X-KB-Timestamp"]) + 301)
            assert not docs_signature_check()(secret, received.body, headers)

    def test_a_retry_after_a_500_succeeds_with_the_same_body_and_id(self):
        self.subscribe()
        self.ingest(URL, body=INSTALL)
        self.hook.answer(500, b"database is down")

        first = self.send()
        early = self.send(after=10)
        later = self.send(after=31)

        assert (first.failed, early.sent, later.sent) == (1, 0, 1)
        failed, delivered = self.hook.received
        assert failed.body == delivered.body
        assert failed.headers["X-KB-Delivery"] == delivered.headers["X-KB-Delivery"]
        log = NotificationAttempt.objects.order_by("attempted_at")
        assert [(a.number, a.ok, a.status) for a in log] == [
            (1, False, 500),
            (2, True, 200),
        ]
        assert log[0].error == "HTTP 500: database is down"
        notification = Notification.objects.get()
        assert notification.state == Notification.State.SENT
        assert Subscription.objects.get().failures == 0

    def test_retry_after_is_honoured_up_to_the_longest_wait(self):
        self.subscribe()
        self.ingest(URL, body=INSTALL)
        elapsed = 0.0
        for asked, wait in [
            ("120", 120),
            ("999999", 3600),  # NOTIFY_RETRY_MAX_SECONDS
            (None, 30 * 2**2),  # none asked: the third attempt's backoff
        ]:
            if asked:
                self.hook.answer(503, Retry_After=asked)
            else:
                self.hook.answer(503)

            assert self.send(after=elapsed).failed == 1

            notification = Notification.objects.get()
            attempt = notification.attempt_log.order_by("-number").first()
            with self.subTest(retry_after=asked):
                assert notification.next_attempt_at - attempt.attempted_at == (
                    timedelta(seconds=wait)
                )
            elapsed += wait + 1

    def test_a_refusal_is_not_sent_again_and_the_next_batch_goes(self):
        self.subscribe()
        self.ingest(URL, body=INSTALL)
        self.hook.answer(400, b"unknown field")
        self.send()
        self.ingest(GUIDE_URL, body=GUIDE, content_type="text/markdown")

        self.send(after=3600)

        refused, sent = Notification.objects.order_by("created_at")
        assert refused.state == Notification.State.REFUSED
        assert refused.last_error == "HTTP 400: unknown field"
        assert sent.state == Notification.State.SENT
        assert len(self.hook.received) == 2
        assert [c["title"] for c in self.bodies()[1]["changes"]] == ["Guide"]

    def test_repeated_failures_disable_it_with_the_reason_until_enabled_again(self):
        subscription = self.subscribe()
        self.ingest(URL, body=INSTALL)
        self.hook.always = Answer(502, body=b"bad gateway")
        with override_settings(NOTIFY_MAX_FAILURES=3, NOTIFY_RETRY_SECONDS=1):
            for hour in range(5):
                self.send(after=hour * 3600)

        subscription.refresh_from_db()
        assert len(self.hook.received) == 3, "nothing sent once disabled"
        assert subscription.is_disabled and subscription.failures == 3
        assert subscription.disabled_reason.startswith(
            "3 attempts in a row failed; the last, on "
        )
        assert subscription.disabled_reason.endswith(": HTTP 502: bad gateway")
        self.ingest(GUIDE_URL, body=GUIDE, content_type="text/markdown")
        assert SubscriptionChange.objects.waiting().count() == 1, "still collected"

        self.hook.always = None
        with self.captureOnCommitCallbacks(execute=False) as queued:
            assert subscription_enable(subscription=subscription)
        assert len(queued) == 1, "a send is queued at once"
        self.send()

        assert [len(body["changes"]) for body in self.bodies()[3:]] == [1, 1]
        assert not Notification.objects.unsent().exists()

    def test_a_burst_of_changes_is_one_post_once_it_has_settled(self):
        self.subscribe()
        with override_settings(NOTIFY_QUIET_SECONDS=60, NOTIFY_MAX_WAIT_SECONDS=900):
            self.ingest(URL, body=INSTALL)
            self.ingest(GUIDE_URL, body=GUIDE, content_type="text/markdown")
            self.ingest(URL, body=ONE_WORD)
            assert self.send().made == 0, "changes still coming in"

            assert self.send(after=61).sent == 1

        (body,) = self.bodies()
        assert body["count"] == 3
        assert [c["kind"] for c in body["changes"]] == ["changed", "new", "new"]

    def test_a_long_burst_goes_out_after_the_longest_wait(self):
        self.subscribe()
        self.ingest(URL, body=INSTALL)
        SubscriptionChange.objects.update(
            routed_at=timezone.now() - timedelta(seconds=901)
        )
        with override_settings(NOTIFY_QUIET_SECONDS=60, NOTIFY_MAX_WAIT_SECONDS=900):
            self.ingest(URL, body=ONE_WORD)  # the burst goes on

            assert self.send().sent == 1

        assert self.bodies()[0]["count"] == 2

    def test_a_backlog_goes_in_bodies_of_at_most_the_batch_size_in_order(self):
        self.subscribe()
        self.ingest(URL, body=INSTALL)
        self.ingest(GUIDE_URL, body=GUIDE, content_type="text/markdown")
        self.ingest(URL, body=ONE_WORD)

        with override_settings(NOTIFY_BATCH_MAX=2):
            report = self.send()

        assert (report.made, report.sent) == (2, 2)
        ids = [[c["id"] for c in body["changes"]] for body in self.bodies()]
        steps = list(PageVersion.objects.order_by("pk").values_list("pk", flat=True))
        assert ids == [steps[1::-1], steps[2:]]

    def test_a_sender_that_died_after_claiming_leaves_it_to_be_sent_again(self):
        self.subscribe()
        self.ingest(URL, body=INSTALL)
        now = timezone.now()
        notifications_prepare(now=now)
        notification = Notification.objects.get()
        assert notification.mark_claimed(at=now)  # and its worker died
        assert not Notification.objects.get().mark_claimed(at=now), "taken once"

        assert self.send().sent == 0, "while a job could still hold it"
        report = notifications_send(now=now + timedelta(seconds=settings.Q_RETRY + 1))

        assert report.sent == 1
        assert self.bodies()[0]["id"] == str(notification.key)

    def test_a_fault_while_sending_is_a_failed_attempt_not_a_stuck_claim(self):
        self.subscribe()
        self.ingest(URL, body=INSTALL)

        with mock.patch(
            "ingest.notify.services.webhook_post", side_effect=RuntimeError("boom")
        ):
            assert self.send().failed == 1

        notification = Notification.objects.get()
        assert notification.state == Notification.State.WAITING
        assert notification.last_error == "RuntimeError: boom"
        assert self.send(after=31).sent == 1

    def test_a_subscription_deleted_while_sending_leaves_no_trace(self):
        subscription = self.subscribe()
        self.ingest(URL, body=INSTALL)
        sent = notifications_send

        def delete_then_post(**kwargs):
            Subscription.objects.filter(pk=subscription.pk).delete()
            return Attempt(ok=True, status=200)

        with mock.patch(
            "ingest.notify.services.webhook_post", side_effect=delete_then_post
        ):
            assert sent(now=timezone.now()).sent == 1

        assert not NotificationAttempt.objects.exists()

    def test_a_change_rolled_back_is_never_sent(self):
        self.subscribe()
        with transaction.atomic():
            self.ingest(URL, body=INSTALL)
            assert SubscriptionChange.objects.count() == 1
            transaction.set_rollback(True)

        assert self.send().made == 0 and self.hook.received == []

    def test_the_scheduled_task_sends(self):
        self.subscribe()
        self.ingest(URL, body=INSTALL)

        assert notifications_send_task() == "1 notifications made, 1 sent, 0 failed"

    def test_old_sent_notifications_leave_the_log(self):
        self.subscribe()
        self.ingest(URL, body=INSTALL)
        self.send()
        Notification.objects.update(
            created_at=timezone.now()
            - timedelta(days=settings.NOTIFY_LOG_KEEP_DAYS + 1)
        )

        assert notifications_prune() == 1
        assert not NotificationAttempt.objects.exists()
        assert not SubscriptionChange.objects.exists()
        assert PageVersion.objects.exists(), "the change itself stays"


class AddressGuardTests(NotifyWorld):
    @override_settings(CRAWL_ALLOW_PRIVATE_ADDRESSES=False)
    def test_a_loopback_webhook_is_refused_when_saved(self):
        with pytest.raises(ValidationError) as error:
            self.subscribe()

        (message,) = error.value.message_dict["url"]
        assert "127.0.0.1, a loopback address" in message
        assert "CRAWL_ALLOW_PRIVATE_ADDRESSES" in message

    def test_a_url_refused_when_sending_disables_it_at_once_and_keeps_the_changes(
        self,
    ):
        subscription = self.subscribe()  # allowed then
        self.ingest(URL, body=INSTALL)

        with override_settings(CRAWL_ALLOW_PRIVATE_ADDRESSES=False):
            report = self.send()

        assert report.failed == 1 and self.hook.received == []
        subscription.refresh_from_db()
        assert subscription.is_disabled
        assert "a loopback address" in subscription.disabled_reason
        assert Notification.objects.get().state == Notification.State.WAITING

        subscription_enable(subscription=subscription)
        assert self.send().sent == 1

    def test_only_http_and_https_urls_are_taken(self):
        with pytest.raises(ValidationError) as error:
            self.subscribe(url="ftp://127.0.0.1/hook")

        assert "only http and https" in error.value.message_dict["url"][0]


class NoiseTests(NotifyWorld):
    def test_a_whitespace_only_recrawl_sends_nothing(self):
        self.ingest(URL, body=INSTALL)
        self.subscribe()
        spaced = INSTALL.replace("<p>", "<p>\n   ").replace("</p>", "  \n\n</p>")

        self.ingest(URL, body=spaced)

        assert self.send().made == 0 and self.hook.received == []

    @pytest.mark.slow  # sixty deliveries
    def test_a_footer_learned_as_boilerplate_sends_only_the_real_edits(self):
        urls = [f"{SITE}/topic{n}/" for n in range(PAGES)]
        for number, url in enumerate(urls):
            self.deliver(url, doc(number))
        self.subscribe()
        for number, url in enumerate(urls):
            if number == GONE:
                self.deliver(url, "gone", original_status=404)
            else:
                self.deliver(url, doc(number, footer=True, edited=number in EDITED))

        self.send()

        (body,) = self.bodies()
        changed = {c["page_url"]: c["kind"] for c in body["changes"]}
        assert changed == {
            **{urls[n]: "changed" for n in EDITED},
            urls[GONE]: "deleted",
        }

    def deliver(self, url: str, body: str, **kwargs) -> None:
        self.ingest(url, body, **kwargs)
        run_queued(REDERIVE)


class FilterTests(NotifyWorld):
    def test_each_subscription_gets_the_changes_its_filters_let_through(self):
        subscriptions = {
            name: self.subscribe(name=name, **filters)
            for name, filters in {
                "every change": {},
                "gone only": {"kinds": ["deleted"]},
                "guide pages": {"url_patterns": "*/guide/*"},
                "under With pip": {"headings": "with pip"},
                "three lines or more": {"min_lines": 3},
            }.items()
        }
        self.ingest(URL, body=INSTALL)
        self.ingest(URL, body=ONE_WORD)
        self.ingest(GUIDE_URL, body=GUIDE, content_type="text/markdown")
        self.ingest(URL, body="gone", original_status=404)

        expected = {
            "every change": ["install new", "install changed", "guide new",
                             "install deleted"],
            "gone only": ["install deleted"],
            "guide pages": ["guide new"],
            "under With pip": ["install new", "install changed"],
            "three lines or more": ["install new", "guide new", "install deleted"],
        }  # fmt: skip
        for name, subscription in subscriptions.items():
            routed = subscription.changes.order_by("change_id").select_related(
                "change__page"
            )
            with self.subTest(subscription=name):
                assert [
                    f"{r.change.page.url.split('/')[-2]} {r.change.kind}"
                    for r in routed
                ] == expected[name]

    def test_a_paused_subscription_collects_nothing(self):
        self.subscribe(active=False)

        self.ingest(URL, body=INSTALL)

        assert not SubscriptionChange.objects.exists()

    def test_another_sources_changes_are_not_routed(self):
        from sources.models import Source

        other = Source.objects.create(name="Other", seed_urls="https://other.example/")
        self.subscribe(source=other)

        self.ingest(URL, body=INSTALL)

        assert not SubscriptionChange.objects.exists()


class EmailDigestTests(NotifyWorld):
    def test_a_batch_is_one_digest_to_each_address_with_links(self):
        self.ingest(URL, body=INSTALL)
        self.subscribe(channel="email", url="",
                       emails="docs@example.com,\nops@example.com")  # fmt: skip
        self.ingest(URL, body=ONE_WORD)
        title = "Guide <b>bold</b>"
        self.ingest(GUIDE_URL, body=GUIDE.replace("# Guide", f"# {title}"),
                    content_type="text/markdown")  # fmt: skip

        assert self.send().sent == 1

        assert [m.to for m in mail.outbox] == [
            ["docs@example.com"],
            ["ops@example.com"],
        ]
        message = mail.outbox[0]
        assert message.subject == "Example docs: 2 changes (1 new, 1 changed)"
        assert message.from_email == settings.DEFAULT_FROM_EMAIL
        key = str(Notification.objects.get().key)
        assert message.extra_headers["X-KB-Delivery"] == key
        step = PageVersion.objects.get(kind="changed")
        diff = f"https://kb.example.com/admin/sources/page/{step.page_id}/diff/?b={step.pk}"
        text = message.body
        assert "* Install: 1 line changed in Install › With pip" in text
        assert f"What changed: {diff}" in text
        assert (
            f"https://kb.example.com/feeds/sources/{self.source.pk}/changes.atom"
            in text
        )
        assert title in text, "plain text is not escaped"
        assert "ops@example.com" not in text, "no one sees the other addresses"
        ((html, kind),) = message.alternatives
        assert kind == "text/html"
        assert "Guide &lt;b&gt;bold&lt;/b&gt;" in html and "<b>bold" not in html
        assert diff.replace("&", "&amp;") in html or diff in html
        assert self.hook.received == []

    def test_a_single_change_names_its_page_in_the_subject(self):
        self.ingest(URL, body=INSTALL)
        self.subscribe(channel="email", url="", emails="docs@example.com")
        self.ingest(URL, body=ONE_WORD)

        self.send()

        assert mail.outbox[0].subject == (
            "Example docs: Install, 1 line changed in Install › With pip"
        )

    @override_settings(
        EMAIL_BACKEND="tests.ingest.notify.test_notifications.RefusingBackend"
    )
    def test_a_mail_server_that_fails_is_retried(self):
        self.subscribe(channel="email", url="", emails="docs@example.com")
        self.ingest(URL, body=INSTALL)

        assert self.send().failed == 1
        notification = Notification.objects.get()
        assert notification.state == Notification.State.WAITING
        assert notification.last_error == "SMTPServerDisconnected: gone away"

    def test_bad_addresses_are_refused_when_saved(self):
        with pytest.raises(ValidationError) as error:
            self.subscribe(channel="email", url="", emails="docs@example.com, nope")

        assert error.value.message_dict["emails"] == [
            "'nope' is not an e-mail address."
        ]


class RefusingBackend:
    """A mail server that hangs up."""

    def __init__(self, **kwargs):
        pass

    def __enter__(self):
        import smtplib

        raise smtplib.SMTPServerDisconnected("gone away")

    def __exit__(self, *exc):
        return False
