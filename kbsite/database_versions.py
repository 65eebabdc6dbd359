"""What the index needs of its PostgreSQL server, the embedded one or DATABASE_URL's:
PostgreSQL 16 or later, and pgvector 0.8 or later available (iterative index scans,
``halfvec``).

Checked on each process's first connection to a server, by every process (web
workers, the job cluster and commands run no system checks of the database): a
server without them stops the process with ``ImproperlyConfigured`` naming what is
missing, before a query could fail half-way through a job.

A database keeps the version of pgvector's SQL objects it was created with when the
server's pgvector is upgraded (or the cluster, with ``pg_upgrade``); every
``migrate`` brings them up first (``ALTER EXTENSION vector UPDATE``).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connections, transaction

logger = logging.getLogger(__name__)

MIN_POSTGRESQL = (16,)
MIN_PGVECTOR = (0, 8)
INSUFFICIENT_PRIVILEGE = "42501"

VERSIONS = """
SELECT current_setting('server_version'),
       (SELECT default_version FROM pg_available_extensions WHERE name = 'vector'),
       (SELECT extversion FROM pg_extension WHERE extname = 'vector')
"""

# Servers checked by this process: one query per process and server.
_checked: set[tuple[Any, ...]] = set()


def version_tuple(text: str) -> tuple[int, ...]:
    """``"16.2"`` -> (16, 2); ``"18.3 (Debian 18.3-1.pgdg120+1)"`` -> (18, 3);
    ``"19beta1"`` -> (19,); ``"0.10.0"`` -> (0, 10, 0)."""
    match = re.match(r"\d+(?:\.\d+)*", text.strip())
    if match is None:
        raise ValueError(f"not a version: {text!r}")
    return tuple(int(part) for part in match.group().split("."))


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def requirements_missing(
    *, server_version: str, vector_available: str | None
) -> list[str]:
    """What the server lacks, one phrase each; empty if nothing."""
    missing = []
    if version_tuple(server_version) < MIN_POSTGRESQL:
        missing.append(
            f"PostgreSQL {_dotted(MIN_POSTGRESQL)} or later "
            f"(this server is {server_version})"
        )
    wanted = f"pgvector {_dotted(MIN_PGVECTOR)} or later"
    if vector_available is None:
        missing.append(f"{wanted} (the vector extension is not installed on it)")
    elif version_tuple(vector_available) < MIN_PGVECTOR:
        missing.append(f"{wanted} (this server has {vector_available})")
    return missing


def database_versions_check(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created`` receiver: ``ImproperlyConfigured`` (the connection
    closed, so the next attempt checks again) if the server lacks what the index
    needs."""
    if connection.vendor != "postgresql":
        return
    db = connection.settings_dict
    server = (db.get("EMBEDDED_ROOT"), db.get("HOST"), db.get("PORT"))
    if server in _checked:
        return
    with connection.cursor() as cursor:
        cursor.execute(VERSIONS)
        server_version, available, installed = cursor.fetchone()
    missing = requirements_missing(
        server_version=server_version, vector_available=available
    )
    if missing:
        connection.close()
        where = _where(db, connection.alias)
        raise ImproperlyConfigured(
            f"The database server of {where} lacks what the index needs: "
            + "; ".join(missing)
        )
    if installed is not None and version_tuple(installed) < MIN_PGVECTOR:
        logger.warning(
            "pgvector %s is installed in database %s (the server has %s): "
            "manage.py migrate updates it",
            installed,
            db["NAME"],
            available,
        )
    _checked.add(server)


def _where(db: dict[str, Any], alias: str = "default") -> str:
    if db.get("EMBEDDED_ROOT"):
        return f"the embedded database in {db['EMBEDDED_ROOT']}"
    host = db.get("HOST") or "localhost"
    variable = "DATABASE_URL" if alias == "default" else "DATABASE_REPLICA_URLS"
    return f"{variable} (database {db['NAME']} on {host}:{db.get('PORT') or 5432})"


def vector_extension_update(*, using: str) -> None:
    """pgvector's SQL objects brought up to the server's version, if older."""
    connection = connections[using]
    with connection.cursor() as cursor:
        cursor.execute(VERSIONS)
        _, available, installed = cursor.fetchone()
        if installed is None or installed == available:
            return
        try:
            with transaction.atomic(using=using):
                cursor.execute("ALTER EXTENSION vector UPDATE")
        except DatabaseError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != INSUFFICIENT_PRIVILEGE:
                raise
            _not_updated(connection.settings_dict, installed, available)
            return
    logger.warning(
        "pgvector updated from %s to %s in database %s",
        installed,
        available,
        connection.settings_dict["NAME"],
    )


def _not_updated(db: dict[str, Any], installed: str, available: str) -> None:
    """This role may not update the extension: fatal below what the index needs."""
    advice = (
        f"pgvector is {installed} in database {db['NAME']} (the server has "
        f"{available}) and {db.get('USER') or 'this role'} may not update it: as "
        "its owner or a superuser, run ALTER EXTENSION vector UPDATE there"
    )
    if version_tuple(installed) < MIN_PGVECTOR:
        raise ImproperlyConfigured(advice)
    logger.warning(advice)


def vector_extension_update_before_migrate(
    sender: Any, *, using: str, **kwargs: Any
) -> None:
    """``pre_migrate`` receiver: before the migrations, which may use what the
    server's pgvector has."""
    vector_extension_update(using=using)
