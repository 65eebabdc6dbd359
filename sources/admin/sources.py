"""The sources app's part of the source admin: each source with its pages' counts,
the failing and stale ones linked to the page list filtered to them, and the form
that keeps a source in its editor's groups and off other groups' addresses. The
admin registered for ``Source`` adds ingest's part to it (``kbsite.admin``)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser, Group
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
from kbsite.patterns import pattern_problem
from sources.admin.visibility import VisibleRowsAdmin
from sources.models import Page, Source, sees_every_source, stale_condition
from sources.scope import PROBED_PAGES, Scope, overlapping_sources

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


OVERLAP = (
    "Another source already covers some of these addresses, and other groups "
    "manage it. A source may take addresses from another only when the same "
    "groups manage both: narrow the seeds or allow patterns, or ask an "
    "administrator."
)
OVERLAP_NAMED = (
    "The source \u201c{}\u201d already covers some of these addresses, and other "
    "groups manage it. A source may take addresses from another only when the "
    "same groups manage both: give both the same groups, or narrow the seeds or "
    "allow patterns."
)


class SourceForm(forms.ModelForm):
    """A source as an editor saves it: in the editor's own groups only (any, for
    a superuser), and never reaching addresses of a source other groups manage."""

    editor: AbstractBaseUser | AnonymousUser  # set by ``EditingSourceAdmin.get_form``

    def kept_groups(self) -> set[int]:
        """The source's groups the editor is not in: not theirs to offer or to
        take away, so they stay as they are."""
        if self.instance.pk is None or sees_every_source(self.editor):
            return set()
        groups = self.instance.allowed_groups.exclude(user__pk=self.editor.pk)
        return set(groups.values_list("pk", flat=True))

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        fields = ["seed_urls", "allow_patterns", "deny_patterns", "allowed_groups"]
        if any(name in self.errors for name in fields):
            return cleaned
        chosen = cleaned.get("allowed_groups")
        if chosen is None:  # a form without the field leaves them as they are
            managers = set(self.instance.manager_ids)
        else:
            managers = {group.pk for group in chosen} | self.kept_groups()
            self._groups_check(managers)
        lines = Source._lines
        allow = lines(cleaned.get("allow_patterns", ""))
        deny = lines(cleaned.get("deny_patterns", ""))
        if any(map(pattern_problem, [*allow, *deny])):
            return cleaned  # the model's own validation names the bad pattern
        scope = Scope.compile(
            self.instance.pk or 0,
            seeds=lines(cleaned.get("seed_urls", "")),
            allow=allow,
            deny=deny,
            managers=managers,
        )
        pages = self.instance.pages if self.instance.pk else Page.objects.none()
        own = pages.values_list("url", flat=True)[:PROBED_PAGES]
        overlaps = overlapping_sources(scope, own_urls=own)
        if overlaps:
            raise forms.ValidationError(self._overlap_message(overlaps), code="overlap")
        return cleaned

    def _groups_check(self, managers: set[int]) -> None:
        """An editor in groups gives a new source (or one that had groups) to
        at least one of them: a source of no group is every signed-in user's,
        other groups' included."""
        if managers or sees_every_source(self.editor):
            return
        had_none = self.instance.pk is not None and not self.instance.manager_ids
        in_groups = Group.objects.filter(user__pk=self.editor.pk or 0).exists()
        if had_none or not in_groups:
            return
        raise forms.ValidationError(
            {"allowed_groups": "Choose at least one of your groups: a source of "
             "no group may be read by every signed-in user."},
            code="no_group",
        )  # fmt: skip

    def _overlap_message(self, overlaps: list[Source]) -> str:
        """The overlap named only when the editor manages every source in it: a
        source of another group is not theirs to learn of."""
        ids = [source.pk for source in overlaps]
        managed = Source.objects.visible_to(self.editor).filter(pk__in=ids)
        if managed.count() < len(ids):
            return OVERLAP
        return OVERLAP_NAMED.format(overlaps[0])


class EditingSourceAdmin(VisibleRowsAdmin):
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

    form = SourceForm

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        return type(form.__name__, (form,), {"editor": request.user})

    def formfield_for_manytomany(
        self, db_field: Any, request: HttpRequest, **kwargs: Any
    ) -> Any:
        # Editors give a source to their own groups only; superusers to any.
        if db_field.name == "allowed_groups" and not sees_every_source(request.user):
            kwargs["queryset"] = request.user.groups.all()
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def save_related(
        self, request: HttpRequest, form: Any, formsets: Any, change: bool
    ) -> None:
        kept = form.kept_groups()
        super().save_related(request, form, formsets, change)
        if kept:
            form.instance.allowed_groups.add(*kept)

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
