from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Func, IntegerField

from kbsite.admin_utils import ReadOnlyAdmin, hash_column
from retrieval.models import Chunk, Embedding, EmbeddingUsage, QueryLog


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


@admin.register(EmbeddingUsage)
class EmbeddingUsageAdmin(ReadOnlyAdmin):
    list_display = ["day", "space", "requests", "inputs", "tokens"]
    list_filter = ["space"]
    date_hierarchy = "day"


@admin.register(QueryLog)
class QueryLogAdmin(ReadOnlyAdmin):
    """What people asked and what they got: the raw material for evaluation."""

    list_display = ["created_at", "kind", "text", "user", "abstained", "latency_ms"]
    list_filter = ["kind", "abstained"]
    search_fields = ["text"]
    list_select_related = ["user"]
