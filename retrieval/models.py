from __future__ import annotations

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser, Group
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import (
    SearchQuery,
    SearchRank,
    SearchVector,
    SearchVectorField,
)
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Cast
from pgvector.django import CosineDistance, VectorField

from sources.models import Page, Source

# What full-text search reads: heading path and text, English stemming. Stored as a
# generated column, so that ranking many matches does not parse every text again.
CHUNK_SEARCH_VECTOR = SearchVector("heading", "text", config="english")


# Who is asking: a user or an anonymous visitor from a request, or None for the
# system itself (management commands), which sees everything.
Caller = AbstractBaseUser | AnonymousUser | None


class ChunkQuerySet(models.QuerySet["Chunk"]):
    def live(self) -> ChunkQuerySet:
        return self.filter(page__status=Page.Status.LIVE)

    def visible_to(self, user: Caller) -> ChunkQuerySet:
        """Chunks of sources open to everyone or to one of the user's groups."""
        if user is None or getattr(user, "is_superuser", False):
            return self
        groups = Group.objects.filter(user__pk=user.pk) if user.is_authenticated else []
        sources = Source.objects.filter(
            Q(allowed_groups=None) | Q(allowed_groups__in=groups)
        )
        return self.filter(page__source__in=sources.values("pk"))

    def matching(self, query: str) -> ChunkQuerySet:
        """Full-text matches (websearch syntax), best first, through the GIN index."""
        search = SearchQuery(query, search_type="websearch", config="english")
        return (
            self.filter(search_document=search)
            .annotate(keyword_rank=SearchRank(F("search_document"), search))
            .order_by("-keyword_rank", "pk")
        )


class Chunk(models.Model):
    """A heading-delimited piece of a page, as shown to users and embedded."""

    page = models.ForeignKey(Page, on_delete=models.CASCADE, related_name="chunks")
    position = models.PositiveIntegerField(help_text="Order within the page, from 0.")
    heading = models.CharField(
        max_length=1000,
        blank=True,
        help_text="Heading path, e.g. Install › Requirements",
    )
    text = models.TextField(help_text="The Markdown shown to users.")
    embed_hash = models.CharField(
        max_length=64,
        help_text="SHA-256 of the text that is embedded (title, heading path, text).",
    )
    token_count = models.PositiveIntegerField(default=0)
    search_document = models.GeneratedField(
        expression=CHUNK_SEARCH_VECTOR,
        output_field=SearchVectorField(),
        db_persist=True,
        editable=False,
    )

    objects = ChunkQuerySet.as_manager()

    class Meta:
        ordering = ["page", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["page", "position"], name="chunk_page_position_uniq"
            ),
        ]
        indexes = [
            models.Index(fields=["embed_hash"], name="chunk_embed_hash_idx"),
            GinIndex(fields=["search_document"], name="chunk_search_document_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.page.url} #{self.position}"


class EmbeddingSpace(models.Model):
    """A backend, model and size whose vectors the index holds.

    Exactly one space serves queries. When the settings name another, ingest fills
    both, and ``manage.py reembed`` completes the new one and switches to it.
    """

    class State(models.TextChoices):
        BUILDING = "building", "Being filled"
        SERVING = "serving", "Serving queries"
        RETIRED = "retired", "Retired"

    name = models.CharField(max_length=200, unique=True)
    backend = models.CharField(max_length=20)
    model = models.CharField(max_length=200)
    dimensions = models.PositiveIntegerField()
    state = models.CharField(max_length=20, choices=State.choices)
    created_at = models.DateTimeField(auto_now_add=True)
    switched_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["state"],
                condition=Q(state="serving"),
                name="embeddingspace_one_serving",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.state})"


class EmbeddingQuerySet(models.QuerySet):
    def nearest(self, *, space: str, dimensions: int, vector: list[float]):
        """Vectors of one space by cosine distance, through that space's HNSW index
        (same cast, same filter as the index: see embedding_index_ensure)."""
        cast = Cast("vector", VectorField(dimensions=dimensions))
        return (
            self.filter(space=space)
            .annotate(distance=CosineDistance(cast, vector))
            .order_by("distance")
        )


class Embedding(models.Model):
    """The vector of one embedded text in one embedding space.

    Rows are shared by every chunk whose embedded text has this hash, so identical
    text is embedded once. The column has no fixed dimension: each space gets its
    own partial HNSW index (see ``retrieval.services.embedding_index_ensure``), which
    lets a new model fill its space while the old one keeps serving.
    """

    space = models.CharField(
        max_length=200,
        help_text="backend/model/dimensions, e.g. openai/text-embedding-3-small/1536",
    )
    text_hash = models.CharField(max_length=64)
    vector = VectorField()
    token_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = EmbeddingQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["space", "text_hash"], name="embedding_space_hash_uniq"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.space} {self.text_hash[:12]}"


class EmbeddingUsage(models.Model):
    """What one day cost in one embedding space: requests, texts and tokens sent."""

    day = models.DateField()
    space = models.CharField(max_length=200)
    requests = models.PositiveIntegerField(default=0)
    inputs = models.PositiveIntegerField(default=0)
    tokens = models.PositiveBigIntegerField(default=0)

    class Meta:
        verbose_name_plural = "embedding usage"
        ordering = ["-day", "space"]
        constraints = [
            models.UniqueConstraint(
                fields=["day", "space"], name="usage_day_space_uniq"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.space}: {self.tokens} tokens"


class QueryLog(models.Model):
    """One search or question, with what it retrieved: the material for evaluation."""

    class Kind(models.TextChoices):
        SEARCH = "search", "Search"
        QUERY = "query", "Question"

    kind = models.CharField(max_length=10, choices=Kind.choices)
    text = models.TextField()
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    chunk_ids = ArrayField(models.BigIntegerField(), default=list)
    scores = ArrayField(models.FloatField(), default=list)
    abstained = models.BooleanField(default=False)
    answer = models.TextField(
        blank=True, help_text="The answer given to a question; empty for a search."
    )
    latency_ms = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["-created_at"], name="querylog_created_idx")]

    def __str__(self) -> str:
        return self.text[:80]
