"""The sources app's part of the page admin: pages filtered by the editor's
questions about them, their chunks, and the diff between two of their versions.
The admin registered for ``Page`` adds ingest's part to it (``kbsite.admin``)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path
from django.utils import timezone
from django.utils.html import format_html_join

from kbsite.admin_utils import (
    CappedPaginator,
    ListDeferMixin,
    ago,
    hash_column,
    number,
    short_hash,
    title_and_path,
)
from kbsite.canonical import canonical_url_or_none
from kbsite.textdiff import markdown_diff
from sources.admin.sources import durations_in_words
from sources.admin.versions import PageVersionInline
from sources.admin.visibility import VisibleRowsAdmin
from sources.models import Page, PageVersion
from sources.scope import ScopeMap

NOT_ITS_SOURCE = (
    "This URL does not belong to the chosen source: it is outside the source's "
    "seed directories or allow patterns, or a deny pattern keeps it out."
)


class PageForm(forms.ModelForm):
    """A page is stored under its canonical URL, in the source that URL belongs to
    (``sources.scope``), as a delivered or crawled page is."""

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or self.cleaned_data
        url, source = cleaned.get("url"), cleaned.get("source")
        if not url:
            return cleaned
        canonical = canonical_url_or_none(url)
        if canonical is None:
            self.add_error("url", "This URL cannot be parsed or has no host.")
            return cleaned
        cleaned["url"] = canonical
        if source is not None and ScopeMap().source_id_for(canonical) != source.pk:
            self.add_error("url", NOT_ITS_SOURCE)
        return cleaned


class PageConditionFilter(admin.SimpleListFilter):
    """The editor's questions about pages: which fail, which are out of date,
    which are gone, which were never crawled."""

    title = "condition"
    parameter_name = "condition"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("failing", "Failing (last crawl failed)"),
            ("stale", "Stale (not verified within its interval)"),
            ("tombstoned", "Tombstoned (404/410)"),
            ("pending", "Waiting for its first crawl"),
            ("near_duplicate", "Near-duplicate of another page"),
            ("kept_out", "Kept out of answers (generated: indexes, listings)"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        match self.value():
            case "failing":
                return queryset.failing()  # type: ignore[attr-defined]
            case "stale":
                return queryset.stale(now=timezone.now())  # type: ignore[attr-defined]
            case "tombstoned":
                return queryset.filter(status=Page.Status.GONE)
            case "pending":
                return queryset.filter(status=Page.Status.PENDING)
            case "near_duplicate":
                return queryset.filter(near_duplicate_of__isnull=False)
            case "kept_out":
                live = queryset.filter(status=Page.Status.LIVE)
                return live.exclude(not_indexed_reason="")
        return None


class EditingPageAdmin(VisibleRowsAdmin, ListDeferMixin, admin.ModelAdmin):
    menu_order = 2
    form = PageForm
    source_path = "source"
    list_display = ["page", "source", "status", "verified", "changed", "failures",
                    "next_check"]  # fmt: skip
    list_display_links = ["page"]
    list_filter = [PageConditionFilter, "status", "source"]
    list_defer = ["markdown", "raw_body", "line_shapes", "last_error"]
    search_fields = ["url", "title", "final_url"]
    list_select_related = ["source"]
    show_full_result_count = False
    paginator = CappedPaginator
    formfield_overrides = durations_in_words(
        "Overrides the source's interval for this page, e.g. 1 day or 12 hours."
    )
    readonly_fields = [
        "title",
        "status",
        "not_indexed_reason",
        "content_hash",
        "pushed_url",
        "final_url",
        "redirect_to",
        "duplicate_of",
        "near_duplicate_of",
        "near_duplicate_score",
        "original_status",
        "last_verified_at",
        "last_changed_at",
        "site_modified_at",
        "etag",
        "last_modified",
        "deleted_at",
        "last_failure_at",
        "failure_count",
        "last_error",
        "embedding_tokens",
        "extractor_version",
        "next_crawl_at",
        "created_at",
        "chunk_list",
        "markdown",
    ]
    inlines = [PageVersionInline]

    hash = hash_column("content_hash", "content hash")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Page]:
        # The delivered body is for re-derivation; no admin view shows it.
        return super().get_queryset(request).defer("raw_body")

    @admin.display(description="page", ordering="title")
    def page(self, obj: Page) -> str:
        return title_and_path(obj.title, obj.url)

    @admin.display(description="verified", ordering="last_verified_at")
    def verified(self, obj: Page) -> str:
        return ago(obj.last_verified_at)

    @admin.display(description="changed", ordering="last_changed_at")
    def changed(self, obj: Page) -> str:
        return ago(obj.last_changed_at)

    @admin.display(description="failures", ordering="failure_count")
    def failures(self, obj: Page) -> int:
        return obj.failure_count

    @admin.display(description="next check", ordering="next_crawl_at")
    def next_check(self, obj: Page) -> str:
        return ago(obj.next_crawl_at, empty="—")

    @admin.display(description="chunks")
    def chunk_list(self, obj: Page) -> str:
        """The chunks search holds for this page, in order (heading and size)."""
        rows = obj.chunks.order_by("position").values_list(
            "position", "heading", "token_count", "embed_hash"
        )
        return (
            format_html_join(
                "\n",
                "<div>#{} {} <small>({} tokens, {})</small></div>",
                ((p, h or "—", number(n), short_hash(e)) for p, h, n, e in rows),
            )
            or "—"
        )

    # -- the diff between two versions ------------------------------------------

    def get_urls(self) -> list[Any]:
        diff = self.admin_site.admin_view(self.diff_view)
        return [
            path("<path:object_id>/diff/", diff, name="sources_page_diff"),
            *super().get_urls(),
        ]

    def diff_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Two versions of the page side by side as a diff (``a`` older, ``b`` newer;
        by default the latest version and the one before it)."""
        page = self.get_object(request, object_id)
        if page is None:
            raise Http404("No page with this id.")
        if not self.has_view_or_change_permission(request, page):
            raise PermissionDenied
        versions = list(page.versions.defer("markdown").order_by("-recorded_at", "-pk"))
        older, newer = _chosen(versions, request.GET.get("a"), request.GET.get("b"))
        context = {
            **self.admin_site.each_context(request),
            "title": f"Changes to {page.title or page.url}",
            "opts": self.opts,
            "original": page,
            "page": page,
            "versions": versions,
            "older": older,
            "newer": newer,
            "diff": None,
            "change": None,
        }
        if newer is not None:
            texts = (_markdown(older), _markdown(newer))
            context["diff"] = markdown_diff(*texts)
            context["change"] = self.version_change(page=page, newer=newer, texts=texts)
        return TemplateResponse(request, "admin/sources/page/diff.html", context)

    def version_change(
        self, *, page: Page, newer: PageVersion, texts: tuple[str, str]
    ) -> dict[str, Any] | None:
        """What the change to ``newer`` cost in the index (``texts``: the Markdown
        before and after); ingest's part of the admin knows, sources does not."""
        return None


def _chosen(
    versions: list[PageVersion], a: str | None, b: str | None
) -> tuple[PageVersion | None, PageVersion | None]:
    """The versions to compare, older first: ``b`` (else the latest) and ``a``
    (else the version before ``b``, or none for a first version)."""
    by_pk = {str(version.pk): version for version in versions}
    newer = by_pk.get(b or "") or (versions[0] if versions else None)
    older = by_pk.get(a or "")
    if older is None and newer is not None:
        below = versions[versions.index(newer) + 1 :]
        older = below[0] if below else None
    if newer and older and older.recorded_at > newer.recorded_at:
        older, newer = newer, older
    return older, newer


def _markdown(version: PageVersion | None) -> str:
    if version is None:
        return ""
    return PageVersion.objects.values_list("markdown", flat=True).get(pk=version.pk)
