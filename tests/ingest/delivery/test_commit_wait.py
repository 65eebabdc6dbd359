"""Which commits of a delivery's run wait for the disk (``synchronous_commit``) and
which do not (``ingest.delivery.sql.commits_unflushed``): those a run made again
writes again do not; the claim, what follows the outcome and a paid request's
vectors and spend do. The session waits again after the run, however it ended."""

from __future__ import annotations

from unittest import mock

import pytest
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext, override_settings
from django_q.models import OrmQ

from ingest.delivery import job
from ingest.delivery.models import Delivery
from sources.models import Page, Source
from tests.fakes.openai_api import FakeOpenAI
from tests.ingest.delivery.jobs import run_as_a_worker
from tests.world import SITE, fake_openai_settings, page_html, receive_delivery

pytestmark = pytest.mark.django_db(transaction=True)

# What each statement of a run writes, by its text.
WRITES = {
    "the claim": lambda sql: sql.startswith(
        'UPDATE "ingest_delivery" SET "state" = \'processing\''
    ),
    "the new page": lambda sql: (
        sql.startswith('INSERT INTO "sources_page"') and "ON CONFLICT" not in sql
    ),
    "hashing vectors": lambda sql: (
        sql.startswith('INSERT INTO "retrieval_embedding"')
        and "VALUES ('hashing/" in sql
    ),
    "openai vectors": lambda sql: (
        sql.startswith('INSERT INTO "retrieval_embedding"')
        and "VALUES ('openai/" in sql
    ),
    "the spend": lambda sql: (
        sql.startswith('UPDATE "ingest_delivery" SET "embedding_requests"')
        or sql.startswith('UPDATE "sources_page" SET "embedding_tokens"')
    ),
    "the outcome": lambda sql: sql.startswith(
        'UPDATE "ingest_delivery" SET "state" = \'done\''
    ),
    "the link's page": lambda sql: (
        sql.startswith('INSERT INTO "sources_page"') and "ON CONFLICT DO NOTHING" in sql
    ),
}


def commit_wait() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return cursor.fetchone()[0]


def waits_by_statement(statements: list[str]) -> list[tuple[str, bool]]:
    """Each statement, with whether the commit that ends its transaction waits
    for the disk, by the settings the run sent before that commit."""
    session, local = True, None
    waits: list[tuple[str, bool]] = []
    open_: list[str] | None = None
    for sql in statements:
        if sql == "SET synchronous_commit = off":
            session = False
        elif sql == "RESET synchronous_commit":
            session = True
        elif sql == "SET LOCAL synchronous_commit = on":
            # Outside a transaction PostgreSQL ignores it.
            local = True if open_ is not None else local
        elif sql == "BEGIN":
            open_, local = [], None
        elif sql in ("COMMIT", "ROLLBACK"):
            commit = session if local is None else local
            waits += [(each, commit) for each in open_]
            open_, local = None, None
        elif open_ is None:
            waits.append((sql, session))  # a statement committed on its own
        else:
            open_.append(sql)
    return waits


def first_crawl_of_a_page_with_a_link(settings: dict) -> list[tuple[str, bool]]:
    with override_settings(**settings):
        Source.objects.create(
            name="Example docs", fetcher=Source.Fetcher.CRAWLBASE, seed_urls=f"{SITE}/"
        )
        OrmQ.objects.all().delete()  # the rescope its creation queued
        body = page_html("Install", ("Next", '<a href="/guide/">The guide</a>.'))
        delivery = receive_delivery(f"{SITE}/install/", body)
        with CaptureQueriesContext(connection) as queries:
            assert run_as_a_worker(delivery) == Delivery.Outcome.EMBEDDED
    assert Page.objects.filter(url=f"{SITE}/guide/").exists(), "the link became a page"
    assert commit_wait() == "on", "the worker's next job waits for the disk again"
    return waits_by_statement([query["sql"] for query in queries.captured_queries])


# Whether each write's commit waits, by the embedder the run embeds with.
WAITS = {
    "hashing": {
        "the claim": True,
        "the new page": False,
        "hashing vectors": False,
        "the spend": False,
        "the outcome": False,
        "the link's page": True,
    },
    # Re-embedding into a paid space: the hashing space still serves.
    "openai": {
        "the claim": True,
        "the new page": False,
        "hashing vectors": False,
        "openai vectors": True,
        "the spend": True,
        "the outcome": False,
        "the link's page": True,
    },
}


@pytest.mark.parametrize("embedder", WAITS)
def test_a_commit_waits_for_the_disk_only_where_running_again_would_not_redo_it(
    embedder,
):
    with FakeOpenAI() as api:
        chosen = fake_openai_settings(api) if embedder == "openai" else {}
        committed = first_crawl_of_a_page_with_a_link(chosen)

    # Each write as often as it is sent: True, False, or both if its commits differ.
    seen = {
        writes: {waited for sql, waited in committed if WRITES[writes](sql)}
        for writes in WAITS[embedder]
    }
    assert seen == {writes: {waits} for writes, waits in WAITS[embedder].items()}


def session_killed() -> None:
    """The run's database session ends under it (a server restart, an admin's
    pg_terminate_backend)."""
    with connection.cursor() as cursor, pytest.raises(OperationalError):
        cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")


@pytest.mark.parametrize(
    ("during", "state"),
    [
        (None, Delivery.State.DONE),
        (RuntimeError("a bug in the run"), Delivery.State.QUEUED),
        # Queued again at once, and carried by the same job.
        (session_killed, Delivery.State.DONE),
    ],
    ids=["finished", "a run that raises", "the session killed"],
)
def test_after_a_run_however_it_ended_the_session_waits_for_the_disk_again(
    during, state
):
    Source.objects.create(name="Example docs", seed_urls=f"{SITE}/")
    OrmQ.objects.all().delete()
    delivery = receive_delivery(f"{SITE}/p/", page_html("Page", ("About", "It.")))
    seen: list[str] = []
    real = job.delivery_read

    def observed(*args, **kwargs):
        seen.append(commit_wait())
        if isinstance(during, Exception):
            raise during
        if during is not None and len(seen) == 1:
            during()  # the run cut off is queued at once, and carried: once only
        return real(*args, **kwargs)

    with mock.patch.object(job, "delivery_read", observed):
        run_as_a_worker(delivery)

    assert seen[0] == "off", "the run's commits up to its outcome do not wait"
    assert set(seen) == {"off"}
    assert commit_wait() == "on"
    assert Delivery.objects.get(pk=delivery.pk).state == state


def test_an_outcome_with_no_page_to_change_commits_with_its_push():
    from django.utils import timezone

    from ingest.delivery import finish
    from ingest.pushing.models import Push

    source = Source.objects.create(name="Example docs", seed_urls=f"{SITE}/docs/")
    page = Page.objects.create(source=source, url=f"{SITE}/docs/old/")
    Push.objects.create(
        rid="push-1", page=page, url=page.url, state=Push.State.SENT,
        pushed_at=timezone.now(),
    )  # fmt: skip
    # The editor narrowed the source: the pushed page is out of its scope now.
    Source.objects.filter(pk=source.pk).update(seed_urls=f"{SITE}/docs/new/")
    OrmQ.objects.all().delete()
    delivery = receive_delivery(page.url, page_html("Old", ("A", "B.")), rid="push-1")
    lost = OperationalError("the server closed the connection")

    with mock.patch.object(finish.Push, "objects") as pushes:
        pushes.filter.return_value.update.side_effect = lost
        run_as_a_worker(delivery)

    # Neither is recorded; the run is retried.
    assert Delivery.objects.get(pk=delivery.pk).state == Delivery.State.QUEUED
    assert Push.objects.get(rid="push-1").state == Push.State.SENT
    job.delivery_process(delivery_id=delivery.pk)  # the retry's run
    delivery.refresh_from_db()
    assert (delivery.state, delivery.outcome) == ("done", "rejected")
    assert Push.objects.get(rid="push-1").state == Push.State.DELIVERED
