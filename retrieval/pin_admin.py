"""Pins in the admin: *Answer this with…* from a group of readers' questions (find
the section, pin it), the list of pins with those waiting for review first, and
renewing a reviewed pin. Imported by ``retrieval.admin``, which Django reads."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join

from kbsite.admin_utils import ago, short_path
from retrieval.chunking import section_of
from retrieval.grouping import group_similarity, question_key
from retrieval.models import Chunk, Pin, QueryLog
from retrieval.pins import pin_create, pin_renew
from retrieval.search import chunks_search
from retrieval.searchable import SearchFilters
from retrieval.spaces import floor_in_force, serving
from retrieval.spans import cut, unmark
from sources.admin.visibility import VisibleRowsAdmin
from sources.models import Caller, Page, Source

# Sections offered for a search on the *Answer this with…* page.
SECTIONS_OFFERED = 10
# Questions of a group carried to the page (its logs, newest first).
GROUP_LOGS = 200
# Characters of a section's text shown in the search's list.
PREVIEW_CHARS = 400


@admin.register(Pin)
class PinAdmin(VisibleRowsAdmin):
    """An editor sees and reviews the pins of the sources they see; pins are made
    from the questions page (*Answer this with…*), not from an empty form."""

    menu_order = 6
    source_path = "page__source"
    list_display = ["section", "question_count", "status", "pinned_by", "pinned"]
    list_filter = ["state", "reason"]
    search_fields = ["heading", "url", "questions__text"]
    list_select_related = ["created_by", "page"]
    fields = ["section", "status", "question_list", "excerpt", "pinned_by",
              "pinned"]  # fmt: skip
    readonly_fields = ["section", "status", "question_list", "excerpt",
                       "pinned_by", "pinned"]  # fmt: skip
    actions = ["renew"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # see answer_view

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a pin is renewed or deleted, never edited

    def get_queryset(self, request: HttpRequest) -> QuerySet[Pin]:
        return (
            super()
            .get_queryset(request)
            .annotate(question_total=Count("questions"))
            .order_by("-state", "-review_since", "-created_at")  # review first
        )

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path("answer/", view(self.answer_view), name="retrieval_pin_answer"),
            *super().get_urls(),
        ]

    @admin.display(description="section", ordering="heading")
    def section(self, obj: Pin) -> str:
        where = f"{obj.url}#{obj.anchor}" if obj.anchor else obj.url
        inner = unmark(section_of(obj.heading, obj.title))
        return format_html(
            '<a href="{}" rel="noopener noreferrer">{}</a> <small>{}</small>',
            where,
            obj.title or short_path(obj.url),
            f"› {inner}" if inner else "",
        )

    @admin.display(description="questions", ordering="question_total")
    def question_count(self, obj: Pin) -> int:
        return getattr(obj, "question_total", 0)

    @admin.display(description="status", ordering="state")
    def status(self, obj: Pin) -> str:
        return _status(obj).capitalize()

    @admin.display(description="questions it answers")
    def question_list(self, obj: Pin) -> str:
        return format_html(
            "<ul>{}</ul><p>{}</p>",
            format_html_join(
                "", "<li>{}</li>", ((q.text,) for q in obj.questions.all())
            ),
            f"…and new questions at least {_bar():.2f} similar to one of them.",
        )

    @admin.display(description="pinned by")
    def pinned_by(self, obj: Pin) -> str:
        return obj.created_by.get_username() if obj.created_by else "—"

    @admin.display(description="pinned", ordering="created_at")
    def pinned(self, obj: Pin) -> str:
        return ago(obj.created_at)

    @admin.action(description="Pin the selected sections as they read now")
    def renew(self, request: HttpRequest, queryset: QuerySet[Pin]) -> None:
        if not request.user.has_perm("retrieval.add_pin"):
            raise PermissionDenied
        renewed = sum(pin_renew(pin) for pin in queryset.select_related("page"))
        left = queryset.count() - renewed
        self.message_user(request, f"{renewed} pins answer again.")
        if left:
            self.message_user(
                request,
                f"{left} could not be renewed: their section is gone. Delete them, "
                "or pin another section from the questions page.",
                messages.WARNING,
            )

    def answer_view(self, request: HttpRequest) -> HttpResponse:
        """*Answer this with…*: the group's questions, a search of the sections of
        the editor's sources, and a button that pins one."""
        if not request.user.has_perm("retrieval.add_pin"):
            raise PermissionDenied
        questions = _group_questions(request)
        if not questions:
            raise Http404("No question of yours with these ids.")
        sources = Source.objects.visible_to(request.user)
        if request.method == "POST":
            chunk_id = _number(request.POST.get("chunk"))
            chunk = (
                Chunk.objects.live()
                .filter(page__source__in=sources, pk=chunk_id)
                .select_related("page")
                .first()
                if chunk_id is not None
                else None
            )
            if chunk is None:
                raise Http404("No section of yours with this id.")
            pin = pin_create(chunk=chunk, questions=questions, user=request.user)
            self.message_user(
                request,
                f"Pinned: {len(questions)} questions, and new ones like them, now "
                f"get “{chunk.heading or chunk.page.title}” first.",
            )
            return HttpResponseRedirect(
                reverse("admin:retrieval_pin_change", args=[pin.pk])
            )
        query = request.GET.get("q", "").strip()[:1000] or questions[0]
        ids = tuple(sources.values_list("pk", flat=True))
        found = (
            chunks_search(
                query=query,
                user=request.user,
                k=SECTIONS_OFFERED,
                per_page=3,
                filters=SearchFilters(source_ids=ids),
            ).hits
            if ids
            else []
        )
        context = {
            **self.admin_site.each_context(request),
            "title": "Answer this with…",
            "opts": self.model._meta,
            "questions": questions,
            "logs": request.GET.get("logs", ""),
            "query": query,
            "hits": [
                (
                    hit,
                    short_path(hit.chunk.page.url),
                    unmark(section_of(hit.chunk.heading, hit.chunk.page.title)),
                    cut(_prose(hit.chunk.text), PREVIEW_CHARS),
                )
                for hit in found
            ],
            "threshold": f"{_bar():.2f}",
        }
        return TemplateResponse(request, "admin/retrieval/pin/answer.html", context)


class PinnedSectionsPageAdmin(admin.ModelAdmin):
    """The Page admin's part that retrieval owns (composed by ``kbsite.admin``):
    the sections of the page pinned to answer readers' questions."""

    @admin.display(description="pinned sections")
    def pins(self, obj: Page) -> str:
        pins = list(obj.pins.select_related("created_by").order_by("-created_at"))
        if not pins:
            return "None: no section of this page is pinned to answer questions."
        return format_html(
            "<ul>{}</ul>",
            format_html_join(
                "",
                '<li><a href="{}">{}</a>: {} ({}, by {} {})</li>',
                (
                    (
                        reverse("admin:retrieval_pin_change", args=[pin.pk]),
                        pin.heading or pin.title or pin.url,
                        _questions(pin),
                        _status(pin),
                        pin.created_by.get_username() if pin.created_by else "—",
                        ago(pin.created_at),
                    )
                    for pin in pins
                ),
            ),
        )


def _questions(pin: Pin) -> str:
    texts = list(pin.questions.values_list("text", flat=True))
    more = len(texts) - 2
    shown = "; ".join(f"“{text}”" for text in texts[:2])
    return f"{shown} and {more} more" if more > 0 else shown


def _status(pin: Pin) -> str:
    if pin.page_id is None:
        return f"waiting for review: {Pin.Reason.GONE.label.lower()}"
    if pin.state == Pin.State.REVIEW:
        since = f" {ago(pin.review_since)}" if pin.review_since else ""
        return f"waiting for review: {pin.get_reason_display().lower()}{since}"
    return "answering"


def _group_questions(request: HttpRequest) -> list[str]:
    """The distinct questions of the logs named in ``logs`` that the editor may
    see, most asked first."""
    raw = request.GET.get("logs") or request.POST.get("logs") or ""
    ids = [n for n in (_number(part) for part in raw.split(",")) if n][:GROUP_LOGS]
    user: Caller = request.user
    texts = (
        QueryLog.objects.visible_to(user)
        .filter(pk__in=ids)
        .values_list("text", flat=True)
    )
    counts: dict[str, int] = {}
    first: dict[str, str] = {}
    for text in texts:
        key = question_key(text)
        counts[key] = counts.get(key, 0) + 1
        first.setdefault(key, text.strip())
    return [first[key] for key in sorted(counts, key=lambda k: -counts[k])]


def _bar() -> float:
    """The pin bar of the serving space (``retrieval.grouping.group_similarity``)."""
    return group_similarity(floor_in_force(serving()[1]))


def _prose(markdown: str) -> str:
    """A section's text as plain text, without its heading lines (the list names
    the section beside it)."""
    lines = [line for line in markdown.splitlines() if not line.startswith("#")]
    return unmark("\n".join(lines))


def _number(raw: str | None) -> int | None:
    raw = (raw or "").strip()
    return int(raw) if raw.isdigit() and len(raw) < 19 else None
