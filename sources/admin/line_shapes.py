"""What each source's pages repeat, and whether it is stripped as boilerplate."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import F, QuerySet
from django.http import HttpRequest

from kbsite.admin_utils import ReadOnlyAdmin, number
from sources.admin.visibility import VisibleRowsAdmin
from sources.models import EqualsAny, LineShape


class StrippedFilter(admin.SimpleListFilter):
    title = "stripped as boilerplate"
    parameter_name = "stripped"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Stripped"), ("no", "Kept (not on enough pages)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        if self.value() == "yes":
            return queryset.filter(_stripped=True)
        if self.value() == "no":
            return queryset.filter(_stripped=False)
        return None


@admin.register(LineShape)
class LineShapeAdmin(VisibleRowsAdmin, ReadOnlyAdmin):
    """What each source's pages repeat: the lines stripped as boilerplate."""

    menu_order = 4
    source_path = "source"
    list_display = ["example", "source", "page_count", "stripped"]
    list_filter = [StrippedFilter, "source"]
    search_fields = ["example"]
    ordering = ["-pages"]
    list_select_related = ["source"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[LineShape]:
        stripped = EqualsAny(F("shape"), F("source__common_shapes"))
        return super().get_queryset(request).annotate(_stripped=stripped)

    @admin.display(description="pages carrying it", ordering="pages")
    def page_count(self, obj: LineShape) -> str:
        return number(obj.pages)

    @admin.display(description="stripped", boolean=True, ordering="_stripped")
    def stripped(self, obj: Any) -> bool:
        return obj._stripped
