"""The default database: the one DATABASE_URL names, which must be PostgreSQL (the
index needs pgvector and its full-text search), else the embedded server whose data
lives under ``var/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured


def default_database(url: str, *, var_dir: Path, name: str) -> dict[str, Any]:
    """Connections are kept a minute and checked before reuse; a URL that cannot be
    parsed, or names another engine, stops start-up."""
    database = _from_url(url) if url else _embedded(var_dir, name)
    database["CONN_HEALTH_CHECKS"] = True
    return database


def _from_url(url: str) -> dict[str, Any]:
    try:
        database = dict(dj_database_url.parse(url, conn_max_age=60))
    except ValueError as exc:
        raise ImproperlyConfigured(f"DATABASE_URL cannot be parsed: {exc}") from exc
    if database["ENGINE"] != "django.db.backends.postgresql":
        raise ImproperlyConfigured(
            "DATABASE_URL must point to PostgreSQL (postgres://…), "
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
