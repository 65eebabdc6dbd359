"""A database made by earlier migrations moves to the current layout with every row."""

from __future__ import annotations

from datetime import date

import pytest
from django.contrib.auth.models import User
from django.core import checks
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone
from django_q.models import Schedule

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# The schema before deliveries moved from sources to ingest.
BEFORE = [
    ("sources", "0001_initial"),
    ("retrieval", "0002_index_tables"),
    ("ingest", None),
]


def state_before(executor: MigrationExecutor):
    return executor.loader.project_state([t for t in BEFORE if t[1]]).apps


def migrate(targets: list[tuple[str, str | None]]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor


@pytest.fixture(autouse=True)
def back_to_the_latest_layout():
    """Whatever a test leaves, the database ends at the latest migrations."""
    yield
    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def fill_every_table(apps) -> dict[str, int]:
    """One or more rows in every table of the old layout; returns their ids."""
    source = apps.get_model("sources", "Source").objects.create(
        name="Old docs", seed_urls="https://old.example/"
    )
    page = apps.get_model("sources", "Page").objects.create(
        source=source, url="https://old.example/a/", title="A", status="live",
        content_hash="f" * 64, markdown="# A\n\nText.\n",
    )  # fmt: skip
    apps.get_model("sources", "LineShape").objects.create(
        source=source, shape=42, pages=1, example="© Old"
    )
    push = apps.get_model("sources", "Push").objects.create(
        rid="push-1", page=page, url=page.url
    )
    delivery_model = apps.get_model("sources", "Delivery")
    delivered = delivery_model.objects.create(
        rid="push-1", url=page.url, original_status=200, crawler_status=200,
        push=push, page=page, state="done", outcome="embedded", attempts=1,
        embedding_tokens=12,
    )  # fmt: skip
    waiting = delivery_model.objects.create(
        rid="waiting-1", url="https://old.example/b/", body=b"\x1f\x8bbody"
    )
    version = apps.get_model("sources", "PageVersion").objects.create(
        page=page, kind="changed", content_hash="f" * 64, markdown=page.markdown,
        delivery=delivered,
    )  # fmt: skip
    chunk = apps.get_model("retrieval", "Chunk").objects.create(
        page=page, position=0, heading="A", text="Text.", embed_hash="e" * 64
    )
    apps.get_model("retrieval", "Embedding").objects.create(
        space="hashing/hashing-v2/3", text_hash="e" * 64, vector=[1.0, 0.0, 0.0]
    )
    apps.get_model("retrieval", "EmbeddingSpace").objects.create(
        name="hashing/hashing-v2/3", backend="hashing", model="hashing-v2",
        dimensions=3, state="retired",
    )  # fmt: skip
    apps.get_model("retrieval", "EmbeddingUsage").objects.create(
        day=date(2026, 11, 1), space="hashing/hashing-v2/3", requests=1, tokens=12
    )
    apps.get_model("retrieval", "QueryLog").objects.create(
        kind="query", text="what is A?", chunk_ids=[chunk.pk], latency_ms=3
    )
    return {
        "delivered": delivered.pk,
        "waiting": waiting.pk,
        "version": version.pk,
        "page": page.pk,
        "push": push.pk,
        "source": source.pk,
    }


def test_a_database_at_the_old_layout_migrates_forward_with_every_row():
    User.objects.create(username="editor")
    executor = migrate(BEFORE)
    ids = fill_every_table(state_before(executor))

    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    from ingest.delivery.models import Delivery
    from ingest.pushing.models import Push
    from retrieval.models import (
        Chunk,
        Embedding,
        EmbeddingSpace,
        EmbeddingUsage,
        QueryLog,
    )
    from sources.models import LineShape, Page, PageVersion, Source

    counts = {
        model.__name__: model.objects.count()
        for model in [Source, Page, LineShape, Push, PageVersion, Chunk, Embedding,
                      EmbeddingUsage, QueryLog, Delivery]
    }  # fmt: skip
    assert counts == dict.fromkeys(counts, 1) | {"Delivery": 2}
    assert EmbeddingSpace.objects.filter(name="hashing/hashing-v2/3").exists()
    delivered = Delivery.objects.get(pk=ids["delivered"])
    assert (delivered.rid, delivered.outcome, delivered.embedding_tokens) == (
        "push-1",
        "embedded",
        12,
    )
    assert (delivered.page_id, delivered.push_id) == (ids["page"], ids["push"])
    assert delivered.version_id == ids["version"], "the version link survives"
    assert PageVersion.objects.get(pk=ids["version"]).delivery == delivered
    first = PageVersion.objects.get(pk=ids["version"])
    assert (first.kind, first.source_id) == ("new", ids["source"]), (
        "a page's first step was a new page, of its page's source"
    )
    assert first.lines_added is None and first.summary == "New page"
    waiting = Delivery.objects.get(pk=ids["waiting"])
    assert (waiting.state, bytes(waiting.body)) == ("queued", b"\x1f\x8bbody")
    assert waiting.queued_at == waiting.received_at
    with connection.cursor() as cursor:
        tables = connection.introspection.table_names(cursor)
    assert "ingest_delivery" in tables and "sources_delivery" not in tables


def test_the_move_can_be_undone_with_every_row():
    executor = migrate(BEFORE)
    ids = fill_every_table(state_before(executor))
    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    executor = migrate(BEFORE)

    apps = state_before(executor)
    version = apps.get_model("sources", "PageVersion").objects.get(pk=ids["version"])
    assert version.delivery_id == ids["delivered"]
    assert apps.get_model("sources", "Delivery").objects.count() == 2


# The leaf migrations of the last release: whatever lands later comes after them,
# so a database it made migrates on (a migration renamed or renumbered would be
# applied twice, or never).
RELEASED = [
    ("sources", "0005_crawl_limits_validators_duplicates"),
    ("retrieval", "0003_querylog_answer"),
    ("ingest", "0004_delivery_outcome_out_of_scope"),
]


def test_a_database_of_the_last_release_migrates_on_with_its_answers():
    executor = migrate(RELEASED)
    apps = executor.loader.project_state(RELEASED).apps
    log = apps.get_model("retrieval", "QueryLog").objects.create(
        kind="query", text="what is A?", answer="A is a letter [1].", latency_ms=3
    )

    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    from retrieval.models import QueryLog

    assert QueryLog.objects.get(pk=log.pk).answer == "A is a letter [1]."


# The last migrations before a seed's scope became its directory.
HOST_WIDE = [
    ("sources", "0005_crawl_limits_validators_duplicates"),
    ("retrieval", "0007_querylog_feedback"),
]


def test_pages_a_neighbour_held_move_to_their_source_or_leave_search(capsys):
    executor = migrate(HOST_WIDE)
    apps = executor.loader.project_state(HOST_WIDE).apps
    source_model = apps.get_model("sources", "Source")
    source_model.objects.create(
        name="HR", seed_urls="https://corp.example/hr/", deny_patterns="/hr/private"
    )
    eng = source_model.objects.create(name="Eng", seed_urls="https://corp.example/eng/")
    shapes = apps.get_model("sources", "LineShape")
    shapes.objects.create(source=eng, shape=7, pages=3, example="© Corp")
    pages = {}
    for path in ["hr/handbook", "hr/private/salaries", "eng/setup"]:
        pages[path] = apps.get_model("sources", "Page").objects.create(
            source=eng, url=f"https://corp.example/{path}", status="live",
            content_hash="f" * 64, markdown=f"# {path}\n", line_shapes=[7],
        )  # fmt: skip
        apps.get_model("retrieval", "Chunk").objects.create(
            page=pages[path], position=0, heading=path, text=path, embed_hash="e" * 64
        )

    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    from retrieval.models import Chunk
    from sources.models import LineShape, Page

    held = {
        p.url.split("example/")[1]: (p.source.name, p.status, p.chunks.count())
        for p in Page.objects.select_related("source")
    }
    assert held == {
        "hr/handbook": ("HR", "live", 1),
        "hr/private/salaries": ("Eng", "gone", 0),
        "eng/setup": ("Eng", "live", 1),
    }
    retired = Page.objects.get(url="https://corp.example/hr/private/salaries")
    assert (retired.markdown, retired.next_crawl_at) == ("", None)
    assert retired.versions.get().kind == "out_of_scope"
    assert Chunk.objects.count() == 2
    counts = dict(LineShape.objects.values_list("source__name", "pages"))
    assert counts == {"Eng": 1, "HR": 1}
    printed = capsys.readouterr().out
    assert "https://corp.example/hr/handbook: moved from Eng to HR" in printed
    assert "Pages rescoped: 1 moved, 1 out of every scope" in printed


# The last migrations before pushes to Crawlbase moved from sources to ingest.
PUSHES_IN_SOURCES = [
    ("sources", "0007_push_columns_left_out_of_its_insert_have_db_defaults"),
    ("ingest", "0006_columns_left_out_of_hand_written_inserts_have_db_defaults"),
]


def fill_pushes(apps) -> dict[str, int]:
    """A push sent to Crawlbase and delivered, and a redirect the built-in crawler
    recorded as a push never sent, as the old layout held them; and the schedule
    of the old sender (django-q2's own table, which these migrations leave)."""
    source = apps.get_model("sources", "Source").objects.create(
        name="Docs", seed_urls="https://docs.example/"
    )
    page_model = apps.get_model("sources", "Page")
    pushed = page_model.objects.create(source=source, url="https://docs.example/a/")
    moved = page_model.objects.create(source=source, url="https://docs.example/old/")
    push_model = apps.get_model("sources", "Push")
    sent = push_model.objects.create(
        rid="cb-rid-1", page=pushed, url=pushed.url, state="sent", attempts=1,
        pushed_at=timezone.now(),
    )  # fmt: skip
    crawler = push_model.objects.create(
        rid="direct-0f0f", page=moved, url=moved.url, pushed_at=timezone.now()
    )
    delivery_model = apps.get_model("ingest", "Delivery")
    delivered = delivery_model.objects.create(
        rid="cb-rid-1", url=pushed.url, push=sent, page=pushed, state="done"
    )
    redirected = delivery_model.objects.create(
        rid="direct-0f0f", url="https://docs.example/new/", push=crawler,
        original_status=200, crawler_status=200,
    )  # fmt: skip
    Schedule.objects.update_or_create(
        name="sources: send queued pushes",
        defaults={"func": "sources.tasks.pushes_send_task", "minutes": 1},
    )
    return {
        "sent": sent.pk,
        "delivered": delivered.pk,
        "redirected": redirected.pk,
        "moved": moved.pk,
    }


def test_pushes_move_to_ingest_with_every_row_and_back():
    executor = migrate(PUSHES_IN_SOURCES)
    ids = fill_pushes(executor.loader.project_state(PUSHES_IN_SOURCES).apps)

    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    from ingest.delivery.models import Delivery
    from ingest.pushing.models import Push
    from ingest.pushing.services import pages_push_queue
    from sources.models import Page

    push = Push.objects.get()
    assert (push.pk, push.rid, push.state, push.attempts) == (
        ids["sent"], "cb-rid-1", "sent", 1,
    )  # fmt: skip
    assert Delivery.objects.get(pk=ids["delivered"]).push == push
    redirected = Delivery.objects.get(pk=ids["redirected"])
    assert (redirected.push_id, redirected.requested_url) == (
        None,
        "https://docs.example/old/",
    ), "the crawler's redirect is its own record, not a push"
    assert Schedule.objects.get(name="ingest: send queued pushes").func == (
        "ingest.tasks.pushes_send_task"
    )
    assert not Schedule.objects.filter(func__startswith="sources.tasks.push")
    with connection.cursor() as cursor:
        tables = connection.introspection.table_names(cursor)
    assert "ingest_push" in tables and "sources_push" not in tables
    queued = pages_push_queue(pages=Page.objects.filter(pk=ids["moved"]))
    again = Push.objects.get(page_id=ids["moved"])
    assert queued == (1, 0), "the page the crawler's push held is free again"
    assert (again.state, again.attempts, again.error) == ("queued", 0, ""), (
        "the columns the push INSERT leaves out keep their database defaults"
    )
    assert again.queued_at is not None

    executor = migrate(PUSHES_IN_SOURCES)

    apps = executor.loader.project_state(PUSHES_IN_SOURCES).apps
    pushes = apps.get_model("sources", "Push").objects
    assert pushes.get(pk=ids["sent"]).rid == "cb-rid-1"
    back = pushes.get(rid="direct-0f0f")
    assert (back.page_id, back.state) == (ids["moved"], "delivered")
    deliveries = apps.get_model("ingest", "Delivery").objects
    assert deliveries.get(pk=ids["redirected"]).push_id == back.pk
    assert deliveries.get(pk=ids["delivered"]).push_id == ids["sent"]
    schedule = Schedule.objects.get(func="sources.tasks.pushes_send_task")
    assert schedule.name == "sources: send queued pushes"
    with connection.cursor() as cursor:
        assert "sources_push" in connection.introspection.table_names(cursor)


BEFORE_HALF_PRECISION = [("retrieval", "0007_querylog_feedback")]


def index_of(name: str) -> str | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [name])
        row = cursor.fetchone()
    return row[0] if row else None


def test_vector_indexes_move_to_half_precision_and_back(capsys):
    import hashlib

    from retrieval.models import Embedding
    from retrieval.spaces import embedding_index_name

    executor = migrate(BEFORE_HALF_PRECISION)
    # The model as it was then: later fields have no column yet.
    old = executor.loader.project_state(BEFORE_HALF_PRECISION).apps
    space = old.get_model("retrieval", "EmbeddingSpace").objects.create(
        name="test/old/8", backend="hashing", model="old", dimensions=8,
        state="building",
    )  # fmt: skip
    then = old.get_model("retrieval", "Embedding")
    then.objects.bulk_create(
        then(space=space.name, text_hash=f"{n:064x}", vector=[n % 3, 1] + [0] * 6)
        for n in range(20)
    )
    # The index as the last release built it: single precision, the old name.
    single = f"embedding_hnsw_{hashlib.sha1(space.name.encode()).hexdigest()[:12]}"
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE INDEX {single} ON retrieval_embedding USING hnsw "
            "((vector::vector(8)) vector_cosine_ops) WHERE space = 'test/old/8'"
        )

    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    half = index_of(embedding_index_name(space.name))
    assert half is not None and "halfvec_cosine_ops" in half and "::halfvec(8)" in half
    assert index_of(single) is None
    assert "test/old/8: 20 vectors, index at halfvec" in capsys.readouterr().out
    assert Embedding.objects.filter(space=space.name).count() == 20

    migrate(BEFORE_HALF_PRECISION)

    assert "vector_cosine_ops" in (index_of(single) or "")
    assert index_of(embedding_index_name(space.name)) is None


RECHECKS_AS_QUESTIONS = [("retrieval", "0012_widget_keys_share_the_hashed_key_fields")]


def test_rechecks_logged_as_questions_become_rechecks_and_back():
    executor = migrate(RECHECKS_AS_QUESTIONS)
    logs = executor.loader.project_state(RECHECKS_AS_QUESTIONS).apps.get_model(
        "retrieval", "QueryLog"
    )
    asked = logs.objects.create(kind="query", text="What is A?", latency_ms=3)
    again = logs.objects.create(
        kind="query", text="What is A?", latency_ms=3, recheck_of=asked
    )
    search = logs.objects.create(kind="search", text="A", latency_ms=3)

    migrate([("retrieval", "0013_rechecks_logged_as_their_own_kind")])
    from retrieval.models import QueryLog

    kinds = dict(QueryLog.objects.values_list("pk", "kind"))
    migrate(RECHECKS_AS_QUESTIONS)

    assert kinds == {asked.pk: "query", again.pk: "recheck", search.pk: "search"}
    assert set(logs.objects.values_list("kind", flat=True)) == {"query", "search"}


# Each system check that reads rows through the models, with a row it would warn of.
ROW_CHECKS = ["sources.W001", "ingest.W004", "ingest.W001"]


@pytest.mark.parametrize(
    "layout",
    [BEFORE, RELEASED, HOST_WIDE, RECHECKS_AS_QUESTIONS],
    ids=["deliveries in sources", "an early release", "host-wide scopes", "rechecks"],
)
def test_migrate_runs_on_a_database_at_an_older_layout_and_then_the_checks_read_it(
    layout, settings
):
    """``migrate`` runs the system checks before it migrates: a check that read
    rows through today's models queried columns an older release's tables lack."""
    from ingest.notify.models import Subscription
    from sources.models import Source

    settings.WEBHOOK_TOKEN = ""
    migrate(layout)

    before = {m.id for m in checks.run_checks(databases=["default"])}
    call_command("migrate", verbosity=0)
    source = Source.objects.create(
        name="Crawled", seed_urls="https://new.example/", fetcher="crawlbase",
        boilerplate_patterns="(?<=lookbehind)",
    )  # fmt: skip
    Subscription.objects.create(
        source=source, name="Hook", channel="webhook",
        url="https://hooks.example/", url_patterns="re:(?<=lookbehind)",
    )  # fmt: skip
    after = {m.id for m in checks.run_checks(databases=["default"])}

    assert before.isdisjoint(ROW_CHECKS)
    assert after.issuperset(ROW_CHECKS)


BEFORE_WINDOWS = [("retrieval", "0004_chunk_anchor_and_weighted_search")]


def test_windows_of_a_long_text_fold_into_its_first_when_windows_are_undone():
    """The layout before windows holds one vector per text and space: going back
    keeps each text's first window, where it failed on a duplicate key."""
    from retrieval.models import Embedding

    for window in (0, 1, 2):
        Embedding.objects.create(
            space="hashing/hashing-v2/3", text_hash="e" * 64, window=window,
            vector=[1.0, float(window), 0.0],
        )  # fmt: skip
    executor = migrate(BEFORE_WINDOWS)
    old = executor.loader.project_state(BEFORE_WINDOWS).apps.get_model(
        "retrieval", "Embedding"
    )

    assert [list(v) for v in old.objects.values_list("vector", flat=True)] == [
        [1.0, 0.0, 0.0]
    ]
