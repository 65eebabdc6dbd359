"""The Crawlbase webhook: authenticate, validate, store, enqueue, answer.

Nothing slow happens here (no Markdown, no embedding, no outbound call): Crawlbase
wants an answer within 200 ms, and treats anything but 2xx as a reason to crawl the
page again and deliver it again.
"""

from __future__ import annotations

import hmac
import logging
import traceback

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import InterfaceError, OperationalError
from django.http import Http404, UnreadablePostError
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, status
from rest_framework.authentication import BaseAuthentication
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.permissions import BasePermission
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from ingest.delivery.headers import parse_delivery
from ingest.delivery.queue import delivery_receive, error_name
from ingest.reading import wire

logger = logging.getLogger(__name__)

WEBHOOK_AUTH = "crawlbase-webhook"
# Crawlbase redelivers on any answer but 2xx; this only tells it not to hurry.
RETRY_AFTER_SECONDS = 10


class WebhookTokenAuthentication(BaseAuthentication):
    """The shared secret in the callback URL's ``token`` query parameter."""

    def authenticate(self, request):
        supplied = request.query_params.get("token", "")
        expected = settings.WEBHOOK_TOKEN
        if not supplied:
            return None
        if not expected or not hmac.compare_digest(
            supplied.encode(), expected.encode()
        ):
            raise exceptions.AuthenticationFailed("The webhook token is not valid.")
        return (None, WEBHOOK_AUTH)

    def authenticate_header(self, request) -> str:
        return 'Token realm="webhook"'


class HasWebhookToken(BasePermission):
    def has_permission(self, request, view) -> bool:
        return request.auth == WEBHOOK_AUTH


class BodyTooLargeError(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "body_too_large"


class RawBodyParser(BaseParser):
    """Hands the view the body as bytes, read only up to the configured limit."""

    media_type = "*/*"

    # DRF hands whatever a parser returns to the view as request.data: here, bytes.
    def parse(  # type: ignore[override]
        self, stream, media_type=None, parser_context=None
    ) -> bytes:
        limit = settings.WEBHOOK_MAX_BODY_BYTES
        request = parser_context["request"]
        declared = request.META.get("CONTENT_LENGTH") or "0"
        if declared.isascii() and declared.isdigit() and int(declared) > limit:
            raise BodyTooLargeError(f"body is over the {limit:,}-byte limit")
        data = stream.read(limit + 1) if stream is not None else b""
        if len(data) > limit:
            raise BodyTooLargeError(f"body is over the {limit:,}-byte limit")
        return data


class JSONOnly(BaseContentNegotiation):
    """The webhook answers JSON whatever the sender accepts: Crawlbase reads only
    the status, and parsing an Accept header on every delivery costs time."""

    def select_parser(self, request, parsers):
        return parsers[0]

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


def _headers(request) -> dict[str, str]:
    """Request headers with lower-case, hyphenated names."""
    headers = {key.lower(): value for key, value in request.headers.items()}
    headers["content-type"] = request.META.get("CONTENT_TYPE", "")
    return headers


class CrawlbaseWebhookView(APIView):
    authentication_classes = [WebhookTokenAuthentication]
    permission_classes = [HasWebhookToken]
    parser_classes = [RawBodyParser]
    renderer_classes = [JSONRenderer]
    content_negotiation_class = JSONOnly
    throttle_classes: list = []

    @extend_schema(
        summary="Receive a page from Crawlbase's Enterprise Crawler",
        request={"application/octet-stream": bytes},
        responses={code: dict for code in (200, 400, 401, 413, 415, 500, 503)},
    )
    def post(self, request):
        headers = _headers(request)
        raw = request.data if isinstance(request.data, bytes) else b""
        try:
            parsed = parse_delivery(
                headers=headers, raw=raw, limit=settings.WEBHOOK_MAX_BODY_BYTES
            )
        except wire.DeliveryError as exc:
            logger.warning(
                "webhook rejected a delivery: %s (%s) rid=%r url=%r",
                exc.code,
                exc,
                headers.get("rid", "")[:100],
                headers.get("url", "")[:300],
            )
            return Response({"error": exc.code, "detail": str(exc)}, status=exc.status)
        if parsed.is_probe:
            return Response({"status": "ok", "probe": True})
        delivery_id, created = delivery_receive(
            parsed=parsed, raw=raw, content_type=parsed.content_type
        )
        if not created:
            logger.info("webhook ignored a repeated rid %s", parsed.rid)
            return Response({"status": "duplicate", "delivery": delivery_id})
        return Response({"status": "queued", "delivery": delivery_id})

    def handle_exception(self, exc: Exception) -> Response:
        """JSON for every failure: Crawlbase redelivers on a 5xx, and an HTML error
        page helps nobody. Log lines name the error, never its message, which could
        quote page text."""
        if isinstance(exc, InterfaceError | OperationalError):
            # The database is down or restarting: the delivery was not stored.
            logger.warning("webhook could not reach the database: %s", error_name(exc))
            return Response(
                {
                    "error": "database_unavailable",
                    "detail": "The database is not available; deliver again later.",
                },
                status=status.HTTP_503_SERVICE_UNAVAILABLE,
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        if isinstance(
            exc,
            exceptions.APIException | Http404 | PermissionDenied | UnreadablePostError,
        ):
            return super().handle_exception(exc)  # a 4xx, by the API's handler
        logger.error(
            "webhook failed: %s\n%s",
            error_name(exc),
            "".join(traceback.format_tb(exc.__traceback__)).rstrip(),
        )
        return Response(
            {"error": "internal_error", "detail": "The delivery was not stored."},
            status=status.HTTP_500_INTERNAL_SERVER_ERROR,
        )
