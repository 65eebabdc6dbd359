"""Words readers use in the admin: the synonyms of the sources an editor sees, and
the suggestions drawn from what readers asked (``retrieval.suggestions``), each
added with one button. Imported by ``retrieval.admin``, which Django reads."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from kbsite.admin_utils import ago, short_path
from retrieval import asked
from retrieval.models import Synonym
from retrieval.suggestions import CANDIDATES, SUGGESTED_CHUNKS, synonym_suggestions
from retrieval.synonyms import means_check, synonym_add, words_check
from sources.admin.visibility import VisibleRowsAdmin
from sources.models import Source


class SynonymForm(forms.ModelForm):
    class Meta:
        model = Synonym
        fields = ["source", "words", "means"]

    def clean_words(self) -> str:
        return words_check(self.cleaned_data["words"])

    def clean_means(self) -> list[str]:
        return means_check(self.cleaned_data["means"])


@admin.register(Synonym)
class SynonymAdmin(VisibleRowsAdmin):
    """An editor sees, adds and changes the synonyms of the sources they see; the
    source field offers only those."""

    menu_order = 7
    source_path = "source"
    form = SynonymForm
    list_display = ["words", "meaning", "source", "added_by", "added"]
    list_filter = ["source"]
    search_fields = ["words"]
    list_select_related = ["source", "created_by"]
    fields = ["source", "words", "means", "added_by", "added"]
    readonly_fields = ["added_by", "added"]

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path("suggestions/", view(self.suggestions_view),
                 name="retrieval_synonym_suggestions"),
            *super().get_urls(),
        ]  # fmt: skip

    def save_model(
        self, request: HttpRequest, obj: Synonym, form: Any, change: bool
    ) -> None:
        if not change:
            obj.created_by_id = request.user.pk
        super().save_model(request, obj, form, change)

    @admin.display(description="documentation's words")
    def meaning(self, obj: Synonym) -> str:
        return ", ".join(obj.means)

    @admin.display(description="added by")
    def added_by(self, obj: Synonym) -> str:
        return obj.created_by.get_username() if obj.created_by else "—"

    @admin.display(description="added", ordering="created_at")
    def added(self, obj: Synonym) -> str:
        return ago(obj.created_at) if obj.created_at else "—"

    def suggestions_view(self, request: HttpRequest) -> HttpResponse:
        """Words of readers' unanswered and doubtful questions the index does not
        hold, with candidate documentation words and an *Add* button each."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        raw = request.GET.get("days") or request.POST.get("days") or ""
        days = (
            int(raw) if raw in {str(d) for d in asked.PERIODS} else asked.DEFAULT_DAYS
        )
        if request.method == "POST":
            self._suggestion_add(request)
            url = reverse("admin:retrieval_synonym_suggestions")
            return HttpResponseRedirect(f"{url}?days={days}")
        found = synonym_suggestions(user=request.user, since=asked.period_start(days))
        context = {
            **self.admin_site.each_context(request),
            "title": "Words readers use",
            "opts": self.model._meta,
            "days": days,
            "periods": asked.PERIODS,
            "rows": [
                (
                    s,
                    reverse("admin:sources_page_change", args=[s.page_id]),
                    short_path(s.url),
                )
                for s in found
            ],
            "can_add": self.has_add_permission(request),
            "rare": SUGGESTED_CHUNKS,
            "candidates": CANDIDATES,
        }
        return TemplateResponse(
            request, "admin/retrieval/synonym/suggestions.html", context
        )

    def _suggestion_add(self, request: HttpRequest) -> None:
        """*Add*: the synonym, for a source the editor sees (404 for another)."""
        if not self.has_add_permission(request):
            raise PermissionDenied
        raw = request.POST.get("source", "")
        source = (
            Source.objects.visible_to(request.user).filter(pk=int(raw)).first()
            if raw.isdigit() and len(raw) < 19
            else None
        )
        if source is None:
            raise Http404("No source of yours with this id.")
        words = request.POST.get("words", "")
        means = request.POST.get("means", "").split(",")
        try:
            synonym, made = synonym_add(
                source=source, words=words, means=means, user=request.user
            )
        except ValidationError as error:
            self.message_user(request, " ".join(error.messages), messages.ERROR)
            return
        self.message_user(
            request,
            f"{'Added' if made else 'Widened'} for {source.name}: “{synonym}”. "
            "Questions holding these words are now searched with the "
            "documentation's words too.",
        )
