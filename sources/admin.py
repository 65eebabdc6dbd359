from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Count, Q
from django.utils.html import format_html_join

from kbsite.admin_utils import ReadOnlyAdmin, hash_column, short_hash
from sources.models import LineShape, Page, PageVersion, Push, Source


@admin.register(Source)
class SourceAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "fetcher",
        "page_count",
        "live_count",
        "recrawl_every",
        "max_pages",
    ]
    list_filter = ["fetcher"]
    search_fields = ["name", "seed_urls", "sitemap_url"]
    filter_horizontal = ["allowed_groups"]
    readonly_fields = ["created_at", "updated_at"]

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(
                _pages=Count("pages"),
                _live=Count("pages", filter=Q(pages__status=Page.Status.LIVE)),
            )
        )

    @admin.display(description="pages", ordering="_pages")
    def page_count(self, obj: Any) -> int:
        return obj._pages

    @admin.display(description="live", ordering="_live")
    def live_count(self, obj: Any) -> int:
        return obj._live


class PageVersionInline(admin.TabularInline):
    model = PageVersion
    fields = readonly_fields = ("recorded_at", "kind", "hash")
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = True

    hash = hash_column("content_hash", "content hash")


@admin.register(Page)
class PageAdmin(admin.ModelAdmin):
    list_display = [
        "url",
        "source",
        "status",
        "hash",
        "last_verified_at",
        "last_changed_at",
        "site_modified_at",
        "next_crawl_at",
        "failure_count",
        "embedding_tokens",
    ]
    list_filter = [
        "status",
        "source",
        ("near_duplicate_of", admin.EmptyFieldListFilter),
    ]
    search_fields = ["url", "title", "final_url"]
    list_select_related = ["source"]
    show_full_result_count = False
    readonly_fields = [
        "title",
        "status",
        "content_hash",
        "pushed_url",
        "final_url",
        "redirect_to",
        "duplicate_of",
        "near_duplicate_of",
        "near_duplicate_score",
        "original_status",
        "last_verified_at",
        "last_changed_at",
        "site_modified_at",
        "etag",
        "last_modified",
        "deleted_at",
        "last_failure_at",
        "failure_count",
        "last_error",
        "embedding_tokens",
        "extractor_version",
        "next_crawl_at",
        "created_at",
        "chunk_list",
        "markdown",
    ]
    inlines = [PageVersionInline]

    hash = hash_column("content_hash", "content hash")

    @admin.display(description="chunks")
    def chunk_list(self, obj: Page) -> str:
        """The chunks search holds for this page, in order (heading and size)."""
        rows = obj.chunks.order_by("position").values_list(
            "position", "heading", "token_count", "embed_hash"
        )
        return (
            format_html_join(
                "\n",
                "<div>#{} {} <small>({} tokens, {})</small></div>",
                ((p, h or "—", n, short_hash(e)) for p, h, n, e in rows),
            )
            or "—"
        )


@admin.register(LineShape)
class LineShapeAdmin(ReadOnlyAdmin):
    """What each source's pages repeat: the lines stripped as boilerplate."""

    list_display = ["example", "source", "pages"]
    list_filter = ["source"]
    search_fields = ["example"]
    ordering = ["-pages"]


@admin.register(PageVersion)
class PageVersionAdmin(ReadOnlyAdmin):
    list_display = ["page", "kind", "hash", "recorded_at"]
    list_filter = ["kind"]
    search_fields = ["page__url", "content_hash"]
    list_select_related = ["page"]

    hash = hash_column("content_hash", "content hash")


@admin.register(Push)
class PushAdmin(ReadOnlyAdmin):
    list_display = ["rid", "url", "pushed_at", "delivered_at"]
    search_fields = ["=rid", "url"]
    list_select_related = ["page"]
    raw_id_fields = ["page"]
