"""Searches on replicas: which database each kind of read and write goes to.

The replica here is Django's test mirror (``tests/settings.py``): a second
connection to the test database, made read-only as a standby is, so that a write
sent to it fails. A streaming replica of a real primary, with its lag, is in
``tests/retrieval/test_replication.py``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from unittest import mock

import pytest
from django.contrib.auth.models import Group, User
from django.contrib.sessions.models import Session
from django.core.exceptions import ImproperlyConfigured
from django.db import (
    DEFAULT_DB_ALIAS,
    OperationalError,
    connections,
    router,
    transaction,
)
from django.db.backends.signals import connection_created
from django.test import SimpleTestCase, TransactionTestCase, override_settings
from django.test.utils import CaptureQueriesContext
from django_q.models import OrmQ
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from ingest.delivery.models import Delivery
from kbsite import replicas
from kbsite.databases import replica_databases
from kbsite.env import env_secret_list
from kbsite.models import ThrottleWindow
from kbsite.parallel import connections_close, settle
from kbsite.replicas import read_alias, replica_lag, replica_reads
from retrieval import search
from retrieval.models import (
    Chunk,
    Embedding,
    EmbeddingSpace,
    IndexStatistics,
    Lexeme,
    QueryLog,
)
from retrieval.routers import IndexReadRouter
from sources.models import Page, Source
from tests.kbsite.test_settings import run_check
from tests.world import HARBOR, ingest_markdown

REPLICA = "replica_1"
ON_REPLICA = override_settings(DATABASE_REPLICAS=[REPLICA])
INDEX = [Chunk, Embedding, EmbeddingSpace, IndexStatistics, Lexeme, Page]
NOT_INDEX = [Source, User, Group, Session, Token, ThrottleWindow, QueryLog, Delivery,
             OrmQ]  # fmt: skip
QUESTION = "How do I drain a lighthouse lamp before winter?"
LAMP = f"{HARBOR}/lamps/"
WIDGET_ORIGIN = "https://harbor.example.com"
LAMP_TEXT = """# Lighthouse lamps

## Draining a lamp

Drain the lighthouse lamp before winter: close the oil valve, open the drain
cock and let the reservoir empty into the tray.
"""


def tables_read(captured: CaptureQueriesContext, *models) -> list[str]:
    """The statements captured that name one of the models' tables."""
    names = [f'"{m._meta.db_table}"' for m in models]
    return [q["sql"] for q in captured if any(n in q["sql"] for n in names)]


def writes(captured: CaptureQueriesContext) -> list[str]:
    verbs = ("INSERT", "UPDATE", "DELETE")
    return [q["sql"] for q in captured if q["sql"].lstrip().upper().startswith(verbs)]


def standby_like(sender, connection, **kwargs) -> None:
    """Every connection to the replica refuses writes, as a hot standby does."""
    if connection.alias == REPLICA:
        with connection.cursor() as cursor:
            cursor.execute("SET default_transaction_read_only = on")


class RouterTests(SimpleTestCase):
    """The router's answers, without a database."""

    router = IndexReadRouter()

    def test_outside_a_replica_block_every_read_goes_to_the_primary(self):
        with ON_REPLICA:
            assert {self.router.db_for_read(m) for m in INDEX + NOT_INDEX} == {
                DEFAULT_DB_ALIAS
            }

    def test_every_write_goes_to_the_primary(self):
        token = replicas._reading.set(REPLICA)
        try:
            assert read_alias() == REPLICA
            assert {self.router.db_for_write(m) for m in INDEX + NOT_INDEX} == {
                DEFAULT_DB_ALIAS
            }
        finally:
            replicas._reading.reset(token)

    def test_only_the_primary_is_migrated(self):
        assert self.router.allow_migrate(DEFAULT_DB_ALIAS, "retrieval") is True
        assert self.router.allow_migrate(REPLICA, "retrieval") is False

    def test_rows_of_the_primary_and_a_replica_may_be_related(self):
        chunk, page = Chunk(), Page()
        chunk._state.db, page._state.db = DEFAULT_DB_ALIAS, REPLICA
        with ON_REPLICA:
            assert self.router.allow_relation(chunk, page) is True
        page._state.db = "elsewhere"
        with ON_REPLICA:
            assert self.router.allow_relation(chunk, page) is None


@ON_REPLICA
class ReplicaReadTests(TransactionTestCase):
    """A page of a source only one group may read, and a member of that group."""

    databases = {DEFAULT_DB_ALIAS, REPLICA}

    def setUp(self):
        # Pool threads keep their connections between tests: new ones, read-only.
        connection_created.connect(standby_like)
        self.addCleanup(connection_created.disconnect, standby_like)
        connections_close()
        self.addCleanup(connections_close)
        replicas._resting.clear()
        replicas._logged.clear()
        keepers = Group.objects.create(name="keepers")
        source = Source.objects.create(name="Harbor docs", seed_urls=f"{HARBOR}/")
        source.allowed_groups.add(keepers)
        ingest_markdown(LAMP, LAMP_TEXT)
        self.reader = User.objects.create_user("keeper", password="a long password 1")
        self.reader.groups.add(keepers)
        self.api = APIClient()
        token = Token.objects.create(user=self.reader)
        self.api.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")

    @contextmanager
    def captured(self) -> Iterator[tuple[CaptureQueriesContext, ...]]:
        """The statements this thread runs on the primary and on the replica."""
        with ExitStack() as stack:
            yield tuple(
                stack.enter_context(CaptureQueriesContext(connections[alias]))
                for alias in (DEFAULT_DB_ALIAS, REPLICA)
            )

    def asked(self) -> dict[str, object]:
        """Each reader's view, asked the question once."""
        self.client.force_login(self.reader)
        return {
            "search": lambda: self.api.get("/api/search/", {"q": QUESTION}),
            "query": lambda: self.api.post(
                "/api/query/", {"question": QUESTION}, format="json"
            ),
            "ask page": lambda: self.client.get("/", {"q": QUESTION}),
            "widget": self.widget_asked,
        }

    def widget_asked(self):
        """The Ask widget on a site the source allows, which it serves publicly."""
        Source.objects.update(public=True, widget_origins=[WIDGET_ORIGIN])
        return APIClient().post(
            "/api/widget/query/", {"question": QUESTION}, format="json",
            HTTP_ORIGIN=WIDGET_ORIGIN,
        )  # fmt: skip

    def test_searches_answers_and_the_ask_page_read_the_index_from_the_replica(self):
        for name, ask in self.asked().items():
            with self.subTest(name), self.captured() as (primary, replica):
                response = ask()

                assert response.status_code == 200
                assert LAMP in response.content.decode()
                assert tables_read(replica, Chunk, Embedding, Page)
                assert not tables_read(primary, Chunk, Embedding, Page)
                assert not writes(replica)

    def test_who_the_reader_is_and_what_they_may_read_come_from_the_primary(self):
        for name, ask in self.asked().items():
            with self.subTest(name), self.captured() as (primary, replica):
                ask()

                # A session on the page; a token and its throttle on the API; the
                # widget's throttle.
                kept = {
                    "ask page": [Session],
                    "widget": [ThrottleWindow],
                }.get(name, [Token, ThrottleWindow])
                assert all(tables_read(primary, model) for model in kept)
                # The sources the reader's groups may read.
                assert tables_read(primary, Source)
                assert not tables_read(replica, *kept, Source)

    def test_the_question_is_logged_on_the_primary(self):
        for name, ask in self.asked().items():
            with self.subTest(name):
                QueryLog.objects.all().delete()
                ask()
                settle()  # the search's row is written after the answer

                # The replica refuses writes: a row shows it went to the primary.
                # (The widget's readers are anonymous.)
                asker = None if name == "widget" else self.reader
                assert (
                    QueryLog.objects.using(DEFAULT_DB_ALIAS)
                    .filter(text=QUESTION, user=asker)
                    .exists()
                )

    def test_the_keyword_query_on_a_pool_thread_reads_from_the_same_replica(self):
        seen: list[tuple[threading.Thread, str]] = []
        ranked = search.keyword_ranked

        def recorded(*args, **kwargs):
            seen.append((threading.current_thread(), read_alias()))
            return ranked(*args, **kwargs)

        with mock.patch("retrieval.search.keyword_ranked", recorded):
            assert self.api.get("/api/search/", {"q": QUESTION}).status_code == 200

        ((thread, alias),) = seen
        assert thread is not threading.current_thread()
        assert alias == REPLICA

    def test_inside_a_transaction_reads_stay_on_the_primary(self):
        with transaction.atomic(), self.captured() as (_, replica):
            with replica_reads() as alias:
                assert alias == DEFAULT_DB_ALIAS
                assert router.db_for_read(Chunk) == DEFAULT_DB_ALIAS
        with replica_reads() as alias, transaction.atomic():
            assert alias == REPLICA
            assert router.db_for_read(Chunk) == DEFAULT_DB_ALIAS
        assert not list(replica)

    def test_without_replicas_a_block_reads_from_the_primary(self):
        with override_settings(DATABASE_REPLICAS=[]), replica_reads() as alias:
            assert alias == DEFAULT_DB_ALIAS
            assert router.db_for_read(Chunk) == DEFAULT_DB_ALIAS

    def test_a_replica_that_cannot_be_reached_is_left_out_for_the_primary(self):
        down = OperationalError("connection to server failed: Connection refused")
        replica = connections[REPLICA]
        with (
            mock.patch.object(replica, "ensure_connection", side_effect=down) as tried,
            self.assertLogs("kbsite.replicas", logging.WARNING) as logged,
            CaptureQueriesContext(connections[DEFAULT_DB_ALIAS]) as primary,
        ):
            first = self.api.get("/api/search/", {"q": QUESTION})
            second = self.api.get("/api/search/", {"q": QUESTION})

        assert first.status_code == second.status_code == 200
        assert LAMP in second.content.decode()
        assert tables_read(primary, Chunk, Embedding, Page)
        assert tried.call_count == 1, "tried again only after a rest"
        (line,) = logged.output
        assert "replica_1 cannot be reached" in line
        assert "searches read from the primary" in line

    def test_with_a_lag_limit_a_server_that_is_no_standby_is_passed_over(self):
        # The mirror is the primary itself: it replays nothing, so its lag is
        # unknown, and a limit cannot be kept with it.
        assert replica_lag(REPLICA) is None
        with (
            override_settings(DATABASE_REPLICA_MAX_LAG=5.0),
            self.assertLogs("kbsite.replicas", logging.WARNING) as logged,
            self.captured() as (primary, replica),
        ):
            response = self.api.get("/api/search/", {"q": QUESTION})

        assert LAMP in response.content.decode()
        assert tables_read(primary, Chunk, Embedding, Page)
        assert not tables_read(replica, Chunk, Embedding, Page)
        assert "lag unknown" in logged.output[0]


def test_replica_urls_become_the_databases_replica_1_onwards():
    databases = replica_databases(
        ["postgres://kb:pw@replica-a:5432/kb",
         "postgres://kb:pw@replica-b:5432/kb?connect_timeout=10"],
        embedded=False,
    )  # fmt: skip

    assert list(databases) == ["replica_1", "replica_2"]
    assert databases["replica_1"]["HOST"] == "replica-a"
    assert databases["replica_1"]["OPTIONS"]["connect_timeout"] == 3
    assert databases["replica_2"]["OPTIONS"]["connect_timeout"] == 10
    assert replica_databases([], embedded=True) == {}


def test_a_replica_url_of_another_engine_is_refused_naming_the_setting():
    with pytest.raises(ImproperlyConfigured, match="DATABASE_REPLICA_URLS must point"):
        replica_databases(["mysql://kb@replica/kb"], embedded=False)


def test_replica_urls_may_come_from_a_file(monkeypatch, tmp_path):
    path = tmp_path / "replicas"
    path.write_text("postgres://kb:s3cret@a/kb, postgres://kb:s3cret@b/kb\n")
    monkeypatch.setenv("DATABASE_REPLICA_URLS_FILE", str(path))

    assert env_secret_list("DATABASE_REPLICA_URLS") == [
        "postgres://kb:s3cret@a/kb",
        "postgres://kb:s3cret@b/kb",
    ]


def test_replicas_of_the_embedded_database_stop_start_up():
    # The test suite's database is the embedded one: no DATABASE_URL.
    result = run_check(
        DATABASE_URL="", DATABASE_REPLICA_URLS="postgres://kb@replica:5432/kb"
    )

    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "DATABASE_REPLICA_URLS is set but DATABASE_URL is not" in result.stderr
