from __future__ import annotations

import csv
from datetime import datetime
from typing import Any, cast
from urllib.parse import urlencode

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Func, IntegerField, QuerySet, Sum
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    JsonResponse,
    StreamingHttpResponse,
)
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import formats, timezone
from django.utils.html import format_html, format_html_join

from kbsite.admin_utils import (
    ReadOnlyAdmin,
    ago,
    hash_column,
    number,
    short_path,
    title_and_path,
    tokens_cost,
)
from retrieval import asked
from retrieval.answer import cited_count
from retrieval.grouping import group_similarity
from retrieval.models import (
    Chunk,
    Embedding,
    EmbeddingSpace,
    EmbeddingUsage,
    QueryLog,
    QueryLogQuerySet,
)
from retrieval.spaces import floor_in_force, serving
from sources.admin.visibility import VisibleRowsAdmin
from sources.models import Caller, Source
from sources.visibility import rows_visible_to, sees_every_row


@admin.register(Chunk)
class ChunkAdmin(VisibleRowsAdmin, ReadOnlyAdmin):
    menu_order = 1
    source_path = "page__source"
    list_display = ["page_title", "position", "heading", "tokens", "hash"]
    search_fields = ["heading", "page__url", "=embed_hash"]
    list_filter = ["page__status", "page__source"]
    list_select_related = ["page"]
    list_defer = [
        "text", "code", "page__markdown", "page__raw_body", "page__line_shapes",
    ]  # fmt: skip
    # The code is for searches (retrieval.codes): 1,024 signs say nothing to a reader.
    exclude = ["search_document", "code", "code_space"]

    hash = hash_column("embed_hash", "embedded text hash")

    @admin.display(description="page", ordering="page__title")
    def page_title(self, obj: Chunk) -> str:
        return title_and_path(obj.page.title, obj.page.url)

    @admin.display(description="tokens", ordering="token_count")
    def tokens(self, obj: Chunk) -> str:
        return number(obj.token_count)


@admin.register(Embedding)
class EmbeddingAdmin(VisibleRowsAdmin, ReadOnlyAdmin):
    menu_order = 2
    source_path = None  # shared by every chunk of its text: see visible_rows
    list_display = ["space", "hash", "dimensions", "tokens", "created_at"]
    list_filter = ["space"]
    search_fields = ["=text_hash"]
    exclude = ["vector", "code"]

    hash = hash_column("text_hash", "text hash")

    def visible_rows(self, queryset: QuerySet, user: Caller) -> QuerySet:
        """A vector is shown when a chunk the editor sees has its text."""
        if sees_every_row(user):
            return queryset
        chunks = rows_visible_to(
            Chunk.objects.all(), source_path=ChunkAdmin.source_path, user=user
        )
        return queryset.filter(text_hash__in=chunks.values("embed_hash"))

    def get_queryset(self, request):
        # The size from PostgreSQL, so the list never loads whole vectors.
        queryset = super().get_queryset(request).defer("vector", "code")
        return queryset.annotate(
            _dims=Func("vector", function="vector_dims", output_field=IntegerField())
        )

    @admin.display(description="dimensions")
    def dimensions(self, obj: Any) -> int:
        return obj._dims

    @admin.display(description="tokens", ordering="token_count")
    def tokens(self, obj: Embedding) -> str:
        return number(obj.token_count)


@admin.register(EmbeddingSpace)
class EmbeddingSpaceAdmin(VisibleRowsAdmin, ReadOnlyAdmin):
    """Which model serves, and the floor each space learned from the index."""

    source_path = None  # learned from every source's chunks

    list_display = ["name", "state", "floor", "probe_quantiles", "floor_chunks",
                    "floor_learned_at", "switched_at"]  # fmt: skip
    list_filter = ["state", "backend"]

    @admin.display(description="probe similarities (quantiles)")
    def probe_quantiles(self, obj: EmbeddingSpace) -> str:
        quantiles = (obj.floor_sample or {}).get("quantiles", {})
        return ", ".join(f"{q}: {v}" for q, v in sorted(quantiles.items()))


@admin.register(EmbeddingUsage)
class EmbeddingUsageAdmin(VisibleRowsAdmin, ReadOnlyAdmin):
    """What embedding cost, per day and space; per source below the list."""

    menu_order = 3
    source_path = None  # what the whole index spent
    list_display = ["day", "space", "request_count", "input_count", "token_count",
                    "cost"]  # fmt: skip
    list_filter = ["space"]
    date_hierarchy = "day"

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        sources = Source.objects.visible_to(request.user).annotate(
            tokens=Sum("pages__embedding_tokens")
        )
        rows = [
            (source.name, number(source.tokens or 0), tokens_cost(source.tokens or 0))
            for source in sources.order_by("-tokens", "name")
        ]
        context = {**(extra_context or {}), "per_source": rows}
        return super().changelist_view(request, context)

    @admin.display(description="requests", ordering="requests")
    def request_count(self, obj: EmbeddingUsage) -> str:
        return number(obj.requests)

    @admin.display(description="texts", ordering="inputs")
    def input_count(self, obj: EmbeddingUsage) -> str:
        return number(obj.inputs)

    @admin.display(description="tokens", ordering="tokens")
    def token_count(self, obj: EmbeddingUsage) -> str:
        return number(obj.tokens)

    @admin.display(description="cost")
    def cost(self, obj: EmbeddingUsage) -> str:
        return tokens_cost(obj.tokens) or "—"


@admin.register(QueryLog)
class QueryLogAdmin(VisibleRowsAdmin, ReadOnlyAdmin):
    """What people asked and what they got: the raw material for evaluation; and
    the docs owner's page of what readers asked and the index served badly
    (``retrieval.asked``)."""

    menu_order = 4
    source_path = None  # its asker and its chunks decide: see visible_rows
    list_display = ["asked_at", "question", "result", "user", "feedback",
                    "latency"]  # fmt: skip
    list_filter = ["kind", "abstained", "feedback", "status"]
    search_fields = ["text"]
    list_select_related = ["user"]
    list_defer = ["scores"]
    fields = ["created_at", "kind", "user", "text", "result", "confidence",
              "answer", "chunks", "latency_ms"]  # fmt: skip
    readonly_fields = ["created_at", "result", "confidence", "chunks"]

    def visible_rows(self, queryset: QuerySet, user: Caller) -> QuerySet:
        return cast(QueryLogQuerySet, queryset).visible_to(user)

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path("questions/", view(self.questions_view),
                 name="retrieval_querylog_questions"),
            path("questions.csv", view(self.questions_export),
                 name="retrieval_querylog_questions_export"),
            *super().get_urls(),
        ]  # fmt: skip

    def questions_view(self, request: HttpRequest) -> HttpResponse:
        """Questions readers asked: the unanswered, the doubtful and the not
        useful, grouped."""
        days = self._questions_days(request)
        if isinstance(days, HttpResponse):
            return days
        since = asked.period_start(days)
        floor = floor_in_force(serving()[1])
        threshold = group_similarity(floor)
        if floor is not None:
            floor = round(floor, 2)  # as shown: a page shown at 0.44 is not under 0.44
        sections = [
            self._questions_section(request, concern, since, floor)
            for concern in asked.Concern
        ]
        context = {
            **self.admin_site.each_context(request),
            "title": "Questions readers asked",
            "opts": self.model._meta,
            "days": days,
            "periods": asked.PERIODS,
            "sections": sections,
            "threshold": f"{threshold:.2f}",
            "floor": floor,
            "doubtful_similarity": f"{asked.DOUBTFUL_SIMILARITY:.2f}",
            "doubtful_lead": f"{asked.DOUBTFUL_LEAD:.0%}",
            "words_readers_use": request.user.has_perm("retrieval.view_synonym"),
        }
        return TemplateResponse(
            request, "admin/retrieval/querylog/questions.html", context
        )

    def _questions_section(
        self,
        request: HttpRequest,
        concern: asked.Concern,
        since: datetime,
        floor: float | None,
    ) -> dict[str, Any]:
        found = asked.question_groups(user=request.user, concern=concern, since=since)
        changelist = reverse("admin:retrieval_querylog_changelist")
        answer_with = reverse("admin:retrieval_pin_answer")
        can_pin = request.user.has_perm("retrieval.add_pin")
        rows = [
            {
                "group": group,
                "examples": [
                    (
                        q,
                        reverse("admin:retrieval_querylog_change", args=[q.ref.newest]),
                    )
                    for q in group.examples
                ],
                "logs": _logs_link(changelist, asked.group_logs(group=group)),
                "answer_with": (
                    f"{answer_with}?logs="
                    + ",".join(map(str, asked.group_logs(group=group, limit=200)))
                    if can_pin
                    else ""
                ),
                "answered": [
                    (
                        page,
                        reverse("admin:sources_page_change", args=[page.page_id]),
                        short_path(page.url),
                    )
                    for page in asked.answered_from(group=group, user=request.user)
                ]
                if concern.answered
                else [],
                "more": len(group.questions) - len(group.examples),
                "latest": ago(group.latest),
                "near": [
                    (
                        page,
                        reverse("admin:sources_page_change", args=[page.page_id]),
                        short_path(page.url),
                        floor is not None and round(page.similarity, 2) < floor,
                    )
                    for page in asked.pages_near(group=group, user=request.user)
                ],
            }
            for group in found.groups[:GROUPS_SHOWN]
        ]
        return {"found": found, "rows": rows, "hidden": found.groups[GROUPS_SHOWN:]}

    def questions_export(self, request: HttpRequest) -> HttpResponseBase:
        """The groups and their questions as CSV, streamed as they are found."""
        days = self._questions_days(request)
        if isinstance(days, HttpResponse):
            return days
        writer = csv.writer(_Echo())
        rows = asked.csv_rows(user=request.user, since=asked.period_start(days))
        name = f"questions-{days}-days-{timezone.localdate():%Y-%m-%d}.csv"
        return StreamingHttpResponse(
            (writer.writerow(row) for row in rows),
            content_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )

    def _questions_days(self, request: HttpRequest) -> int | HttpResponse:
        """The period asked for (DEFAULT_DAYS if none); a 403 without the view
        permission, a 400 for a period not offered."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        raw = request.GET.get("days", str(asked.DEFAULT_DAYS))
        if raw not in {str(days) for days in asked.PERIODS}:
            allowed = ", ".join(map(str, asked.PERIODS))
            return JsonResponse(
                {"error": f"days must be one of {allowed}, not {raw[:20]!r}"},
                status=400,
            )
        return int(raw)

    @admin.display(description="asked", ordering="created_at")
    def asked_at(self, obj: QueryLog) -> str:
        when = timezone.localtime(obj.created_at)
        return format_html(
            '<span class="kb-when" title="{}">{}</span>',
            when.isoformat(timespec="seconds"),
            formats.date_format(when, "j M H:i"),
        )

    @admin.display(description="question or search", ordering="text")
    def question(self, obj: QueryLog) -> str:
        text = obj.text if len(obj.text) <= 160 else obj.text[:159] + "…"
        if obj.kind == QueryLog.Kind.SEARCH:
            return format_html('<span class="kb-kind">search</span> {}', text)
        if obj.kind == QueryLog.Kind.RECHECK:  # asked again by the system
            return format_html('<span class="kb-kind">recheck</span> {}', text)
        return text

    @admin.display(description="result", ordering="abstained")
    def result(self, obj: QueryLog) -> str:
        """For a question, the passages its answer cited (what the asker was
        shown) and how many chunks were retrieved; for a search, what it found."""
        if obj.abstained:
            return format_html(
                '<span class="kb-badge kb-abstained">Abstained</span><br>'
                '<small class="kb-retrieved">{}</small>',
                "no evidence in the index",
            )
        found = len(obj.chunk_ids)
        if obj.kind == QueryLog.Kind.SEARCH:
            return _plural(found, "chunk") + " found"
        cited = cited_count(obj.answer)
        answered = (
            f"Answered from {_plural(cited, 'chunk')}"
            if cited
            else "Answered citing nothing"
        )
        return format_html(
            '{}<br><small class="kb-retrieved">{} retrieved</small>', answered, found
        )

    @admin.display(description="how sure")
    def confidence(self, obj: QueryLog) -> str:
        """What the search's evidence was (``retrieval.asked.doubtful`` reads it)."""
        if obj.similarity is None or obj.held is None:
            return "—"  # logged before it was kept
        floor = f"floor {obj.floor:.2f}" if obj.floor is not None else "no floor"
        parts = [
            f"best passage {obj.similarity:.2f} ({floor})",
            f"{obj.held:.0%} of the question's weight in one passage",
        ]
        if obj.lead is not None:
            parts.append(f"first page {obj.lead:.1%} ahead of the next")
        return " · ".join(parts)

    @admin.display(description="ms", ordering="latency_ms")
    def latency(self, obj: QueryLog) -> int:
        return obj.latency_ms

    @admin.display(description="chunks retrieved (score)")
    def chunks(self, obj: QueryLog) -> str:
        """Each chunk id, linked to the chunk while it still exists."""
        if not obj.chunk_ids:
            return "—"
        existing = set(
            Chunk.objects.filter(pk__in=obj.chunk_ids).values_list("pk", flat=True)
        )
        scores = [*obj.scores, *[None] * len(obj.chunk_ids)]
        return format_html_join(
            " · ",
            "{}",
            ((self._chunk_link(pk, pk in existing, scores[n]),)
             for n, pk in enumerate(obj.chunk_ids)),
        )  # fmt: skip

    @staticmethod
    def _chunk_link(pk: int, exists: bool, score: float | None) -> str:
        shown = f"#{pk}" + (f" ({score:.3f})" if score is not None else "")
        if not exists:
            return format_html('<span title="{}">{}</span>', "replaced since", shown)
        url = reverse("admin:retrieval_chunk_change", args=[pk])
        return format_html('<a href="{}">{}</a>', url, shown)


# Groups shown in each section of the questions page; the export holds them all.
GROUPS_SHOWN = 20


class _Echo:
    """What ``csv.writer`` writes to: each row is handed back, to be streamed."""

    def write(self, value: str) -> str:
        return value


def _logs_link(changelist: str, ids: list[int]) -> str:
    """The query log's list of these rows (the admin filters by any field's
    lookup: ``id__in``)."""
    return f"{changelist}?{urlencode({'id__in': ','.join(map(str, ids))})}"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


# The Ask widget's keys, in a module of their own.
from retrieval import pin_admin, synonym_admin, widget_admin  # noqa: E402, F401
