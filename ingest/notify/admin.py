"""Subscriptions to a source's changes, edited by the editors who see the
source; the notifications sent for them and every attempt, read-only."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from ingest.notify.models import Notification, NotificationAttempt, Subscription
from ingest.notify.services import subscription_enable, subscription_secret_renew
from kbsite.admin_utils import ReadOnlyAdmin, ago
from sources.admin.visibility import VisibleRowsAdmin
from sources.models import PageVersion

RECENT_ATTEMPTS = 20


class SubscriptionForm(forms.ModelForm):
    kinds = forms.MultipleChoiceField(
        choices=PageVersion.Kind.choices,
        widget=forms.CheckboxSelectMultiple,
        required=False,
        help_text=Subscription._meta.get_field("kinds").help_text,
    )

    class Meta:
        model = Subscription
        fields = [
            "source", "name", "channel", "url", "emails", "active", "kinds",
            "url_patterns", "headings", "min_lines",
        ]  # fmt: skip
        widgets = {
            "emails": forms.Textarea(attrs={"rows": 3}),
            "url_patterns": forms.Textarea(attrs={"rows": 3}),
            "headings": forms.Textarea(attrs={"rows": 3}),
        }


class DisabledFilter(admin.SimpleListFilter):
    title = "condition"
    parameter_name = "condition"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("disabled", "Disabled after failures"), ("sending", "Sending")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        if self.value() == "disabled":
            return queryset.exclude(disabled_at=None)
        if self.value() == "sending":
            return queryset.filter(disabled_at=None, active=True)
        return None


@admin.register(Subscription)
class SubscriptionAdmin(VisibleRowsAdmin):
    menu_order = 6
    source_path = "source"
    form = SubscriptionForm
    list_display = ["name", "source", "target", "condition", "sent", "failures"]
    list_filter = ["channel", "active", DisabledFilter, "source"]
    list_select_related = ["source"]
    search_fields = ["name", "url", "emails"]
    readonly_fields = ["condition", "signing_secret", "sent", "recent_attempts"]
    actions = ["enable", "renew_secret"]
    fieldsets = [
        (None, {"fields": ["source", "name", "channel", "url", "emails", "active"]}),
        ("Which changes", {"fields": ["kinds", "url_patterns", "headings",
                                      "min_lines"]}),
        ("Sending", {"fields": ["condition", "signing_secret", "sent",
                                "recent_attempts"]}),
    ]  # fmt: skip

    @admin.display(description="sent to")
    def target(self, obj: Subscription) -> str:
        if obj.channel == Subscription.Channel.WEBHOOK:
            return obj.url
        addresses = obj.addresses()
        more = f" and {len(addresses) - 1} more" if len(addresses) > 1 else ""
        return f"{addresses[0] if addresses else '—'}{more}"

    @admin.display(description="condition")
    def condition(self, obj: Subscription) -> str:
        if obj.pk is None:
            return "—"
        if obj.is_disabled:
            return format_html(
                '<strong class="kb-warning">Disabled {}</strong>: {}',
                ago(obj.disabled_at),
                obj.disabled_reason,
            )
        if not obj.active:
            return "Paused: changes are not collected"
        if obj.failures:
            return f"Sending; the last {obj.failures} attempts failed"
        return "Sending"

    @admin.display(description="last sent", ordering="last_sent_at")
    def sent(self, obj: Subscription) -> str:
        return ago(obj.last_sent_at)

    @admin.display(description="signing secret")
    def signing_secret(self, obj: Subscription) -> str:
        if obj.channel != Subscription.Channel.WEBHOOK:
            return "— (e-mail digests are not signed)"
        return (
            "Shown once, when it was made. Lost it? Select the subscription in the "
            "list and make a new one."
        )

    @admin.display(description="recent attempts")
    def recent_attempts(self, obj: Subscription) -> str:
        if obj.pk is None:
            return "—"
        attempts = obj.attempts.order_by("-attempted_at", "-id")[:RECENT_ATTEMPTS]
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} ms</td>"
            "<td>{}</td></tr>",
            (
                (ago(a.attempted_at), a.notification_id, a.number,
                 a.status if a.status is not None else "—", a.duration_ms,
                 "sent" if a.ok else a.error)
                for a in attempts
            ),
        )  # fmt: skip
        every = (
            reverse("admin:ingest_notificationattempt_changelist")
            + f"?subscription__id__exact={obj.pk}"
        )
        if not rows:
            return "None yet."
        return format_html(
            "<table><thead><tr><th>when</th><th>notification</th><th>attempt</th>"
            "<th>status</th><th>duration</th><th>outcome</th></tr></thead>"
            '<tbody>{}</tbody></table><p><a href="{}">every attempt</a></p>',
            rows,
            every,
        )

    def response_add(
        self, request: HttpRequest, obj: Subscription, post_url_continue: Any = None
    ) -> HttpResponse:
        """A webhook's secret is shown this once, on the page after it is made."""
        if obj.channel != Subscription.Channel.WEBHOOK:
            return super().response_add(request, obj, post_url_continue)
        return self._secrets_shown(request, [(obj, obj.secret)], added=True)

    def _secrets_shown(
        self,
        request: HttpRequest,
        secrets: list[tuple[Subscription, str]],
        *,
        added: bool = False,
    ) -> HttpResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": "Signing secret" if len(secrets) == 1 else "Signing secrets",
            "opts": self.opts,
            "secrets": secrets,
            "added": added,
        }
        # Admin views are never cached (no-store): the secret stays off disks.
        template = "admin/ingest/subscription/secret.html"
        return TemplateResponse(request, template, context)

    def has_enable_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("ingest.change_subscription")

    @admin.action(
        description="Enable again and send what waits", permissions=["enable"]
    )
    def enable(self, request: HttpRequest, queryset: QuerySet[Subscription]) -> None:
        done = sum(subscription_enable(subscription=s) for s in queryset)
        self.message_user(request, f"Enabled {done} disabled subscriptions again.")

    @admin.action(
        description="Make a new signing secret (the old one stops)",
        permissions=["enable"],
    )
    def renew_secret(
        self, request: HttpRequest, queryset: QuerySet[Subscription]
    ) -> HttpResponse | None:
        webhooks = queryset.filter(channel=Subscription.Channel.WEBHOOK)
        secrets = [(s, subscription_secret_renew(subscription=s)) for s in webhooks]
        if not secrets:
            self.message_user(request, "Only webhooks have signing secrets.")
            return None
        return self._secrets_shown(request, secrets)


@admin.register(Notification)
class NotificationAdmin(VisibleRowsAdmin, ReadOnlyAdmin):
    menu_order = 7
    source_path = "subscription__source"
    list_display = ["key", "subscription", "state", "changes_count", "attempts",
                    "last_status", "created_at"]  # fmt: skip
    list_filter = ["state", "subscription__channel"]
    list_select_related = ["subscription"]
    list_defer = ["body"]
    search_fields = ["=key"]
    date_hierarchy = "created_at"
    raw_id_fields = ["subscription"]


@admin.register(NotificationAttempt)
class NotificationAttemptAdmin(VisibleRowsAdmin, ReadOnlyAdmin):
    menu_order = 8
    source_path = "subscription__source"
    list_display = ["attempted_at", "subscription", "number", "ok", "status",
                    "duration_ms", "error"]  # fmt: skip
    list_filter = ["ok", "subscription"]
    list_select_related = ["subscription", "notification"]
    list_defer = ["notification__body"]
    date_hierarchy = "attempted_at"
    raw_id_fields = ["subscription", "notification"]
