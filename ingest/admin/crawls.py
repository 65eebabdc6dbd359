"""The built-in crawler's crawls, with their progress, and the URLs of each."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from ingest.crawl.progress import crawl_progress
from ingest.crawl.services import crawl_cancel
from ingest.models import Crawl, CrawlUrl
from kbsite.admin_utils import ReadOnlyAdmin
from sources.admin.visibility import VisibleRowsAdmin


@admin.register(Crawl)
class CrawlAdmin(VisibleRowsAdmin, ReadOnlyAdmin):
    source_path = "source"
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
class CrawlUrlAdmin(VisibleRowsAdmin, ReadOnlyAdmin):
    source_path = "crawl__source"
    list_display = ["url", "kind", "state", "result", "site_status", "depth", "error"]
    list_filter = ["result", "state", "kind"]
    search_fields = ["url"]
    raw_id_fields = ["crawl", "delivery"]
