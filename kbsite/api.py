"""API conventions shared by every DRF view: one JSON error shape."""

from __future__ import annotations

import logging

from django.http import UnreadablePostError
from rest_framework import exceptions
from rest_framework.views import exception_handler as drf_exception_handler

logger = logging.getLogger("kbsite.api")


class BodyUnreadable(exceptions.APIException):
    status_code = 408
    default_code = "body_unreadable"
    default_detail = "The request body did not arrive in time."


def exception_handler(exc, context):
    """Every error is ``{"error": code, "detail": text}``, plus ``fields`` for input."""
    if isinstance(exc, UnreadablePostError):
        # The body stopped arriving (WEB_BODY_TIMEOUT) or the client went away:
        # the client's fault, not the server's.
        exc = BodyUnreadable()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        response.data = {
            "error": "invalid",
            "detail": "The request has invalid fields.",
            "fields": exc.detail if isinstance(exc.detail, dict) else {"": exc.detail},
        }
    else:
        codes = exc.get_codes() if isinstance(exc, exceptions.APIException) else None
        detail = (
            response.data.get("detail", "") if isinstance(response.data, dict) else ""
        )
        response.data = {
            "error": codes if isinstance(codes, str) else "error",
            "detail": str(detail),
        }
    request = context.get("request")
    logger.warning(
        "%s %s -> %s %s",
        getattr(request, "method", "?"),
        getattr(request, "path", "?"),
        response.status_code,
        response.data["error"],
    )
    return response
