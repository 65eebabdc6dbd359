"""The Crawlbase webhook: authenticate, validate, store, enqueue, answer.

Nothing slow happens here (no Markdown, no embedding, no outbound call): Crawlbase
wants an answer within 200 ms, and treats anything but 2xx as a reason to crawl the
page again and deliver it again.
"""

from __future__ import annotations

import hmac
import logging

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, status
from rest_framework.authentication import BaseAuthentication
from rest_framework.parsers import BaseParser
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView

from ingest import wire
from ingest.services import delivery_receive

logger = logging.getLogger(__name__)

WEBHOOK_AUTH = "crawlbase-webhook"


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

    def parse(self, stream, media_type=None, parser_context=None) -> bytes:
        limit = settings.WEBHOOK_MAX_BODY_BYTES
        request = parser_context["request"]
        declared = request.META.get("CONTENT_LENGTH") or "0"
        if declared.isascii() and declared.isdigit() and int(declared) > limit:
            raise BodyTooLargeError(f"body is over the {limit:,}-byte limit")
        data = stream.read(limit + 1) if stream is not None else b""
        if len(data) > limit:
            raise BodyTooLargeError(f"body is over the {limit:,}-byte limit")
        return data


def _headers(request) -> dict[str, str]:
    """Request headers with lower-case, hyphenated names."""
    headers = {key.lower(): value for key, value in request.headers.items()}
    headers["content-type"] = request.META.get("CONTENT_TYPE", "")
    return headers


class CrawlbaseWebhookView(APIView):
    authentication_classes = [WebhookTokenAuthentication]
    permission_classes = [HasWebhookToken]
    parser_classes = [RawBodyParser]
    throttle_classes: list = []

    @extend_schema(
        summary="Receive a page from Crawlbase's Enterprise Crawler",
        request={"application/octet-stream": bytes},
        responses={code: dict for code in (200, 400, 401, 413, 415)},
    )
    def post(self, request):
        headers = _headers(request)
        raw = request.data if isinstance(request.data, bytes) else b""
        try:
            parsed = wire.parse_delivery(
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
        delivery, created = delivery_receive(
            parsed=parsed, raw=raw, content_type=parsed.content_type
        )
        if not created:
            logger.info("webhook ignored a repeated rid %s", parsed.rid)
            return Response({"status": "duplicate", "delivery": delivery.pk})
        return Response({"status": "queued", "delivery": delivery.pk})
