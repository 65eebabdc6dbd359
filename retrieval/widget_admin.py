"""The Ask widget's keys in the admin: made with a name, sources and sites, shown
once with the script tag to paste, and revoked from the list. Imported by
``retrieval.admin``, which Django reads."""

from __future__ import annotations

from typing import Any, cast

from django.conf import settings
from django.contrib import admin
from django.contrib.postgres.fields import ArrayField
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from kbsite.admin_utils import OriginsField, ago
from retrieval.models import WidgetKey, WidgetKeyQuerySet
from retrieval.widget import widget_key_create
from sources.admin.visibility import VisibleRowsAdmin
from sources.models import Caller, Source


def widget_tag(*, key: str = "") -> str:
    """The script tag a page carries: the widget, with its key if it has one."""
    src = f"{settings.PUBLIC_URL}{reverse('widget-script')}"
    with_key = f' data-key="{key}"' if key else ""
    return f'<script src="{src}"{with_key} async></script>'


@admin.register(WidgetKey)
class WidgetKeyAdmin(VisibleRowsAdmin):
    """An editor sees and changes the keys whose every source they see."""

    menu_order = 5
    source_path = "sources"  # all of them: see visible_rows
    list_display = ["name", "key_start", "sites", "source_names", "created", "used",
                    "active"]  # fmt: skip
    list_filter = ["sources"]
    search_fields = ["name", "key_start"]
    filter_horizontal = ["sources"]
    formfield_overrides = {ArrayField: {"form_class": OriginsField}}
    fields = ["name", "sources", "origins", "reach", "key_start", "created_at",
              "created_by", "last_used_at", "revoked_at"]  # fmt: skip
    readonly_fields = ["reach", "key_start", "created_at", "created_by",
                       "last_used_at", "revoked_at"]  # fmt: skip
    actions = ["revoke"]

    def visible_rows(self, queryset: QuerySet, user: Caller) -> QuerySet:
        return cast(WidgetKeyQuerySet, queryset).visible_to(user)

    def get_queryset(self, request: HttpRequest) -> QuerySet[WidgetKey]:
        return super().get_queryset(request).prefetch_related("sources")

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ["name", "sources", "origins"] if obj is None else self.fields

    def formfield_for_manytomany(
        self, db_field: Any, request: HttpRequest, **kwargs: Any
    ) -> Any:
        if db_field.name == "sources":
            kwargs["queryset"] = Source.objects.visible_to(request.user)
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("retrieval.change_widgetkey")

    def save_model(
        self, request: HttpRequest, obj: Any, form: Any, change: bool
    ) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        made, key = widget_key_create(
            name=obj.name,
            sources=form.cleaned_data["sources"],
            origins=obj.origins,
            user=request.user,
        )
        obj.pk, obj.key_start, obj.key = made.pk, made.key_start, key

    def save_related(
        self, request: HttpRequest, form: Any, formsets: Any, change: bool
    ) -> None:
        if change:  # a new key's sources are set as it is made
            super().save_related(request, form, formsets, change)

    def response_add(
        self, request: HttpRequest, obj: Any, post_url_continue: Any = None
    ) -> HttpResponse:
        """The key, once, in its script tag: rendered in this response, never
        stored or redirected with."""
        made = WidgetKey.objects.get(pk=obj.pk)
        context = {
            **self.admin_site.each_context(request),
            "title": "Widget key made",
            "widget_key": made,
            "tag": widget_tag(key=obj.key),
            "reach": self.reach(made),
            "opts": self.model._meta,
            "list_url": reverse("admin:retrieval_widgetkey_changelist"),
            "change_url": reverse("admin:retrieval_widgetkey_change", args=[obj.pk]),
        }
        return TemplateResponse(request, "admin/retrieval/widgetkey/made.html", context)

    @admin.display(description="answers, by site")
    def reach(self, obj: WidgetKey) -> str:
        """For each of the key's sites, the sources the widget answers from there:
        those of its sources that allow the site themselves."""
        if obj.pk is None:
            return "—"
        sources = list(obj.sources.all())
        rows = []
        for origin in obj.origins:
            names = [s.name for s in sources if origin in s.widget_origins]
            shown = ", ".join(names) or format_html(
                '<strong class="kb-warning">{}</strong>',
                "nothing yet: add the site to a source's Ask widget origins",
            )
            rows.append((origin, shown))
        if not rows:
            return "No site."
        return format_html_join("", "<div><code>{}</code>: {}</div>", rows)

    @admin.display(description="sites")
    def sites(self, obj: WidgetKey) -> str:
        return ", ".join(obj.origins)

    @admin.display(description="sources")
    def source_names(self, obj: WidgetKey) -> str:
        return ", ".join(s.name for s in obj.sources.all())

    @admin.display(description="made", ordering="created_at")
    def created(self, obj: WidgetKey) -> str:
        return ago(obj.created_at)

    @admin.display(description="last used", ordering="last_used_at")
    def used(self, obj: WidgetKey) -> str:
        return ago(obj.last_used_at)

    @admin.display(description="active", boolean=True)
    def active(self, obj: WidgetKey) -> bool:
        return obj.is_active

    @admin.action(description="Revoke the selected keys", permissions=["revoke"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[WidgetKey]) -> None:
        now = timezone.now()
        done = sum(key.revoke(at=now) for key in queryset)
        self.message_user(
            request, f"Revoked {done} widget keys: the widget is refused with them."
        )
