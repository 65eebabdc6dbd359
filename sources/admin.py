from __future__ import annotations

from django.contrib import admin
from django.db.models import Count, Q

from ingest.services import delivery_requeue
from kbsite.admin_utils import ReadOnlyAdmin, short_hash
from retrieval.models import Chunk
from sources.models import Delivery, LineShape, Page, PageVersion, Push, Source


@admin.register(Source)
class SourceAdmin(admin.ModelAdmin):
    list_display = ["name", "fetcher", "page_count", "live_count", "recrawl_every"]
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
    def page_count(self, obj: Source) -> int:
        return obj._pages

    @admin.display(description="live", ordering="_live")
    def live_count(self, obj: Source) -> int:
        return obj._live


class PageVersionInline(admin.TabularInline):
    model = PageVersion
    fields = ["recorded_at", "kind", "hash", "delivery"]
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = True

    @admin.display(description="content hash")
    def hash(self, obj: PageVersion) -> str:
        return short_hash(obj.content_hash)


class ChunkInline(admin.TabularInline):
    model = Chunk
    fields = ["position", "heading", "token_count", "hash"]
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False

    @admin.display(description="embedded text hash")
    def hash(self, obj: Chunk) -> str:
        return short_hash(obj.embed_hash)


@admin.register(Page)
class PageAdmin(admin.ModelAdmin):
    list_display = [
        "url",
        "source",
        "status",
        "hash",
        "last_verified_at",
        "last_changed_at",
        "next_crawl_at",
        "failure_count",
        "embedding_tokens",
    ]
    list_filter = ["status", "source"]
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
        "original_status",
        "last_verified_at",
        "last_changed_at",
        "deleted_at",
        "last_failure_at",
        "failure_count",
        "last_error",
        "embedding_tokens",
        "extractor_version",
        "created_at",
        "markdown",
    ]
    inlines = [PageVersionInline, ChunkInline]

    @admin.display(description="content hash", ordering="content_hash")
    def hash(self, obj: Page) -> str:
        return short_hash(obj.content_hash)


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

    @admin.display(description="content hash")
    def hash(self, obj: PageVersion) -> str:
        return short_hash(obj.content_hash)


@admin.register(Push)
class PushAdmin(ReadOnlyAdmin):
    list_display = ["rid", "url", "pushed_at", "delivered_at"]
    search_fields = ["=rid", "url"]
    list_select_related = ["page"]
    raw_id_fields = ["page"]


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    list_display = [
        "rid",
        "url",
        "state",
        "outcome",
        "original_status",
        "crawler_status",
        "attempts",
        "embedding_tokens",
        "received_at",
    ]
    list_filter = ["state", "outcome", "crawler_status", "original_status"]
    search_fields = ["=rid", "url"]
    exclude = ["body"]
    raw_id_fields = ["page", "push"]
    actions = ["requeue"]

    def has_requeue_permission(self, request) -> bool:
        return request.user.has_perm("sources.change_delivery")

    @admin.action(
        description="Re-queue the selected deliveries", permissions=["requeue"]
    )
    def requeue(self, request, queryset) -> None:
        done = sum(delivery_requeue(delivery=delivery) for delivery in queryset)
        skipped = queryset.count() - done
        message = f"Re-queued {done} deliveries."
        if skipped:
            message += f" {skipped} were left alone (already done, or body dropped)."
        self.message_user(request, message)
