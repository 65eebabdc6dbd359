from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from ingest.models import Delivery
from ingest.queueing import delivery_requeue
from kbsite.admin_utils import ReadOnlyAdmin


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
