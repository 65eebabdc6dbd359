from __future__ import annotations

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from drf_spectacular.utils import extend_schema
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from retrieval.serializers import (
    QueryRequestSerializer,
    QueryResponseSerializer,
    SearchRequestSerializer,
    SearchResponseSerializer,
)
from retrieval.services import question_answer, search_run

ERRORS = {400: dict, 401: dict, 429: dict}


class SearchView(APIView):
    """Retrieval only: the best passage of each matching page, best first."""

    permission_classes = [IsAuthenticated]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "search"

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
    """A cited answer; every citation says when its page was verified and changed."""

    permission_classes = [IsAuthenticated]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "query"

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
    question = forms.CharField(max_length=2000, strip=True)


@login_required
def ask(request: HttpRequest) -> HttpResponse:
    """The "Ask" page: a question, its answer and its sources, for people."""
    form = AskForm(request.POST if request.method == "POST" else None)
    result = None
    if form.is_bound and form.is_valid():
        result = question_answer(
            question=form.cleaned_data["question"], user=request.user, k=5
        )
    return render(request, "retrieval/ask.html", {"form": form, "result": result})
