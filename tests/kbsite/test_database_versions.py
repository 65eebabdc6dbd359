"""The index's PostgreSQL server: 16 or later with pgvector 0.8 or later, checked on
each process's first connection to it."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, connections
from django.test import TestCase

from kbsite import database_versions
from kbsite.database_versions import (
    VERSIONS,
    requirements_missing,
    version_tuple,
)

TOO_OLD = "PostgreSQL 16 or later (this server is 15.6)"
NO_VECTOR = "pgvector 0.8 or later (the vector extension is not installed on it)"


@pytest.mark.parametrize(
    ("server", "vector", "missing"),
    [
        ("18.6", "0.8.6", []),
        ("16.0", "0.8.0", []),
        ("17.4 (Debian 17.4-1.pgdg120+2)", "0.10.0", []),
        ("19beta1", "0.8.1", []),
        ("16.2", "0.6.2", ["pgvector 0.8 or later (this server has 0.6.2)"]),
        ("16.9", "0.7.4", ["pgvector 0.8 or later (this server has 0.7.4)"]),
        ("15.6", "0.8.1", [TOO_OLD]),
        ("15.6", None, [TOO_OLD, NO_VECTOR]),
        ("16.2", None, [NO_VECTOR]),
        ("9.6.24", "0.5.1", ["PostgreSQL 16 or later (this server is 9.6.24)",
                             "pgvector 0.8 or later (this server has 0.5.1)"]),
    ],
)  # fmt: skip
def test_what_a_server_lacks_is_named(server, vector, missing):
    assert requirements_missing(server_version=server, vector_available=vector) == (
        missing
    )


@pytest.mark.parametrize(
    ("text", "version"),
    [("16.2", (16, 2)), ("0.10.0", (0, 10, 0)), ("18devel", (18,)),
     ("17.4 (Debian 17.4-1.pgdg120+2)", (17, 4))],
)  # fmt: skip
def test_versions_compare_by_number_not_by_text(text, version):
    assert version_tuple(text) == version
    assert version_tuple("0.10.0") > version_tuple("0.8.6")


class EmbeddedServerTests(TestCase):
    def test_the_embedded_server_has_what_the_index_needs(self):
        with connection.cursor() as cursor:
            cursor.execute(VERSIONS)
            server, available, installed = cursor.fetchone()
            # What pgvector 0.8 brings: iterative index scans, half-precision.
            cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            cursor.execute("SELECT '[1,2]'::halfvec(2)::text")
            (half,) = cursor.fetchone()

        assert (
            requirements_missing(server_version=server, vector_available=available)
            == []
        )
        assert version_tuple(server) >= (18,)
        assert installed == available
        assert half == "[1,2]"


@pytest.mark.django_db
def test_a_server_below_the_minimum_stops_the_process_at_its_first_connection(
    monkeypatch, django_db_blocker
):
    monkeypatch.setattr(database_versions, "MIN_PGVECTOR", (9,))
    monkeypatch.setattr(database_versions, "_checked", set())
    fresh = connections.create_connection("default")
    try:
        for _ in range(2):  # a second attempt is checked again, not let through
            with (
                django_db_blocker.unblock(),
                pytest.raises(ImproperlyConfigured) as failure,
            ):
                fresh.ensure_connection()
            assert fresh.connection is None
    finally:
        fresh.close()

    message = str(failure.value)
    assert message.startswith("The database server of the embedded database in ")
    assert message.endswith(
        f"lacks what the index needs: pgvector 9 or later (this server has "
        f"{_vector_available()})"
    )


def _vector_available() -> str:
    with connection.cursor() as cursor:
        cursor.execute(VERSIONS)
        return cursor.fetchone()[1]
