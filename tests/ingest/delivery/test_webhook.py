"""The webhook through HTTP (Django's test client); see test_webhook_socket.py for a
real server."""

from __future__ import annotations

import gzip
import json
from unittest import mock

from django.db import InterfaceError, OperationalError, connection
from django.test import override_settings
from django_q.brokers import get_broker
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from ingest.delivery.job import delivery_process
from ingest.delivery.models import Delivery
from sources.models import Page
from tests.world import INSTALL, SITE, TOKEN, IngestWorld

URL = f"/webhooks/crawlbase/?token={TOKEN}"


class WebhookTests(IngestWorld):
    def post(self, body: bytes | None = None, url: str = URL, **headers: str):
        meta = {
            "HTTP_RID": "r-1",
            "HTTP_URL": f"{SITE}/install/",
            "HTTP_ORIGINAL_STATUS": "200",
            "HTTP_PC_STATUS": "200",
            "HTTP_CONTENT_ENCODING": "gzip",
            "HTTP_USER_AGENT": "Crawlbase Delivery Bot 1.0",
        }
        meta.update(headers)
        content_type = meta.pop("CONTENT_TYPE", "text/plain")
        data = gzip.compress(INSTALL.encode()) if body is None else body
        return self.client.generic("POST", url, data, content_type=content_type, **meta)

    def assert_error(self, response, status: int, code: str) -> None:
        assert response.status_code == status, response.content
        assert response["Content-Type"] == "application/json"
        assert response.json()["error"] == code
        assert response.json()["detail"]

    def test_a_delivery_is_stored_and_one_job_is_queued(self):
        response = self.post()

        assert response.status_code == 200
        assert response.json()["status"] == "queued"
        delivery = Delivery.objects.get()
        assert (delivery.rid, delivery.url) == ("r-1", f"{SITE}/install/")
        assert (delivery.original_status, delivery.crawler_status) == (200, 200)
        assert delivery.state == Delivery.State.QUEUED
        assert gzip.decompress(bytes(delivery.body)) == INSTALL.encode()
        assert OrmQ.objects.count() == 1

    def test_the_job_row_is_one_the_queue_hands_to_a_worker(self):
        self.post()

        # django-q2's own broker takes the job, as the cluster does.
        [(ack_id, package)] = get_broker().dequeue()
        task = SignedPackage.loads(package)
        delivery = Delivery.objects.get()
        assert task["func"] == "ingest.tasks.delivery_process_task"
        assert task["args"] == (delivery.pk,)
        assert task["name"] == f"delivery {delivery.pk} (r-1)"
        assert OrmQ.objects.get().pk == ack_id

    def test_the_answer_is_json_whatever_the_client_accepts(self):
        response = self.post(HTTP_ACCEPT="text/html")

        assert response.status_code == 200
        assert response["Content-Type"] == "application/json"
        assert response.json()["status"] == "queued"

    def test_it_acknowledges_and_ignores_a_redelivered_rid(self):
        self.post()
        response = self.post()

        assert response.status_code == 200
        assert response.json()["status"] == "duplicate"
        assert Delivery.objects.count() == 1
        assert OrmQ.objects.count() == 1

    def test_the_monitoring_probe_gets_200_and_does_nothing(self):
        probe = gzip.compress(json.dumps({"rid": "dummyrequest", "body": ""}).encode())
        response = self.post(
            probe,
            CONTENT_TYPE="gzip/json",
            HTTP_RID="dummyrequest",
            HTTP_USER_AGENT="Crawlbase Monitoring Bot 1.0",
        )

        assert response.status_code == 200
        assert not Delivery.objects.exists()
        assert not OrmQ.objects.exists()

    def test_a_wrong_token_gets_401(self):
        self.assert_error(
            self.post(url="/webhooks/crawlbase/?token=nope"),
            401,
            "authentication_failed",
        )
        assert not Delivery.objects.exists()

    def test_a_missing_token_gets_401(self):
        self.assert_error(
            self.post(url="/webhooks/crawlbase/"), 401, "not_authenticated"
        )

    def test_the_token_is_checked_before_the_body_is_read(self):
        # An oversized body with a bad token is refused for the token, not the size.
        with override_settings(WEBHOOK_MAX_BODY_BYTES=1024):
            response = self.post(b"x" * 4096, url="/webhooks/crawlbase/?token=nope")

        self.assert_error(response, 401, "authentication_failed")

    def test_no_token_configured_refuses_every_delivery(self):
        with override_settings(WEBHOOK_TOKEN=""):
            self.assert_error(self.post(), 401, "authentication_failed")

    def test_missing_rid_gets_400(self):
        self.assert_error(self.post(HTTP_RID=""), 400, "missing_rid")

    def test_missing_url_gets_400(self):
        self.assert_error(self.post(HTTP_URL=""), 400, "missing_url")

    def test_a_non_numeric_status_gets_400_not_500(self):
        self.assert_error(self.post(HTTP_PC_STATUS="OK"), 400, "bad_status")

    def test_conflicting_repeated_statuses_get_400(self):
        self.assert_error(self.post(HTTP_ORIGINAL_STATUS="200,404"), 400, "bad_status")

    def test_an_agreeing_repeated_status_is_accepted(self):
        assert self.post(HTTP_PC_STATUS="200,200").status_code == 200
        assert Delivery.objects.get().crawler_status == 200

    def test_corrupt_gzip_gets_400(self):
        self.assert_error(self.post(b"\x1f\x8b\x08\x00garbage"), 400, "bad_gzip")

    def test_invalid_utf8_gets_400(self):
        self.assert_error(self.post(gzip.compress(b"caf\xe9")), 400, "bad_encoding")

    def test_an_unknown_content_type_gets_415(self):
        response = self.post(CONTENT_TYPE="image/png")

        self.assert_error(response, 415, "unsupported_content_type")

    def test_a_body_over_the_limit_gets_413(self):
        with override_settings(WEBHOOK_MAX_BODY_BYTES=1024):
            response = self.post(gzip.compress(b"x" * 10) + b"\0" * 2048)

        self.assert_error(response, 413, "body_too_large")
        assert not Delivery.objects.exists()

    def test_a_body_that_inflates_past_the_limit_gets_413(self):
        with override_settings(WEBHOOK_MAX_BODY_BYTES=4096):
            response = self.post(gzip.compress(b"a" * 100_000))

        self.assert_error(response, 413, "body_too_large")

    def test_the_markdown_and_json_formats_are_accepted(self):
        markdown = self.post(
            gzip.compress(b"# Install\n\nRun pip."),
            CONTENT_TYPE="text/markdown; charset=utf-8",
            HTTP_RID="md-1",
        )
        envelope = {"pc_status": 200, "original_status": 200, "rid": "json-1",
                    "url": f"{SITE}/json/", "body": "<p>hi</p>"}  # fmt: skip
        as_json = self.post(
            gzip.compress(json.dumps(envelope).encode()),
            CONTENT_TYPE="gzip/json",
            HTTP_RID="",
            HTTP_URL="",
            HTTP_ORIGINAL_STATUS="",
            HTTP_PC_STATUS="",
        )

        assert (markdown.status_code, as_json.status_code) == (200, 200)
        assert Delivery.objects.get(rid="json-1").url == f"{SITE}/json/"

    def test_get_is_not_allowed(self):
        response = self.client.get(URL)

        assert response.status_code == 405
        assert response.json()["error"] == "method_not_allowed"

    def test_the_token_never_reaches_the_logs(self):
        with self.assertLogs(level="INFO") as logs:
            self.post(url="/webhooks/crawlbase/?token=wrong-secret-value")
            self.post(HTTP_RID="")

        assert logs.output
        assert not any(
            "wrong-secret-value" in line or TOKEN in line for line in logs.output
        )

    def envelope(self, **fields: object) -> bytes:
        envelope = {"pc_status": 200, "original_status": 200, "rid": "json-1",
                    "url": f"{SITE}/json/", "body": "# Json\\n\\nText."}  # fmt: skip
        envelope.update(fields)
        return gzip.compress(json.dumps(envelope).encode())

    def post_json(self, body: bytes):
        return self.post(body, CONTENT_TYPE="gzip/json", HTTP_RID="", HTTP_URL="",
                         HTTP_ORIGINAL_STATUS="", HTTP_PC_STATUS="")  # fmt: skip

    def process(self, rid: str) -> Delivery:
        delivery = Delivery.objects.get(rid=rid)
        delivery_process(delivery_id=delivery.pk)
        delivery.refresh_from_db()
        return delivery

    # -- NUL characters

    def test_a_markdown_delivery_with_nul_characters_is_stored_without_them(self):
        body = b"# Install\0\n\nRun pip\0 install example.\n"
        response = self.post(
            gzip.compress(body), CONTENT_TYPE="text/markdown", HTTP_RID="nul-md"
        )

        assert response.json()["status"] == "queued"
        assert self.process("nul-md").outcome == Delivery.Outcome.EMBEDDED
        assert "\0" not in self.page().markdown
        assert "Run pip install example." in self.page().markdown

    def test_a_json_delivery_with_nul_characters_is_stored_without_them(self):
        response = self.post_json(self.envelope(body="# Json\0\n\nText\0."))

        assert response.json()["status"] == "queued"
        assert self.process("json-1").outcome == Delivery.Outcome.EMBEDDED
        assert self.page(f"{SITE}/json/").markdown == "# Json\n\nText.\n"

    def test_a_nul_in_the_rid_or_url_headers_is_not_a_500(self):
        response = self.post(HTTP_RID="r\x00-1", HTTP_URL=f"{SITE}/install/\x00")

        assert response.json()["status"] == "queued"
        assert Delivery.objects.get().rid == "r-1"
        assert Delivery.objects.get().url == f"{SITE}/install/"

    def test_a_nul_in_the_content_type_is_not_a_500(self):
        # (A NUL in a charset parameter fails in Django itself, before any view.)
        response = self.post(CONTENT_TYPE="text/plain; profile=\x00x")

        assert response.json()["status"] == "queued"
        assert Delivery.objects.get().content_type == "text/plain; profile=x"

    # -- statuses and JSON

    def test_a_status_of_superscript_digits_gets_400_not_500(self):
        self.assert_error(self.post(HTTP_ORIGINAL_STATUS="\xb2"), 400, "bad_status")

    def test_arabic_indic_digits_are_not_a_status(self):
        self.assert_error(
            self.post(HTTP_ORIGINAL_STATUS="\u0664\u0660\u0664"), 400, "bad_status"
        )
        assert not Delivery.objects.exists()

    def test_a_json_delivery_with_a_superscript_status_gets_400(self):
        for status in ["\xb2", "\u0664\u0660\u0664"]:
            response = self.post_json(self.envelope(original_status=status))
            self.assert_error(response, 400, "bad_status")

    def test_deeply_nested_json_gets_400_not_500(self):
        response = self.post_json(gzip.compress(b'{"a":' * 100_000))

        self.assert_error(response, 400, "bad_json")

    # -- the monitoring probe

    def test_a_delivery_with_the_monitoring_user_agent_is_still_stored(self):
        response = self.post(HTTP_USER_AGENT="Crawlbase Monitoring Bot 1.0")

        assert response.json()["status"] == "queued"
        assert Delivery.objects.get().rid == "r-1"

    def test_a_request_with_no_url_and_no_body_is_a_probe(self):
        response = self.post(b"", HTTP_URL="", HTTP_CONTENT_ENCODING="")

        assert response.json() == {"status": "ok", "probe": True}
        assert not Delivery.objects.exists()

    # -- gzip

    def test_a_multi_member_gzip_delivery_is_read_whole(self):
        half = len(INSTALL) // 2
        body = gzip.compress(INSTALL[:half].encode()) + gzip.compress(
            INSTALL[half:].encode()
        )

        assert self.post(body).json()["status"] == "queued"
        assert self.process("r-1").outcome == Delivery.Outcome.EMBEDDED
        assert "latest release" in self.page().markdown  # from the second member

    def test_junk_after_the_gzip_stream_gets_400(self):
        body = gzip.compress(INSTALL.encode()) + b"trailing junk"

        self.assert_error(self.post(body), 400, "bad_gzip")
        assert not Delivery.objects.exists()

    # -- URLs

    def test_the_delivery_is_stored_under_its_canonical_url(self):
        self.post(HTTP_URL="HTTPS://DOCS.EXAMPLE.COM:443/install/?utm_source=x#top")

        assert Delivery.objects.get().url == f"{SITE}/install/"

    def test_two_spellings_of_one_url_make_one_page(self):
        self.post(HTTP_RID="upper", HTTP_URL="HTTPS://DOCS.EXAMPLE.COM/Upper")
        self.post(HTTP_RID="lower", HTTP_URL=f"{SITE}/Upper")
        self.process("upper")
        self.process("lower")

        assert list(Page.objects.values_list("url", flat=True)) == [f"{SITE}/Upper"]

    # -- failures of the server itself

    def test_a_database_outage_gets_503_json_with_retry_after(self):
        for error in [
            OperationalError("server closed the connection unexpectedly"),
            InterfaceError("connection already closed"),
        ]:
            with mock.patch(
                "ingest.delivery.webhook.delivery_receive",
                autospec=True,
                side_effect=error,
            ):
                response = self.post()

            self.assert_error(response, 503, "database_unavailable")
            assert int(response["Retry-After"]) > 0

    def test_an_unexpected_error_gets_a_json_500_and_a_log_line_without_the_page(self):
        failure = RuntimeError(f"boom: {INSTALL}")
        with (
            mock.patch(
                "ingest.delivery.webhook.delivery_receive",
                autospec=True,
                side_effect=failure,
            ),
            self.assertLogs("ingest.delivery.webhook", level="ERROR") as logs,
        ):
            response = self.post()

        self.assert_error(response, 500, "internal_error")
        assert "RuntimeError" in logs.output[0]
        assert not any("Requirements" in line or TOKEN in line for line in logs.output)


class DuplicateLogTests(IngestWorld):
    def test_a_repeated_rid_leaves_no_body_in_the_database_log(self):
        from kbsite.pgembedded.server import EmbeddedPostgres

        root = connection.settings_dict.get("EMBEDDED_ROOT")
        if root is None:
            self.skipTest("DATABASE_URL is set: the server's log is not this test's")
        log = EmbeddedPostgres.at(root).log_file
        body = "<p>" + "marker-of-the-page-body " * 40_000 + "</p>"  # ~1 MB
        self.receive(body=body, rid="same-rid")
        before = log.stat().st_size

        for _ in range(3):
            self.receive(body=body, rid="same-rid")

        assert Delivery.objects.filter(rid="same-rid").count() == 1
        assert log.stat().st_size - before < 10_000
        assert (
            "marker-of-the-page-body" not in log.read_text(errors="replace")[-50_000:]
        )
