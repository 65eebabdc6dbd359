"""The URLs sent to Crawlbase and what became of each push."""

from __future__ import annotations

from django.contrib import admin

from ingest.pushing.models import Push
from kbsite.admin_utils import ReadOnlyAdmin, title_and_path
from sources.admin.visibility import VisibleRowsAdmin


@admin.register(Push)
class PushAdmin(VisibleRowsAdmin, ReadOnlyAdmin):
    menu_order = 5
    source_path = "page__source"
    list_display = ["page_url", "state", "rid", "pushed_at", "delivered_at"]
    list_filter = ["state"]
    search_fields = ["=rid", "url"]
    list_select_related = ["page"]
    raw_id_fields = ["page"]

    @admin.display(description="URL", ordering="url")
    def page_url(self, obj: Push) -> str:
        return title_and_path(obj.page.title, obj.url, host=True)
