"""Pages' versions, on the page and in their own list, each linked to its diff with
the version before."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from kbsite.admin_utils import ReadOnlyAdmin, hash_column, title_and_path
from sources.admin.visibility import VisibleRowsAdmin
from sources.models import PageVersion


class PageVersionInline(admin.TabularInline):
    model = PageVersion
    fields = readonly_fields = ("recorded_at", "kind", "what", "hash", "compare",
                                "answers")  # fmt: skip
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = True

    hash = hash_column("content_hash", "content hash")

    def get_queryset(self, request: HttpRequest) -> QuerySet[PageVersion]:
        return (
            super()
            .get_queryset(request)
            .defer("markdown")
            .annotate(affected=Count("answers_affected"))
        )

    @admin.display(description="what changed")
    def what(self, obj: PageVersion) -> str:
        return obj.summary

    @admin.display(description="answers affected")
    def answers(self, obj: PageVersion) -> str:
        """Logged answers that quoted text this change took away."""
        if not obj.affected:  # type: ignore[attr-defined]
            return "—"
        url = reverse("admin:retrieval_querylog_changelist")
        return format_html(
            '<a href="{}?stale_change__id__exact={}">{}</a>',
            url, obj.pk, obj.affected,  # type: ignore[attr-defined]
        )  # fmt: skip

    @admin.display(description="diff")
    def compare(self, obj: PageVersion) -> str:
        if obj.kind in PageVersion.TOMBSTONES:
            return "—"
        url = reverse("admin:sources_page_diff", args=[obj.page_id])
        return format_html('<a href="{}?b={}">with the version before</a>', url, obj.pk)


@admin.register(PageVersion)
class PageVersionAdmin(VisibleRowsAdmin, ReadOnlyAdmin):
    menu_order = 3
    source_path = "page__source"
    list_display = ["page_title", "source", "kind", "what", "recorded_at", "compare",
                    "answers"]  # fmt: skip
    list_filter = ["kind", "source"]
    list_defer = ["markdown"]
    search_fields = ["page__title", "page__url", "content_hash"]
    list_select_related = ["page", "source"]
    date_hierarchy = "recorded_at"

    compare = PageVersionInline.compare

    def get_queryset(self, request: HttpRequest) -> QuerySet[PageVersion]:
        return (
            super().get_queryset(request).annotate(affected=Count("answers_affected"))
        )

    what = PageVersionInline.what
    answers = admin.display(description="answers affected", ordering="affected")(
        PageVersionInline.answers
    )

    @admin.display(description="page", ordering="page__title")
    def page_title(self, obj: PageVersion) -> str:
        return title_and_path(obj.page.title, obj.page.url)
