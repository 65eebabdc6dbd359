"""Which line shapes a source strips: a shape comes in at BOILERPLATE_MIN_SHARE % of
the live pages and, once in, leaves only below BOILERPLATE_KEEP_SHARE %, so a line
on about half of a site's pages is not learned and forgotten page after page."""

from __future__ import annotations

from unittest import mock

import pytest
from django.test import override_settings

from sources.models import LineShape, Page, Source
from sources.services import source_boilerplate_refresh

SHAPE = 42
SETTINGS = {
    "BOILERPLATE_MIN_PAGES": 10,
    "BOILERPLATE_MIN_SHARE": 50,
    "BOILERPLATE_KEEP_SHARE": 40,
}


@pytest.fixture(autouse=True)
def read_pace(monkeypatch):
    """Each test starts with a process that has read nothing."""
    from ingest.delivery import rederive

    monkeypatch.setattr(rederive, "READ_PACE", rederive._ReadPace())


def pages_add(source: Source, count: int, *, status=Page.Status.LIVE) -> None:
    first = source.pages.count()
    Page.objects.bulk_create(
        Page(source=source, url=f"https://docs.example.com/{first + n}/", status=status)
        for n in range(count)
    )


def shape_count(source: Source, pages: int) -> None:
    LineShape.objects.update_or_create(
        source=source, shape=SHAPE, defaults={"pages": pages, "example": "Contents"}
    )


@pytest.mark.django_db
@override_settings(**SETTINGS)
@pytest.mark.parametrize(
    ("live", "carrying", "stripped_before", "stripped_after"),
    [
        (40, 20, False, True),  # 50 %: comes in
        (40, 19, False, False),  # 47.5 %: not yet
        (40, 19, True, True),  # 47.5 %, stripped already: stays
        (40, 16, True, True),  # 40 %: stays
        (40, 15, True, False),  # 37.5 %: leaves
        (41, 17, True, True),  # 41.5 %: stays
        (41, 16, True, False),  # 39 %: leaves (16.4 pages would be 40 %)
        (41, 21, False, True),  # 51 %: comes in
        (41, 20, False, False),  # 48.8 %: not yet (20.5 pages would be 50 %)
        (12, 10, False, True),  # 83 % and the fewest pages: comes in
        (18, 9, False, False),  # half, on too few pages
        (18, 9, True, False),  # the fewest pages hold for staying too
        (100, 40, True, True),  # 40 %, of more pages: stays
        (100, 39, True, False),  # 39 %: leaves
    ],
)
def test_a_shape_comes_in_at_one_bar_and_leaves_below_a_lower_one(
    live, carrying, stripped_before, stripped_after
):
    source = Source.objects.create(name="Docs", seed_urls="https://docs.example.com/")
    pages_add(source, live)
    pages_add(source, 5, status=Page.Status.GONE)  # never counted
    shape_count(source, carrying)
    source.common_shapes = [SHAPE] if stripped_before else []
    source.save(update_fields=["common_shapes"])

    moved, _ = source_boilerplate_refresh(source=source)

    assert (SHAPE in Source.objects.get(pk=source.pk).common_shapes) is stripped_after
    assert moved == ({SHAPE} if stripped_before != stripped_after else set())


@pytest.mark.django_db
@pytest.mark.parametrize(("keep_share", "moves"), [(40, 1), (50, 81)])
def test_a_line_on_about_half_the_pages_is_learned_once_while_a_site_is_crawled(
    keep_share, moves
):
    """Pages delivered one by one, every other one carrying the line. With one bar
    the line is on exactly half the pages after every even page and on fewer after
    every odd one: in at 20 pages (its 10th), then out and in again with every
    page up to 100."""
    source = Source.objects.create(name="Docs", seed_urls="https://docs.example.com/")
    carrying = 0
    moved = 0
    with override_settings(**SETTINGS | {"BOILERPLATE_KEEP_SHARE": keep_share}):
        for number in range(100):
            pages_add(source, 1)
            carrying += number % 2 == 1
            shape_count(source, carrying)
            moved += bool(source_boilerplate_refresh(source=source)[0])

    assert moved == moves
    assert SHAPE in Source.objects.get(pk=source.pk).common_shapes


@pytest.mark.django_db
@override_settings(**SETTINGS)
def test_a_source_read_before_another_process_moved_its_set_takes_the_stored_one():
    """A run loaded its source before another one learned the line: the stored set
    decides which bar the line is held to, and the run reads under that set."""
    source = Source.objects.create(name="Docs", seed_urls="https://docs.example.com/")
    pages_add(source, 40)
    shape_count(source, 18)  # 45 %: between the two bars
    Source.objects.filter(pk=source.pk).update(common_shapes=[SHAPE])
    assert source.common_shapes == []  # as the run loaded it

    moved, _ = source_boilerplate_refresh(source=source)

    assert moved == set()  # the other process moved it, and queued its pages
    assert source.common_shapes == [SHAPE]
    assert Source.objects.get(pk=source.pk).common_shapes == [SHAPE]


@pytest.mark.django_db(transaction=True)
@override_settings(**SETTINGS)
def test_a_set_that_moves_commits_with_the_job_deriving_its_pages_again():
    from django.db import OperationalError
    from django_q.models import OrmQ

    from ingest.delivery import rederive

    source = Source.objects.create(name="Docs", seed_urls="https://docs.example.com/")
    pages_add(source, 20)
    shape_count(source, 20)
    OrmQ.objects.all().delete()

    # The database gone between the two writes: neither is kept.
    lost = OperationalError("the server closed the connection")
    with mock.patch.object(rederive, "async_task", side_effect=lost):
        with pytest.raises(OperationalError):
            rederive.source_boilerplate_catch_up(source=source)
    assert Source.objects.get(pk=source.pk).common_shapes == []

    # So the next catch-up still sees the move, and queues the job.
    source = Source.objects.get(pk=source.pk)
    assert rederive.source_boilerplate_catch_up(source=source)
    assert Source.objects.get(pk=source.pk).common_shapes == [SHAPE]
    assert [job.task["func"] for job in OrmQ.objects.all()] == [rederive.TASK]


def checks(source: Source, reads: int) -> list[bool]:
    """For each of ``reads`` pages of the source about to be read, whether its
    stripped lines were checked (its live pages counted) first."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from ingest.delivery import rederive

    made = []
    for _ in range(reads):
        source = Source.objects.get(pk=source.pk)  # as a delivery's run loads it
        with CaptureQueriesContext(connection) as queries:
            rederive.source_boilerplate_catch_up(source=source, reading=True)
        made.append(any(LineShape._meta.db_table in q["sql"] for q in queries))
    return made


@pytest.mark.django_db
@override_settings(**SETTINGS)
@pytest.mark.parametrize(
    ("live", "every"),
    [
        (0, 1),
        (99, 1),  # fewer live pages than READ_CHECK_SHARE: before every page
        (100, 2),
        (250, 3),
        (1_000, 11),  # once in a hundredth of them, and the read that checks
    ],
)
def test_a_process_reading_a_source_checks_its_lines_once_in_a_hundredth_of_its_pages(
    live, every
):
    source = Source.objects.create(name="Docs", seed_urls="https://docs.example.com/")
    pages_add(source, live)
    for status in (Page.Status.GONE, Page.Status.PENDING, Page.Status.REDIRECTED):
        pages_add(source, 100, status=status)  # never counted

    made = checks(source, 3 * every)

    assert made == [read % every == 0 for read in range(3 * every)]


@pytest.mark.django_db(transaction=True)
@override_settings(**SETTINGS)
def test_a_shape_crossing_the_bar_between_checks_is_learned_at_the_next_one():
    from django_q.models import OrmQ

    from ingest.delivery import rederive

    source = Source.objects.create(name="Docs", seed_urls="https://docs.example.com/")
    pages_add(source, 250)
    shape_count(source, 120)  # 48 %
    assert checks(source, 1) == [True]  # checked: left as it was
    OrmQ.objects.all().delete()

    shape_count(source, 130)  # 52 %: over the bar from now on
    assert checks(source, 2) == [False, False]  # 250 // 100 pages read unchecked
    assert Source.objects.get(pk=source.pk).common_shapes == []

    assert checks(source, 1) == [True]
    assert Source.objects.get(pk=source.pk).common_shapes == [SHAPE]
    # The pages read meanwhile under the old set are derived again, with the rest.
    assert [job.task["args"] for job in OrmQ.objects.all()] == [(source.pk, [SHAPE])]
    assert rederive.TASK in {job.task["func"] for job in OrmQ.objects.all()}

    # The 10-minute refresh checks whatever was read.
    shape_count(source, 90)  # 36 %: under the lower bar
    assert rederive.sources_boilerplate_refresh() == 1
    assert Source.objects.get(pk=source.pk).common_shapes == []


@pytest.mark.django_db
@override_settings(**SETTINGS)
def test_each_source_is_read_at_its_own_pace():
    small = Source.objects.create(name="Small", seed_urls="https://small.example/")
    large = Source.objects.create(name="Large", seed_urls="https://docs.example.com/")
    pages_add(large, 300)
    Page.objects.bulk_create(
        Page(source=small, url=f"https://small.example/{n}/", status=Page.Status.LIVE)
        for n in range(20)
    )

    made = []
    for _ in range(4):
        made.append((checks(small, 1)[0], checks(large, 1)[0]))

    assert made == [(True, True), (True, False), (True, False), (True, False)]
    assert checks(large, 1) == [True]  # the fifth page of it: 300 // 100 + 1 reads


@pytest.mark.django_db
@override_settings(**SETTINGS)
def test_a_source_deleted_meanwhile_has_nothing_to_catch_up():
    from ingest.delivery import rederive

    source = Source.objects.create(name="Docs", seed_urls="https://docs.example.com/")
    pages_add(source, 20)
    shape_count(source, 20)
    loaded = Source.objects.get(pk=source.pk)  # as a run loaded it
    Source.objects.filter(pk=source.pk).delete()

    assert rederive.source_boilerplate_catch_up(source=loaded) is False
    assert rederive.source_boilerplate_catch_up(source=loaded, reading=True) is False


@pytest.mark.django_db
@override_settings(**SETTINGS)
def test_a_delivery_checks_its_sources_lines_at_the_reading_pace():
    from ingest.delivery import rederive
    from tests.world import SITE, ingest_delivery

    source = Source.objects.create(name="Docs", seed_urls=f"{SITE}/")
    pages_add(source, 200)
    counted = mock.patch.object(
        rederive,
        "source_boilerplate_refresh",
        wraps=rederive.source_boilerplate_refresh,
    )
    made = []
    with counted as check:
        for number in range(4):
            ingest_delivery(f"{SITE}/guide/{number}/", f"# Guide {number}\n\nText.")
            made.append(check.call_count)

    assert made == [1, 1, 1, 2]  # the first read, then one in three (200 // 100 + 1)
    assert source.pages.filter(url__startswith=f"{SITE}/guide/").count() == 4
