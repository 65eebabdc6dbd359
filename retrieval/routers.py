"""The database router: the index's models are read from a replica inside
``kbsite.replicas.replica_reads()``; everything else, and every write, from and to
the primary.

The index is what a search reads: chunks, their vectors and spaces, the word
counts and the pages they belong to, and what editors added to it (pinned
sections and their questions, readers' words). Not the sources: who may read what is
decided on the primary (``sources.access``, as sign-in, sessions and throttles are),
so that a reader removed from a group is not let in by a replica that has not
heard of it yet.
"""

from __future__ import annotations

from functools import cache

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS
from django.db.models import Model

from kbsite.replicas import read_alias


@cache
def index_models() -> frozenset[type[Model]]:
    from retrieval.models import (
        Chunk,
        Embedding,
        EmbeddingSpace,
        IndexStatistics,
        Lexeme,
        Pin,
        PinQuestion,
        Synonym,
    )
    from sources.models import Page

    return frozenset(
        {Chunk, Embedding, EmbeddingSpace, IndexStatistics, Lexeme, Page, Pin,
         PinQuestion, Synonym}
    )  # fmt: skip


class IndexReadRouter:
    def db_for_read(self, model: type[Model], **hints: object) -> str:
        # Never None: Django would then read from the database the hinted
        # instance came from, a replica, outside any replica_reads() block.
        if model in index_models():
            return read_alias()
        return DEFAULT_DB_ALIAS

    def db_for_write(self, model: type[Model], **hints: object) -> str:
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1: Model, obj2: Model, **hints: object) -> bool | None:
        """Rows of the primary and its replicas are the same rows."""
        same = {DEFAULT_DB_ALIAS, *settings.DATABASE_REPLICAS}
        if obj1._state.db in same and obj2._state.db in same:
            return True
        return None

    def allow_migrate(self, db: str, app_label: str, **hints: object) -> bool:
        """Only the primary is migrated; replicas follow it."""
        return db == DEFAULT_DB_ALIAS
