"""Who sees which rows: a row is seen by whoever sees its source.

Built on the one rule of who sees which source (``Source.objects.visible_to``, the
condition every search puts in its queries), so that the admin's lists, change
pages and actions, the dashboard's figures and search all answer alike.
"""

from __future__ import annotations

from typing import TypeVar

from django.db import models
from django.db.models import QuerySet

from sources.models import Caller, Source, sees_every_source

M = TypeVar("M", bound=models.Model)


def sees_every_row(user: Caller) -> bool:
    """Whether no source is hidden from ``user`` (the system, superusers, or while
    every source is open to them): then rows whose source cannot be known are
    theirs to see as well."""
    return sees_every_source(user) or not Source.objects.hidden_from(user).exists()


def rows_visible_to(
    queryset: QuerySet[M], *, source_path: str | None, user: Caller
) -> QuerySet[M]:
    """The rows of ``queryset`` whose source ``user`` sees. ``source_path`` leads
    from the model to its source, e.g. ``page__source`` ("pk" for sources
    themselves); None for rows of no source (what the whole index spent). A row
    whose source is not known (None, or an empty link such as a delivery no
    source covers) could be anyone's: only those who see every source see it."""
    if sees_every_row(user):
        return queryset
    if source_path is None:
        return queryset.none()
    visible = Source.objects.visible_to(user).values("pk")
    return queryset.filter(**{f"{source_path}__in": visible})
