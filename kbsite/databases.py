"""The default database: the one DATABASE_URL names, which must be PostgreSQL (the
index needs pgvector and its full-text search), else the embedded server whose data
lives under ``var/``; and its streaming replicas, which searches may read from
(``kbsite.replicas``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

# The database aliases of DATABASE_REPLICA_URLS, in order, from 1.
REPLICA_ALIAS = "replica_{}"
# Seconds a replica has to accept a connection, unless its URL says otherwise
# (``?connect_timeout=``): a search waits that long for one that is down, before
# it reads from the primary (``kbsite.replicas``).
REPLICA_CONNECT_TIMEOUT = 3


def default_database(url: str, *, var_dir: Path, name: str) -> dict[str, Any]:
    """Connections are kept a minute and checked before reuse; a URL that cannot be
    parsed, or names another engine, stops start-up."""
    database = _from_url(url) if url else _embedded(var_dir, name)
    database["CONN_HEALTH_CHECKS"] = True
    return database


def replica_databases(urls: list[str], *, embedded: bool) -> dict[str, dict[str, Any]]:
    """A database for each URL of DATABASE_REPLICA_URLS, as ``replica_1``,
    ``replica_2``, …: read-only copies of the primary that the product reaches but
    never writes to or migrates. The embedded database (DATABASE_URL unset) has no
    replicas: it listens on a socket of this machine and streams to nobody."""
    if urls and embedded:
        raise ImproperlyConfigured(
            "DATABASE_REPLICA_URLS is set but DATABASE_URL is not: the embedded "
            "database has no replicas. Set DATABASE_URL to the primary whose "
            "streaming replicas these are, or unset DATABASE_REPLICA_URLS"
        )
    replicas = {}
    for number, url in enumerate(urls, start=1):
        database = _from_url(url, variable="DATABASE_REPLICA_URLS")
        database["CONN_HEALTH_CHECKS"] = True
        options = database.setdefault("OPTIONS", {})
        options.setdefault("connect_timeout", REPLICA_CONNECT_TIMEOUT)
        replicas[REPLICA_ALIAS.format(number)] = database
    return replicas


def _from_url(url: str, *, variable: str = "DATABASE_URL") -> dict[str, Any]:
    try:
        database = dict(dj_database_url.parse(url, conn_max_age=60))
    except ValueError as exc:
        raise ImproperlyConfigured(f"{variable} cannot be parsed: {exc}") from exc
    if database["ENGINE"] != "django.db.backends.postgresql":
        raise ImproperlyConfigured(
            f"{variable} must point to PostgreSQL (postgres://…), "
            f"not {database['ENGINE']}"
        )
    return database


def _embedded(var_dir: Path, name: str) -> dict[str, Any]:
    # EMBEDDED_ROOT is the embedded backend's own key: where its server keeps data.
    return {
        "ENGINE": "kbsite.pgembedded",
        "NAME": name,
        "USER": "postgres",
        "EMBEDDED_ROOT": var_dir,
        "CONN_MAX_AGE": 60,
    }
