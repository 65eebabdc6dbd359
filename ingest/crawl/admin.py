"""The built-in crawler's crawls, with their progress (fetched, indexed, left and
the time left), why one failed, and the URLs of each."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import formats, timezone
from django.utils.html import format_html

from ingest.crawl.models import Crawl, CrawlUrl
from ingest.crawl.progress import Progress, Status, crawl_errors, crawl_progress
from ingest.crawl.services import crawl_cancel
from kbsite.admin_utils import ReadOnlyAdmin, ago
from sources.admin.visibility import VisibleRowsAdmin


def status_html(progress: Progress) -> str:
    """The crawl's status in a word, in red when it failed."""
    if progress.status == Status.FAILED:
        return format_html('<strong class="kb-warning">{}</strong>', progress.status)
    return format_html("<strong>{}</strong>", progress.status)


def progress_html(progress: Progress) -> str:
    """Fetched, indexed, left and the time left; the counts by result below."""
    return format_html(
        '{}<br><small class="kb-path">{}</small>',
        progress.summary(),
        progress.counts(),
    )


def error_html(crawl: Crawl) -> str:
    """The crawl's latest URL that gave it nothing, and why."""
    row = crawl_errors(crawl=crawl).first()
    if row is None:
        return "None."
    return format_html(
        '<a href="{}">{}</a>, {}: {}',
        reverse("admin:ingest_crawlurl_change", args=[row.pk]),
        row.url,
        ago(row.done_at),
        row.error,
    )


@admin.register(Crawl)
class CrawlAdmin(VisibleRowsAdmin, ReadOnlyAdmin):
    source_path = "source"
    # One clock per crawl: started, done fetching, done indexing.
    list_display = ["__str__", "status", "started_at", "fetched_at", "indexed_at",
                    "progress"]  # fmt: skip
    list_filter = ["state", "kind", "source"]
    list_select_related = ["source"]
    readonly_fields = ["status", "progress", "last_error", "url_list"]
    actions = ["cancel"]

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("ingest.change_crawl")

    def _progress(self, obj: Any) -> Progress:
        if not hasattr(obj, "_progress_cache"):
            obj._progress_cache = crawl_progress(crawl=obj)
        return obj._progress_cache

    @admin.display(description="status")
    def status(self, obj: Crawl) -> str:
        """Done only once what it fetched is indexed; failed when no page of it
        could be fetched (the reason is its last error)."""
        progress = self._progress(obj)
        if progress.status != Status.FAILED:
            return status_html(progress)
        return format_html("{}<br><small>{}</small>", status_html(progress),
                           error_html(obj))  # fmt: skip

    @admin.display(description="fetched at", ordering="finished_at")
    def fetched_at(self, obj: Crawl) -> str:
        """When it stopped fetching (done or cancelled); its pages may still be
        indexing then."""
        if obj.finished_at is None:
            return "fetching…"
        return formats.localize(timezone.localtime(obj.finished_at))

    @admin.display(description="indexed at")
    def indexed_at(self, obj: Crawl) -> str:
        """When the last page it fetched went through ingest."""
        progress = self._progress(obj)
        if not progress.finished:
            return "indexing…" if progress.status == Status.INDEXING else "—"
        if progress.indexed_at is None:
            return "—"
        return formats.localize(timezone.localtime(progress.indexed_at))

    @admin.display(description="progress")
    def progress(self, obj: Crawl) -> str:
        return progress_html(self._progress(obj))

    @admin.display(description="last error")
    def last_error(self, obj: Crawl) -> str:
        return error_html(obj)

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
