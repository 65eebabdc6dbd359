from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _ensure_active_index(sender: AppConfig, **kwargs) -> None:
    from retrieval.embeddings import get_embedder
    from retrieval.services import embedding_index_ensure

    embedder = get_embedder()
    embedding_index_ensure(space=embedder.space, dimensions=embedder.dimensions)


class RetrievalConfig(AppConfig):
    name = "retrieval"
    verbose_name = "Search index"

    def ready(self) -> None:
        post_migrate.connect(_ensure_active_index, sender=self)
