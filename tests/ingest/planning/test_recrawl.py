"""Pushing pages to Crawlbase and recrawling them on their own schedules."""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import Permission, User
from django.core.cache import cache
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone
from django.utils.module_loading import import_string
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from ingest.delivery.models import Delivery
from ingest.planning.recrawl import (
    SITEMAPS_TASK,
    recrawl_due,
    source_crawl_start,
    urls_recrawl,
)
from ingest.planning.sitemap_seeds import source_sitemaps_push
from ingest.pushing.models import Push
from ingest.pushing.services import pushes_send
from kbsite.sitemaps import Entry
from retrieval.models import Chunk
from retrieval.questions import search_run
from sources.models import SYSTEM, Page, Source
from sources.replan import checks_since, source_schedule_replan, sources_schedule_replan
from sources.services import pages_sitemap_dated
from tests.conftest import at_once
from tests.fakes.crawlbase_api import CRAWLER, TOKEN, FakeCrawlbaseAPI, SitePage
from tests.fakes.site import FakeSite, sitemap_xml
from tests.world import SITE, page_html, run_queued
from tests.world import TOKEN as WEBHOOK_TOKEN

DELIVERY_TASK = "ingest.tasks.delivery_process_task"


@pytest.fixture
def crawlbase(settings):
    """The fake Crawling API; it delivers what it was pushed to a live webhook
    when the test asks for one (``live_webhook``)."""
    with FakeCrawlbaseAPI() as fake:
        settings.CRAWLBASE_TOKEN = TOKEN
        settings.CRAWLBASE_CRAWLER = CRAWLER
        settings.CRAWLBASE_API_URL = fake.base_url
        settings.CRAWLBASE_RETRY_SECONDS = 0.05
        settings.WEBHOOK_TOKEN = WEBHOOK_TOKEN
        settings.DELIVERY_RETRY_SECONDS = 0
        yield fake


@pytest.fixture
def live_webhook(crawlbase, live_server):
    """The fake Crawling API delivers to this test's live webhook. A live server
    makes the test transactional (its thread reads committed rows only): each
    such test empties every table after it, a fraction of a second."""
    crawlbase.callback_url = (
        f"{live_server.url}/webhooks/crawlbase/?token={WEBHOOK_TOKEN}"
    )


@pytest.fixture
def source(db):
    return Source.objects.create(
        name="Example docs",
        fetcher=Source.Fetcher.CRAWLBASE,
        seed_urls=f"{SITE}/\n",
        deny_patterns="/private/",
    )


def make_page(source: Source, path: str, **fields) -> Page:
    return Page.objects.create(source=source, url=f"{SITE}{path}", **fields)


def queued_urls() -> list[str]:
    return sorted(Push.objects.in_flight().values_list("url", flat=True))


# -- which pages are due -------------------------------------------------------------


@pytest.mark.django_db
def test_due_selection_honours_each_pages_own_time_and_tombstones(source):
    now = timezone.now()
    make_page(source, "/new/")  # never crawled
    make_page(source, "/due/", status="live", next_crawl_at=now - timedelta(minutes=1))
    make_page(source, "/later/", status="live", next_crawl_at=now + timedelta(hours=1))
    make_page(source, "/gone/", status="gone", next_crawl_at=now + timedelta(days=30))
    make_page(source, "/gone-due/", status="gone", next_crawl_at=now - timedelta(1))

    plan = recrawl_due(now=now)

    assert queued_urls() == [f"{SITE}/due/", f"{SITE}/gone-due/", f"{SITE}/new/"]
    assert (plan.queued, plan.in_flight) == (3, 0)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("limit", "pushed"), [(None, ["/z/", "/m/", "/a/"]), (2, ["/z/", "/m/"])]
)
def test_the_most_overdue_pages_get_the_first_pushes(source, limit, pushed):
    now = timezone.now()
    # Most overdue first is not the order of their addresses.
    for path, hours in [("/a/", 1), ("/z/", 3), ("/m/", 2)]:
        overdue = now - timedelta(hours=hours)
        make_page(source, path, status="live", next_crawl_at=overdue)

    recrawl_due(now=now, limit=limit)

    sent_first = Push.objects.order_by("queued_at", "pk").values_list("url", flat=True)
    assert list(sent_first) == [f"{SITE}{path}" for path in pushed]


@pytest.mark.django_db
def test_a_page_in_flight_is_not_pushed_again(source):
    make_page(source, "/a/")

    first, second = recrawl_due(), recrawl_due()

    assert (first.queued, second.queued, second.in_flight) == (1, 0, 1)
    assert Push.objects.count() == 1


@pytest.mark.django_db
def test_a_dry_run_counts_and_queues_nothing(source):
    make_page(source, "/a/")
    make_page(source, "/b/")

    plan = recrawl_due(dry_run=True)

    assert plan.selected == 2
    assert not Push.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_two_recrawls_at_once_push_each_due_url_once(source):
    for n in range(200):
        make_page(source, f"/p{n}/")
    plans = at_once(recrawl_due, times=2)

    assert Push.objects.count() == 200
    assert Push.objects.values("page").distinct().count() == 200
    assert sum(p.queued for p in plans) == 200


@pytest.mark.django_db
def test_a_sent_push_with_no_delivery_in_time_is_pushed_again(source, settings):
    page = make_page(source, "/a/")
    old = timezone.now() - timedelta(seconds=settings.CRAWLBASE_PUSH_TIMEOUT + 60)
    Push.objects.create(
        page=page, url=page.url, rid="lost", state="sent", pushed_at=old
    )

    plan = recrawl_due()

    assert plan.queued == 1
    assert Push.objects.get(rid="lost").state == Push.State.EXPIRED
    assert Push.objects.get(state=Push.State.QUEUED).page == page


# -- sending -------------------------------------------------------------------------


@pytest.mark.django_db
def test_pushes_go_through_the_sdk_with_the_crawler_and_the_sources_options(
    source, crawlbase
):
    source.page_wait, source.ajax_wait, source.crawlbase_format = 2000, True, "md"
    source.save()
    urls_recrawl(urls=[f"{SITE}/a/?utm_source=x#top"], user=SYSTEM)

    report = pushes_send()

    (pushed,) = crawlbase.pushes
    assert pushed.url == f"{SITE}/a/", "normalized before it is pushed"
    assert pushed.params | {"url": "", "token": ""} == {
        "url": "", "token": "", "crawler": CRAWLER, "callback": "true",
        "format": "md", "page_wait": "2000", "ajax_wait": "true",
    }  # fmt: skip
    push = Push.objects.get()
    assert (push.state, push.rid) == (Push.State.SENT, pushed.rid)
    assert push.page.pushed_url == f"{SITE}/a/"
    assert report.pushed == 1


@pytest.mark.django_db
def test_429_slows_pushing_down_and_loses_nothing(source, crawlbase):
    urls_recrawl(urls=[f"{SITE}/p{n}/" for n in range(5)], user=SYSTEM)
    crawlbase.refuse_next(3)

    report = pushes_send()

    assert len(crawlbase.refused) == 3
    assert sorted(crawlbase.urls()) == sorted(f"{SITE}/p{n}/" for n in range(5))
    assert set(Push.objects.values_list("state", flat=True)) == {Push.State.SENT}
    assert (report.pushed, report.retried, report.failed) == (5, 3, 0)
    # Each refusal paused the sender before anything else went out.
    gaps = [b - a for a, b in itertools.pairwise(crawlbase.refused)]
    assert all(gap >= 0.05 for gap in gaps)


@pytest.mark.slow  # thirty pushes at twenty a second
@pytest.mark.django_db
@override_settings(CRAWLBASE_PUSH_RATE=20)
def test_pushes_stay_within_the_providers_rate(source, crawlbase):
    crawlbase.max_per_second = 20  # more would be answered 429
    urls_recrawl(urls=[f"{SITE}/p{n}/" for n in range(30)], user=SYSTEM)

    report = pushes_send()

    assert report.pushed == 30
    assert crawlbase.refused == []


@pytest.mark.django_db
def test_the_sdk_answer_is_read_whatever_its_content_type(source, crawlbase):
    crawlbase.json_content_type = "application/json"
    urls_recrawl(urls=[f"{SITE}/a/"], user=SYSTEM)

    pushes_send()

    assert Push.objects.get().rid == crawlbase.pushes[0].rid


@pytest.mark.django_db
@pytest.mark.usefixtures("live_webhook")
def test_links_out_of_scope_are_never_pushed(source, crawlbase):
    crawlbase.site[f"{SITE}/"] = SitePage(
        body=page_html("Home", ("Start", "Welcome."))
        + f'<a href="/guide/">Guide</a><a href="{SITE}/private/keys">Keys</a>'
        '<a href="https://elsewhere.example.org/">Elsewhere</a>'
        '<a href="/guide/?utm_source=home#intro">Guide again</a>'
    )
    source_crawl_start(source=source)
    pushes_send()
    crawlbase.deliver_pending()

    run_queued(DELIVERY_TASK)
    pushes_send()

    assert crawlbase.urls() == [f"{SITE}/", f"{SITE}/guide/"]
    assert not Page.objects.filter(url__contains="private").exists()


# -- the whole loop ------------------------------------------------------------------


def crawl(crawlbase: FakeCrawlbaseAPI, *, urls: list[str] | None = None) -> list:
    """One round trip: queue (these URLs, or the due pages), push, deliver to the
    webhook, run the delivery jobs; returns their outcomes."""
    if urls is None:
        recrawl_due()
    else:
        urls_recrawl(urls=urls, user=SYSTEM)
    pushes_send()
    crawlbase.deliver_pending()
    return run_queued(DELIVERY_TASK)


def make_due(page: Page) -> None:
    Page.objects.filter(pk=page.pk).update(next_crawl_at=timezone.now())


def edited_page(second: str) -> str:
    return page_html(
        "Install",
        ("Requirements", "You need Python 3.11 and PostgreSQL 16 to run it."),
        ("With pip", second),
        ("Upgrading", "Read the release notes before every upgrade."),
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("live_webhook")
def test_push_deliver_index_recrawl_one_changed_chunk_then_gone(source, crawlbase):
    url = f"{SITE}/install/"
    crawlbase.site[url] = SitePage(body=edited_page("Run pip install example."))
    assert crawl(crawlbase, urls=[url]) == ["embedded"]
    page = Page.objects.get(url=url)
    before = dict(page.chunks.values_list("heading", "embed_hash"))
    assert page.is_live and len(before) >= 3

    # Time passes; the site edits one paragraph; the page comes due.
    crawlbase.site[url] = SitePage(body=edited_page("Run pipx install example."))
    make_due(page)
    assert crawl(crawlbase) == ["embedded"]

    after = dict(
        Page.objects.get(pk=page.pk).chunks.values_list("heading", "embed_hash")
    )
    changed = {h for h in after if after[h] != before.get(h)}
    assert changed == {"Install › With pip"}
    delivery = Delivery.objects.order_by("-pk").first()
    assert "1 new chunk texts" in delivery.error
    assert Push.objects.filter(state=Push.State.DELIVERED).count() == 2

    # Then it disappears.
    crawlbase.site[url] = SitePage(status=410, body="Gone")
    make_due(page)
    assert crawl(crawlbase) == ["deleted"]
    assert Page.objects.get(pk=page.pk).status == Page.Status.GONE
    assert not Chunk.objects.filter(page=page).exists()


def key_words_page(edited: int | None = None) -> str:
    """A reference table as long as the PostgreSQL manual's key words, one cell of
    row ``edited`` a sentence longer."""
    rows = "".join(
        f"<tr><td><code>KEYWORD_{n:03d}</code></td>"
        f"<td>reserved{' (can be function or type)' if n % 3 else ''}"
        f"{' Added by the recrawl.' if n == edited else ''}</td>"
        f"<td>{'non-reserved' if n % 2 else 'reserved'}</td></tr>"
        for n in range(400)
    )
    return (
        "<html><head><title>Key Words</title></head><body><main><h1>Key Words</h1>"
        "<h2>The list</h2><p>Every key word of the language.</p><table><tr>"
        f"<th>Key word</th><th>PostgreSQL</th><th>SQL:2016</th></tr>{rows}</table>"
        "</main></body></html>"
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("row", [5, 200, 395])
@pytest.mark.usefixtures("live_webhook")
def test_one_edited_row_of_a_long_table_embeds_only_the_chunks_around_it(
    source, crawlbase, row
):
    url = f"{SITE}/keywords/"
    crawlbase.site[url] = SitePage(body=key_words_page())
    assert crawl(crawlbase, urls=[url]) == ["embedded"]
    page = Page.objects.get(url=url)
    before = set(page.chunks.values_list("embed_hash", flat=True))
    assert len(before) >= 8

    crawlbase.site[url] = SitePage(body=key_words_page(edited=row))
    make_due(page)
    assert crawl(crawlbase) == ["embedded"]

    after = set(page.chunks.values_list("embed_hash", flat=True))
    assert 1 <= len(after - before) <= 2, f"{len(after - before)} of {len(after)}"
    delivery = Delivery.objects.order_by("-pk").first()
    assert f"{len(after - before)} new chunk texts" in delivery.error


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("live_webhook")
def test_a_delivery_is_matched_to_its_push_across_a_redirect(source, crawlbase):
    old, new = f"{SITE}/setup/", f"{SITE}/install/"
    crawlbase.site[old] = SitePage(body=edited_page("Run pip."), final_url=new)

    crawl(crawlbase, urls=[old])

    push = Push.objects.get()
    delivery = Delivery.objects.get()
    assert delivery.push == push and delivery.url == new
    assert push.state == Push.State.DELIVERED
    assert Page.objects.get(url=old).redirect_to == Page.objects.get(url=new)
    assert Page.objects.get(url=new).is_live


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("status", [404, 410])
@pytest.mark.usefixtures("live_webhook")
def test_a_page_whose_address_now_leads_to_a_gone_page_leaves_search(
    source, crawlbase, status
):
    old, new = f"{SITE}/setup/", f"{SITE}/install/"
    crawlbase.site[old] = SitePage(body=edited_page("Run zyxwal install."))
    crawl(crawlbase, urls=[old])
    assert urls_found("zyxwal") == [old]

    # The site now sends the old address to a page that is not there.
    crawlbase.site[old] = SitePage(status=status, body="Not found", final_url=new)
    make_due(Page.objects.get(url=old))

    assert crawl(crawlbase) == ["deleted"]
    assert urls_found("zyxwal") == []
    page = Page.objects.get(url=old)
    assert page.status == Page.Status.REDIRECTED and not page.chunks.exists()
    assert page.redirect_to.url == new
    assert Page.objects.get(url=new).status == Page.Status.GONE


def urls_found(query: str) -> list[str]:
    reader = User.objects.get_or_create(username="reader")[0]
    return [c.page.url for c in search_run(query=query, user=reader, k=5)]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("live_webhook")
def test_a_captcha_keeps_the_page_and_counts_a_failure(source, crawlbase):
    url = f"{SITE}/install/"
    crawlbase.site[url] = SitePage(body=edited_page("Run pip."))
    crawl(crawlbase, urls=[url])

    crawlbase.site[url] = SitePage(body="<h1>Are you a robot?</h1>", pc_status=503)

    assert crawl(crawlbase, urls=[url]) == ["skipped"]
    page = Page.objects.get(url=url)
    assert page.is_live and "pip" in page.markdown
    assert page.failure_count == 1


# -- the commands --------------------------------------------------------------------


@pytest.mark.django_db
def test_crawlbase_push_sends_urls_and_says_what_it_did(source, crawlbase):
    out = StringIO()

    call_command("crawlbase_push", f"{SITE}/a/", f"{SITE}/b/", "https://else.where/",
                 stdout=out, stderr=StringIO())  # fmt: skip

    assert sorted(crawlbase.urls()) == [f"{SITE}/a/", f"{SITE}/b/"]
    summary = out.getvalue()
    assert "2 queued for Crawlbase" in summary and "1 URL out of every scope" in summary
    assert "2 pushed" in summary


@pytest.mark.django_db
def test_crawlbase_push_of_a_source_pushes_its_seeds(source, crawlbase):
    call_command("crawlbase_push", "--source", "Example docs", "--no-sitemaps",
                 stdout=StringIO(), stderr=StringIO())  # fmt: skip

    assert crawlbase.urls() == [f"{SITE}/"]


# -- sitemaps of Crawlbase sources ----------------------------------------------------


@pytest.fixture
def mapped_site(settings):
    """A site whose robots.txt names a sitemap index (behind a redirect), whose
    child sitemap lists pages in and out of the source's scope."""
    settings.CRAWL_ALLOW_PRIVATE_ADDRESSES = True
    with FakeSite() as site:
        site.robots(f"User-agent: *\nDisallow:\nSitemap: {site.url('/old-map.xml')}\n")
        site.redirect("/old-map.xml", "/index.xml")
        site.add("/index.xml", sitemap_xml([site.url("/docs.xml")], index=True))
        site.add("/docs.xml", sitemap_xml([
            site.url("/docs/a/"), site.url("/docs/b/?utm_source=map"),
            site.url("/docs/private/keys/"), site.url("/blog/news/"),
            "https://elsewhere.example.org/docs/", site.url("/docs/c/"),
        ]))  # fmt: skip
        yield site


@pytest.fixture
def mapped_source(db, mapped_site):
    return Source.objects.create(
        name="Mapped docs",
        fetcher=Source.Fetcher.CRAWLBASE,
        seed_urls=mapped_site.url("/docs/"),
        allow_patterns="^" + re.escape(mapped_site.url("/docs/")),
        deny_patterns="/private/",
        max_pages=3,
    )


@pytest.mark.django_db
def test_a_new_crawlbase_source_pushes_what_its_sitemaps_list_in_scope(
    mapped_site, mapped_source, crawlbase, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        source_crawl_start(source=mapped_source)

    assert run_queued(SITEMAPS_TASK) == [
        "2 sitemaps read, 6 URLs listed, 3 in scope; "
        "2 pages selected: 2 queued for Crawlbase"
    ]
    pushes_send()
    # The seed, then the sitemap's covered URLs (tracking parameters dropped), up
    # to max_pages: /docs/c/ had no room; private, blog and other hosts no scope.
    assert crawlbase.urls() == [
        mapped_site.url("/docs/"), mapped_site.url("/docs/a/"),
        mapped_site.url("/docs/b/"),
    ]  # fmt: skip
    assert mapped_site.requested("/robots.txt") == 1


@pytest.mark.django_db
def test_crawlbase_push_of_a_source_reads_its_sitemaps_and_says_so(
    mapped_site, mapped_source, crawlbase
):
    out = StringIO()

    call_command("crawlbase_push", "--source", "Mapped docs",
                 stdout=out, stderr=StringIO())  # fmt: skip

    assert "sitemaps: 2 sitemaps read, 6 URLs listed, 3 in scope" in out.getvalue()
    assert "3 queued for Crawlbase" in out.getvalue()
    assert len(crawlbase.urls()) == 3


@pytest.mark.django_db
def test_a_missing_sitemap_is_reported_and_the_seeds_still_go(
    mapped_site, mapped_source, crawlbase
):
    mapped_site.robots("User-agent: *\nDisallow:\n")
    mapped_site.add("/sitemap.xml", "", status=404)

    seeds, plan = source_sitemaps_push(source=mapped_source)

    assert str(seeds) == (
        f"0 sitemaps read, 0 URLs listed, 0 in scope; 1 failed: "
        f"{mapped_site.url('/sitemap.xml')}: HTTP 404"
    )
    assert plan.queued == 0


@pytest.mark.django_db
def test_a_known_page_the_sitemap_dates_after_its_last_check_is_due_for_a_push(
    mapped_site, mapped_source, crawlbase
):
    # /docs/a/ was checked before the sitemap's date (2026-11-01), /docs/b/ after.
    checked = {"/docs/a/": datetime(2026, 10, 1, tzinfo=UTC),
               "/docs/b/": datetime(2026, 11, 20, tzinfo=UTC)}  # fmt: skip
    for path, at in checked.items():
        Page.objects.create(
            source=mapped_source, url=mapped_site.url(path), status=Page.Status.LIVE,
            last_verified_at=at, next_crawl_at=timezone.now() + timedelta(days=5),
        )  # fmt: skip

    source_sitemaps_push(source=mapped_source)

    due = Page.objects.due(now=timezone.now()).filter(last_verified_at__isnull=False)
    assert list(due.values_list("url", flat=True)) == [mapped_site.url("/docs/a/")]
    plan = recrawl_due(source=mapped_source)
    assert mapped_site.url("/docs/a/") in queued_urls() and plan.queued >= 1
    assert mapped_site.url("/docs/b/") not in queued_urls()


@pytest.mark.django_db
def test_recrawl_dry_run_and_limit(source, crawlbase):
    for n in range(5):
        make_page(source, f"/p{n}/")
    out = StringIO()

    call_command("recrawl", "--dry-run", stdout=out)
    assert "5 pages selected" in out.getvalue() and not Push.objects.exists()

    call_command("recrawl", "--limit", "2", stdout=StringIO(), stderr=StringIO())
    assert len(crawlbase.pushes) == 2


@pytest.mark.django_db
def test_commands_fail_clearly_without_crawlbase_settings(source, settings):
    settings.CRAWLBASE_TOKEN = ""
    make_page(source, "/a/")

    with pytest.raises(CommandError, match="CRAWLBASE_TOKEN and CRAWLBASE_CRAWLER"):
        call_command("recrawl", stdout=StringIO(), stderr=StringIO())
    assert Push.objects.get().state == Push.State.QUEUED, "kept for later"


@pytest.mark.django_db
def test_an_unknown_source_name_is_an_error_naming_the_known_ones(source):
    with pytest.raises(CommandError, match="sources: Example docs"):
        call_command("recrawl", "--source", "Nope")


# -- the automation endpoints --------------------------------------------------------


def api_as(user: User | None) -> APIClient:
    client = APIClient()
    if user is not None:
        token = Token.objects.create(user=user)
        client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture
def staff(db):
    """Staff who may change sources (and so recrawl them)."""
    user = User.objects.create_user("ops", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="change_source"))
    return api_as(user)


@pytest.mark.django_db
def test_only_staff_tokens_may_recrawl_or_read_stats(source):
    anonymous, reader = api_as(None), api_as(User.objects.create_user("reader"))

    for path in ["/api/recrawl/", "/api/crawler-stats/"]:
        call = "post" if path == "/api/recrawl/" else "get"
        assert getattr(anonymous, call)(path, {}, format="json").status_code == 401
        assert getattr(reader, call)(path, {}, format="json").status_code == 403


@pytest.mark.django_db
def test_staff_queue_urls_or_a_sources_due_pages(source, staff):
    make_page(source, "/due/")

    by_urls = staff.post(
        "/api/recrawl/", {"urls": [f"{SITE}/a/", "https://else.where/"]}, format="json"
    )
    by_source = staff.post("/api/recrawl/", {"source": source.pk}, format="json")

    assert by_urls.status_code == 202
    assert by_urls.json() | {"selected": 0} == {
        "selected": 0, "queued": 1, "in_flight": 0, "fetching": 0,
        "out_of_scope": 1,
    }  # fmt: skip
    assert by_source.status_code == 202 and by_source.json()["queued"] == 1
    assert queued_urls() == [f"{SITE}/a/", f"{SITE}/due/"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "selected"),
    [
        ({"source": "SOURCE", "due": True}, 2),
        ({"source": "SOURCE", "due": False}, 3),
        ({"urls": [f"{SITE}/due/", f"{SITE}/new/", "https://else.where/"]}, 2),
    ],
)
def test_a_dry_run_recrawl_by_the_api_counts_and_pushes_nothing(
    source, staff, crawlbase, body, selected
):
    make_page(source, "/due/")
    make_page(source, "/in-flight/")
    make_page(source, "/later/", next_crawl_at=timezone.now() + timedelta(days=1))
    Push.objects.create(
        rid="flying", page=Page.objects.get(url=f"{SITE}/in-flight/"),
        url=f"{SITE}/in-flight/", state=Push.State.SENT, pushed_at=timezone.now(),
    )  # fmt: skip
    body = {k: source.pk if v == "SOURCE" else v for k, v in body.items()}

    response = staff.post("/api/recrawl/", body | {"dry_run": True}, format="json")
    pushes_send()

    assert response.status_code == 200
    assert response.json()["selected"] == selected
    assert response.json()["queued"] == 0
    assert Push.objects.count() == 1 and crawlbase.pushes == []
    assert not Page.objects.filter(url=f"{SITE}/new/").exists()


@pytest.mark.django_db
def test_a_bad_recrawl_request_is_a_400_with_a_json_error(source, staff):
    for body in [{}, {"urls": ["not a url"]}, {"urls": [f"{SITE}/"], "source": 1},
                 {"source": 999999}, {"source": source.pk, "dryrun": True},
                 {"source": source.pk, "dry_run": "perhaps"}]:  # fmt: skip
        response = staff.post("/api/recrawl/", body, format="json")
        assert response.status_code == 400, body
        assert response.json()["error"]
    assert not Push.objects.exists()


@pytest.mark.django_db
def test_crawler_stats_are_passed_through_and_cached(crawlbase, staff):
    cache.clear()
    crawlbase.stats = {"waiting": 3, "running": 1}

    first = staff.get("/api/crawler-stats/")
    crawlbase.stats = {"waiting": 0}
    second = staff.get("/api/crawler-stats/")

    assert first.status_code == 200 and first.json() == {"waiting": 3, "running": 1}
    assert second.json() == first.json(), "served from the cache"


@pytest.mark.django_db
def test_crawler_stats_failures_are_clear_json_errors(crawlbase, staff, settings):
    cache.clear()
    crawlbase.stats_status = 500
    assert staff.get("/api/crawler-stats/").json()["error"] == "crawlbase_error"

    settings.CRAWLBASE_API_URL = "http://127.0.0.1:9/"  # nothing listens there
    cache.clear()
    unreachable = staff.get("/api/crawler-stats/")
    assert unreachable.status_code == 503
    assert unreachable.json()["error"] == "crawlbase_unreachable"

    settings.CRAWLBASE_TOKEN = ""
    assert staff.get("/api/crawler-stats/").status_code == 503


# -- adaptive intervals --------------------------------------------------------------


def simulate(source: Source, *, days: int) -> dict[str, list]:
    """Each page checked whenever it is due, re-planned daily: the changelog changes
    every hour, the daily pages once a day, the archive never. Returns the pages and
    the archive's interval at the end of each day."""
    changelog, archive = (
        make_page(source, "/changelog/"),
        make_page(source, "/archive/"),
    )
    daily = [make_page(source, f"/p{n}/") for n in range(4)]
    pages = [changelog, archive, *daily]
    start = timezone.now()
    archive_intervals = []
    for day in range(1, days + 1):
        for page in pages:
            while (at := page.next_crawl_at or start) < start + timedelta(days=day):
                last = page.last_verified_at or at - timedelta(days=1)
                if page is changelog:
                    changed = at - last >= timedelta(hours=1)
                else:
                    changed = page is not archive and at.date() != last.date()
                if changed:
                    page.mark_changed(at=at, crawled_at=at, title="T",
                                      markdown=str(at), digest="x")  # fmt: skip
                else:
                    page.mark_verified(at=at, crawled_at=at)
            page.save()
        source_schedule_replan(source=source, now=start + timedelta(days=day))
        for page in pages:
            page.refresh_from_db(fields=["next_crawl_at"])  # re-timed to the plan
            page.source = source  # the new plan, as the next read would see it
        archive_intervals.append(archive.interval)
    return {"pages": [changelog, archive, daily[0]], "archive": archive_intervals}


@pytest.mark.slow  # four months of a source's schedule, day by day
@pytest.mark.django_db
def test_adaptive_intervals_move_within_bounds_toward_each_pages_own_rate(source):
    # Checks a day for the whole source (the changelog alone could use 24): where
    # they go is the schedule's choice.
    source.recrawl_every, source.crawl_budget = timedelta(days=1), 20
    source.save()

    run = simulate(source, days=120)

    changelog, archive, daily = run["pages"]
    assert source.recrawl_min <= changelog.interval < daily.interval
    assert daily.interval < archive.interval <= source.recrawl_max
    at_30, at_60, at_120 = (run["archive"][d - 1] for d in [30, 60, 120])
    assert at_30 < at_60 < at_120, "the archive drifts toward the maximum"
    assert archive.change_rate < daily.change_rate < changelog.change_rate


@pytest.mark.django_db
def test_with_budget_to_spare_a_changelog_is_checked_at_the_shortest_interval(
    source,
):
    source.recrawl_every, source.crawl_budget = timedelta(days=1), 200
    source.save()

    changelog, archive, daily = simulate(source, days=5)["pages"]

    assert changelog.interval == source.recrawl_min
    assert changelog.interval <= daily.interval <= archive.interval


@pytest.mark.django_db
def test_tombstones_are_checked_at_the_longest_interval(source):
    page = make_page(source, "/gone/")
    now = timezone.now()

    page.mark_gone(at=now, crawled_at=now, original_status=404)

    assert page.next_crawl_at == now + source.recrawl_max


@pytest.mark.django_db
def test_a_page_interval_set_by_hand_wins_over_the_schedule(source):
    page = make_page(source, "/fixed/", recrawl_every=timedelta(hours=6))
    now = timezone.now()

    page.mark_verified(at=now, crawled_at=now)

    assert page.next_crawl_at == now + timedelta(hours=6)


# -- the day plan -------------------------------------------------------------------


def checked_pages(source: Source, now, *, count: int, hand_set: int = 0) -> list[Page]:
    """Live pages checked 1 to 7 days ago, at rates from one change a week to one a
    month."""
    pages = []
    for n in range(count):
        pages.append(make_page(
            source, f"/p{n}/", status=Page.Status.LIVE,
            change_rate=1 / (24 * (7 + n % 24)),
            last_verified_at=now - timedelta(hours=24 + (n * 37) % 144),
            next_crawl_at=now + timedelta(days=30),
            recrawl_every=timedelta(hours=6) if n < hand_set else None,
        ))  # fmt: skip
    return pages


@pytest.mark.django_db
def test_a_days_plan_spends_the_days_budget_as_pages_fall_due(source):
    source.recrawl_min, source.recrawl_max = timedelta(days=1), timedelta(days=30)
    source.crawl_budget = 20
    source.save()
    now = timezone.now()
    checked_pages(source, now, count=120)

    plan = source_schedule_replan(source=source, now=now)

    assert plan is not None and source.schedule_plan["planned_at"] == now.isoformat()
    due_today = Page.objects.filter(next_crawl_at__lt=now + timedelta(days=1))
    assert 15 <= due_today.count() <= 20, "re-timed so the day spends its budget"
    for page in Page.objects.all():
        expected = page.last_verified_at + page.interval
        assert page.next_crawl_at == max(now, expected), page.url


@pytest.mark.django_db
def test_pages_timed_by_hand_or_backing_off_keep_their_time(source):
    now = timezone.now()
    hand_set, failing, *others = checked_pages(source, now, count=4, hand_set=1)
    Page.objects.filter(pk=failing.pk).update(failure_count=2)

    source_schedule_replan(source=source, now=now)

    for page in [hand_set, failing]:
        page.refresh_from_db()
        assert page.next_crawl_at == now + timedelta(days=30), page.url
    assert all(
        Page.objects.get(pk=p.pk).next_crawl_at < now + timedelta(days=30)
        for p in others
    )


@pytest.mark.django_db
def test_a_page_a_sitemap_dated_after_its_last_check_stays_due_through_a_plan(
    source,
):
    now = timezone.now()
    dated, *others = checked_pages(source, now, count=4)
    pages_sitemap_dated(
        source=source, entries=[Entry(dated.url, now - timedelta(hours=1))], now=now
    )

    source_schedule_replan(source=source, now=now)

    dated.refresh_from_db()
    assert dated.next_crawl_at == now
    assert all(Page.objects.get(pk=p.pk).next_crawl_at > now for p in others)


@pytest.mark.django_db
def test_the_hourly_schedule_plans_each_source_once_a_day(source):
    now = timezone.now()
    checked_pages(source, now, count=3)
    fixed = Source.objects.create(name="Fixed", seed_urls=f"{SITE}/fixed/",
                                  adaptive_recrawl=False)  # fmt: skip

    assert sources_schedule_replan(now=now) == 1
    assert sources_schedule_replan(now=now + timedelta(hours=23)) == 0
    assert sources_schedule_replan(now=now + timedelta(hours=24)) == 1
    fixed.refresh_from_db()
    assert fixed.schedule_plan is None


@pytest.mark.django_db(transaction=True)
def test_planners_running_at_once_plan_a_source_once(source):
    # The hourly job on two worker nodes at once, or run again by the queue.
    now = timezone.now()
    checked_pages(source, now, count=40)

    planned = at_once(lambda: sources_schedule_replan(now=now), times=4)

    assert sorted(planned) == [0, 0, 0, 1]
    source.refresh_from_db()
    assert source.schedule_plan["planned_at"] == now.isoformat()


@pytest.mark.django_db
def test_migrate_schedules_the_hourly_day_planning():
    from django_q.models import Schedule

    call_command("migrate", verbosity=0, stdout=StringIO())

    job = Schedule.objects.get(name="sources: plan the day's checks")
    assert (job.func, job.minutes) == ("sources.tasks.sources_schedule_replan_task", 60)


@pytest.mark.django_db
def test_migrate_schedules_ingests_sender_of_queued_pushes(source, crawlbase):
    from django_q.models import Schedule

    call_command("migrate", verbosity=0, stdout=StringIO())
    urls_recrawl(urls=[f"{SITE}/a/"], user=SYSTEM)

    job = Schedule.objects.get(name="ingest: send queued pushes")
    summary = import_string(job.func)()

    assert not Schedule.objects.filter(name="sources: send queued pushes").exists()
    assert summary.startswith("1 pushed")
    assert crawlbase.urls() == [f"{SITE}/a/"]
    assert Push.objects.get().state == Push.State.SENT


def test_spending_is_read_from_each_pages_last_checks():
    now = timezone.now()
    since = now - timedelta(days=2)

    assert checks_since(None, [], since) == 0
    assert checks_since(now - timedelta(days=3), [1.0], since) == 0
    assert checks_since(now, [], since) == 1
    # Checks now, 10 h, 30 h and 50 h ago: three within two days.
    assert checks_since(now, [20.0, 20.0, 10.0], since) == 3
    # An hourly page's two days (49 checks, 48 gaps) fit in the 50 gaps kept.
    assert checks_since(now, [1.0] * 50, since) == 49
