from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, cast

from django import forms
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseNotFound,
    HttpResponseRedirect,
)
from django.shortcuts import render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import etag, require_GET, require_POST
from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from kbsite.throttling import SharedRateThrottle, request_wait
from retrieval.models import QueryLog
from retrieval.permissions import ReadersSchema, SignedInOrPublic, reader_admitted
from retrieval.questions import (
    feedback_ticket,
    feedback_ticket_log,
    query_feedback_record,
    question_answer,
    search_run,
    sources_for,
)
from retrieval.rechecks import answer_for, answer_report
from retrieval.searchable import SearchFilters
from retrieval.serializers import (
    FeedbackRequestSerializer,
    QueryRequestSerializer,
    QueryResponseSerializer,
    SearchRequestSerializer,
    SearchResponseSerializer,
    WidgetFeedbackRequestSerializer,
    WidgetQueryRequestSerializer,
    WidgetQueryResponseSerializer,
)
from retrieval.widget import (
    WidgetRefused,
    widget_origin,
    widget_origin_allowed,
    widget_reader,
)
from sources.models import PageVersion, WidgetReader

ERRORS = {400: dict, 401: dict, 429: dict}


class SearchView(APIView):
    """Retrieval only: the best passage of each matching page, best first. Without
    a token, over the public sources only (at anonymous readers' own rate).

    The search reads the index from a replica when there are any
    (``retrieval.questions``, ``kbsite.replicas``); who the caller is, what they
    may read, their throttle and the question's log row stay on the primary."""

    permission_classes = [SignedInOrPublic]
    throttle_classes = [SharedRateThrottle]
    throttle_scope = "search"
    anonymous_throttle_scope = "anon_search"
    schema = ReadersSchema()

    @extend_schema(
        parameters=[SearchRequestSerializer],
        responses={200: SearchResponseSerializer, **ERRORS},
    )
    def get(self, request):
        params = SearchRequestSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        citations = search_run(
            query=params.validated_data["q"],
            user=request.user,
            k=params.validated_data["k"],
            filters=params.filters(),
        )
        return Response(SearchResponseSerializer({"results": citations}).data)


class QueryView(APIView):
    """A cited answer; every citation says when its page was verified and changed.
    Without a token, over the public sources only (at anonymous readers' own
    rate)."""

    permission_classes = [SignedInOrPublic]
    throttle_classes = [SharedRateThrottle]
    throttle_scope = "query"
    anonymous_throttle_scope = "anon_query"
    schema = ReadersSchema()

    @extend_schema(
        request=QueryRequestSerializer,
        responses={200: QueryResponseSerializer, **ERRORS},
    )
    def post(self, request):
        body = QueryRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        result = question_answer(
            question=body.validated_data["question"],
            user=request.user,
            k=body.validated_data["k"],
            filters=body.filters(),
        )
        output = QueryResponseSerializer(result, context={"request": request})
        return Response(output.data)


class AskForm(forms.Form):
    q = forms.CharField(label="Question", max_length=2000, strip=True)
    source = forms.TypedChoiceField(
        label="Source", coerce=int, required=False, empty_value=None
    )

    def __init__(self, *args, sources: list[tuple[int, str]], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        field = cast(forms.TypedChoiceField, self.fields["source"])
        field.choices = [("", "All sources"), *sources]

    def filters(self) -> SearchFilters:
        source = self.cleaned_data.get("source")
        return SearchFilters(source_ids=(source,) if source else ())


@require_GET
def ask(request: HttpRequest) -> HttpResponse:
    """The "Ask" page: a question, its answer and its sources, for people. Asked by
    GET (``/?q=…``), so an answer has a link to share and a reload asks again
    rather than re-posting a form. Anonymous readers ask the public sources (at
    their own rate, counted with the API's questions); with none, they log in."""
    if not reader_admitted(request.user):
        return redirect_to_login(request.get_full_path())
    sources = sources_for(request.user)
    form = AskForm(
        request.GET if "q" in request.GET else None,
        sources=[(s.pk, s.name) for s in sources],
    )
    result, ticket = None, ""
    if form.is_bound and form.is_valid():
        wait = request_wait(request, anonymous_scope=QueryView.anonymous_throttle_scope)
        if wait is not None:
            return _too_many(request, form, wait)
        result = question_answer(
            question=form.cleaned_data["q"],
            user=request.user,
            k=5,
            filters=form.filters(),
        )
        if result.log_id and not request.user.is_authenticated:
            ticket = feedback_ticket(result.log_id)
    context = {"form": form, "result": result, "ticket": ticket}
    return render(request, "retrieval/ask.html", context)


def _too_many(request: HttpRequest, form: AskForm, wait: float) -> HttpResponse:
    seconds = max(1, math.ceil(wait))
    response = render(
        request,
        "retrieval/ask.html",
        {"form": form, "result": None, "wait": seconds},
        status=429,
    )
    response["Retry-After"] = str(seconds)
    return response


class FeedbackForm(forms.Form):
    log = forms.IntegerField(min_value=1, required=False)
    # An anonymous asker's proof that the answer was theirs (``feedback_ticket``).
    ticket = forms.CharField(required=False, max_length=200)
    helpful = forms.TypedChoiceField(choices=[("1", "yes"), ("0", "no")], coerce=int)
    next = forms.CharField(required=False, max_length=4000)

    def clean(self) -> dict:
        cleaned = super().clean() or {}
        if not cleaned.get("log") and not cleaned.get("ticket"):
            raise forms.ValidationError("Name the question: its log or its ticket.")
        return cleaned

    def log_id(self, *, signed_in: bool) -> int | None:
        """The question rated: a signed-in asker names it (only theirs are
        found); an anonymous one shows the ticket its answer came with."""
        if signed_in:
            return self.cleaned_data["log"]
        return feedback_ticket_log(self.cleaned_data["ticket"])


@require_POST
def ask_feedback(request: HttpRequest) -> HttpResponse:
    """Thumbs up or down on an answer, stored with its question's log row. A POST
    with the CSRF token: it changes state. Scripts get 204; a form post goes back."""
    if not reader_admitted(request.user):
        return redirect_to_login(reverse("ask"))
    form = FeedbackForm(request.POST)
    if not form.is_valid():
        return HttpResponseBadRequest("bad feedback")
    log_id = form.log_id(signed_in=request.user.is_authenticated)
    stored = log_id is not None and query_feedback_record(
        log_id=log_id,
        user=request.user,
        helpful=bool(form.cleaned_data["helpful"]),
    )
    if not stored:
        return HttpResponseNotFound("no such question of yours")
    if request.headers.get("X-Requested-With") == "fetch":
        return HttpResponse(status=204)
    target = form.cleaned_data["next"]
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = reverse("ask")
    return HttpResponseRedirect(target)


def _diff_url(request: HttpRequest) -> Callable[[PageVersion], str]:
    def url(change: PageVersion) -> str:
        path = reverse("admin:sources_page_diff", args=[change.page_id])
        return request.build_absolute_uri(f"{path}?b={change.pk}")

    return url


class AnswerView(APIView):
    """A logged answer read again by its asker: whether it still holds, the change
    that made it stale, and the answers the question got since."""

    permission_classes = [IsAuthenticated]
    throttle_classes = [SharedRateThrottle]
    throttle_scope = "search"

    @extend_schema(responses={200: dict, 401: dict, 404: dict})
    def get(self, request, log_id: int):
        log = answer_for(request.user, log_id)
        if log is None:
            missing = {"error": "not_found", "detail": "No such answer of yours."}
            return Response(missing, status=404)
        return Response(answer_report(log, _diff_url(request), user=request.user))


class AnswerFeedbackView(APIView):
    """*Useful* / *Not useful* on a logged answer, by its asker (the
    ``answer_id`` that ``/api/query/`` gave them); a later rating replaces an
    earlier one."""

    permission_classes = [IsAuthenticated]
    throttle_classes = [SharedRateThrottle]
    throttle_scope = "search"

    @extend_schema(
        request=FeedbackRequestSerializer,
        responses={204: None, 400: dict, 401: dict, 404: dict, 429: dict},
    )
    def post(self, request, log_id: int):
        body = FeedbackRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        # Only the asker's own questions are found: a superuser reads anyone's
        # answer (``answer_for``) but rates only their own.
        if not query_feedback_record(
            log_id=log_id, user=request.user, helpful=body.validated_data["helpful"]
        ):
            raise NotFound("No such answer of yours.", "not_found")
        return Response(status=204)


# What the kept answer's page says its asker thought of it.
SAID: dict[int | None, str] = {
    QueryLog.Feedback.HELPFUL: "useful",
    QueryLog.Feedback.UNHELPFUL: "not useful",
}


@login_required
@require_GET
def answer_page(request: HttpRequest, log_id: int) -> HttpResponse:
    """An answer given before, as it was, with what became of it."""
    log = answer_for(request.user, log_id)
    if log is None:
        return HttpResponseNotFound(render(request, "404.html").content)
    report = answer_report(log, _diff_url(request), user=request.user)
    context = {
        "log": log,
        "report": report,
        # Its asker rates a question they typed (``query_feedback_record``): a
        # superuser reading someone else's, or a recheck, has no buttons.
        "rateable": log.user_id == request.user.pk and log.kind == QueryLog.Kind.QUERY,
        "said": SAID.get(log.feedback, ""),
    }
    return render(request, "retrieval/answer.html", context)


# -- the Ask widget ----------------------------------------------------------------

# Not a static file: served at one address only, whose directory the script
# takes its endpoint's from.
WIDGET_SCRIPT = Path(__file__).resolve().parent / "scripts" / "widget.js"
# Seconds browsers keep a preflight's answer (Chromium keeps it two hours at most).
PREFLIGHT_MAX_AGE = 600


@cache
def _widget_script() -> tuple[bytes, str]:
    body = WIDGET_SCRIPT.read_bytes()
    return body, f'"{hashlib.sha256(body).hexdigest()[:32]}"'


@require_GET
@etag(lambda request: _widget_script()[1])
def widget_script(request: HttpRequest) -> HttpResponse:
    """The Ask widget, for a script tag on any site: the same file whatever the
    page, kept by browsers for five minutes and then checked by its ETag."""
    response = HttpResponse(
        _widget_script()[0], content_type="text/javascript; charset=utf-8"
    )
    response["Cache-Control"] = "public, max-age=300"
    response["Cross-Origin-Resource-Policy"] = "cross-origin"
    return response


class WidgetView(APIView):
    """What the Ask widget's endpoints share: pages of other sites call them,
    known by their ``Origin`` alone, counted with anonymous readers' questions.

    CORS: an origin some source allows gets ``Access-Control-Allow-Origin`` (its
    own, never ``*``, never with credentials) on its preflight and every answer,
    errors included, so that its pages can read them; any other gets 403 and no
    CORS header. Every answer varies by ``Origin``."""

    # The widget sends no cookie and no token: a session in the browser never
    # widens what a page of another site reads.
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    throttle_classes = [SharedRateThrottle]
    throttle_scope = QueryView.anonymous_throttle_scope
    anonymous_throttle_scope = QueryView.anonymous_throttle_scope
    origin = ""
    cors = False

    def check_permissions(self, request: Request) -> None:
        try:
            self.origin = widget_origin(request.headers.get("Origin"))
        except WidgetRefused as refused:
            raise PermissionDenied(refused.detail, refused.code) from None
        self.cors = widget_origin_allowed(origin=self.origin)
        if not self.cors:
            raise PermissionDenied(
                f"The Ask widget is not allowed on {self.origin}: no source lists "
                "it among its Ask widget origins.",
                "origin_not_allowed",
            )
        super().check_permissions(request)

    def get_throttles(self) -> list[Any]:
        # A preflight asks nothing: browsers send one before each POST.
        return [] if self.request.method == "OPTIONS" else super().get_throttles()

    def options(self, request: Any, *args: Any, **kwargs: Any) -> Response:
        return Response(status=204)

    def reader(self, *, key: str) -> WidgetReader:
        try:
            return widget_reader(origin=self.origin, key=key)
        except WidgetRefused as refused:
            raise PermissionDenied(refused.detail, refused.code) from None

    def finalize_response(
        self, request: Request, response: Any, *args: Any, **kwargs: Any
    ) -> Any:
        response = super().finalize_response(request, response, *args, **kwargs)
        patch_vary_headers(response, ["Origin"])
        if self.cors:
            response["Access-Control-Allow-Origin"] = self.origin
            response["Access-Control-Expose-Headers"] = "Retry-After"
            if request.method == "OPTIONS":
                response["Access-Control-Allow-Methods"] = "POST"
                response["Access-Control-Allow-Headers"] = "Content-Type"
                response["Access-Control-Max-Age"] = str(PREFLIGHT_MAX_AGE)
        return response


class WidgetQueryView(WidgetView):
    """The Ask widget's questions: a cited answer, as ``/api/query/`` gives, over
    the sources the page's site may read (``retrieval.widget``), with the ticket
    its reader rates it by."""

    @extend_schema(
        request=WidgetQueryRequestSerializer,
        responses={200: WidgetQueryResponseSerializer, 400: dict, 403: dict, 429: dict},
    )
    def post(self, request: Request) -> Response:
        body = WidgetQueryRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        result = question_answer(
            question=body.validated_data["question"],
            user=self.reader(key=body.validated_data["key"]),
            k=body.validated_data["k"],
            filters=body.filters(),
        )
        return Response(WidgetQueryResponseSerializer(result).data)


class WidgetFeedbackView(WidgetView):
    """*Useful* / *Not useful* on a widget's answer, named by the ticket it came
    with (the reader is anonymous: only the one answered holds it), from a page
    that may ask. A later rating replaces an earlier one."""

    @extend_schema(
        request=WidgetFeedbackRequestSerializer,
        responses={204: None, 400: dict, 403: dict, 404: dict, 429: dict},
    )
    def post(self, request: Request) -> Response:
        body = WidgetFeedbackRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        reader = self.reader(key=body.validated_data["key"])
        log_id = feedback_ticket_log(body.validated_data["ticket"])
        stored = log_id is not None and query_feedback_record(
            log_id=log_id, user=reader, helpful=body.validated_data["helpful"]
        )
        if not stored:
            raise NotFound(
                "No such answer: the ticket is wrong or more than a day old.",
                "not_found",
            )
        return Response(status=204)
