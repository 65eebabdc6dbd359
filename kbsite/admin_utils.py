"""Pieces shared by the admin classes of every app."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from django import forms
from django.conf import settings
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.dateparse import parse_duration
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.timesince import timesince

from kbsite.canonical import web_origins

# Rows a changelist counts at most: past this a full count costs a scan of the table
# for a number nobody pages through anyway.
COUNT_CAP = 10_000


class CappedPaginator(Paginator):
    """Counts at most COUNT_CAP rows; ``capped`` says whether there are more."""

    capped = False

    @cached_property
    def count(self) -> int:
        rows = self.object_list
        if not isinstance(rows, QuerySet):
            return len(rows)
        counted = rows[: COUNT_CAP + 1].count()
        self.capped = counted > COUNT_CAP
        return min(counted, COUNT_CAP)


class ListDeferMixin:
    """Leave big columns (``list_defer``) out of changelist queries: a list of 100
    pages should not read 100 stored Markdown bodies."""

    list_defer: Sequence[str] = ()

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        queryset = super().get_queryset(request)  # type: ignore[misc]
        match = getattr(request, "resolver_match", None)
        name = match.url_name if match is not None else ""
        if self.list_defer and name and name.endswith("_changelist"):
            queryset = queryset.defer(*self.list_defer)
        return queryset


class ReadOnlyAdmin(ListDeferMixin, admin.ModelAdmin):
    """For rows that machines write (deliveries, chunks, vectors): look, don't touch.

    No full count either: these tables grow large and the count costs a scan.
    """

    show_full_result_count = False
    paginator = CappedPaginator

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


def short_path(url: str, *, limit: int = 60) -> str:
    """The path and query of a URL, cut in the middle past ``limit`` characters."""
    parts = urlsplit(url)
    path = parts.path or "/"
    if parts.query:
        path += f"?{parts.query}"
    if len(path) > limit:
        half = (limit - 1) // 2
        path = f"{path[:half]}…{path[-half:]}"
    return path


def title_and_path(title: str, url: str, *, host: bool = False) -> str:
    """Two lines for a list column: the title, and the short path (the whole URL on
    hover), so that lists fit the screen however long the URLs are."""
    where = short_path(url)
    if host:
        where = f"{urlsplit(url).hostname or ''}{where}"
    return format_html(
        '{}<br><small class="kb-path" title="{}">{}</small>',
        title or "(no title)",
        url,
        where,
    )


def ago(moment: datetime | None, *, empty: str = "never") -> str:
    """ "3 days ago", with the exact time on hover."""
    if moment is None:
        return empty
    local, now = timezone.localtime(moment), timezone.now()
    if abs(now - moment) < timedelta(minutes=1):
        words = "just now"
    elif moment > now:
        words = f"in {timesince(now, moment, depth=1)}"
    else:
        words = f"{timesince(moment, depth=1)} ago"
    return format_html('<span title="{}">{}</span>', f"{local:%Y-%m-%d %H:%M}", words)


def number(value: int | float | None) -> str:
    """Thousands separated: 1,234,567."""
    return "—" if value is None else f"{value:,}"


def tokens_cost(tokens: int) -> str:
    """What ``tokens`` embedding tokens cost at EMBEDDING_COST_PER_MILLION_TOKENS;
    empty when no price is set."""
    price = settings.EMBEDDING_COST_PER_MILLION_TOKENS
    if not price:
        return ""
    cost = tokens * price / 1_000_000
    return f"{cost:,.2f}" if cost >= 1 or cost == 0 else f"{cost:,.4f}"


# -- durations as people write them --------------------------------------------

UNITS = [
    ("week", timedelta(weeks=1)),
    ("day", timedelta(days=1)),
    ("hour", timedelta(hours=1)),
    ("minute", timedelta(minutes=1)),
    ("second", timedelta(seconds=1)),
]
DURATION_PART = re.compile(r"(\d+)\s*(week|day|hour|minute|min|second|sec)s?\b")


def readable_duration(value: timedelta | None) -> str:
    """ "7 days", "1 day 12 hours", "90 seconds" → "1 minute 30 seconds"."""
    if value is None:
        return ""
    left = max(value, timedelta(0))
    parts = []
    for name, size in UNITS[1:]:  # weeks read worse than days ("2 weeks 3 days")
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count} {name}{'s' if count != 1 else ''}")
    return " ".join(parts) or "0 seconds"


def parse_readable_duration(text: str) -> timedelta | None:
    """ "7 days", "1 day 12 hours", "2 weeks", "90 minutes", or Django's own
    "7 00:00:00"; None when it is none of these."""
    text = text.strip().lower()
    sizes = dict(UNITS) | {"min": UNITS[3][1], "sec": UNITS[4][1]}
    parts = DURATION_PART.findall(text)
    if parts and not DURATION_PART.sub("", text).replace(",", "").strip():
        return sum((int(count) * sizes[unit] for count, unit in parts), timedelta())
    return parse_duration(text)


class ReadableDurationField(forms.DurationField):
    """A duration shown and typed as words: "7 days" rather than "7 00:00:00"."""

    def prepare_value(self, value: Any) -> Any:
        return readable_duration(value) if isinstance(value, timedelta) else value

    def to_python(self, value: Any) -> timedelta | None:
        if value in self.empty_values:
            return None
        if isinstance(value, timedelta):
            return value
        parsed = parse_readable_duration(str(value))
        if parsed is None:
            raise ValidationError(
                "Write a duration such as 7 days, 12 hours or 1 day 6 hours.",
                code="invalid",
            )
        return parsed


class OriginsField(forms.CharField):
    """A list of web origins, typed one per line and stored as browsers send them
    (``kbsite.canonical.web_origin``): the form field of an ArrayField of origins
    (``formfield_overrides``, which also hands it ``base_field``)."""

    widget = forms.Textarea(attrs={"rows": 3, "cols": 60})

    def __init__(self, *, base_field: Any = None, **kwargs: Any) -> None:
        kwargs.pop("max_length", None)  # the array's size: lines are not counted
        super().__init__(**kwargs)

    def prepare_value(self, value: Any) -> Any:
        return "\n".join(value) if isinstance(value, list | tuple) else value

    def to_python(self, value: Any) -> list[str]:  # type: ignore[override]
        if value in self.empty_values:
            return []
        lines = value if isinstance(value, list | tuple) else str(value).splitlines()
        try:
            return web_origins(line for line in map(str.strip, lines) if line)
        except ValueError as exc:
            example = "e.g. https://docs.example.com"
            raise ValidationError(f"{exc}, {example}", code="invalid") from None
