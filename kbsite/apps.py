from __future__ import annotations

from django.apps import AppConfig
from django.core.management import call_command
from django.db.models.signals import post_migrate


def _ensure_cache_table(sender: AppConfig, *, using: str, **kwargs) -> None:
    """The database cache's table (the throttles' counts), created by every migrate
    so that ``migrate`` alone readies a database."""
    call_command("createcachetable", database=using, verbosity=0)


class KbsiteConfig(AppConfig):
    name = "kbsite"
    verbose_name = "Site"

    def ready(self) -> None:
        post_migrate.connect(_ensure_cache_table, sender=self)
