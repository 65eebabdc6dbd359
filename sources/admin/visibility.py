"""The editors' admins see only the rows of the sources their groups see.

Every admin of the editors' apps is a ``VisibleRowsAdmin`` and says how its rows
reach their source (``source_path``); it then reads through ``rows_visible_to``
everywhere the admin reads rows: lists, search, change pages and their history,
actions (Django runs them on the list's queryset), related-field filters and the
choices of a form's related fields. Another group's row is a 404, as an id that
does not exist is: ids reveal nothing.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.contrib import admin
from django.contrib.admin.utils import get_fields_from_path
from django.core.exceptions import ImproperlyConfigured
from django.db import models
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponseRedirect

from sources.models import Caller
from sources.visibility import rows_visible_to


class VisibleRowsAdmin(admin.ModelAdmin):
    # How a row reaches its source, e.g. "page__source" ("pk" for sources); None
    # for rows of no source, which only those who see every source see.
    source_path: ClassVar[str | None]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not hasattr(cls, "source_path"):
            raise ImproperlyConfigured(
                f"{cls.__name__} must say how its rows reach their source "
                "(source_path)."
            )

    def visible_rows(self, queryset: QuerySet, user: Caller) -> QuerySet:
        """The rows of ``queryset`` that ``user`` may see."""
        return rows_visible_to(queryset, source_path=self.source_path, user=user)

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return self.visible_rows(super().get_queryset(request), request.user)

    def _get_obj_does_not_exist_redirect(
        self, request: HttpRequest, opts: Any, object_id: str
    ) -> HttpResponseRedirect:
        # Django redirects with "doesn't exist"; a row hidden from the editor
        # must answer exactly as a missing one, and as a 404.
        raise Http404(f"No {opts.verbose_name} with this id.")

    def get_list_filter(self, request: HttpRequest) -> Any:
        return [
            self._visible_filter(entry) for entry in super().get_list_filter(request)
        ]

    def _visible_filter(self, entry: Any) -> Any:
        """A filter on a relation to rows the editor may not all see offers only
        those they see (not every source's name)."""
        path, kind = entry if isinstance(entry, tuple) else (entry, None)
        plain = kind is None or kind is admin.RelatedFieldListFilter
        if not isinstance(path, str) or not plain:
            return entry
        field = get_fields_from_path(self.model, path)[-1]
        if field.is_relation and self._visible_admin(field.related_model):
            return (path, VisibleRelatedFilter)
        return entry

    def formfield_for_foreignkey(
        self, db_field: Any, request: HttpRequest, **kwargs: Any
    ) -> Any:
        related = self._visible_admin(db_field.related_model)
        if related is not None and "queryset" not in kwargs:
            rows = db_field.related_model._default_manager.all()
            kwargs["queryset"] = related.visible_rows(rows, request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def _visible_admin(
        self, model: type[models.Model] | None
    ) -> VisibleRowsAdmin | None:
        found = self.admin_site._registry.get(model) if model else None
        return found if isinstance(found, VisibleRowsAdmin) else None


class VisibleRelatedFilter(admin.RelatedFieldListFilter):
    """A related field's filter whose choices are the rows the editor sees."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: Any) -> Any:
        related = model_admin.admin_site._registry[field.related_model]
        rows = field.related_model._default_manager.all()
        visible = related.visible_rows(rows, request.user).values("pk")
        ordering = self.field_admin_ordering(field, request, model_admin)
        return field.get_choices(
            include_blank=False, ordering=ordering, limit_choices_to={"pk__in": visible}
        )
