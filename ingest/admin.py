from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from ingest.crawl.services import crawl_cancel, crawl_progress
from ingest.models import Crawl, CrawlUrl, Delivery
from ingest.queueing import delivery_requeue
from ingest.recrawl import RecrawlPlan, pages_recrawl, recrawl_due, source_crawl_start
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


# The editors' source and page admins, with the crawls that ingest runs: ingest
# extends them here, so that sources never depends on ingest.


def _report(admin_: admin.ModelAdmin, request: HttpRequest, plan: RecrawlPlan) -> None:
    level = messages.WARNING if plan.busy or plan.out_of_scope else messages.SUCCESS
    admin_.message_user(request, f"Recrawl: {plan}.", level)


FETCHER_SETTINGS = {
    Source.Fetcher.CRAWLBASE: ["CRAWLBASE_TOKEN", "CRAWLBASE_CRAWLER", "WEBHOOK_TOKEN"],
    Source.Fetcher.NSTPROXY: ["NSTPROXY_API_KEY"],
    Source.Fetcher.DIRECT: ["CRAWL_CONTACT_URL"],
}


def fetcher_problems(source: Source) -> list[str]:
    """Settings the source's fetcher needs and does not have."""
    needed = FETCHER_SETTINGS.get(Source.Fetcher(source.fetcher), [])
    return [f"{name} is not set" for name in needed if not getattr(settings, name)]


class CrawlingSourceAdmin(SourceAdmin):
    actions = ["crawl_now", "recrawl_due_pages"]
    readonly_fields = [*SourceAdmin.readonly_fields, "callback_url", "fetcher_status"]

    def save_model(
        self, request: HttpRequest, obj: Any, form: Any, change: bool
    ) -> None:
        super().save_model(request, obj, form, change)
        if not change:
            _report(self, request, source_crawl_start(source=obj))

    @admin.display(description="callback URL for Crawlbase")
    def callback_url(self, obj: Source) -> str:
        """What to paste into the crawler's settings at Crawlbase (the token is
        WEBHOOK_TOKEN, masked here)."""
        token = settings.WEBHOOK_TOKEN
        shown = f"{token[:4]}…" if token else "(WEBHOOK_TOKEN is not set)"
        path = reverse("ingest:crawlbase-webhook")
        return format_html(
            "<code>{}{}?token={}</code>", settings.PUBLIC_URL, path, shown
        )

    @admin.display(description="fetcher settings")
    def fetcher_status(self, obj: Source) -> str:
        problems = fetcher_problems(obj)
        if not problems:
            return "Complete."
        return format_html(
            '<strong style="color:#ba2121">Missing: {}</strong>', "; ".join(problems)
        )

    @admin.action(description="Crawl the selected sources now (from their seeds)")
    def crawl_now(self, request: HttpRequest, queryset: QuerySet[Source]) -> None:
        for source in queryset:
            _report(self, request, source_crawl_start(source=source))

    @admin.action(description="Recrawl the due pages of the selected sources")
    def recrawl_due_pages(
        self, request: HttpRequest, queryset: QuerySet[Source]
    ) -> None:
        for source in queryset:
            _report(self, request, recrawl_due(source=source))


class CrawlingPageAdmin(PageAdmin):
    actions = ["crawl_now"]

    def save_model(
        self, request: HttpRequest, obj: Any, form: Any, change: bool
    ) -> None:
        super().save_model(request, obj, form, change)
        if not change:
            _report(self, request, pages_recrawl(pages=Page.objects.filter(pk=obj.pk)))

    @admin.action(description="Crawl the selected pages again now")
    def crawl_now(self, request: HttpRequest, queryset: QuerySet[Page]) -> None:
        _report(self, request, pages_recrawl(pages=queryset))


for model, model_admin in [(Source, CrawlingSourceAdmin), (Page, CrawlingPageAdmin)]:
    admin.site.unregister(model)
    admin.site.register(model, model_admin)
