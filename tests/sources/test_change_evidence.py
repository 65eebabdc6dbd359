"""What the site says about when a page changed: a sitemap's lastmod makes a page
due at once, and a response's Last-Modified tells the change rate how long the new
version had stood when it was found."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from kbsite.sitemaps import Entry
from sources.models import Page, Source
from sources.services import pages_sitemap_dated

SITE = "https://docs.example.com"
NOW = datetime(2026, 12, 3, 15, 0, tzinfo=UTC)


@pytest.fixture
def source(db):
    return Source.objects.create(name="Docs", seed_urls=f"{SITE}/")


def verified_page(source: Source, path: str, *, at: datetime, **fields) -> Page:
    return Page.objects.create(
        source=source,
        url=f"{SITE}{path}",
        status=Page.Status.LIVE,
        last_verified_at=at,
        last_crawled_at=at,
        next_crawl_at=at + timedelta(days=7),
        **fields,
    )


def entry(path: str, lastmod: datetime | None, *, day_only: bool = False) -> Entry:
    return Entry(f"{SITE}{path}", lastmod, day_only=day_only)


def due_paths() -> set[str]:
    due = Page.objects.due(now=NOW)
    return {url.removeprefix(SITE) for url in due.values_list("url", flat=True)}


@pytest.mark.django_db
def test_a_page_whose_sitemap_lastmod_is_newer_than_its_last_check_is_due_now(
    source,
):
    morning = NOW - timedelta(hours=6)
    edited = verified_page(source, "/edited/", at=morning)
    verified_page(source, "/older/", at=morning)
    verified_page(source, "/undated/", at=morning)
    assert due_paths() == set()

    dated = pages_sitemap_dated(
        source=source,
        entries=[
            entry("/older/", morning - timedelta(hours=1)),
            entry("/edited/", NOW - timedelta(hours=1)),
            entry("/undated/", None),
            entry("/not-a-page-yet/", NOW),
        ],
        now=NOW,
    )

    assert dated == [edited.pk]
    assert due_paths() == {"/edited/"}
    edited.refresh_from_db()
    assert edited.site_modified_at == NOW - timedelta(hours=1)
    assert edited.next_crawl_at == NOW


@pytest.mark.django_db
def test_a_lastmod_of_a_day_alone_counts_until_that_days_end(source):
    # Checked this morning; the sitemap says only "today": edited this afternoon
    # for all it says, so it is checked again. Yesterday's date is older.
    today = NOW.replace(hour=0)
    verified_page(source, "/today/", at=NOW - timedelta(hours=6))
    verified_page(source, "/yesterday/", at=NOW - timedelta(hours=6))

    pages_sitemap_dated(
        source=source,
        entries=[
            entry("/today/", today, day_only=True),
            entry("/yesterday/", today - timedelta(days=1), day_only=True),
        ],
        now=NOW,
    )

    assert due_paths() == {"/today/"}


@pytest.mark.django_db
def test_a_page_backing_off_or_out_of_every_scope_keeps_its_time(source):
    later = NOW + timedelta(minutes=30)
    failing = verified_page(source, "/failing/", at=NOW - timedelta(days=2))
    Page.objects.filter(pk=failing.pk).update(failure_count=2, next_crawl_at=later)
    verified_page(source, "/left/", at=NOW - timedelta(days=2))
    Page.objects.filter(url=f"{SITE}/left/").update(
        status=Page.Status.GONE, next_crawl_at=None
    )

    dated = pages_sitemap_dated(
        source=source,
        entries=[entry("/failing/", NOW - timedelta(days=1)), entry("/left/", NOW)],
        now=NOW,
    )

    assert dated == [failing.pk]
    failing.refresh_from_db()
    assert failing.next_crawl_at == later
    assert failing.site_modified_at == NOW - timedelta(days=1)
    assert Page.objects.get(url=f"{SITE}/left/").next_crawl_at is None


@pytest.mark.django_db
def test_a_page_never_checked_counts_as_dated_after_its_check(source):
    new = Page.objects.create(source=source, url=f"{SITE}/new/")

    assert pages_sitemap_dated(
        source=source, entries=[entry("/new/", timezone.now())], now=NOW
    ) == [new.pk]


# -- Last-Modified: how long new content had stood --------------------------------


def checked_page(source: Source, *, at: datetime) -> Page:
    page = verified_page(source, "/guide/", at=at - timedelta(days=1))
    page.mark_verified(at=at, crawled_at=at)  # one check kept already
    return page


@pytest.mark.django_db
def test_new_content_keeps_how_long_it_had_stood_by_its_last_modified(source):
    page = checked_page(source, at=NOW - timedelta(days=2))

    page.mark_changed(
        at=NOW, crawled_at=NOW, title="Guide", markdown="# Guide\n\nNew.",
        digest="b" * 64, modified_at=NOW - timedelta(hours=5),
    )  # fmt: skip

    assert page.check_hours == [24.0, 48.0]
    assert page.check_changed == [False, True]
    assert page.check_quiet_hours == [0.0, 5.0]


@pytest.mark.django_db
def test_the_page_changes_slower_when_its_new_content_had_stood_long(source):
    rates = []
    for stood in [47, 1]:  # changed just after the previous check, or just before
        page = checked_page(source, at=NOW - timedelta(days=2))
        page.mark_changed(
            at=NOW, crawled_at=NOW, title="Guide", markdown="New.",
            digest="b" * 64, modified_at=NOW - timedelta(hours=stood),
        )  # fmt: skip
        rates.append(page.change_rate)
        page.delete()

    assert rates[0] < rates[1]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "modified_at",
    [
        None,
        NOW - timedelta(days=3),  # before the previous check: the site disagrees
        NOW - timedelta(seconds=20),  # a generated page's "now"
        NOW + timedelta(hours=1),  # a clock ahead
    ],
)
def test_a_last_modified_that_cannot_date_the_change_is_not_used(source, modified_at):
    page = checked_page(source, at=NOW - timedelta(days=2))

    page.mark_changed(
        at=NOW, crawled_at=NOW, title="Guide", markdown="New.", digest="b" * 64,
        modified_at=modified_at,
    )  # fmt: skip

    assert page.check_quiet_hours == [0.0, 0.0]


@pytest.mark.django_db
def test_checks_kept_before_quiet_hours_were_kept_count_as_not_said(source):
    page = checked_page(source, at=NOW - timedelta(days=2))
    page.check_hours, page.check_changed = [24.0, 24.0, 24.0], [True, False, False]
    page.check_quiet_hours = []

    page.mark_verified(at=NOW, crawled_at=NOW)

    assert page.check_quiet_hours == [0.0, 0.0, 0.0, 0.0]
    assert len(page.check_hours) == 4
