"""Ingest's part of the editors' page admin, what ingest knows of a page: crawling
it again, its recent deliveries, and what a change to it cost in the index. The
admin registered for ``Page`` (``kbsite.admin``) puts it before the sources app's
part, whose saves and version hook it extends."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html_join

from ingest.delivery.models import Delivery
from ingest.planning.admin import plan_report
from ingest.planning.recrawl import RECRAWL_PERMISSION, pages_recrawl
from kbsite.admin_utils import ago, number, tokens_cost
from retrieval.chunking import chunk_markdown
from sources.models import Page, PageVersion


class CrawlingPageAdmin(admin.ModelAdmin):
    """Its read-only field (``recent_deliveries``) is listed by the composed admin,
    beside the sources app's."""

    actions = ["crawl_now"]

    def save_model(
        self, request: HttpRequest, obj: Any, form: Any, change: bool
    ) -> None:
        super().save_model(request, obj, form, change)
        if not change:
            pages = Page.objects.filter(pk=obj.pk)
            plan_report(self, request, pages_recrawl(pages=pages))

    def has_recrawl_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(RECRAWL_PERMISSION)

    @admin.action(
        description="Crawl the selected pages again now", permissions=["recrawl"]
    )
    def crawl_now(self, request: HttpRequest, queryset: QuerySet[Page]) -> None:
        plan_report(self, request, pages_recrawl(pages=queryset))

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
