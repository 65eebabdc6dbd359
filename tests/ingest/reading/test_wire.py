from __future__ import annotations

import dataclasses
import gzip
import json

import pytest

from ingest.delivery.headers import parse_delivery, parse_status
from ingest.reading import wire

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
    return parse_delivery(headers=headers(**extra), raw=raw, limit=LIMIT)


def read(raw: bytes, content_type: str = "text/plain") -> str:
    return wire.read_body(raw=raw, content_type=content_type, limit=LIMIT).text


def envelope(**fields: object) -> bytes:
    base = {"pc_status": 200, "original_status": 200, "rid": "r9",
            "url": "https://x.example/", "body": "<p>x</p>"}  # fmt: skip
    base.update(fields)
    return gzip.compress(json.dumps(base).encode())


def parse_json(raw: bytes) -> wire.ParsedDelivery:
    return parse_delivery(headers={"content-type": "gzip/json"}, raw=raw, limit=LIMIT)


def test_it_reads_a_gzip_html_delivery():
    delivery = parse(gzip.compress(b"<h1>Hi</h1>"))

    assert delivery.rid == "r1"
    assert delivery.url == "https://docs.example.com/a"
    assert (delivery.original_status, delivery.crawler_status) == (200, 200)
    assert delivery.body_format == wire.BodyFormat.HTML
    assert not delivery.is_probe
    assert read(gzip.compress(b"<h1>Hi</h1>")) == "<h1>Hi</h1>"


def test_it_detects_gzip_by_its_magic_bytes_without_the_header():
    delivery = parse(
        gzip.compress(b"# Hi"), content_encoding="", content_type="text/markdown"
    )

    assert delivery.body_format == wire.BodyFormat.MARKDOWN
    assert read(gzip.compress(b"# Hi"), "text/markdown") == "# Hi"


def test_it_accepts_an_uncompressed_body():
    assert parse(b"plain", content_encoding="").rid == "r1"
    assert read(b"plain") == "plain"


def test_it_reads_the_json_format_envelope():
    raw = envelope(original_status=404)
    delivery = parse_json(raw)

    assert (delivery.rid, delivery.url) == ("r9", "https://x.example/")
    assert (delivery.original_status, delivery.crawler_status) == (404, 200)
    assert read(raw, "gzip/json") == "<p>x</p>"


def test_cb_status_is_read_when_pc_status_is_absent():
    h = headers(content_encoding="")
    del h["pc-status"]
    h["cb-status"] = "503"

    assert parse_delivery(headers=h, raw=b"x", limit=LIMIT).crawler_status == 503


@pytest.mark.parametrize(
    ("value", "expected"),
    [("200", 200), (" 200 ", 200), ("200,200", 200), ("404, 404", 404)],
)
def test_a_repeated_status_that_agrees_is_one_status(value, expected):
    assert parse_status("PC-Status", value) == expected


@pytest.mark.parametrize("value", ["abc", "200,404", "2000", "99", "-1", "20 0"])
def test_an_unparsable_or_conflicting_status_is_refused(value):
    with pytest.raises(wire.DeliveryError) as caught:
        parse_status("PC-Status", value)

    assert caught.value.code == "bad_status"
    assert caught.value.status == 400


def test_a_missing_status_is_none():
    assert parse_status("PC-Status", None) is None
    assert parse_status("PC-Status", "") is None


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


def test_the_parsed_delivery_keeps_no_copy_of_the_page_text():
    # The job reads the stored raw body; a decoded copy in the webhook is waste.
    assert "text" not in {f.name for f in dataclasses.fields(wire.ParsedDelivery)}


# -- the monitoring probe --------------------------------------------------------


def test_the_monitoring_probe_is_recognised_by_its_rid():
    probe = gzip.compress(json.dumps({"rid": "dummyrequest", "body": ""}).encode())

    assert parse_json(probe).is_probe
    assert parse(b"", rid="dummyrequest", url="", content_encoding="").is_probe


def test_a_request_with_no_url_and_no_body_is_a_probe():
    assert parse(b"", url="", content_encoding="").is_probe
    assert parse_json(envelope(rid="x", url="", body="")).is_probe


def test_a_delivery_is_never_taken_for_a_probe_by_its_user_agent():
    delivery = parse(
        gzip.compress(b"<p>x</p>"), user_agent="Crawlbase Monitoring Bot 1.0"
    )

    assert not delivery.is_probe
    assert delivery.rid == "r1"


# -- NUL characters ---------------------------------------------------------------


@pytest.mark.parametrize("content_type", ["text/markdown", "text/plain"])
def test_nul_characters_are_removed_from_the_page_text(content_type):
    assert read(gzip.compress(b"# Hi\0\n\nText\0."), content_type) == "# Hi\n\nText."


def test_nul_characters_are_removed_from_a_json_delivery():
    raw = envelope(body="# Hi\0 there", rid="r\x009", url="https://x.example/\0a")

    assert read(raw, "gzip/json") == "# Hi there"
    assert (parse_json(raw).rid, parse_json(raw).url) == ("r9", "https://x.example/a")


def test_a_raw_nul_byte_in_json_is_removed_before_parsing():
    raw = gzip.compress(b'{"rid": "r9", "url": "https://x.example/", "body": "a\0b"}')

    assert read(raw, "gzip/json") == "ab"


def test_nul_characters_are_removed_from_header_values():
    delivery = parse(
        b"x",
        content_encoding="",
        rid="r\x001",
        url="https://docs.example.com/\x00a",
        content_type="text/plain; charset=utf-8\x00",
    )

    assert (delivery.rid, delivery.url) == ("r1", "https://docs.example.com/a")
    assert "\0" not in delivery.content_type


def test_an_unpaired_surrogate_in_json_becomes_a_replacement_character():
    raw = gzip.compress(b'{"rid": "r\\ud8009", "url": "https://x.example/",'
                        b' "body": "a\\udc00b"}')  # fmt: skip

    assert read(raw, "gzip/json") == "a\ufffdb"
    assert parse_json(raw).rid == "r\ufffd9"


# -- statuses and JSON -------------------------------------------------------------


@pytest.mark.parametrize("value", ["\xb2", "²⁰⁰", "٤٠٤", "２００", "1" * 5000, "0200"])
def test_a_status_is_ascii_digits_only(value):
    with pytest.raises(wire.DeliveryError) as caught:
        parse_status("Original-Status", value)

    assert (caught.value.code, caught.value.status) == ("bad_status", 400)


@pytest.mark.parametrize("value", ["²", "٤٠٤", [200], {"a": 1}, True, 200.0])
def test_a_json_delivery_status_is_checked_the_same_way(value):
    with pytest.raises(wire.DeliveryError) as caught:
        parse_json(envelope(original_status=value))

    assert caught.value.code == "bad_status"


def test_a_json_status_may_be_a_number_or_a_string():
    assert parse_json(envelope(original_status="404")).original_status == 404
    assert parse_json(envelope(pc_status=None, cb_status=503)).crawler_status == 503


@pytest.mark.parametrize(
    "body",
    [
        b'{"a":' * 100_000,
        b'{"rid": "r", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"rid": "r", "x": ' + b"[" * 40 + b"]" * 40 + b"}",
    ],
)
def test_deeply_nested_json_is_refused(body):
    with pytest.raises(wire.DeliveryError) as caught:
        parse_json(gzip.compress(body))

    assert (caught.value.code, caught.value.status) == ("bad_json", 400)


def test_a_json_number_too_long_to_read_is_refused():
    with pytest.raises(wire.DeliveryError) as caught:
        parse_json(gzip.compress(b'{"rid": ' + b"1" * 5000 + b"}"))

    assert caught.value.code == "bad_json"


@pytest.mark.parametrize("field", ["rid", "url", "body"])
def test_a_json_text_field_must_be_a_string(field):
    with pytest.raises(wire.DeliveryError) as caught:
        parse_json(envelope(**{field: ["x"]}))

    assert caught.value.code == "bad_json"


# -- gzip members -------------------------------------------------------------------


def test_every_gzip_member_is_read():
    raw = gzip.compress(b"<p>one</p>") + gzip.compress(b"<p>two</p>")

    assert read(raw) == "<p>one</p><p>two</p>"
    assert parse(raw).rid == "r1"


def test_many_small_members_are_all_read():
    raw = b"".join(gzip.compress(b"%d," % n) for n in range(2000))

    assert read(raw) == "".join(f"{n}," for n in range(2000))


@pytest.mark.parametrize("junk", [b"\0", b"\0\0\0\0", b"junk after", b"\x1f"])
def test_junk_after_the_gzip_stream_is_refused(junk):
    with pytest.raises(wire.DeliveryError) as caught:
        parse(gzip.compress(b"<p>x</p>") + junk)

    assert (caught.value.code, caught.value.status) == ("bad_gzip", 400)


def test_a_truncated_second_member_is_refused():
    raw = gzip.compress(b"<p>x</p>") + gzip.compress(b"<p>y</p>")[:-4]

    with pytest.raises(wire.DeliveryError) as caught:
        parse(raw)

    assert caught.value.code == "bad_gzip"


def test_the_inflate_limit_applies_to_all_members_together():
    member = gzip.compress(b"a" * (LIMIT // 2 + 1))

    assert len(read(member)) == LIMIT // 2 + 1
    with pytest.raises(wire.BodyTooLarge):
        parse(member + member)


# -- URLs ---------------------------------------------------------------------------


def test_the_url_passed_on_is_canonical():
    delivery = parse(
        b"x",
        content_encoding="",
        url="HTTPS://DOCS.EXAMPLE.COM:443/Upper?utm_source=a#x",
    )

    assert delivery.url == "https://docs.example.com/Upper"


@pytest.mark.parametrize(
    "url", ["https://", "https://x.example:99999/", "https://x.example/" + "a" * 2100]
)
def test_an_unusable_url_is_refused(url):
    with pytest.raises(wire.DeliveryError) as caught:
        parse(b"x", content_encoding="", url=url)

    assert caught.value.code == "bad_url"


def test_a_url_that_canonicalizes_past_the_length_limit_is_refused():
    with pytest.raises(wire.DeliveryError) as caught:
        parse(b"x", content_encoding="", url="https://x.example/" + "é" * 600)

    assert caught.value.code == "bad_url"


MARKDOWN_PAGE = "# Install\n\nRun `pip install example`.\n"
HTML_PAGE = "<!doctype html><html><body><h1>Install</h1></body></html>"


@pytest.mark.parametrize(
    ("content_type", "text", "read_as"),
    [
        # Crawlbase's HTML format comes as text/plain; its Markdown format's
        # content type is not documented, and may be the same.
        ("text/plain", HTML_PAGE, wire.BodyFormat.HTML),
        ("text/plain", MARKDOWN_PAGE, wire.BodyFormat.MARKDOWN),
        ("text/plain; charset=utf-8", MARKDOWN_PAGE, wire.BodyFormat.MARKDOWN),
        ("TEXT/PLAIN", "  \n<div>Install</div>", wire.BodyFormat.HTML),
        ("text/plain", "\ufeff" + HTML_PAGE, wire.BodyFormat.HTML),
        ("", MARKDOWN_PAGE, wire.BodyFormat.MARKDOWN),
        ("", HTML_PAGE, wire.BodyFormat.HTML),
        # A type that says which it is is taken at its word.
        ("text/html", MARKDOWN_PAGE, wire.BodyFormat.HTML),
        ("text/markdown", HTML_PAGE, wire.BodyFormat.MARKDOWN),
        ("application/xhtml+xml", "Install", wire.BodyFormat.HTML),
    ],
)
def test_a_body_whose_type_does_not_say_its_format_is_read_by_what_it_holds(
    content_type, text, read_as
):
    body = wire.read_body(
        raw=gzip.compress(text.encode()), content_type=content_type, limit=LIMIT
    )

    assert (body.format, body.text) == (read_as, text)


def test_markdown_delivered_as_plain_text_keeps_its_title_and_headings():
    from ingest.reading.content import content_derive

    content = content_derive(
        url="https://docs.example.com/install/", raw=MARKDOWN_PAGE.encode(),
        content_type="text/plain", selector="", common=set(), patterns=[],
        limit=LIMIT,
    )  # fmt: skip

    assert content.title == "Install"
    assert content.markdown.startswith("# Install")
