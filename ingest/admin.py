from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from ingest.crawl.services import (
    crawl_cancel,
    crawl_progress,
    crawl_start,
    page_fetch_queue,
)
from ingest.models import Crawl, CrawlUrl, Delivery
from ingest.queueing import delivery_requeue
from kbsite.admin_utils import ReadOnlyAdmin
from sources.admin import PageAdmin, SourceAdmin
from sources.models import Page, Source


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
    raw_id_fields = ["page", "push", "version"]
    actions = ["requeue"]

    def has_requeue_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("ingest.change_delivery")

    @admin.action(
        description="Re-queue the selected deliveries", permissions=["requeue"]
    )
    def requeue(self, request: HttpRequest, queryset: QuerySet[Delivery]) -> None:
        done = sum(delivery_requeue(delivery=delivery) for delivery in queryset)
        skipped = queryset.count() - done
        message = f"Re-queued {done} deliveries."
        if skipped:
            message += f" {skipped} were left alone (already done, or body dropped)."
        self.message_user(request, message)


# -- the built-in crawler ----------------------------------------------------------


@admin.register(Crawl)
class CrawlAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "state", "started_at", "finished_at", "progress"]
    list_filter = ["state", "kind", "source"]
    list_select_related = ["source"]
    readonly_fields = ["progress", "url_list"]
    actions = ["cancel"]

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("ingest.change_crawl")

    @admin.display(description="progress")
    def progress(self, obj: Crawl) -> str:
        return crawl_progress(crawl=obj).counts()

    @admin.display(description="URLs")
    def url_list(self, obj: Crawl) -> str:
        url = (
            reverse("admin:ingest_crawlurl_changelist") + f"?crawl__id__exact={obj.pk}"
        )
        return format_html('<a href="{}">every URL of this crawl</a>', url)

    @admin.action(description="Cancel the selected crawls", permissions=["cancel"])
    def cancel(self, request: HttpRequest, queryset: QuerySet[Crawl]) -> None:
        done = sum(crawl_cancel(crawl=crawl) for crawl in queryset)
        self.message_user(request, f"Cancelled {done} running crawls.")


@admin.register(CrawlUrl)
class CrawlUrlAdmin(ReadOnlyAdmin):
    list_display = ["url", "kind", "state", "result", "site_status", "depth", "error"]
    list_filter = ["result", "state", "kind"]
    search_fields = ["url"]
    raw_id_fields = ["crawl", "delivery"]


# The crawler lives in ingest, which sources must not import: the sources' admin
# classes are extended here so that saving a source or a page starts its crawl.


class CrawlingSourceAdmin(SourceAdmin):
    actions = ["crawl_now"]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool):
        super().save_model(request, obj, form, change)
        if change or not obj.is_crawled_here:
            return
        transaction.on_commit(lambda: crawl_start(source=obj))
        self.message_user(request, f"The first crawl of {obj} is queued.")
        self._warn_missing_settings(request, obj)

    @admin.action(description="Crawl the selected sources now")
    def crawl_now(self, request: HttpRequest, queryset: QuerySet[Source]) -> None:
        started = resumed = skipped = 0
        for source in queryset:
            if not source.is_crawled_here:
                skipped += 1
                continue
            _, new = crawl_start(source=source)
            started, resumed = started + new, resumed + (not new)
        message = f"{started} crawls started, {resumed} already running."
        if skipped:
            message += f" {skipped} Crawlbase sources left to Crawlbase."
        self.message_user(request, message)

    def _warn_missing_settings(self, request: HttpRequest, source: Source) -> None:
        if source.fetcher == Source.Fetcher.NSTPROXY and not settings.NSTPROXY_API_KEY:
            self.message_user(
                request,
                "NSTPROXY_API_KEY is not set: this source's crawl will stop at once.",
                messages.WARNING,
            )


class FetchingPageAdmin(PageAdmin):
    actions = ["fetch_now"]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool):
        super().save_model(request, obj, form, change)
        if not change and obj.source.is_crawled_here:
            transaction.on_commit(lambda: page_fetch_queue(page_ids=[obj.pk]))
            self.message_user(request, f"{obj} is queued for its first fetch.")

    @admin.action(description="Fetch the selected pages again now")
    def fetch_now(self, request: HttpRequest, queryset: QuerySet[Page]) -> None:
        queued = page_fetch_queue(page_ids=queryset.values_list("pk", flat=True))
        self.message_user(
            request, f"{queued} pages queued (Crawlbase sources' pages left out)."
        )


admin.site.unregister(Source)
admin.site.register(Source, CrawlingSourceAdmin)
admin.site.unregister(Page)
admin.site.register(Page, FetchingPageAdmin)
