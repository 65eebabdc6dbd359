"""Saving a source whose crawl cannot fetch its seeds says why on the next page:
the crawler's own checks, made before the crawl and without fetching anything."""

from __future__ import annotations

import contextlib
import time
from unittest import mock

import pytest
from django.contrib.auth import get_user_model
from django.contrib.messages import get_messages
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from ingest.crawl.models import CrawlHost
from ingest.crawl.preflight import source_seeds_check
from ingest.fetchers import safety
from sources.models import Source

HINT = "set CRAWL_ALLOW_PRIVATE_ADDRESSES=true to allow it"


def resolving_to(address: str):
    return mock.patch.object(safety, "resolve", return_value=[address])


def unresolvable(host: str = "docs.nowhere.example"):
    refusal = safety.Refused(f"{host} cannot be resolved: Name or service not known")
    return mock.patch.object(safety, "resolve", side_effect=refusal)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "allow_private", "patch", "reasons"),
    [
        ({"seed_urls": "http://127.0.0.1:8000/docs/"}, False, None,
         [f"127.0.0.1, a loopback address; {HINT}"]),
        ({"seed_urls": "http://127.0.0.1:8000/docs/"}, True, None, []),
        ({"seed_urls": "http://docs.internal.example/"}, False,
         resolving_to("10.0.0.5"),
         [f"docs.internal.example resolves to 10.0.0.5, a private address; {HINT}"]),
        ({"seed_urls": "https://docs.public.example/"}, False,
         resolving_to("93.184.215.14"), []),
        ({"seed_urls": "https://docs.nowhere.example/"}, False, unresolvable(),
         ["docs.nowhere.example cannot be resolved: Name or service not known"]),
        ({"seed_urls": "ftp://files.example.com/docs/"}, False, None,
         ["only http and https URLs are crawled, not ftp"]),
        ({"seed_urls": "http://[::1", "allow_patterns": "^http"}, True, None,
         ["it is not a usable URL: Invalid IPv6 URL"]),
        ({"seed_urls": "http://localhost/docs/", "fetcher": "nstproxy"}, False,
         None, [f"localhost is a loopback name; {HINT}"]),
        ({"seed_urls": "http://localhost/docs/", "fetcher": "crawlbase"}, False,
         None, []),
        ({"seed_urls": "https://docs.public.example/docs/\n"
                       "https://docs.public.example/docs/private/",
          "deny_patterns": "/private/"}, False, resolving_to("93.184.215.14"),
         ["it is out of the source's scope (its deny patterns)"]),
        ({"seed_urls": "http://127.0.0.1:8000/docs/",
          "sitemap_url": "http://127.0.0.1:8000/sitemap.xml"}, False, None,
         [f"127.0.0.1, a loopback address; {HINT}"] * 2),
    ],
    ids=["loopback", "loopback-allowed", "private-name", "public-name",
         "unresolvable", "ftp", "unparsable", "hosted-localhost", "crawlbase",
         "denied-seed", "sitemap-too"],
)  # fmt: skip
def test_each_seed_the_crawler_would_refuse_is_named_with_its_reason(
    fields, allow_private, patch, reasons, settings
):
    settings.CRAWL_ALLOW_PRIVATE_ADDRESSES = allow_private
    source = Source.objects.create(name="Docs", **fields)

    # Names are resolved by the patch; addresses resolve to themselves.
    with patch or contextlib.nullcontext():
        refusals = source_seeds_check(source=source)

    assert [refusal.reason for refusal in refusals] == reasons


@pytest.mark.django_db
def test_a_seed_the_stored_robots_txt_disallows_is_named(settings):
    settings.CRAWL_ALLOW_PRIVATE_ADDRESSES = True
    CrawlHost.objects.create(
        origin="http://127.0.0.1:8000",
        robots_txt="User-agent: *\nDisallow: /docs/\n",
        robots_fetched_at=timezone.now(),
    )
    source = Source.objects.create(
        name="Docs", seed_urls="http://127.0.0.1:8000/docs/\nhttp://127.0.0.1:8000/"
    )

    (refusal,) = source_seeds_check(source=source)

    assert str(refusal) == (
        "http://127.0.0.1:8000/docs/: robots.txt of http://127.0.0.1:8000 disallows it"
    )


@pytest.mark.django_db
def test_a_slow_resolver_leaves_the_answer_to_the_crawl(settings):
    settings.CRAWL_ALLOW_PRIVATE_ADDRESSES = False
    source = Source.objects.create(name="Docs", seed_urls="https://slow.example/")

    def slow(host, port):
        time.sleep(1.0)
        return ["127.0.0.1"]

    started = time.monotonic()
    with mock.patch.object(safety, "resolve", side_effect=slow):
        refusals = source_seeds_check(source=source, seconds=0.1)

    assert refusals == []
    assert time.monotonic() - started < 0.8


# The admin: the warning comes once the save has committed (host names are
# resolved outside the transaction), so these tests commit.

FORM = {
    "name": "Local docs", "fetcher": "direct", "recrawl_every": "7 days",
    "max_pages": "100", "max_depth": "3", "crawlbase_format": "html",
    "adaptive_recrawl": "on", "recrawl_min": "1 hour", "recrawl_max": "30 days",
}  # fmt: skip


@pytest.fixture
def editor_client(client):
    editor = get_user_model().objects.create_superuser(
        "editor", "editor@example.com", "a long test password"
    )
    client.force_login(editor)
    return client


def messages_of(response) -> list[tuple[str, str]]:
    return [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]


@pytest.mark.django_db(transaction=True)
@override_settings(CRAWL_ALLOW_PRIVATE_ADDRESSES=False)
def test_adding_a_loopback_source_says_why_its_first_crawl_is_refused(
    editor_client,
):
    seed = "http://127.0.0.1:8000/docs/"

    response = editor_client.post(
        reverse("admin:sources_source_add"), FORM | {"seed_urls": seed}
    )

    source = Source.objects.get()
    assert response.url == reverse("admin:sources_source_change", args=[source.pk])
    level, text = messages_of(response)[-1]
    assert level == "warning"
    assert text.startswith(
        f"The crawl of Local docs can fetch none of its seeds: {seed}: 127.0.0.1, "
        f"a loopback address; {HINT}. Settings are environment variables"
    )
    assert "then use Crawl now on this page" in text


@pytest.mark.django_db(transaction=True)
@override_settings(CRAWL_ALLOW_PRIVATE_ADDRESSES=True)
def test_adding_a_source_the_crawler_may_fetch_adds_no_warning(editor_client):
    response = editor_client.post(
        reverse("admin:sources_source_add"),
        FORM | {"seed_urls": "http://127.0.0.1:8000/docs/"},
    )

    assert [level for level, _ in messages_of(response)] == ["success", "success"]
    assert messages_of(response)[0][1] == (
        "First crawl: 1 page selected: 1 queued for the built-in fetcher."
    )


@pytest.mark.django_db(transaction=True)
@override_settings(CRAWL_ALLOW_PRIVATE_ADDRESSES=False)
def test_changing_a_sources_seeds_checks_them_again(editor_client):
    source = Source.objects.create(
        name="Docs", seed_urls="https://docs.public.example/", fetcher="direct"
    )
    change = reverse("admin:sources_source_change", args=[source.pk])
    form = FORM | {"name": "Docs", "seed_urls": "https://docs.nowhere.example/"}

    with unresolvable():
        response = editor_client.post(change, form)

    level, text = messages_of(response)[-1]
    assert level == "warning"
    assert "docs.nowhere.example cannot be resolved" in text
    assert "Once that is fixed, Crawl now on this page starts it again." in text


@pytest.mark.django_db(transaction=True)
@override_settings(CRAWL_ALLOW_PRIVATE_ADDRESSES=False)
def test_crawl_now_says_why_the_crawl_cannot_fetch_a_seed(editor_client):
    source = Source.objects.create(
        name="Docs", seed_urls="http://127.0.0.1:8000/docs/", fetcher="direct"
    )

    response = editor_client.post(
        reverse("admin:sources_source_crawl_now", args=[source.pk])
    )

    level, text = messages_of(response)[-1]
    assert level == "warning" and HINT in text
