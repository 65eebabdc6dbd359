"""API conventions shared by every DRF view: one JSON error shape, bounded JSON."""

from __future__ import annotations

import codecs
import logging
from typing import Any

from django.conf import settings
from django.http import UnreadablePostError
from rest_framework import exceptions
from rest_framework.parsers import JSONParser
from rest_framework.utils.json import strict_constant
from rest_framework.views import exception_handler as drf_exception_handler

from kbsite import boundedjson

logger = logging.getLogger("kbsite.api")


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser with a bound on nesting depth.

    DRF's own lets ``RecursionError`` through as a 500 for a deeply nested body.
    """

    def parse(self, stream, media_type=None, parser_context=None) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = codecs.getreader(encoding)(stream).read()
            return boundedjson.loads(
                text, parse_constant=strict_constant if self.strict else None
            )
        except ValueError as exc:  # bad JSON, bad encoding, too deep
            raise exceptions.ParseError(f"JSON parse error - {exc}") from None


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
