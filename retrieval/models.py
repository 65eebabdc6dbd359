from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.contrib.auth.models import Group
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Exists, F, Func, OuterRef, Q, Value
from pgvector.django import BitField, VectorField

from kbsite.canonical import web_origins
from kbsite.models import HashedKey
from retrieval.chunking import section_of
from retrieval.codes import CODE_BITS
from sources.models import Caller, EqualsAny, Page, Source
from sources.visibility import sees_every_row

# Markdown link targets and titles carry no words of the text: "[VACUUM](sql-
# vacuum.html "VACUUM")" is indexed as "[VACUUM]". (PostgreSQL's regex dialect.)
LINK_TARGET = r"\]\((?:[^()\s]|\([^)]*\))*(?:\s+\"[^\"]*\")?\)"
# Every line that is not a heading ("###### max_connections (integer)").
NOT_HEADING_LINE = r"^(?!#).*$"


def _regexp_replace(expression, pattern: str, flags: str) -> Func:
    return Func(expression, Value(pattern), Value(""), Value(flags),
                function="regexp_replace", output_field=models.TextField())  # fmt: skip


# What full-text search reads, English stemming: the heading path weighs most (A),
# then the headings inside the text (B: definition terms such as a setting or a
# function's signature), then the text (D), all without link targets. Stored as a
# generated column, so that ranking many matches does not parse every text again.
_TEXT = _regexp_replace(F("text"), LINK_TARGET, "g")
CHUNK_SEARCH_VECTOR = (
    SearchVector("heading", config="english", weight="A")
    + SearchVector(_regexp_replace(_TEXT, NOT_HEADING_LINE, "gn"), config="english",
                   weight="B")
    + SearchVector(_TEXT, config="english", weight="D")
)  # fmt: skip


class ChunkQuerySet(models.QuerySet["Chunk"]):
    def live(self) -> ChunkQuerySet:
        return self.filter(page__status=Page.Status.LIVE)


class Chunk(models.Model):
    """A heading-delimited piece of a page, as shown to users and embedded."""

    # Indexed by ``chunk_page_codes_idx`` below, which also holds what a search
    # by codes reads of each chunk.
    page = models.ForeignKey(
        Page, on_delete=models.CASCADE, related_name="chunks", db_index=False
    )
    position = models.PositiveIntegerField(help_text="Order within the page, from 0.")
    heading = models.CharField(
        max_length=1000,
        blank=True,
        help_text="Heading path, e.g. Install › Requirements",
    )
    text = models.TextField(help_text="The Markdown shown to users.")
    anchor = models.CharField(
        max_length=200,
        blank=True,
        help_text="Id of the section's heading in the page, e.g. VACUUM-BASICS.",
    )
    embed_hash = models.CharField(
        max_length=64,
        help_text="SHA-256 of the text that is embedded (title, heading path, text).",
    )
    token_count = models.PositiveIntegerField(default=0)
    code = BitField(
        length=CODE_BITS,
        null=True,
        blank=True,
        editable=False,
        help_text="Its text's code in the space code_space (retrieval.codes).",
    )
    code_space = models.PositiveIntegerField(
        null=True,
        blank=True,
        editable=False,
        help_text="The embedding space (its id) whose vector the code is of.",
    )
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
            models.CheckConstraint(
                condition=Q(code__isnull=True, code_space__isnull=True)
                | Q(code__isnull=False, code_space__isnull=False),
                name="chunk_code_with_its_space",
            ),
        ]
        indexes = [
            # A search by codes reads its chunks from this index alone (an
            # index-only scan): 16 against 23 ms at a tenth of 100,000 chunks.
            models.Index(
                fields=["page"],
                include=["embed_hash", "code_space", "code"],
                name="chunk_page_codes_idx",
            ),
            models.Index(fields=["embed_hash"], name="chunk_embed_hash_idx"),
            GinIndex(fields=["search_document"], name="chunk_search_document_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.page.url} #{self.position}"

    @property
    def section_url(self) -> str:
        """The page's URL, at this chunk's section when its heading has an id."""
        return f"{self.page.url}#{self.anchor}" if self.anchor else self.page.url


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
    max_input_tokens = models.PositiveIntegerField(
        default=0, help_text="Tokens one vector stands for, if not the model's own."
    )
    state = models.CharField(max_length=20, choices=State.choices)
    created_at = models.DateTimeField(auto_now_add=True)
    switched_at = models.DateTimeField(null=True, blank=True)
    floor = models.FloatField(
        null=True,
        blank=True,
        editable=False,
        help_text="Cosine similarity that unrelated questions rarely reach in this "
        "index, learned from it (RELEVANCE_FLOOR overrides it), e.g. 0.42.",
    )
    floor_learned_at = models.DateTimeField(null=True, blank=True, editable=False)
    floor_chunks = models.PositiveIntegerField(
        default=0, editable=False, help_text="Live chunks when the floor was learned."
    )
    floor_sample = models.JSONField(
        default=dict,
        blank=True,
        editable=False,
        help_text="What the floor was learned from: probe similarities.",
    )
    source_chunks = models.JSONField(
        default=dict,
        blank=True,
        editable=False,
        help_text="Live chunks of each source by source id, counted with the floor: "
        "how a search of some sources picks its plan.",
    )
    source_floors = models.JSONField(
        default=dict,
        blank=True,
        editable=False,
        help_text="The floor within each source large enough to learn one, by "
        "source id: what a search of that source alone holds its evidence to.",
    )

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


class Embedding(models.Model):
    """The vector of one embedded text in one embedding space.

    Rows are shared by every chunk whose embedded text has this hash, so identical
    text is embedded once. The column has no fixed dimension: each space gets its
    own partial HNSW index (see ``retrieval.spaces.embedding_index_ensure``), which
    lets a new model fill its space while the old one keeps serving.
    """

    space = models.CharField(
        max_length=200,
        help_text="backend/model/dimensions, e.g. openai/text-embedding-3-small/1536",
    )
    text_hash = models.CharField(max_length=64)
    window = models.PositiveSmallIntegerField(
        default=0,
        help_text="Which window of a text longer than the model reads, from 0.",
    )
    vector = VectorField()
    code = BitField(
        length=CODE_BITS,
        null=True,
        blank=True,
        editable=False,
        help_text="On a text's first window: the code of the text (retrieval.codes).",
    )
    token_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["space", "text_hash", "window"],
                name="embedding_space_hash_window_uniq",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.space} {self.text_hash[:12]} [{self.window}]"


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


class QueryLogQuerySet(models.QuerySet["QueryLog"]):
    def unrated_before(self, when: datetime) -> QueryLogQuerySet:
        """Logs made before ``when`` that no reader rated: what the retention job
        may delete, unless the history of an answer keeps them
        (``retrieval.retention``)."""
        return self.filter(created_at__lt=when, feedback__isnull=True)

    def of_readers(self) -> QueryLogQuerySet:
        """What readers asked: their searches and questions, without the answers
        the system asked again for them (``retrieval.rechecks``), which no reader
        typed and which would count a question twice."""
        return self.exclude(kind=QueryLog.Kind.RECHECK)

    def visible_to(self, user: Caller) -> QueryLogQuerySet:
        """Logs that tell ``user`` nothing of a source whose text is hidden from
        them.

        A log keeps its asker and the chunks it retrieved, not the sources it
        searched: those are the asker's. So a log is shown when its asker can search
        no source ``user`` may not (a log without one counts as anonymous: the
        public sources only, which everyone may read) and none of its chunks still
        in the index is in one. Every log, for whoever sees every source."""
        if sees_every_row(user):
            return self
        hidden = Source.objects.unsearchable_by(user)
        asker_searches_hidden = Q(user__is_superuser=True) | Exists(
            Group.objects.filter(user=OuterRef("user_id"), sources__in=hidden)
        )
        retrieved_hidden = Exists(
            Chunk.objects.filter(
                EqualsAny(F("pk"), OuterRef("chunk_ids")), page__source__in=hidden
            )
        )
        return self.exclude(asker_searches_hidden).exclude(retrieved_hidden)


class QueryLog(models.Model):
    """One search or question, with what it retrieved: the material for evaluation."""

    class Kind(models.TextChoices):
        SEARCH = "search", "Search"
        QUERY = "query", "Question"
        # Logged for the asker of the question, whose sources it searched.
        RECHECK = "recheck", "Recheck: asked again for its asker"

    # The kinds that carry an answer, which a change can make stale.
    ANSWERS = (Kind.QUERY, Kind.RECHECK)

    class Feedback(models.IntegerChoices):
        HELPFUL = 1, "Helpful"
        UNHELPFUL = -1, "Not helpful"

    class Status(models.TextChoices):
        CURRENT = "current", "Current"
        STALE = "stale", "Stale: text it quoted changed"
        SUPERSEDED = "superseded", "Superseded by a newer answer"

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
    feedback = models.SmallIntegerField(
        choices=Feedback.choices,
        null=True,
        blank=True,
        help_text="What the asker said of the answer on the Ask page.",
    )
    feedback_at = models.DateTimeField(null=True, blank=True)
    # What an answer quoted: the text hashes of the chunks its cited passages were
    # made of, and their pages. A recrawl that takes one of them away makes the
    # answer stale (``retrieval.rechecks``).
    cited_hashes = ArrayField(
        models.CharField(max_length=64),
        default=list,
        db_default=Value([], output_field=ArrayField(models.CharField(max_length=64))),
        blank=True,
    )
    cited_pages = ArrayField(
        models.BigIntegerField(),
        default=list,
        db_default=Value([], output_field=ArrayField(models.BigIntegerField())),
        blank=True,
    )
    status = models.CharField(
        max_length=12,
        choices=Status.choices,
        default=Status.CURRENT,
        db_default=Status.CURRENT,
    )
    stale_at = models.DateTimeField(null=True, blank=True)
    stale_change = models.ForeignKey(
        "sources.PageVersion",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="answers_affected",
        help_text="The change that took away text the answer quoted.",
    )
    rechecked_at = models.DateTimeField(
        null=True, blank=True, help_text="When the question was last asked again."
    )
    recheck_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="rechecks",
        help_text="The answer this one was asked again for.",
    )
    superseded_by = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The answer given when the question was asked again.",
    )
    # How sure the search was (``retrieval.evidence.Evidence``, and the fused
    # scores' first two pages): what tells a doubtful answer (``retrieval.asked``).
    # Empty in logs written before they were kept.
    similarity = models.FloatField(
        null=True,
        blank=True,
        editable=False,
        help_text="Best cosine similarity of a passage the asker could search, "
        "e.g. 0.52.",
    )
    floor = models.FloatField(
        null=True,
        blank=True,
        editable=False,
        help_text="The similarity floor in force, e.g. 0.48; empty when none was "
        "learned (a log from before it was kept is empty too).",
    )
    held = models.FloatField(
        null=True,
        blank=True,
        editable=False,
        help_text="Largest share of the question's weight (its words, the rarer "
        "the heavier) one passage held, e.g. 0.75.",
    )
    lead = models.FloatField(
        null=True,
        blank=True,
        editable=False,
        help_text="How far the first page's fused score was ahead of the next "
        "page's, as a share of it, e.g. 0.05; 1 when no other page came, negative "
        "when a word of the question's own put it first; empty when nothing did.",
    )

    objects = QueryLogQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["-created_at"], name="querylog_created_idx"),
            GinIndex(fields=["cited_hashes"], name="querylog_cited_idx"),
            models.Index(
                fields=["status"],
                name="querylog_stale_idx",
                condition=Q(status="stale"),
            ),
        ]

    def __str__(self) -> str:
        return self.text[:80]

    def record_feedback(self, *, helpful: bool, at: datetime) -> None:
        """The asker's verdict; a later one replaces an earlier one."""
        self.feedback = self.Feedback.HELPFUL if helpful else self.Feedback.UNHELPFUL
        self.feedback_at = at


class QuestionVector(models.Model):
    """A logged question's vector in one embedding space, for grouping what readers
    asked (``retrieval.asked``). Written by a periodic job and by the questions
    page for what the job has not reached yet, never while a question is answered;
    one per log, replaced when another space serves."""

    log = models.OneToOneField(
        QueryLog, on_delete=models.CASCADE, primary_key=True, related_name="vector"
    )
    space = models.CharField(
        max_length=200, help_text="The space the vector is in, e.g. local/…/384."
    )
    vector = VectorField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.space} vector of log {self.log_id}"


class Pin(models.Model):
    """A section an editor chose to answer a group of readers' questions with
    (``retrieval.pins``): those questions, and new ones as near them as a question
    that group would take, get it first. It holds the section as it was when
    pinned; once the section changes or goes the pin stops answering and waits
    for review."""

    class State(models.TextChoices):
        ACTIVE = "active", "Answering"
        REVIEW = "review", "Waiting for review"

    class Reason(models.TextChoices):
        CHANGED = "changed", "The section changed"
        GONE = "gone", "The section is gone"

    page = models.ForeignKey(
        Page, null=True, on_delete=models.SET_NULL, related_name="pins"
    )
    # What it pinned, kept for review after the page goes.
    url = models.URLField(max_length=2000)
    title = models.CharField(max_length=500, blank=True)
    heading = models.CharField(
        max_length=1000, blank=True, help_text="The section's heading path."
    )
    anchor = models.CharField(max_length=200, blank=True)
    # The chunk the editor picked, and every chunk of its section, by text hash:
    # a change to any of them is a change to what the pin answers with.
    chunk_hash = models.CharField(max_length=64)
    section_hashes = ArrayField(models.CharField(max_length=64), default=list)
    excerpt = models.TextField(blank=True, help_text="The section's text when pinned.")
    state = models.CharField(max_length=10, choices=State.choices, default=State.ACTIVE)
    reason = models.CharField(max_length=10, choices=Reason.choices, blank=True)
    review_since = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(
                fields=["page"], name="pin_active_page_idx", condition=Q(state="active")
            ),
        ]

    def __str__(self) -> str:
        where = self.title or self.url
        inner = section_of(self.heading, self.title)
        return f"{where} › {inner}" if inner else where


class PinQuestion(models.Model):
    """One of the questions a pin answers, with its vector in one space (filled
    again in the serving space after a change of model)."""

    pin = models.ForeignKey(Pin, on_delete=models.CASCADE, related_name="questions")
    text = models.TextField()
    space = models.CharField(max_length=200, blank=True)
    vector = VectorField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["space"], name="pinquestion_space_idx")]

    def __str__(self) -> str:
        return self.text[:80]


class Synonym(models.Model):
    """Words readers use for what a source's documentation calls otherwise ("undo"
    for "reset, revert"): a question holding the reader's words, as whole words,
    is searched in that source's pages as if it also said the documentation's
    (``retrieval.synonyms``). The reader's words are stored casefolded with their
    spaces collapsed, once per source."""

    source = models.ForeignKey(
        Source, on_delete=models.CASCADE, related_name="synonyms"
    )
    words = models.CharField(
        "reader's words",
        max_length=100,
        help_text="A word or short phrase readers use, e.g. undo, or roll back. "
        "A plural (undos, roll backs) is read as it too.",
    )
    means = ArrayField(
        models.CharField(max_length=100),
        verbose_name="documentation's words",
        size=10,
        help_text="What the documentation calls it, separated by commas, e.g. "
        "reset, revert.",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["source", "words"]
        constraints = [
            models.UniqueConstraint(
                # Words first: a search looks its question's words up in it,
                # for one source, some, or all of them.
                fields=["words", "source"],
                name="synonym_words_source_uniq",
                violation_error_message="This source already has these reader's "
                "words: add the documentation's words to that entry.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.words} → {', '.join(self.means)}"

    def save(self, *args, **kwargs) -> None:
        self.normalise()
        super().save(*args, **kwargs)

    def clean(self) -> None:
        self.normalise()  # before the uniqueness of the words is checked

    def normalise(self) -> None:
        """Casefolded, spaces collapsed; the documentation's words each once."""
        self.words = words_normalised(self.words)
        means = (words_normalised(m) for m in self.means or [])
        self.means = list(dict.fromkeys(m for m in means if m))


def words_normalised(text: str) -> str:
    """How a synonym keeps words: casefolded, spaces collapsed ("Roll  Back" →
    "roll back")."""
    return " ".join(text.casefold().split())


class Lexeme(models.Model):
    """How many live chunks contain a word (its English stem), for ranking keyword
    matches by rarity and for telling rare evidence from common words. Refreshed
    with the index statistics (``retrieval.statistics``), never by a search."""

    word = models.CharField(max_length=300, unique=True)
    chunks = models.PositiveIntegerField()

    def __str__(self) -> str:
        return f"{self.word} ({self.chunks} chunks)"


class IndexStatistics(models.Model):
    """One row: the size of the index when its word counts were last refreshed."""

    chunks = models.PositiveIntegerField(default=0)
    refreshed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "index statistics"

    def __str__(self) -> str:
        return f"{self.chunks} chunks at {self.refreshed_at}"


class WidgetKeyQuerySet(models.QuerySet["WidgetKey"]):
    def active(self) -> WidgetKeyQuerySet:
        return self.filter(revoked_at=None)

    def visible_to(self, user: Caller) -> WidgetKeyQuerySet:
        """The keys an editor sees and manages: those naming no source hidden
        from them (``Source.objects.visible_to``), so that nobody widens, narrows
        or revokes what another group's source shows."""
        hidden = Source.objects.hidden_from(user)
        return self.exclude(pk__in=self.filter(sources__in=hidden).values("pk"))


class WidgetKey(HashedKey):
    """A publishable key of the Ask widget, pasted into a site's pages with its
    script tag: the widget on those sites (``origins``) answers from these
    sources, private ones too. Anyone reading the page reads the key, so it
    counts only on the origins it names, and only for those of its sources that
    allow the origin themselves (``Source.widget_origins``). Only its SHA-256 is
    stored (refused with 403 once revoked)."""

    PREFIX = "kba_"

    name = models.CharField(
        max_length=100, help_text="Where it is pasted, e.g. Intranet, staff docs."
    )
    sources = models.ManyToManyField(
        Source,
        related_name="widget_keys",
        help_text="What the widget answers from with this key, private sources "
        "too: e.g. the staff handbook, for the intranet's pages.",
    )
    origins = ArrayField(
        models.CharField(max_length=300),
        help_text="Sites whose pages use it, one origin per line, e.g. "
        "https://intranet.example.com. Each source must allow the site too "
        "(its Ask widget origins).",
    )

    objects = WidgetKeyQuerySet.as_manager()

    class Meta(HashedKey.Meta):
        verbose_name = "widget key"

    def __str__(self) -> str:
        return f"{self.name} ({self.key_start}…)"

    def clean(self) -> None:
        try:
            self.origins = web_origins(self.origins or [])
        except ValueError as exc:
            raise ValidationError({"origins": str(exc)}) from None

    def allows(self, origin: str) -> bool:
        return self.revoked_at is None and origin in self.origins
