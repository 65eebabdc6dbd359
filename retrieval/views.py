from __future__ import annotations

from typing import cast

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseNotFound,
    HttpResponseRedirect,
)
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from kbsite.throttling import SharedRateThrottle
from retrieval.permissions import ReadersSchema, SignedInOrPublic
from retrieval.questions import (
    query_feedback_record,
    question_answer,
    search_run,
    sources_for,
)
from retrieval.searchable import SearchFilters
from retrieval.serializers import (
    QueryRequestSerializer,
    QueryResponseSerializer,
    SearchRequestSerializer,
    SearchResponseSerializer,
)

ERRORS = {400: dict, 401: dict, 429: dict}


class SearchView(APIView):
    """Retrieval only: the best passage of each matching page, best first. Without
    a token, over the public sources only (at anonymous readers' own rate)."""

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
        return Response(QueryResponseSerializer(result).data)


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


@login_required
@require_GET
def ask(request: HttpRequest) -> HttpResponse:
    """The "Ask" page: a question, its answer and its sources, for people. Asked by
    GET (``/?q=…``), so an answer has a link to share and a reload asks again
    rather than re-posting a form."""
    sources = sources_for(request.user)
    form = AskForm(
        request.GET if "q" in request.GET else None,
        sources=[(s.pk, s.name) for s in sources],
    )
    result = None
    if form.is_bound and form.is_valid():
        result = question_answer(
            question=form.cleaned_data["q"],
            user=request.user,
            k=5,
            filters=form.filters(),
        )
    return render(request, "retrieval/ask.html", {"form": form, "result": result})


class FeedbackForm(forms.Form):
    log = forms.IntegerField(min_value=1)
    helpful = forms.TypedChoiceField(choices=[("1", "yes"), ("0", "no")], coerce=int)
    next = forms.CharField(required=False, max_length=4000)


@login_required
@require_POST
def ask_feedback(request: HttpRequest) -> HttpResponse:
    """Thumbs up or down on an answer, stored with its question's log row. A POST
    with the CSRF token: it changes state. Scripts get 204; a form post goes back."""
    form = FeedbackForm(request.POST)
    if not form.is_valid():
        return HttpResponseBadRequest("bad feedback")
    stored = query_feedback_record(
        log_id=form.cleaned_data["log"],
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
