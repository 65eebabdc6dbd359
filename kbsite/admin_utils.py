"""Pieces shared by the admin classes of every app."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.db.models import Model
from django.utils.html import format_html


class ReadOnlyAdmin(admin.ModelAdmin):
    """For rows that machines write (deliveries, chunks, vectors): look, don't touch.

    No full count either: these tables grow large and the count costs a scan.
    """

    show_full_result_count = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


def short_hash(value: str) -> str:
    """A hash shortened for a list column, the full value on hover."""
    if not value:
        return "—"
    return format_html('<code title="{}">{}</code>', value, value[:12])


def hash_column(field: str, description: str) -> Callable[[Any, Model], str]:
    """An admin column showing the model's ``field`` as a short hash."""

    @admin.display(description=description, ordering=field)
    def column(admin_self: Any, obj: Model) -> str:
        return short_hash(getattr(obj, field))

    return column
