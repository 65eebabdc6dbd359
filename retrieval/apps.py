from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _ensure_active_index(sender: AppConfig, **kwargs) -> None:
    """The configured space is registered (serving, if it is the first) with its
    index, and the serving space keeps its index."""
    from retrieval.spaces import (
        configured_space_register,
        embedding_index_ensure,
        space_serving,
    )

    configured_space_register()
    serving = space_serving()
    if serving is not None:
        embedding_index_ensure(space=serving.name, dimensions=serving.dimensions)


class RetrievalConfig(AppConfig):
    name = "retrieval"
    verbose_name = "Search index"

    def ready(self) -> None:
        post_migrate.connect(_ensure_active_index, sender=self)
