"""The source admin: each source with its pages' counts, the failing and stale ones
linked to the page list filtered to them."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from kbsite.admin_utils import (
    OriginsField,
    ReadableDurationField,
    number,
    readable_duration,
)
from sources.admin.visibility import VisibleRowsAdmin
from sources.models import Page, Source, stale_condition

DURATION_HELP = (
    "How often pages are checked again, e.g. 7 days, 12 hours, 1 day 6 hours."
)


def durations_in_words(help_text: str) -> dict[Any, dict[str, Any]]:
    return {
        models.DurationField: {
            "form_class": ReadableDurationField,
            "help_text": help_text,
        }
    }


@admin.register(Source)
class SourceAdmin(VisibleRowsAdmin):
    menu_order = 1
    source_path = "pk"
    list_display = ["name", "fetcher", "live_count", "failing_count", "stale_count",
                    "interval"]  # fmt: skip
    # Public ones by the filter: the list has no room for an eighth column.
    list_filter = ["fetcher", "public"]
    search_fields = ["name", "seed_urls", "sitemap_url"]
    filter_horizontal = ["allowed_groups"]
    readonly_fields = ["created_at", "updated_at"]
    formfield_overrides = {
        **durations_in_words(DURATION_HELP),
        ArrayField: {"form_class": OriginsField},  # the widget's origins
    }

    def get_queryset(self, request: HttpRequest) -> QuerySet[Source]:
        live = Q(pages__status=Page.Status.LIVE)
        return (
            super()
            .get_queryset(request)
            .annotate(
                _pages=Count("pages"),
                _live=Count("pages", filter=live),
                _failing=Count("pages", filter=Q(pages__failure_count__gt=0)),
                _stale=Count(
                    "pages",
                    filter=stale_condition(now=timezone.now(), prefix="pages__"),
                ),
            )
        )

    @admin.display(description="live pages", ordering="_live")
    def live_count(self, obj: Any) -> str:
        return format_html(
            "{} <small>of {}</small>", number(obj._live), number(obj._pages)
        )

    @admin.display(description="failing", ordering="_failing")
    def failing_count(self, obj: Any) -> str:
        return _pages_link(obj, obj._failing, "failing")

    @admin.display(description="stale", ordering="_stale")
    def stale_count(self, obj: Any) -> str:
        return _pages_link(obj, obj._stale, "stale")

    @admin.display(description="checked every", ordering="recrawl_every")
    def interval(self, obj: Source) -> str:
        return readable_duration(obj.recrawl_every)


def _pages_link(source: Source, count: int, condition: str) -> str:
    """A count linked to the page list filtered to it."""
    if not count:
        return "0"
    url = reverse("admin:sources_page_changelist")
    return format_html(
        '<a href="{}?source__id__exact={}&amp;condition={}">{}</a>',
        url,
        source.pk,
        condition,
        number(count),
    )
