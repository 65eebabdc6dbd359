"""Automation endpoints for staff tokens: recrawl on demand, Crawlbase's stats."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from django.conf import settings
from django.core.cache import cache
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.permissions import BasePermission, IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ingest.recrawl import RECRAWL_PERMISSION, recrawl_due, urls_recrawl
from sources.models import Source

STATS_CACHE_SECONDS = 30
STATS_TIMEOUT_SECONDS = 10


@extend_schema_field(OpenApiTypes.INT)
class VisibleSourceField(serializers.PrimaryKeyRelatedField):
    """A source's id, among the sources the caller sees: another's is an id that
    does not exist (and without a caller, every one is)."""

    def get_queryset(self) -> Any:
        request = self.context.get("request")
        sources = Source.objects
        return sources.visible_to(request.user) if request else sources.none()


class RecrawlRequestSerializer(serializers.Serializer):
    urls = serializers.ListField(
        child=serializers.URLField(max_length=2048),
        required=False,
        min_length=1,
        max_length=1000,
        help_text="URLs to push; pages are created in the source covering each.",
    )
    # The metaclass moves declared fields off the class: this does not shadow
    # Field.source at run time, whatever the stubs say.
    source = VisibleSourceField(  # type: ignore[assignment]
        required=False,
        help_text="A source id: push its pages (with due=true, only the due ones).",
    )
    due = serializers.BooleanField(default=True)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if bool(attrs.get("urls")) == bool(attrs.get("source")):
            raise serializers.ValidationError("Give either urls or source.")
        return attrs


class RecrawlResponseSerializer(serializers.Serializer):
    selected = serializers.IntegerField()
    queued = serializers.IntegerField()
    in_flight = serializers.IntegerField(help_text="Skipped: already in flight.")
    fetching = serializers.IntegerField(help_text="Queued for the built-in fetcher.")
    out_of_scope = serializers.IntegerField(help_text="URLs no source covers.")


class MayRecrawl(BasePermission):
    """Staff who may change sources: the admin's rule for its crawl buttons."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return request.user.has_perm(RECRAWL_PERMISSION)


class RecrawlView(APIView):
    """Queue pages for Crawlbase now; pushes go out at CRAWLBASE_PUSH_RATE. Only
    the sources the caller sees: a URL of another is answered as a URL no source
    covers, a source id of another as an id that does not exist."""

    permission_classes = [IsAdminUser, MayRecrawl]

    @extend_schema(
        request=RecrawlRequestSerializer,
        responses={202: RecrawlResponseSerializer, 400: dict, 401: dict, 403: dict},
    )
    def post(self, request: Request) -> Response:
        body = RecrawlRequestSerializer(data=request.data, context={"request": request})
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if data.get("urls"):
            plan = urls_recrawl(urls=data["urls"], user=request.user)
        else:
            plan = recrawl_due(source=data["source"], everything=not data["due"])
        if plan.busy:
            return Response(
                {"error": "busy", "detail": str(plan)},
                status=status.HTTP_409_CONFLICT,
            )
        return Response(
            RecrawlResponseSerializer(plan).data, status=status.HTTP_202_ACCEPTED
        )


class CrawlerStatsView(APIView):
    """Crawlbase's statistics of the crawler, as Crawlbase gives them (cached for
    half a minute)."""

    permission_classes = [IsAdminUser]

    @extend_schema(responses={200: dict, 401: dict, 403: dict, 502: dict, 503: dict})
    def get(self, request: Request) -> Response:
        if not settings.CRAWLBASE_TOKEN:
            return _error(
                503, "crawlbase_not_configured", "CRAWLBASE_TOKEN is not set."
            )
        stats = cache.get("crawlbase-crawler-stats")
        if stats is None:
            try:
                stats = _fetch_stats()
            except urllib.error.HTTPError as exc:
                return _error(502, "crawlbase_error", f"Crawlbase answered {exc.code}.")
            except (OSError, ValueError) as exc:
                detail = f"Crawlbase could not be reached: {type(exc).__name__}."
                return _error(503, "crawlbase_unreachable", detail)
            cache.set("crawlbase-crawler-stats", stats, STATS_CACHE_SECONDS)
        return Response(stats)


def _fetch_stats() -> Any:
    url = f"{settings.CRAWLBASE_API_URL}crawler/{settings.CRAWLBASE_TOKEN}/stats"
    with urllib.request.urlopen(url, timeout=STATS_TIMEOUT_SECONDS) as answer:
        return json.loads(answer.read())


def _error(code: int, error: str, detail: str) -> Response:
    return Response({"error": error, "detail": detail}, status=code)
