from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.views.decorators.http import require_POST

from ingest import stats
from ingest.crawl.services import crawl_cancel, crawl_progress
from ingest.models import Crawl, CrawlUrl, Delivery
from ingest.queueing import delivery_requeue
from ingest.recrawl import RecrawlPlan, pages_recrawl, recrawl_due, source_crawl_start
from kbsite.admin_utils import (
    ReadOnlyAdmin,
    ago,
    number,
    title_and_path,
    tokens_cost,
)
from retrieval.chunking import chunk_markdown
from sources.admin import PageAdmin, SourceAdmin
from sources.models import Page, PageVersion, Source

Outcome = Delivery.Outcome


class SiteStatusFilter(admin.SimpleListFilter):
    """The site's HTTP status in classes: fixed choices, so no scan of the table
    for the distinct values."""

    title = "site status"
    parameter_name = "site_status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("2xx", "2xx"),
            ("3xx", "3xx"),
            ("gone", "404 or 410"),
            ("4xx", "other 4xx"),
            ("5xx", "5xx"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        ranges = {"2xx": (200, 299), "3xx": (300, 399), "5xx": (500, 599)}
        value = self.value()
        if value in ranges:
            low, high = ranges[value]
            return queryset.filter(original_status__range=(low, high))
        if value == "gone":
            return queryset.filter(original_status__in=[404, 410])
        if value == "4xx":
            return queryset.filter(original_status__range=(400, 499)).exclude(
                original_status__in=[404, 410]
            )
        return None


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    menu_order = 1
    list_display = ["delivery", "source", "result", "statuses", "tokens", "received"]
    list_display_links = ["delivery"]
    list_filter = ["outcome", "state", ("page__source", admin.RelatedFieldListFilter),
                   SiteStatusFilter]  # fmt: skip
    list_select_related = ["page__source"]
    list_defer = ["page__markdown", "page__raw_body", "page__line_shapes",
                  "page__last_error", "error"]  # fmt: skip
    date_hierarchy = "received_at"
    search_fields = ["=rid", "url"]
    exclude = ["body"]
    readonly_fields = ["kept_body", "version_diff"]
    raw_id_fields = ["page", "push", "version"]
    actions = ["requeue"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Delivery]:
        return super().get_queryset(request).defer("body")

    @admin.display(description="delivery", ordering="url")
    def delivery(self, obj: Delivery) -> str:
        title = obj.page.title if obj.page else ""
        return title_and_path(title or obj.rid, obj.url, host=obj.page is None)

    @admin.display(description="source", ordering="page__source__name")
    def source(self, obj: Delivery) -> str:
        return obj.page.source.name if obj.page else "—"

    @admin.display(description="result", ordering="outcome")
    def result(self, obj: Delivery) -> str:
        if not obj.outcome:
            return obj.get_state_display()
        return format_html(
            '<span class="kb-badge kb-{}" title="{}">{}</span>',
            obj.outcome,
            obj.error,
            obj.get_outcome_display(),
        )

    @admin.display(description="site · crawler")
    def statuses(self, obj: Delivery) -> str:
        return f"{obj.original_status or '—'} · {obj.crawler_status or '—'}"

    @admin.display(description="tokens", ordering="embedding_tokens")
    def tokens(self, obj: Delivery) -> str:
        return number(obj.embedding_tokens)

    @admin.display(description="received", ordering="received_at")
    def received(self, obj: Delivery) -> str:
        return ago(obj.received_at)

    @admin.display(description="body")
    def kept_body(self, obj: Delivery) -> str:
        kept = Delivery.objects.filter(pk=obj.pk).exclude(body=None).exists()
        if not kept:
            return "Dropped once processed."
        days = settings.REJECTED_BODY_KEEP_DAYS
        return (
            f"Kept ({number(obj.body_bytes)} bytes); kept {days} days if out of scope."
        )

    @admin.display(description="change recorded")
    def version_diff(self, obj: Delivery) -> str:
        if obj.version_id is None or obj.page_id is None:
            return "—"
        url = reverse("admin:sources_page_diff", args=[obj.page_id])
        return format_html(
            '<a href="{}?b={}">The diff of this change</a>', url, obj.version_id
        )

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
            message += (
                f" {skipped} were left alone (already done, body dropped, or still "
                "no source covers them)."
            )
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


OVERVIEW = ["pages_overview", "index_overview", "last_delivery", "last_error",
            "callback_url", "fetcher_status"]  # fmt: skip


class CrawlingSourceAdmin(SourceAdmin):
    actions = ["crawl_now", "recrawl_due_pages"]
    list_display = [*SourceAdmin.list_display, "tokens_week"]
    readonly_fields = [*SourceAdmin.readonly_fields, *OVERVIEW]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Source]:
        week = Delivery.objects.filter(
            page__source=OuterRef("pk"),
            received_at__gte=timezone.now() - stats.WEEK,
        ).order_by()
        tokens = week.values("page__source").annotate(t=Sum("embedding_tokens"))
        return (
            super()
            .get_queryset(request)
            .annotate(_tokens_week=Coalesce(Subquery(tokens.values("t")), 0))
        )

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        """The overview first on an existing source; every other field after it,
        whatever fields the model gains."""
        fields = [f for f in self.get_fields(request, obj) if f not in OVERVIEW]
        if obj is None:
            return [(None, {"fields": fields})]
        return [("Overview", {"fields": OVERVIEW}), ("Settings", {"fields": fields})]

    def save_model(
        self, request: HttpRequest, obj: Any, form: Any, change: bool
    ) -> None:
        super().save_model(request, obj, form, change)
        if not change:
            _report(self, request, source_crawl_start(source=obj))

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        source = Source.objects.filter(pk=object_id).first()
        buttons = self.crawl_buttons(request, source) if source else []
        context = {**(extra_context or {}), "crawl_buttons": buttons}
        return super().change_view(request, object_id, form_url, context)

    def crawl_buttons(self, request: HttpRequest, source: Source) -> list[dict]:
        """The crawl actions of the source's page: only those its fetcher can do,
        for editors who may change sources."""
        if not self.has_change_permission(request, source):
            return []
        return [
            {"url": reverse("admin:sources_source_crawl_now", args=[source.pk]),
             "label": "Crawl now (from the seeds)"},
            {"url": reverse("admin:sources_source_recrawl_due", args=[source.pk]),
             "label": "Recrawl the due pages"},
        ]  # fmt: skip

    def get_urls(self) -> list[Any]:
        def view(func: Any) -> Any:
            return self.admin_site.admin_view(require_POST(func))

        return [
            path("<path:object_id>/crawl-now/", view(self.crawl_now_view),
                 name="sources_source_crawl_now"),
            path("<path:object_id>/recrawl-due/", view(self.recrawl_due_view),
                 name="sources_source_recrawl_due"),
            *super().get_urls(),
        ]  # fmt: skip

    def crawl_now_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        source = self._changeable(request, object_id)
        _report(self, request, source_crawl_start(source=source))
        return self._back(source)

    def recrawl_due_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        source = self._changeable(request, object_id)
        _report(self, request, recrawl_due(source=source))
        return self._back(source)

    def _changeable(self, request: HttpRequest, object_id: str) -> Source:
        source = get_object_or_404(Source, pk=object_id)
        if not self.has_change_permission(request, source):
            raise PermissionDenied
        return source

    def _back(self, source: Source) -> HttpResponse:
        return HttpResponseRedirect(
            reverse("admin:sources_source_change", args=[source.pk])
        )

    # -- list columns and the overview ------------------------------------------

    @admin.display(description="tokens, 7 days", ordering="_tokens_week")
    def tokens_week(self, obj: Any) -> str:
        return number(obj._tokens_week)

    def _overview(self, obj: Any) -> stats.SourceOverview:
        if not hasattr(obj, "_overview_cache"):
            obj._overview_cache = stats.source_overview(source=obj, now=timezone.now())
        return obj._overview_cache

    @admin.display(description="pages")
    def pages_overview(self, obj: Source) -> str:
        o = self._overview(obj)
        pages = reverse("admin:sources_page_changelist")
        link = f"{pages}?source__id__exact={obj.pk}"
        return format_html(
            '<a href="{}&amp;status__exact=live">{} live</a> · '
            '<a href="{}&amp;condition=stale">{} stale</a> (not verified within '
            'their interval) · <a href="{}&amp;condition=failing">{} failing</a> · '
            '<a href="{}&amp;condition=tombstoned">{} gone</a> · {} redirected · '
            '<a href="{}&amp;condition=pending">{} waiting for a first crawl</a>',
            link, number(o.live), link, number(o.stale), link, number(o.failing),
            link, number(o.gone), number(o.redirected), link, number(o.pending),
        )  # fmt: skip

    @admin.display(description="index")
    def index_overview(self, obj: Source) -> str:
        o = self._overview(obj)
        week, ever = tokens_cost(o.tokens_week), tokens_cost(o.tokens_ever)
        return format_html(
            "{} chunks · {} tokens embedded in the last 7 days{} · {} ever{}",
            number(o.chunks),
            number(o.tokens_week),
            f" (≈ {week})" if week else "",
            number(o.tokens_ever),
            f" (≈ {ever})" if ever else "",
        )

    @admin.display(description="last delivery")
    def last_delivery(self, obj: Source) -> str:
        delivery = self._overview(obj).last_delivery
        if delivery is None:
            return "None yet."
        url = reverse("admin:ingest_delivery_change", args=[delivery.pk])
        return format_html(
            '<a href="{}">{}</a>, {}: {}',
            url,
            delivery.url,
            ago(delivery.received_at),
            delivery.get_outcome_display() or delivery.get_state_display(),
        )

    @admin.display(description="last error")
    def last_error(self, obj: Source) -> str:
        page = self._overview(obj).last_error
        if page is None:
            return "No page is failing."
        url = reverse("admin:sources_page_change", args=[page.pk])
        return format_html(
            '<a href="{}">{}</a>, {}: {}',
            url,
            page.title or page.url,
            ago(page.last_failure_at),
            page.last_error,
        )

    @admin.display(description="callback URL for Crawlbase")
    def callback_url(self, obj: Source) -> str:
        """What to paste into the crawler's settings at Crawlbase (the token is
        WEBHOOK_TOKEN, masked here)."""
        if obj.fetcher != Source.Fetcher.CRAWLBASE:
            return f"— (this source's fetcher is {obj.get_fetcher_display()})"
        token = settings.WEBHOOK_TOKEN
        shown = f"{token[:4]}…" if token else "(WEBHOOK_TOKEN is not set)"
        path_ = reverse("ingest:crawlbase-webhook")
        return format_html(
            "<code>{}{}?token={}</code>", settings.PUBLIC_URL, path_, shown
        )

    @admin.display(description="fetcher settings")
    def fetcher_status(self, obj: Source) -> str:
        problems = fetcher_problems(obj)
        if not problems:
            return "Complete."
        return format_html(
            '<strong class="kb-warning">Missing: {}</strong>', "; ".join(problems)
        )

    # -- actions on many sources -------------------------------------------------

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
    readonly_fields = [*PageAdmin.readonly_fields, "recent_deliveries"]

    def save_model(
        self, request: HttpRequest, obj: Any, form: Any, change: bool
    ) -> None:
        super().save_model(request, obj, form, change)
        if not change:
            _report(self, request, pages_recrawl(pages=Page.objects.filter(pk=obj.pk)))

    @admin.action(description="Crawl the selected pages again now")
    def crawl_now(self, request: HttpRequest, queryset: QuerySet[Page]) -> None:
        _report(self, request, pages_recrawl(pages=queryset))

    @admin.display(description="recent deliveries")
    def recent_deliveries(self, obj: Page) -> str:
        rows = obj.deliveries.defer("body").order_by("-received_at")[:10]
        return (
            format_html_join(
                "\n",
                '<div><a href="{}">{}</a> {} · {} tokens</div>',
                (
                    (
                        reverse("admin:ingest_delivery_change", args=[d.pk]),
                        d.get_outcome_display() or d.get_state_display(),
                        ago(d.received_at),
                        number(d.embedding_tokens),
                    )
                    for d in rows
                ),
            )
            or "None yet."
        )

    def version_change(
        self, *, page: Page, newer: PageVersion, texts: tuple[str, str]
    ) -> dict[str, Any] | None:
        """The chunks whose text is new in ``newer`` (chunked as the index chunks,
        with the page's current title) and the delivery that recorded it."""
        before = {c.embed_hash for c in chunk_markdown(texts[0], title=page.title)}
        after = chunk_markdown(texts[1], title=page.title)
        fresh = [c for c in after if c.embed_hash not in before]
        delivery = Delivery.objects.defer("body").filter(version=newer).first()
        change: dict[str, Any] = {
            "chunks": [
                {"position": c.position, "heading": c.heading,
                 "tokens": number(c.token_count)}
                for c in fresh
            ],
            "kept": len(after) - len(fresh),
            "delivery": delivery,
        }  # fmt: skip
        if delivery is not None:
            change |= {
                "delivery_url": reverse(
                    "admin:ingest_delivery_change", args=[delivery.pk]
                ),
                "delivery_tokens": number(delivery.embedding_tokens),
                "delivery_cost": tokens_cost(delivery.embedding_tokens),
            }
        return change


for model, model_admin in [(Source, CrawlingSourceAdmin), (Page, CrawlingPageAdmin)]:
    admin.site.unregister(model)
    admin.site.register(model, model_admin)
