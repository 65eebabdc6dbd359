"""Automation endpoints: recrawl on demand and Crawlbase's stats, for staff
tokens; a source's check for changes, for that source's publish tokens."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any, cast

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.core.cache import cache
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import exceptions, serializers, status
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.permissions import BasePermission, IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ingest.planning.recrawl import RECRAWL_PERMISSION, recrawl_due, urls_recrawl
from ingest.publish.models import PublishCheck, PublishToken
from ingest.publish.services import publish_check_request, publish_token_find
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
    dry_run = serializers.BooleanField(
        default=False, help_text="Count what would be queued; queue nothing."
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # An unknown field is refused, not ignored: a misspelt "dry_run" would
        # otherwise push every page it meant to count.
        unknown = sorted(set(self.initial_data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError(f"Unknown fields: {', '.join(unknown)}.")
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
        responses={
            200: RecrawlResponseSerializer,  # a dry run
            202: RecrawlResponseSerializer,
            400: dict,
            401: dict,
            403: dict,
        },
    )
    def post(self, request: Request) -> Response:
        body = RecrawlRequestSerializer(data=request.data, context={"request": request})
        body.is_valid(raise_exception=True)
        data = body.validated_data
        dry_run = data["dry_run"]
        if data.get("urls"):
            plan = urls_recrawl(urls=data["urls"], user=request.user, dry_run=dry_run)
        else:
            plan = recrawl_due(
                source=data["source"], everything=not data["due"], dry_run=dry_run
            )
        if plan.busy:
            return Response(
                {"error": "busy", "detail": str(plan)},
                status=status.HTTP_409_CONFLICT,
            )
        return Response(
            RecrawlResponseSerializer(plan).data,
            status=status.HTTP_200_OK if dry_run else status.HTTP_202_ACCEPTED,
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


# -- a source's check for changes, for its publish tokens -----------------------------


class PublishTokenAuthentication(BaseAuthentication):
    """``Authorization: Bearer kbp_…``: a publish token, which stands for no user
    (the caller is anonymous to every rule of who sees what) and is accepted by
    the endpoints of its source's check for changes only."""

    keyword = "Bearer"

    def authenticate(
        self, request: Request
    ) -> tuple[AnonymousUser, PublishToken] | None:
        words = get_authorization_header(request).split()
        if not words or words[0].lower() != self.keyword.lower().encode():
            return None
        if len(words) != 2:
            raise exceptions.AuthenticationFailed("Give one token after Bearer.")
        token = publish_token_find(key=words[1].decode("latin-1"))
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked publish token.")
        return AnonymousUser(), token

    def authenticate_header(self, request: Request) -> str:
        return f'{self.keyword} realm="api"'


class PublishTokenScheme(OpenApiAuthenticationExtension):
    target_class = "ingest.api.PublishTokenAuthentication"
    name = "publishToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer"}


class TokenOfThisSource(BasePermission):
    """The publish token is the source's in the URL: another source's id, or
    one that does not exist, is refused alike (403), and tells nothing."""

    message = "This publish token is for another source."
    code = "wrong_source"

    def has_permission(self, request: Request, view: Any) -> bool:
        token = request.auth
        if not isinstance(token, PublishToken):
            return False
        return token.source_id == view.kwargs.get("source_id")


class PublishCheckSerializer(serializers.ModelSerializer):
    check = serializers.IntegerField(source="pk", read_only=True)
    summary = serializers.CharField(read_only=True, help_text="In the editor's words.")

    class Meta:
        model = PublishCheck
        fields = ["check", "source", "state", "requested_at", "requests",
                  "started_at", "finished_at", "sitemaps_read", "sitemap_urls",
                  "dated", "new_pages", "others", "not_pushed", "in_flight",
                  "crawl", "summary"]  # fmt: skip
        read_only_fields = fields


class PublishAnswerSerializer(PublishCheckSerializer):
    already_queued = serializers.BooleanField(
        read_only=True,
        help_text="A check of this source was queued already: this request "
        "joined it, and nothing was added.",
    )

    class Meta(PublishCheckSerializer.Meta):
        fields = [*PublishCheckSerializer.Meta.fields, "already_queued"]
        read_only_fields = fields


class PublishView(APIView):
    """I just published, look now: check the source for changes (its sitemaps
    first, then the pages they date after their last check and new ones, then
    the rest). Only with a publish token of this source. A request while a
    check is queued joins it (``already_queued``): retries add no work."""

    authentication_classes = [PublishTokenAuthentication]
    permission_classes = [TokenOfThisSource]

    @extend_schema(
        request=None,
        responses={202: PublishAnswerSerializer, 401: dict, 403: dict},
    )
    def post(self, request: Request, source_id: int) -> Response:
        token = cast(PublishToken, request.auth)  # TokenOfThisSource saw to it
        check, created = publish_check_request(
            source=token.source, user=request.user, token=token
        )
        answer = {**PublishCheckSerializer(check).data, "already_queued": not created}
        return Response(answer, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        responses={200: PublishCheckSerializer, 401: dict, 403: dict, 404: dict}
    )
    def get(self, request: Request, source_id: int) -> Response:
        """The source's latest check for changes, with what it handed over."""
        check = (
            PublishCheck.objects.filter(source_id=source_id)
            .select_related("source")
            .order_by("-requested_at", "-pk")
            .first()
        )
        if check is None:
            return _error(404, "not_found", "No check of this source yet.")
        return Response(PublishCheckSerializer(check).data)


def _fetch_stats() -> Any:
    url = f"{settings.CRAWLBASE_API_URL}crawler/{settings.CRAWLBASE_TOKEN}/stats"
    with urllib.request.urlopen(url, timeout=STATS_TIMEOUT_SECONDS) as answer:
        return json.loads(answer.read())


def _error(code: int, error: str, detail: str) -> Response:
    return Response({"error": error, "detail": detail}, status=code)
