"""Checks for changes ("I just published") and the publish tokens a CI step asks
for them with: a token is shown once, when it is made, and can be revoked."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from ingest.planning.recrawl import RECRAWL_PERMISSION
from ingest.publish.models import PublishCheck, PublishToken
from ingest.publish.services import publish_token_create
from kbsite.admin_utils import ReadOnlyAdmin, ago
from sources.admin.visibility import VisibleRowsAdmin


@admin.register(PublishCheck)
class PublishCheckAdmin(VisibleRowsAdmin, ReadOnlyAdmin):
    menu_order = 6
    source_path = "source"
    list_display = ["__str__", "state", "requested", "requests", "asked_by", "result"]
    list_filter = ["state", "source"]
    list_select_related = ["source", "requested_by", "token"]
    readonly_fields = ["result"]

    @admin.display(description="requested", ordering="requested_at")
    def requested(self, obj: PublishCheck) -> str:
        return ago(obj.requested_at)

    @admin.display(description="asked by")
    def asked_by(self, obj: PublishCheck) -> str:
        if obj.token_id:
            return f"publish token {obj.token}"
        return str(obj.requested_by or "—")

    @admin.display(description="what it did")
    def result(self, obj: PublishCheck) -> str:
        return obj.summary()


@admin.register(PublishToken)
class PublishTokenAdmin(VisibleRowsAdmin):
    """Made with a source and a name; the token is shown on the next page only."""

    menu_order = 7
    source_path = "source"
    list_display = ["name", "source", "key_start", "created", "used", "active"]
    list_filter = ["source"]
    list_select_related = ["source"]
    search_fields = ["name", "key_start"]
    fields = ["source", "name", "key_start", "created_at", "created_by",
              "last_used_at", "revoked_at"]  # fmt: skip
    actions = ["revoke"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        made = ["key_start", "created_at", "created_by", "last_used_at", "revoked_at"]
        return made if obj is None else ["source", "name", *made]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ["source", "name"] if obj is None else self.fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return super().has_add_permission(request) and self._may_check(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Nothing of a token changes but its revocation (an action).
        return False

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return self._may_check(request) and request.user.has_perm(
            "ingest.change_publishtoken"
        )

    def _may_check(self, request: HttpRequest) -> bool:
        return request.user.has_perm(RECRAWL_PERMISSION)

    def save_model(
        self, request: HttpRequest, obj: Any, form: Any, change: bool
    ) -> None:
        token, key = publish_token_create(
            source=obj.source, name=obj.name, user=request.user
        )
        obj.pk, obj.key = token.pk, key

    def response_add(
        self, request: HttpRequest, obj: Any, post_url_continue: Any = None
    ) -> HttpResponse:
        """The token, once: rendered in this response, never stored or redirected
        with (a message would travel in a cookie)."""
        url = settings.PUBLIC_URL + reverse("ingest-api:publish", args=[obj.source_id])
        context = {
            **self.admin_site.each_context(request),
            "title": "Publish token made",
            "token": obj,
            "key": obj.key,
            "publish_url": url,
            "opts": self.model._meta,
            "list_url": reverse("admin:ingest_publishtoken_changelist"),
        }
        return TemplateResponse(request, "admin/ingest/publishtoken/made.html", context)

    @admin.display(description="made", ordering="created_at")
    def created(self, obj: PublishToken) -> str:
        return ago(obj.created_at)

    @admin.display(description="last used", ordering="last_used_at")
    def used(self, obj: PublishToken) -> str:
        return ago(obj.last_used_at)

    @admin.display(description="active", boolean=True)
    def active(self, obj: PublishToken) -> bool:
        return obj.is_active

    @admin.action(description="Revoke the selected tokens", permissions=["revoke"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[PublishToken]) -> None:
        now = timezone.now()
        done = sum(token.revoke(at=now) for token in queryset)
        self.message_user(request, f"Revoked {done} tokens: they are refused now.")
