"""The pages a new reading is compared with for near-duplicates: the other live
pages of its source that share a band, by URL, at most the cap; found by the
bands' index whatever the source's size."""

from __future__ import annotations

import random

import pytest
from django.db import connection

from ingest.reading import similarity
from sources import sql
from sources.models import Page, Source

BANDS = [11, 12, 13]


def page(source: Source, name: str, bands: list[int], **fields) -> Page:
    return Page.objects.create(
        source=source,
        url=f"https://docs.example.com/{name}",
        status=fields.pop("status", Page.Status.LIVE),
        minhash=fields.pop("minhash", name.encode()),
        minhash_bands=bands,
        **fields,
    )


@pytest.mark.django_db
def test_other_live_pages_of_the_source_sharing_a_band_by_url():
    source = Source.objects.create(name="Docs", seed_urls="https://docs.example.com/")
    other = Source.objects.create(name="Other", seed_urls="https://other.example/")
    reading = page(source, "reading", BANDS)
    rows = {
        "b-one band": page(source, "b-one band", [99, 12]),
        "a-every band": page(source, "a-every band", BANDS),
        "c-none shared": page(source, "c-none shared", [1, 2, 3]),
        "d-gone": page(source, "d-gone", BANDS, status=Page.Status.GONE),
        "e-no bands yet": page(source, "e-no bands yet", []),
        "g-no signature": page(source, "g-no signature", BANDS, minhash=None),
    }
    page(other, "f-another source", BANDS)

    found = sql.near_duplicate_candidates(
        page_id=reading.pk, source_id=source.pk, bands=BANDS, limit=200
    )

    assert found == [
        (rows["a-every band"].pk, b"a-every band"),
        (rows["b-one band"].pk, b"b-one band"),
        (rows["g-no signature"].pk, None),
    ]
    assert sql.near_duplicate_candidates(
        page_id=reading.pk, source_id=source.pk, bands=BANDS, limit=1
    ) == [(rows["a-every band"].pk, b"a-every band")]
    # A page not saved yet is compared with every page sharing a band.
    unsaved = sql.near_duplicate_candidates(
        page_id=None, source_id=source.pk, bands=BANDS, limit=200
    )
    assert [pk for pk, _ in unsaved] == [
        rows["a-every band"].pk,
        rows["b-one band"].pk,
        rows["g-no signature"].pk,
        reading.pk,
    ]


@pytest.mark.django_db
def test_a_new_reading_in_a_large_source_is_not_compared_by_walking_every_url():
    """Asked with its LIMIT in one query, ordered by URL, the planner walked the
    URL index and tested every page's bands on the way: the whole source, for a
    new reading that shares no band (55 ms a page at 100,000 pages)."""
    from django.test.utils import CaptureQueriesContext

    from ingest.delivery.content import page_similarity_record

    source = Source.objects.create(name="Docs", seed_urls="https://docs.example.com/")
    draw = random.Random(7)
    count, _ = similarity.bands_layout()
    Page.objects.bulk_create(
        Page(
            source=source,
            url=f"https://docs.example.com/{number:05d}",
            status=Page.Status.LIVE,
            minhash_bands=[draw.getrandbits(63) for _ in range(count)],
        )
        for number in range(20_000)
    )
    reading = page(source, "new", [])
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Page._meta.db_table}")
    with CaptureQueriesContext(connection) as queries:
        page_similarity_record(page=reading, sig=similarity.signature("A new page."))
    (lookup,) = [q["sql"] for q in queries if "minhash_bands" in q["sql"]]
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + lookup)
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert "sources_page_url" not in plan, plan
    assert reading.near_duplicate_of_id is None
