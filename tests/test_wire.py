from __future__ import annotations

import gzip
import json

import pytest

from ingest import wire

LIMIT = 1_000_000


def headers(**extra: str) -> dict[str, str]:
    base = {
        "rid": "r1",
        "url": "https://docs.example.com/a",
        "original-status": "200",
        "pc-status": "200",
        "content-type": "text/plain",
        "content-encoding": "gzip",
    }
    base.update({k.replace("_", "-"): v for k, v in extra.items()})
    return base


def parse(raw: bytes, **extra: str) -> wire.ParsedDelivery:
    return wire.parse_delivery(headers=headers(**extra), raw=raw, limit=LIMIT)


def test_it_reads_a_gzip_html_delivery():
    delivery = parse(gzip.compress(b"<h1>Hi</h1>"))

    assert delivery.rid == "r1"
    assert delivery.url == "https://docs.example.com/a"
    assert (delivery.original_status, delivery.crawler_status) == (200, 200)
    assert delivery.body_format == wire.BodyFormat.HTML
    assert delivery.text == "<h1>Hi</h1>"


def test_it_detects_gzip_by_its_magic_bytes_without_the_header():
    delivery = parse(
        gzip.compress(b"# Hi"), content_encoding="", content_type="text/markdown"
    )

    assert delivery.text == "# Hi"
    assert delivery.body_format == wire.BodyFormat.MARKDOWN


def test_it_accepts_an_uncompressed_body():
    assert parse(b"plain", content_encoding="").text == "plain"


def test_it_reads_the_json_format_envelope():
    envelope = {"pc_status": 200, "original_status": 404, "rid": "r9",
                "url": "https://x.example/", "body": "<p>x</p>"}  # fmt: skip
    raw = gzip.compress(json.dumps(envelope).encode())
    delivery = wire.parse_delivery(
        headers={"content-type": "gzip/json"}, raw=raw, limit=LIMIT
    )

    assert (delivery.rid, delivery.url) == ("r9", "https://x.example/")
    assert (delivery.original_status, delivery.crawler_status) == (404, 200)
    assert delivery.text == "<p>x</p>"


def test_cb_status_is_read_when_pc_status_is_absent():
    h = headers(content_encoding="")
    del h["pc-status"]
    h["cb-status"] = "503"

    assert wire.parse_delivery(headers=h, raw=b"x", limit=LIMIT).crawler_status == 503


@pytest.mark.parametrize(
    ("value", "expected"),
    [("200", 200), (" 200 ", 200), ("200,200", 200), ("404, 404", 404)],
)
def test_a_repeated_status_that_agrees_is_one_status(value, expected):
    assert wire.parse_status("PC-Status", value) == expected


@pytest.mark.parametrize("value", ["abc", "200,404", "2000", "99", "-1", "20 0"])
def test_an_unparsable_or_conflicting_status_is_refused(value):
    with pytest.raises(wire.DeliveryError) as caught:
        wire.parse_status("PC-Status", value)

    assert caught.value.code == "bad_status"
    assert caught.value.status == 400


def test_a_missing_status_is_none():
    assert wire.parse_status("PC-Status", None) is None
    assert wire.parse_status("PC-Status", "") is None


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"rid": ""}, "missing_rid"),
        ({"url": ""}, "missing_url"),
        ({"url": "ftp://x.example/"}, "bad_url"),
        ({"rid": "a,b"}, "bad_rid"),
        ({"rid": "x" * 101}, "bad_rid"),
    ],
)
def test_required_headers_are_checked(change, code):
    with pytest.raises(wire.DeliveryError) as caught:
        parse(b"x", content_encoding="", **change)

    assert caught.value.code == code


def test_a_repeated_identical_rid_collapses():
    assert parse(b"x", content_encoding="", rid="r1,r1").rid == "r1"


def test_corrupt_gzip_is_refused():
    raw = gzip.compress(b"hello world" * 100)
    broken = raw[:10] + bytes(b ^ 0xFF for b in raw[10:30]) + raw[30:]

    with pytest.raises(wire.DeliveryError) as caught:
        parse(broken)

    assert caught.value.code == "bad_gzip"


def test_truncated_gzip_is_refused():
    with pytest.raises(wire.DeliveryError) as caught:
        parse(gzip.compress(b"hello world" * 100)[:-12])

    assert caught.value.code == "bad_gzip"


def test_a_gzip_bomb_is_stopped_at_the_limit():
    bomb = gzip.compress(b"\0" * (LIMIT * 20))

    with pytest.raises(wire.BodyTooLarge) as caught:
        parse(bomb)

    assert caught.value.status == 413


def test_invalid_utf8_is_refused():
    with pytest.raises(wire.DeliveryError) as caught:
        parse(gzip.compress("café".encode("latin-1")))

    assert caught.value.code == "bad_encoding"


def test_an_unknown_content_type_is_refused_with_415():
    with pytest.raises(wire.DeliveryError) as caught:
        parse(b"x", content_encoding="", content_type="image/png")

    assert (caught.value.code, caught.value.status) == ("unsupported_content_type", 415)


def test_json_that_is_not_an_object_is_refused():
    with pytest.raises(wire.DeliveryError) as caught:
        parse(gzip.compress(b"[1, 2]"), content_type="gzip/json")

    assert caught.value.code == "bad_json"


def test_the_monitoring_probe_is_recognised_by_rid_or_agent():
    assert wire.is_probe_request({"rid": "dummyrequest"})
    assert wire.is_probe_request({"user-agent": "Crawlbase Monitoring Bot 1.0"})
    assert not wire.is_probe_request(
        {"rid": "r1", "user-agent": "Crawlbase Delivery Bot 1.0"}
    )
