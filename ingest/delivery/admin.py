"""Deliveries as the operator looks at them: filtered by outcome, source and the
site's status, read-only, and re-queued on demand."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from ingest.delivery.models import Delivery
from ingest.delivery.queue import delivery_requeue
from kbsite.admin_utils import ReadOnlyAdmin, ago, number, title_and_path
from sources.admin.visibility import VisibleRowsAdmin


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
class DeliveryAdmin(VisibleRowsAdmin, ReadOnlyAdmin):
    menu_order = 1
    # A delivery no page holds yet (its job has not run, or no source covers its
    # URL) is nobody's known source's: for those who see every source.
    source_path = "page__source"
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
