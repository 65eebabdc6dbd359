from __future__ import annotations

from django.urls import reverse
from rest_framework import serializers

from retrieval.questions import QueryResult, feedback_ticket
from retrieval.rendering import markdown_html
from retrieval.searchable import SearchFilters


class StrictCharField(serializers.CharField):
    """A string, and only a string (DRF's CharField also takes numbers)."""

    default_error_messages = {"invalid": "Must be a string."}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """JSON's true or false, and only those (DRF's BooleanField also takes "yes",
    1 and "off"): a rating is a verdict, not a guess at what a string meant."""

    default_error_messages = {"invalid": "Must be true or false."}

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class FiltersSerializer(serializers.Serializer):
    sources = serializers.ListField(
        child=serializers.IntegerField(min_value=1),
        required=False,
        max_length=100,
        help_text="Only these source ids.",
    )
    max_age_days = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=36500,
        help_text="Only pages verified within this many days.",
    )

    def filters(self) -> SearchFilters:
        data = self.validated_data
        return SearchFilters(
            source_ids=tuple(data.get("sources", ())),
            max_age_days=data.get("max_age_days"),
        )


class SearchRequestSerializer(FiltersSerializer):
    q = StrictCharField(max_length=1000, help_text="Words, phrases or identifiers.")
    k = serializers.IntegerField(default=8, min_value=1, max_value=50)


class QueryRequestSerializer(FiltersSerializer):
    question = StrictCharField(max_length=2000)
    k = serializers.IntegerField(default=5, min_value=1, max_value=20)


class CitationSerializer(serializers.Serializer):
    url = serializers.URLField(source="page.url")
    section_url = serializers.URLField(
        help_text="The page's URL at the cited section (url#anchor) when the "
        "section's heading has an id in the page, else the page's URL."
    )
    title = serializers.CharField(source="page.title")
    heading = serializers.CharField(source="chunk.heading")
    excerpt = serializers.CharField(
        help_text="Plain text of the part of the chunk quoted by the answer or "
        "matching the question."
    )
    score = serializers.FloatField()
    confident = serializers.BooleanField(
        help_text="This result by itself is evidence for the question: its meaning "
        "is as near as the index's floor, or it holds most of the question's "
        "weight in words. A search lists its best results either way; an answer "
        "abstains when none is."
    )
    pinned_at = serializers.DateTimeField(
        allow_null=True,
        help_text="When an editor pinned this section to answer questions like "
        "this one (it then comes first); null for a ranked result.",
    )
    last_verified_at = serializers.DateTimeField(source="page.last_verified_at")
    last_changed_at = serializers.DateTimeField(source="page.last_changed_at")


class SearchResponseSerializer(serializers.Serializer):
    results = CitationSerializer(many=True)


class QueryResponseSerializer(serializers.Serializer):
    answer = serializers.CharField(help_text="Markdown, with [n] citation markers.")
    abstained = serializers.BooleanField()
    citations = CitationSerializer(many=True)
    chunk_ids = serializers.ListField(child=serializers.IntegerField())
    answer_id = serializers.SerializerMethodField(
        help_text="The logged answer, which its asker can read again "
        "(GET /api/answers/<id>/): whether it still holds, and what changed. "
        "Null for an anonymous reader, whose answers name nobody."
    )
    answer_url = serializers.SerializerMethodField(
        help_text="The kept answer's page (/answers/<id>/), for people; null "
        "with answer_id."
    )

    def _kept(self, result) -> int | None:
        request = self.context.get("request")
        signed_in = request is not None and request.user.is_authenticated
        return result.log_id if signed_in else None

    def get_answer_id(self, result) -> int | None:
        return self._kept(result)

    def get_answer_url(self, result) -> str | None:
        kept = self._kept(result)
        if kept is None:
            return None
        return self.context["request"].build_absolute_uri(
            reverse("answer", args=[kept])
        )


class WidgetQueryRequestSerializer(QueryRequestSerializer):
    key = StrictCharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=200,
        help_text="A widget key (kba_…), for sources that are not public.",
    )


class WidgetCitationSerializer(CitationSerializer):
    section = serializers.CharField(
        help_text="The heading path without a first heading that repeats the "
        "title, as plain text: what the Ask page shows after the title."
    )


class WidgetQueryResponseSerializer(serializers.Serializer):
    answer = serializers.CharField(help_text="Markdown, with [n] citation markers.")
    answer_html = serializers.SerializerMethodField(
        help_text="The answer as the Ask page shows it: HTML from the same "
        "renderer (raw HTML in the text escaped, only http and https links), "
        "each [n] a link to the cited section."
    )
    abstained = serializers.BooleanField()
    citations = WidgetCitationSerializer(many=True)
    ticket = serializers.SerializerMethodField(
        help_text="The reader's proof that this answer was theirs, for rating it "
        "(POST /api/widget/feedback/) within a day; null when nothing was logged."
    )

    def get_answer_html(self, result: QueryResult) -> str:
        urls = [citation.section_url for citation in result.citations]
        return markdown_html(result.answer, citation_urls=urls)

    def get_ticket(self, result: QueryResult) -> str | None:
        return feedback_ticket(result.log_id) if result.log_id else None


class FeedbackRequestSerializer(serializers.Serializer):
    helpful = StrictBooleanField(help_text="Whether the answer was useful.")


class WidgetFeedbackRequestSerializer(FeedbackRequestSerializer):
    ticket = StrictCharField(
        max_length=200, help_text="The ticket the widget's answer came with."
    )
    key = StrictCharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=200,
        help_text="The widget key the question was asked with, if any.",
    )
