"""The admin site editors work in: their apps first, the machinery for superusers.

Installed as the default site (``AdminConfig`` below, in INSTALLED_APPS in place of
``django.contrib.admin``), so every app's ``admin.register`` lands here.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin import apps as admin_apps
from django.db.models import Model
from django.db.models.base import ModelBase
from django.http import HttpRequest

# The editors' apps in the order of their work (what is indexed, what arrived, the
# index and its questions), then accounts; anything else follows by name.
APP_ORDER = ["sources", "ingest", "retrieval", "auth"]
# The job queue and API tokens: an editor has no business there, and a token in the
# wrong hands is someone else's API access.
SUPERUSER_ONLY_APPS = {"django_q", "authtoken"}


class SuperuserOnly:
    """Mixed into the admins of SUPERUSER_ONLY_APPS: hidden from the index and
    refused (403) to staff who are not superusers, whatever their permissions."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return request.user.is_superuser and super().has_add_permission(  # type: ignore[misc]
            request, *args
        )

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser


class KnowledgeBaseAdminSite(admin.AdminSite):
    site_header = "Knowledge base"
    site_title = "Knowledge base admin"
    index_title = "Sources, pages and the index"
    index_template = "admin/kb_index.html"

    def register(
        self,
        model_or_iterable: Any,
        admin_class: Any = None,
        **options: Any,
    ) -> None:
        models: list[Any] = (
            [model_or_iterable]
            if isinstance(model_or_iterable, ModelBase)
            else list(model_or_iterable)
        )
        for model in models:
            chosen = admin_class or admin.ModelAdmin
            if model._meta.app_label in SUPERUSER_ONLY_APPS:
                chosen = type(chosen.__name__, (SuperuserOnly, chosen), {})
            super().register(model, chosen, **options)

    def get_app_list(
        self, request: HttpRequest, app_label: str | None = None
    ) -> list[Any]:
        apps = super().get_app_list(request, app_label)
        apps.sort(key=lambda app: (_rank(app["app_label"]), app["name"].lower()))
        for app in apps:
            app["models"].sort(key=lambda row: (self._menu_order(row["model"]),))
        return apps

    def _menu_order(self, model: type[Model]) -> tuple[int, str]:
        """A model admin's ``menu_order`` (lower first), then the name."""
        model_admin = self._registry.get(model)
        order = getattr(model_admin, "menu_order", 100)
        return order, str(model._meta.verbose_name_plural)


def _rank(label: str) -> int:
    return APP_ORDER.index(label) if label in APP_ORDER else len(APP_ORDER)


class AdminConfig(admin_apps.AdminConfig):
    """Django's admin, with the editors' site as the default one."""

    default = False
    default_site = "kbsite.admin_site.KnowledgeBaseAdminSite"
