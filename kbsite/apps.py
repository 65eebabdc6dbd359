from __future__ import annotations

from django.apps import AppConfig
from django.conf import settings
from django.core.management import call_command
from django.db import connections
from django.db.backends.signals import connection_created
from django.db.models.signals import post_migrate, pre_migrate
from psycopg.sql import SQL, Identifier

from kbsite.database_versions import (
    database_versions_check,
    vector_extension_update_before_migrate,
)
from kbsite.schedules import schedules_ensure


def _ensure_cache_table(sender: AppConfig, *, using: str, **kwargs) -> None:
    """The database cache's table, created by every migrate so that ``migrate``
    alone readies a database.

    The table is unlogged: a cache may lose what it holds when the server crashes,
    and its writes then need no WAL flush."""
    call_command("createcachetable", database=using, verbosity=0)
    table = settings.CACHES["default"]["LOCATION"]
    with connections[using].cursor() as cursor:
        # A no-op for a table that is unlogged already.
        cursor.execute(
            SQL("ALTER TABLE {} SET UNLOGGED").format(Identifier(table)).as_string()
        )


def _ensure_schedules(sender: AppConfig, **kwargs) -> None:
    schedules_ensure(
        prefix="site: ",
        schedules={
            # Anonymous readers' throttle rows (hashes of addresses) last a day.
            "site: forget idle throttle windows": (
                "kbsite.throttling.throttle_windows_sweep",
                60,
            ),
        },
    )


class KbsiteConfig(AppConfig):
    name = "kbsite"
    verbose_name = "Site"

    def ready(self) -> None:
        connection_created.connect(database_versions_check)
        pre_migrate.connect(vector_extension_update_before_migrate, sender=self)
        post_migrate.connect(_ensure_cache_table, sender=self)
        post_migrate.connect(_ensure_schedules, sender=self)
