from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from ingest.models import Delivery
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


# The editors' source and page admins, with the crawls that ingest runs: ingest
# extends them here, so that sources never depends on ingest.


def _report(admin_: admin.ModelAdmin, request: HttpRequest, plan: RecrawlPlan) -> None:
    level = messages.WARNING if plan.busy or plan.out_of_scope else messages.SUCCESS
    admin_.message_user(request, f"Recrawl: {plan}.", level)


def fetcher_problems(source: Source) -> list[str]:
    """Settings the source's fetcher needs and does not have."""
    if source.fetcher != Source.Fetcher.CRAWLBASE:
        return []
    needed = ["CRAWLBASE_TOKEN", "CRAWLBASE_CRAWLER", "WEBHOOK_TOKEN"]
    return [f"{name} is not set" for name in needed if not getattr(settings, name)]


class CrawlingSourceAdmin(SourceAdmin):
    actions = ["push_now", "recrawl_due_pages"]
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

    @admin.action(description="Push the seeds of the selected sources now")
    def push_now(self, request: HttpRequest, queryset: QuerySet[Source]) -> None:
        for source in queryset:
            _report(self, request, source_crawl_start(source=source))

    @admin.action(description="Recrawl the due pages of the selected sources")
    def recrawl_due_pages(
        self, request: HttpRequest, queryset: QuerySet[Source]
    ) -> None:
        for source in queryset:
            _report(self, request, recrawl_due(source=source))


class CrawlingPageAdmin(PageAdmin):
    actions = ["push_now"]

    def save_model(
        self, request: HttpRequest, obj: Any, form: Any, change: bool
    ) -> None:
        super().save_model(request, obj, form, change)
        if not change:
            _report(self, request, pages_recrawl(pages=Page.objects.filter(pk=obj.pk)))

    @admin.action(description="Push the selected pages now")
    def push_now(self, request: HttpRequest, queryset: QuerySet[Page]) -> None:
        _report(self, request, pages_recrawl(pages=queryset))


for model, model_admin in [(Source, CrawlingSourceAdmin), (Page, CrawlingPageAdmin)]:
    admin.site.unregister(model)
    admin.site.register(model, model_admin)
