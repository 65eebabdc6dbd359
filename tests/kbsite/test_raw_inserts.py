"""Every hand-written INSERT names its columns, or leaves them to the database.

The INSERTs of the hot paths are written as SQL (``kbsite.sqlrows.Insert``); a
column one of them does not name must be one the database fills (a
``db_default``, NULL, generated, the automatic primary key). A model that gains a
NOT NULL column without a ``db_default`` fails the table here, not a webhook call
in production.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.contrib.auth.models import User
from django.core.exceptions import FieldDoesNotExist
from django.db import IntegrityError, connection, models, transaction
from django.test import SimpleTestCase
from django_q.models import OrmQ
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from ingest.crawl.models import CrawlHost, CrawlUrl
from ingest.delivery.models import Delivery
from ingest.pushing.models import Push
from kbsite.models import ThrottleWindow
from kbsite.sqlrows import Insert
from retrieval.models import EmbeddingUsage, Lexeme, QueryLog
from retrieval.sql import QUERY_LOG_INSERT
from sources.models import LineShape
from tests.world import HarborWorld

ROOT = Path(__file__).resolve().parents[2]
APPS = ("kbsite", "sources", "ingest", "retrieval")
STATEMENT = re.compile(r"\bINSERT\s+INTO\b")


def _modules_with_inserts() -> dict[str, int]:
    """Each project module that writes an INSERT, with how many it writes."""
    found = {}
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            count = len(STATEMENT.findall(path.read_text()))
            if count:
                name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                found[name] = count
    return found


def hand_written_inserts() -> dict[str, Insert]:
    """Every hand-written INSERT of the project, by module and name."""
    inserts = {}
    for module_name in _modules_with_inserts():
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            if isinstance(value, Insert):
                inserts[f"{module_name}.{name}"] = value
    return inserts


def unfilled_by_insert() -> dict[str, list[str]]:
    """The table: for each INSERT, the columns nobody fills (none, for each)."""
    return {name: insert.unfilled() for name, insert in hand_written_inserts().items()}


@contextmanager
def field_added(model: type[models.Model], name: str, field: models.Field):
    """``model`` with one more field, as if its class had gained it."""
    field.contribute_to_class(model, name)
    try:
        yield field
    finally:
        model._meta.local_fields.remove(field)
        model._meta._expire_cache()
        delattr(model, field.attname)


class HandWrittenInsertTests(SimpleTestCase):
    def test_every_insert_of_the_project_is_built_by_an_insert_object(self):
        inserts = hand_written_inserts()
        written = {
            module: sum(
                len(STATEMENT.findall(insert.template))
                for name, insert in inserts.items()
                if name.rpartition(".")[0] == module
            )
            for module in _modules_with_inserts()
        }

        # One with its statement in a plain string is not in the table below.
        assert written == _modules_with_inserts()
        models_written = {insert.model for insert in inserts.values()}
        assert models_written >= {
            QueryLog, Delivery, OrmQ, CrawlHost, CrawlUrl, Push, LineShape,
            ThrottleWindow, Lexeme, EmbeddingUsage,
        }  # fmt: skip

    def test_the_inserts_of_each_app_are_in_its_sql_module(self):
        owned = [
            module
            for module in _modules_with_inserts()
            if module.partition(".")[0] in {"ingest", "sources", "retrieval"}
        ]

        assert sorted(owned) == [
            "ingest.crawl.sql",
            "ingest.delivery.sql",
            "ingest.pushing.sql",
            "retrieval.sql",
            "sources.sql",
        ]

    def test_every_column_an_insert_leaves_out_is_filled_by_the_database(self):
        table = unfilled_by_insert()

        assert table == dict.fromkeys(table, [])

    def test_the_table_catches_a_not_null_column_without_a_db_default(self):
        with field_added(QueryLog, "reviewed", models.BooleanField()):
            table = unfilled_by_insert()

        assert table["retrieval.sql.QUERY_LOG_INSERT"] == ["reviewed"]
        assert [name for name, columns in table.items() if columns] == [
            "retrieval.sql.QUERY_LOG_INSERT"
        ]

    def test_an_insert_names_only_columns_of_its_model(self):
        with self.assertRaises(FieldDoesNotExist):
            Insert(QueryLog, ("kind", "question"), "INSERT INTO {table} ({columns})")


class NewQueryLogColumnTests(HarborWorld):
    """A column added to QueryLog, in its table as a migration would add it."""

    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        user = User.objects.create_user("app", password="a long password 1")
        cls.token = Token.objects.create(user=user)

    def setUp(self):
        self.api = APIClient()
        self.api.credentials(HTTP_AUTHORIZATION=f"Token {self.token.key}")

    @contextmanager
    def column_added(self, field: models.Field) -> Iterator[None]:
        with field_added(QueryLog, "reviewed", field):
            with connection.schema_editor() as editor:
                editor.add_field(QueryLog, field)
            yield

    def search(self):
        return self.api.get("/api/search/", {"q": "How do I pause a queue?", "k": 3})

    def test_a_search_is_logged_when_the_new_not_null_column_has_a_db_default(self):
        with self.column_added(models.BooleanField(db_default=False)):
            response = self.search()
            log = QueryLog.objects.get()

            assert response.status_code == 200
            assert response.json()["results"]
            assert (log.kind, log.text) == ("search", "How do I pause a queue?")
            assert log.user_id == self.token.user_id and log.chunk_ids
            assert log.reviewed is False, "the database's default"

    def test_without_a_db_default_the_search_fails_here_as_the_table_says(self):
        with self.column_added(models.BooleanField()):
            assert QUERY_LOG_INSERT.unfilled() == ["reviewed"]
            with self.assertRaises(IntegrityError), transaction.atomic():
                self.search()
