"""Who may call the readers' endpoints (search, questions): anyone signed in, and
anonymous readers while some source is public.

What each caller then reads is decided by the one visibility rule
(``Source.objects.searchable_by``), never here: this only keeps a site with no
public source asking for a token or a login, as it always did.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from sources.models import Caller, anonymous_readers_welcome, caller_check


def reader_admitted(user: Caller) -> bool:
    """Whether ``user`` may ask at all: signed in, or anonymous while some source
    is public. (The pages' rule as the API's.)"""
    if caller_check(user).is_authenticated:
        return True
    return anonymous_readers_welcome()


class SignedInOrPublic(BasePermission):
    """A signed-in caller, or an anonymous one when some source is public."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return reader_admitted(request.user)


class ReadersSchema(AutoSchema):
    """The schema of a readers' endpoint: a token or a session, or none (over the
    public sources)."""

    def get_auth(self) -> list:
        return [*super().get_auth(), {}]
