"""The webhook over a real socket, delivered by the fake Crawlbase crawler.

Django's test client passes any header through; real servers drop header names with
underscores. These tests go through a real HTTP server to see what Crawlbase's
deliveries really look like on arrival.
"""

from __future__ import annotations

import gzip
import http.client
import json
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import pytest
from django_q.models import OrmQ

from ingest.delivery.models import Delivery
from tests.fakes.crawlbase import MONITOR_AGENT, FakeCrawler
from tests.world import INSTALL, SITE, TOKEN

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def crawler(live_server, settings):
    settings.WEBHOOK_TOKEN = TOKEN
    return FakeCrawler(f"{live_server.url}/webhooks/crawlbase/?token={TOKEN}")


def test_a_real_delivery_arrives_with_its_hyphenated_status_headers(crawler):
    answer = crawler.deliver(
        rid="sock-1", url=f"{SITE}/install/", body=INSTALL, pc_status=503
    )

    assert (answer.status, answer.body["status"], answer.attempts) == (200, "queued", 1)
    delivery = Delivery.objects.get(rid="sock-1")
    assert (delivery.original_status, delivery.crawler_status) == (200, 503)
    assert gzip.decompress(bytes(delivery.body)).decode() == INSTALL


def test_cb_status_is_read_over_a_real_socket_too(crawler):
    crawler.deliver(rid="sock-cb", url=f"{SITE}/a/", body="<p>x</p>",
                    pc_status=502, status_header="CB-Status")  # fmt: skip

    assert Delivery.objects.get(rid="sock-cb").crawler_status == 502


def test_all_three_formats_arrive_over_a_real_socket(crawler):
    for fmt in ["html", "md", "json"]:
        answer = crawler.deliver(
            rid=f"fmt-{fmt}", url=f"{SITE}/{fmt}/", body="# Hi", format=fmt
        )
        assert answer.status == 200, answer.body

    assert Delivery.objects.count() == 3


def test_underscore_header_names_never_reach_the_application(crawler):
    # Why the webhook only reads hyphenated names: a real server drops these.
    parts = urlsplit(crawler.callback_url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    connection.request(
        "POST",
        f"{parts.path}?{parts.query}",
        body=gzip.compress(b"<p>x</p>"),
        headers={
            "rid": "under-1",
            "url": f"{SITE}/u/",
            "Content-Type": "text/plain",
            "original_status": "404",
            "pc_status": "503",
        },  # fmt: skip
    )
    assert connection.getresponse().status == 200

    delivery = Delivery.objects.get(rid="under-1")
    assert (delivery.original_status, delivery.crawler_status) == (None, None)


def test_the_monitoring_probe_is_answered_without_storing_anything(crawler):
    assert crawler.probe().status == 200
    assert not Delivery.objects.exists()


def test_the_fake_crawler_redelivers_until_it_gets_a_2xx(live_server):
    crawler = FakeCrawler(f"{live_server.url}/webhooks/crawlbase/?token=wrong")

    answer = crawler.deliver(rid="again", url=f"{SITE}/x/", body="<p>x</p>")

    assert (answer.status, answer.attempts) == (401, crawler.max_attempts)
    assert not Delivery.objects.exists()


def test_the_same_rid_delivered_100_times_at_once_is_stored_and_queued_once(crawler):
    def send(_):
        return crawler.deliver(rid="storm", url=f"{SITE}/install/", body=INSTALL)

    with ThreadPoolExecutor(max_workers=32) as pool:
        answers = list(pool.map(send, range(100)))

    assert {a.status for a in answers} == {200}
    statuses = sorted(a.body["status"] for a in answers)
    assert statuses.count("queued") == 1
    assert statuses.count("duplicate") == 99
    assert Delivery.objects.filter(rid="storm").count() == 1
    assert OrmQ.objects.count() == 1


def post_raw(crawler: FakeCrawler, headers: list[tuple[str, bytes]], body: bytes):
    """POST with header values as exact bytes, which http.client would re-encode."""
    parts = urlsplit(crawler.callback_url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        connection.putrequest("POST", f"{parts.path}?{parts.query}")
        for name, value in [*headers, ("Content-Length", str(len(body)).encode())]:
            connection.putheader(name, value)
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type"), response.read()
    finally:
        connection.close()


def test_a_raw_superscript_byte_in_a_status_header_gets_400_json(crawler):
    status, content_type, body = post_raw(
        crawler,
        [
            ("rid", b"sock-b2"),
            ("url", f"{SITE}/a/".encode()),
            ("Content-Type", b"text/plain"),
            ("Content-Encoding", b"gzip"),
            ("Original-Status", b"\xb2"),
        ],
        gzip.compress(b"<p>x</p>"),
    )

    assert (status, content_type) == (400, "application/json")
    assert json.loads(body)["error"] == "bad_status"
    assert not Delivery.objects.exists()


def test_a_delivery_sent_with_the_monitoring_user_agent_is_stored(crawler):
    answer = crawler.deliver(
        rid="sock-agent", url=f"{SITE}/install/", body=INSTALL,
        extra_headers={"User-Agent": MONITOR_AGENT},
    )  # fmt: skip

    assert (answer.status, answer.body["status"]) == (200, "queued")
    assert Delivery.objects.filter(rid="sock-agent").exists()
