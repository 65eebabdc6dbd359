"""Addresses the crawler refuses, at the check and at the socket."""

from __future__ import annotations

from unittest import mock

import httpx2
import pytest

from ingest.crawl.links import header_robots, html_facts, looks_like_page
from ingest.fetchers import safety
from tests.fakes.site import FakeSite, page


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "a loopback address"),
        ("::1", "a loopback address"),
        ("::ffff:127.0.0.1", "a loopback address"),
        ("10.1.2.3", "a private address"),
        ("192.168.0.1", "a private address"),
        ("169.254.169.254", "a cloud metadata address"),
        ("169.254.1.1", "a link-local address"),
        ("fe80::1", "a link-local address"),
        ("100.64.0.1", "a non-public address"),
        ("0.0.0.0", "a private address"),
        ("93.184.215.14", None),
    ],
)
def test_non_public_addresses_are_named(address, kind):
    assert safety.address_refusal(address) == kind


def test_only_http_and_https_pass():
    assert safety.scheme_refusal("https://a.example/") is None
    assert "not file:" in safety.scheme_refusal("file:///etc/passwd")
    with pytest.raises(safety.Refused, match="not gopher:"):
        safety.url_check("gopher://a.example/", allow_private=True)


def test_the_socket_is_opened_only_to_the_checked_address():
    with FakeSite() as site:
        site.add("/", page("Home"))
        transport = safety.guarded_transport(allow_private=False)
        with httpx2.Client(transport=transport) as client:
            with pytest.raises(safety.Refused, match="loopback"):
                client.get(site.url("/"))
            url = f"http://name.example:{site.port}/"
            with mock.patch.object(safety, "resolve", return_value=["127.0.0.1"]):
                with pytest.raises(safety.Refused, match="resolves to 127.0.0.1"):
                    client.get(url)
        assert site.paths() == []

        allowed = safety.guarded_transport(allow_private=True)
        with httpx2.Client(transport=allowed) as client:
            assert client.get(site.url("/")).status_code == 200


def test_links_are_absolute_without_fragments_and_nofollow_is_skipped():
    html = (
        '<base href="https://a.example/docs/"><link rel="canonical" href="/docs/x">'
        '<a href="y.html#part">y</a><a href="mailto:a@b">m</a><a href="#top">t</a>'
        '<a rel="nofollow" href="z.html">z</a>'
    )

    facts = html_facts(html, url="https://a.example/other/", bot_name="kb-crawler")

    assert facts.links == ["https://a.example/docs/y.html"]
    assert facts.canonical == "https://a.example/docs/x"


def test_x_robots_tag_counts_for_everyone_or_for_this_crawler_only():
    assert header_robots("noindex", bot_name="kb-crawler").noindex
    assert header_robots("kb-crawler: nofollow", bot_name="kb-crawler").nofollow
    assert not header_robots("otherbot: noindex", bot_name="kb-crawler").noindex
    assert not header_robots("max-snippet: 20", bot_name="kb-crawler").noindex


def test_paths_that_are_not_pages_are_known_by_extension():
    assert looks_like_page("https://a.example/docs/intro.html")
    assert looks_like_page("https://a.example/docs/")
    assert not looks_like_page("https://a.example/manual.PDF")
    assert not looks_like_page("https://a.example/logo.svg?v=2")
