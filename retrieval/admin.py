from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Func, IntegerField

from kbsite.admin_utils import ReadOnlyAdmin, hash_column
from retrieval.models import (
    Chunk,
    Embedding,
    EmbeddingSpace,
    EmbeddingUsage,
    QueryLog,
)


@admin.register(Chunk)
class ChunkAdmin(ReadOnlyAdmin):
    list_display = ["page", "position", "heading", "token_count", "hash"]
    search_fields = ["heading", "page__url", "=embed_hash"]
    list_filter = ["page__status", "page__source"]
    list_select_related = ["page"]

    hash = hash_column("embed_hash", "embedded text hash")


@admin.register(Embedding)
class EmbeddingAdmin(ReadOnlyAdmin):
    list_display = ["space", "hash", "dimensions", "token_count", "created_at"]
    list_filter = ["space"]
    search_fields = ["=text_hash"]
    exclude = ["vector"]

    hash = hash_column("text_hash", "text hash")

    def get_queryset(self, request):
        # The size from PostgreSQL, so the list never loads whole vectors.
        queryset = super().get_queryset(request).defer("vector")
        return queryset.annotate(
            _dims=Func("vector", function="vector_dims", output_field=IntegerField())
        )

    @admin.display(description="dimensions")
    def dimensions(self, obj: Any) -> int:
        return obj._dims


@admin.register(EmbeddingSpace)
class EmbeddingSpaceAdmin(ReadOnlyAdmin):
    """Which model serves, and the floor each space learned from the index."""

    list_display = ["name", "state", "floor", "probe_quantiles", "floor_chunks",
                    "floor_learned_at", "switched_at"]  # fmt: skip
    list_filter = ["state", "backend"]

    @admin.display(description="probe similarities (quantiles)")
    def probe_quantiles(self, obj: EmbeddingSpace) -> str:
        quantiles = (obj.floor_sample or {}).get("quantiles", {})
        return ", ".join(f"{q}: {v}" for q, v in sorted(quantiles.items()))


@admin.register(EmbeddingUsage)
class EmbeddingUsageAdmin(ReadOnlyAdmin):
    list_display = ["day", "space", "requests", "inputs", "tokens"]
    list_filter = ["space"]
    date_hierarchy = "day"


@admin.register(QueryLog)
class QueryLogAdmin(ReadOnlyAdmin):
    """What people asked and what they got: the raw material for evaluation."""

    list_display = ["created_at", "kind", "text", "user", "abstained", "feedback",
                    "latency_ms"]  # fmt: skip
    list_filter = ["kind", "abstained", "feedback"]
    search_fields = ["text"]
    list_select_related = ["user"]
