"""Sitemaps: url sets, indexes, gzip, plain text, robots.txt lines, bad input."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime

import pytest

from kbsite.sitemaps import (
    SitemapError,
    origin_sitemaps,
    parse_lastmod,
    robots_sitemaps,
    sitemap_parse,
)
from tests.fakes.site import sitemap_xml


def test_a_url_set_gives_its_pages_with_their_lastmod():
    sitemap = sitemap_parse(
        sitemap_xml(["https://a.example/1", "https://a.example/2"]).encode()
    )

    assert [entry.url for entry in sitemap.pages] == [
        "https://a.example/1",
        "https://a.example/2",
    ]
    assert sitemap.pages[0].lastmod == datetime(2026, 11, 1, tzinfo=UTC)
    assert sitemap.sitemaps == []


def test_a_lastmod_of_a_day_alone_may_have_changed_until_the_days_end():
    dated = {
        "https://a.example/day": "2026-11-30",
        "https://a.example/hour": "2026-11-30T10:00:00Z",
    }
    sitemap = sitemap_parse(
        sitemap_xml([*dated, "https://a.example/none"], lastmod=dated).encode()
    )

    day, hour, none = sitemap.pages
    assert (day.lastmod, day.day_only) == (datetime(2026, 11, 30, tzinfo=UTC), True)
    assert day.changed_by == datetime(2026, 12, 1, tzinfo=UTC)
    assert hour.changed_by == hour.lastmod == datetime(2026, 11, 30, 10, tzinfo=UTC)
    assert not hour.day_only
    assert none.lastmod is None and none.changed_by is None


def test_an_index_gives_its_child_sitemaps_and_gzip_is_read():
    data = gzip.compress(sitemap_xml(["https://a.example/s1.xml"], index=True).encode())

    sitemap = sitemap_parse(data)

    assert [entry.url for entry in sitemap.sitemaps] == ["https://a.example/s1.xml"]
    assert sitemap.pages == []


def test_a_sitemap_without_namespace_and_a_text_sitemap_are_read():
    bare = b"<urlset><url><loc> https://a.example/x </loc></url></urlset>"
    text = b"https://a.example/a\nnot a url\nhttps://a.example/b\n"

    assert [e.url for e in sitemap_parse(bare).pages] == ["https://a.example/x"]
    assert [e.url for e in sitemap_parse(text).pages] == [
        "https://a.example/a",
        "https://a.example/b",
    ]


def test_entities_are_never_expanded():
    hostile = (
        b'<?xml version="1.0"?><!DOCTYPE u [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
        b"<urlset><url><loc>https://a.example/&x;</loc></url></urlset>"
    )

    urls = [entry.url for entry in sitemap_parse(hostile).pages]

    assert not any("root:" in url for url in urls)


def test_a_gzip_bomb_and_broken_gzip_are_refused():
    bomb = gzip.compress(b"<urlset>" + b" " * 2_000_000 + b"</urlset>")

    with pytest.raises(SitemapError, match="inflates past"):
        sitemap_parse(bomb, limit=1_000_000)
    with pytest.raises(SitemapError, match="not valid gzip"):
        sitemap_parse(b"\x1f\x8bnot gzip at all")


def test_robots_txt_sitemap_lines_are_found_in_any_case():
    robots = (
        "User-agent: *\nDisallow: /x\nSitemap: https://a.example/s.xml\n"
        "sitemap:https://a.example/t.xml.gz\nSitemap: /relative.xml\n"
    )

    assert robots_sitemaps(robots) == [
        "https://a.example/s.xml",
        "https://a.example/t.xml.gz",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-30", datetime(2026, 11, 30, tzinfo=UTC)),
        ("2026-11-30T10:00:00Z", datetime(2026, 11, 30, 10, tzinfo=UTC)),
        ("2026-11-30T11:00:00+01:00", datetime(2026, 11, 30, 10, tzinfo=UTC)),
        ("last tuesday", None),
        ("", None),
    ],
)
def test_lastmod_values_are_read_as_aware_datetimes(text, expected):
    assert parse_lastmod(text) == expected


def test_an_origin_reads_what_robots_txt_names_else_its_sitemap_xml():
    origin = "https://docs.example.com"
    named = "Sitemap: https://docs.example.com/a.xml\n"

    assert origin_sitemaps(origin, named, source_names_one=False) == [
        "https://docs.example.com/a.xml"
    ]
    assert origin_sitemaps(origin, "", source_names_one=False) == [
        "https://docs.example.com/sitemap.xml"
    ]
    assert origin_sitemaps(origin, "", source_names_one=True) == []
