from __future__ import annotations

import secrets
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser, Group
from django.contrib.postgres.aggregates import ArrayAgg
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import ExpressionWrapper, F, Func, Q, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce
from django.utils import timezone

from kbsite.canonical import web_origins
from kbsite.patterns import (
    EVERYTHING,
    NOTHING,
    Pattern,
    pattern_problem,
    stored_pattern,
)
from kbsite.text import sha256_hex
from kbsite.textdiff import Change
from sources import access, schedule
from sources.change_rate import CHECKS_KEPT

# The fields whose lines are regular expressions, run by RE2 (``kbsite.patterns``).
PATTERN_FIELDS = ("allow_patterns", "deny_patterns", "boilerplate_patterns")
# First wait after a failed crawl; it doubles with each further failure.
FAILURE_RETRY = timedelta(minutes=15)
HOUR = timedelta(hours=1)
# A Last-Modified this close to the check says the page is generated on request
# (its time is the request's), not when its content changed.
GENERATED_WITHIN = timedelta(minutes=1)


class System:
    """The system itself as a caller (management commands, periodic jobs, the
    bodies of notifications): it sees every source. Always named (``SYSTEM``),
    never implied: no caller at all (None) is an error, so that a code path that
    lost its user fails instead of reading every group's sources."""

    # Read as a visitor that is not signed in by code that records who acted
    # (a log's asker, a token's creator): the system is nobody.
    is_authenticated = False
    pk = None

    def __repr__(self) -> str:
        return "SYSTEM"


SYSTEM = System()

# Who is asking: a user or an anonymous visitor from a request, the Ask widget's
# reader, or the system itself.
Caller = AbstractBaseUser | AnonymousUser | System


class WidgetReader(AnonymousUser):
    """An anonymous reader of the Ask widget on a page of another site: they read
    these sources and no other, whatever is public. ``retrieval.widget`` decides
    which (the sources that allow the page's origin: public ones, or those of a
    widget key); none when it is given none."""

    def __init__(self, source_ids: Iterable[int] = ()) -> None:
        self.source_ids = tuple(sorted(set(source_ids)))


def caller_check(user: object) -> Caller:
    """``user`` if it is a caller; a TypeError for anything else, None first of
    all (it used to mean the system, and so every source)."""
    if isinstance(user, AbstractBaseUser | AnonymousUser | System):
        return user
    raise TypeError(
        f"a caller is required (a user, an anonymous visitor or SYSTEM), not {user!r}"
    )


def sees_every_source(user: Caller) -> bool:
    """The system and superusers see every source."""
    caller = caller_check(user)
    return isinstance(caller, System) or getattr(caller, "is_superuser", False)


def source_ids_searchable_by(user: Caller) -> list[int] | None:
    """The ids of the sources ``user`` may search (``SourceQuerySet.searchable_by``);
    None for every source (the system, superusers). One small query, so that a
    search can name its sources as a list the planner estimates from its
    statistics (see ``retrieval.searchable``)."""
    if sees_every_source(user):
        return None
    if isinstance(user, WidgetReader):
        return list(user.source_ids)
    return access.visible_source_ids(member_id=_member_id(user), public=True)


def _member_id(user: Caller) -> int | None:
    """A signed-in user's id, as a member of groups; None for an anonymous
    visitor (and for the system, which never gets here: it sees every source). No
    caller at all is a TypeError."""
    return user.pk if caller_check(user).is_authenticated else None


def anonymous_readers_welcome() -> bool:
    """Whether an anonymous reader may search anything (some source is public):
    else the Ask page and the API ask them to sign in, as they always did."""
    return Source.objects.searchable_by(AnonymousUser()).exists()


class SourceQuerySet(models.QuerySet["Source"]):
    """Who sees which source, in two readings of one rule (``sources.access``):

    - ``searchable_by``: whose text a caller may read (search, answers and their
      citations, the Ask page's menu, and whatever else shows indexed text). An
      anonymous reader: the public sources; a signed-in user: those, the sources
      with no allowed groups and those of their groups; the Ask widget's reader
      (``WidgetReader``): the sources it was given, and no other.
    - ``visible_to``: the sources whose rows an editor sees in the admin and acts
      on: those with no allowed groups and those of their groups. Making a source
      public lets everyone read it, not manage it; an anonymous caller has none.

    The system (``SYSTEM``) and superusers see every source either way; no
    caller (None) is a TypeError.
    """

    def searchable_by(self, user: Caller) -> SourceQuerySet:
        """The sources whose text ``user`` may read: the same SELECT as a
        search's (``sources.access``)."""
        return self._of(user, public=True)

    def visible_to(self, user: Caller) -> SourceQuerySet:
        """The sources an editor sees and acts on in the admin: open to every
        signed-in user or to one of the user's groups."""
        return self._of(user, public=False)

    def hidden_from(self, user: Caller) -> SourceQuerySet:
        """The sources ``user`` may not see in the admin: none for the system and
        superusers."""
        if sees_every_source(user):
            return self.none()
        return self.exclude(pk__in=Source.objects.visible_to(user).values("pk"))

    def unsearchable_by(self, user: Caller) -> SourceQuerySet:
        """The sources whose text ``user`` may not read: none for the system and
        superusers."""
        if sees_every_source(user):
            return self.none()
        return self.exclude(pk__in=Source.objects.searchable_by(user).values("pk"))

    def with_manager_ids(self) -> SourceQuerySet:
        """The sources with the ids of the groups that manage each
        (``Source.manager_ids``) read in the same query."""
        return self.annotate(
            _manager_ids=ArrayAgg(
                "allowed_groups", filter=Q(allowed_groups__isnull=False), default=[]
            )
        )

    def allowing_origin(self, origin: str) -> SourceQuerySet:
        """The sources whose answers the Ask widget may show on pages of
        ``origin`` (as a browser sends it: ``https://docs.example.com``), by their
        own list; a key or being public decides the rest (``retrieval.widget``)."""
        return self.filter(widget_origins__contains=[origin])

    def _of(self, user: Caller, *, public: bool) -> SourceQuerySet:
        if sees_every_source(user):
            return self
        if isinstance(user, WidgetReader):  # reads its sources, manages none
            return self.filter(pk__in=user.source_ids) if public else self.none()
        member_id = _member_id(user)
        select = access.visible_source_ids_select(member_id=member_id, public=public)
        return self.filter(pk__in=RawSQL(*select))


class EqualsAny(Func):
    """``value = ANY(array)`` in PostgreSQL: whether the array holds the value."""

    template = "(%(expressions)s))"
    arg_joiner = " = ANY("
    output_field = models.BooleanField()


class Source(models.Model):
    """A site or a set of seed URLs, crawled with one set of rules."""

    class Fetcher(models.TextChoices):
        CRAWLBASE = "crawlbase", "Crawlbase Enterprise Crawler"
        DIRECT = "direct", "Built-in polite fetcher"
        NSTPROXY = "nstproxy", "Nstproxy crawl API (proxy network, JavaScript)"

    name = models.CharField(
        max_length=200, unique=True, help_text="For example: Django 5.2 documentation."
    )
    fetcher = models.CharField(
        max_length=20,
        choices=Fetcher.choices,
        default=Fetcher.DIRECT,
        help_text="Crawlbase needs CRAWLBASE_TOKEN and CRAWLBASE_CRAWLER to be set; "
        "Nstproxy needs NSTPROXY_API_KEY.",
    )
    seed_urls = models.TextField(
        "seed URLs",
        blank=True,
        help_text="One URL per line, e.g. https://docs.djangoproject.com/en/5.2/. The "
        "source holds the pages under each seed's directory: …/hr/ holds /hr/…, a "
        "seed of the site's root its whole host.",
    )
    sitemap_url = models.URLField(
        "sitemap URL",
        max_length=2048,
        blank=True,
        help_text="e.g. https://docs.djangoproject.com/sitemap-en.xml",
    )
    allow_patterns = models.TextField(
        blank=True,
        help_text=(
            "Regular expressions, one per line. When given, they replace the seeds' "
            "directories: a URL must match one of them to belong to this source, "
            r"even one another source denies. e.g. ^https://docs\.example\.com/"
        ),
    )
    deny_patterns = models.TextField(
        blank=True,
        help_text=r"Regular expressions, one per line, e.g. /(genindex|search)\.html$",
    )
    content_selector = models.CharField(
        max_length=300,
        blank=True,
        help_text="CSS selector of the main content in HTML pages, e.g. div[role=main]",
    )
    index_source_listings = models.BooleanField(
        "index source code listings",
        default=False,
        db_default=False,
        help_text=(
            "Answer from the site's generated source code pages too (Sphinx's "
            "_modules/…), for readers who want code. Other generated pages "
            "(indexes, search pages) are never answered from."
        ),
    )
    boilerplate_patterns = models.TextField(
        blank=True,
        help_text=(
            "Regular expressions, one per line; matching lines are removed before "
            "hashing, e.g. ^Last updated on .*$"
        ),
    )
    recrawl_every = models.DurationField(
        default=timedelta(days=7),
        help_text="How often pages are checked again, e.g. 7 00:00:00 for a week.",
    )
    adaptive_recrawl = models.BooleanField(
        default=True,
        help_text="Learn each page's interval from how often it changes, within the "
        "minimum and maximum below and the crawl budget.",
    )
    recrawl_min = models.DurationField(
        "shortest interval",
        default=timedelta(hours=1),
        help_text="Adaptive pages are never checked more often, e.g. 01:00:00.",
    )
    recrawl_max = models.DurationField(
        "longest interval",
        default=timedelta(days=30),
        help_text="Adaptive pages, and gone or redirected ones, are checked at least "
        "this often, e.g. 30 00:00:00.",
    )
    crawl_budget = models.PositiveIntegerField(
        "crawl budget per day",
        null=True,
        blank=True,
        help_text="Checks per day the adaptive schedule spends. Empty: as many as "
        "checking every page once per recheck interval would.",
    )
    schedule_plan = models.JSONField(
        null=True,
        blank=True,
        editable=False,
        help_text="The adaptive schedule's price of a check, from the daily re-plan.",
    )
    max_pages = models.PositiveIntegerField(
        default=10_000,
        help_text="Most pages of this source: discovery from seeds, sitemaps and "
        "links stops there, e.g. 10000.",
    )
    max_depth = models.PositiveSmallIntegerField(
        default=10,
        help_text="Most links followed from a seed or sitemap entry; 0 crawls only "
        "those, e.g. 10.",
    )
    crawlbase_format = models.CharField(
        "Crawlbase format",
        max_length=10,
        choices=[("html", "HTML"), ("md", "Markdown")],
        default="html",
        help_text="What Crawlbase delivers. HTML lets the content selector pick the "
        "main text; Markdown arrives with the page's menus.",
    )
    page_wait = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Crawlbase: milliseconds to wait for JavaScript, e.g. 2000.",
    )
    ajax_wait = models.BooleanField(
        default=False, help_text="Crawlbase: wait for the page's AJAX requests."
    )
    public = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Anyone may ask and search this source without signing in: the Ask "
        "page and the API answer anonymous readers from public sources only. The "
        "allowed groups below still decide which editors manage it.",
    )
    widget_origins = ArrayField(
        models.CharField(max_length=300),
        verbose_name="Ask widget origins",
        default=list,
        # Nodes still running the code of before insert sources without it.
        db_default=Value([], output_field=ArrayField(models.CharField(max_length=300))),
        blank=True,
        help_text="Sites whose pages may show this source's answers in the Ask "
        "widget, one origin per line, e.g. https://docs.example.com (scheme, host "
        "and port if not the default; no path). A public source answers there "
        "without a key; any other only through a widget key that names it and "
        "the site.",
    )
    allowed_groups = models.ManyToManyField(
        Group,
        blank=True,
        related_name="sources",
        help_text="Only users in these groups may search this source (unless it is "
        "public), and only editors in them see it and its pages in the admin. "
        "Empty: every signed-in user may.",
    )
    common_shapes = ArrayField(
        models.BigIntegerField(),
        default=list,
        editable=False,
        help_text="Line shapes currently stripped as this source's boilerplate.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = SourceQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @staticmethod
    def _lines(text: str) -> list[str]:
        return [line.strip() for line in text.splitlines() if line.strip()]

    @property
    def seeds(self) -> list[str]:
        return self._lines(self.seed_urls)

    def _regexes(self, text: str, *, refused: Pattern) -> list[Pattern]:
        """The lines compiled by RE2; a line it cannot run (saved before it was
        checked) is ``refused`` instead, and ``sources.W001`` names it."""
        return [stored_pattern(line, refused=refused) for line in self._lines(text)]

    @property
    def manager_ids(self) -> frozenset[int]:
        """The ids of the groups whose editors manage this source (its allowed
        groups); empty when every editor does. A source may take a URL from
        another only when both have the same (``sources.scope``)."""
        annotated = getattr(self, "_manager_ids", None)
        if annotated is not None:
            return frozenset(annotated)
        if self._state.adding:  # not saved: no groups yet
            return frozenset()
        return frozenset(self.allowed_groups.values_list("pk", flat=True))

    @property
    def boilerplate_regexes(self) -> list[Pattern]:
        return self._regexes(self.boilerplate_patterns, refused=NOTHING)

    def plan(self) -> schedule.Plan | None:
        """The adaptive schedule's plan from the last re-plan, if there was one."""
        data = self.schedule_plan
        if not self.adaptive_recrawl or not data:
            return None
        return schedule.Plan(
            multiplier=float(data["multiplier"]),  # "inf" when over budget
            stale_cost_hours=float(data["stale_cost_hours"]),
            min_hours=self.recrawl_min / HOUR,
            max_hours=self.recrawl_max / HOUR,
        )

    @property
    def allow_regexes(self) -> list[Pattern]:
        return self._regexes(self.allow_patterns, refused=NOTHING)

    @property
    def deny_regexes(self) -> list[Pattern]:
        # Denying every URL rather than none: a deny pattern keeps pages out, and
        # one that stopped working must not let them in.
        return self._regexes(self.deny_patterns, refused=EVERYTHING)

    def refused_patterns(self) -> list[tuple[str, str]]:
        """(field, why) for each stored pattern RE2 cannot run."""
        return [
            (name, problem)
            for name in PATTERN_FIELDS
            for problem in map(pattern_problem, self._lines(getattr(self, name)))
            if problem
        ]

    def clean(self) -> None:
        errors: dict[str, str] = {}
        for name, problem in self.refused_patterns():
            errors.setdefault(name, problem)
        try:
            self.widget_origins = web_origins(self.widget_origins)
        except ValueError as exc:
            errors["widget_origins"] = str(exc)
        if errors:
            raise ValidationError(errors)


class LineShape(models.Model):
    """How many of a source's pages carry a line of this shape (digits masked)."""

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="shapes")
    shape = models.BigIntegerField()
    pages = models.PositiveIntegerField(default=0)
    example = models.CharField(max_length=300, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["source", "shape"], name="lineshape_uniq"),
        ]
        indexes = [
            models.Index(
                fields=["source", "-pages"], name="lineshape_source_pages_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.example} ({self.pages} pages)"


class PageQuerySet(models.QuerySet["Page"]):
    def light(self) -> PageQuerySet:
        """Without the stored Markdown and body: read when touched, and a save
        writes only what was loaded or set, so a check that changes neither does
        not send them back (the bulk of a page row)."""
        return self.defer("markdown", "raw_body")

    def due(self, *, now: datetime) -> PageQuerySet:
        """Pages whose next check has come, and pages never crawled yet."""
        return self.filter(
            Q(next_crawl_at__lte=now)
            | Q(next_crawl_at=None, status=Page.Status.PENDING)
        )

    def stale(self, *, now: datetime) -> PageQuerySet:
        """Live pages not verified within their interval (the page's own, else their
        source's): what search serves may have changed since."""
        return self.filter(stale_condition(now=now))

    def failing(self) -> PageQuerySet:
        """Pages whose last crawl failed (the crawler or the site answered an error)."""
        return self.filter(failure_count__gt=0)


def stale_condition(*, now: datetime, prefix: str = "") -> Q:
    """The test of ``PageQuerySet.stale``; with ``prefix="pages__"`` it tests a
    source's pages, for counts per source."""
    source_interval = F("recrawl_every") if prefix else F("source__recrawl_every")
    due = ExpressionWrapper(
        Value(now, output_field=models.DateTimeField())
        - Coalesce(F(f"{prefix}recrawl_every"), source_interval),
        output_field=models.DateTimeField(),
    )
    return Q(**{f"{prefix}status": Page.Status.LIVE}) & (
        Q(**{f"{prefix}last_verified_at": None})
        | Q(**{f"{prefix}last_verified_at__lt": due})
    )


class Page(models.Model):
    """One canonical URL, with the latest content the index holds for it."""

    class Status(models.TextChoices):
        PENDING = "pending", "Waiting for its first crawl"
        LIVE = "live", "Live"
        GONE = "gone", "Gone (tombstoned)"
        REDIRECTED = "redirected", "Redirects to another page"
        DUPLICATE = "duplicate", "Same content as another page"

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="pages")
    url = models.URLField(
        "URL",
        max_length=2048,
        unique=True,
        help_text="Canonical URL, e.g. https://docs.djangoproject.com/en/5.2/intro/",
    )
    pushed_url = models.URLField(
        "pushed URL",
        max_length=2048,
        blank=True,
        editable=False,
        help_text="The URL last sent to the crawler.",
    )
    final_url = models.URLField(
        "final URL",
        max_length=2048,
        blank=True,
        editable=False,
        help_text="Where the crawler ended up after redirects.",
    )
    redirect_to = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="redirected_from",
        editable=False,
    )
    duplicate_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="duplicates",
        editable=False,
        help_text="The page indexed in its place: same content (a mirror, a "
        "parameter variant).",
    )
    near_duplicate_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
        help_text="A page of the same source with almost the same text; both stay "
        "indexed, for an editor to judge.",
    )
    near_duplicate_score = models.FloatField(
        null=True,
        blank=True,
        editable=False,
        help_text="Estimated share of shared word shingles (MinHash), 0 to 1.",
    )
    minhash = models.BinaryField(
        null=True, editable=False, help_text="MinHash signature of the Markdown."
    )
    minhash_bands = ArrayField(
        models.BigIntegerField(),
        default=list,
        editable=False,
        help_text="Hashes of the signature's bands, to find near-duplicate candidates.",
    )
    title = models.CharField(max_length=500, blank=True, editable=False)
    status = models.CharField(
        max_length=20, choices=Status.choices, default=Status.PENDING, editable=False
    )
    content_hash = models.CharField(
        max_length=64, blank=True, editable=False, help_text="SHA-256 of the Markdown."
    )
    markdown = models.TextField(
        blank=True,
        editable=False,
        help_text="Normalized, without boilerplate: indexed.",
    )
    raw_body = models.BinaryField(
        null=True, editable=False, help_text="The latest delivered body, gzip."
    )
    raw_content_type = models.CharField(max_length=200, blank=True, editable=False)
    reading_key = models.CharField(
        max_length=64,
        blank=True,
        editable=False,
        help_text="A hash of the body the live page's Markdown was read from and of "
        "every rule that read it: a delivery with the same key is unchanged without "
        "being read again.",
    )
    extractor_version = models.CharField(
        max_length=100, blank=True, editable=False, help_text="What made the Markdown."
    )
    release_notes = models.BooleanField(
        default=False,
        db_default=False,
        editable=False,
        help_text=(
            "Release notes or a changelog (by its address or title): ranked below "
            "the pages that define what it mentions, unless a question asks about "
            "a version or a change."
        ),
    )
    not_indexed_reason = models.CharField(
        "kept out of answers because",
        max_length=200,
        blank=True,
        default="",
        db_default="",
        editable=False,
        help_text=(
            "Why a live page has no chunks, e.g. a generated index of the site's "
            "terms; crawled for its links all the same."
        ),
    )
    line_shapes = ArrayField(
        models.BigIntegerField(),
        default=list,
        editable=False,
        help_text="Line shapes this page adds to its source's boilerplate counts.",
    )
    original_status = models.PositiveSmallIntegerField(
        null=True, blank=True, editable=False, help_text="The site's last HTTP status."
    )
    last_verified_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text="Last crawl that saw this content.",
    )
    last_changed_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text="When the content last changed.",
    )
    deleted_at = models.DateTimeField(null=True, blank=True, editable=False)
    etag = models.CharField(
        "ETag",
        max_length=200,
        blank=True,
        editable=False,
        help_text="The site's ETag for the content held, sent back as If-None-Match.",
    )
    last_modified = models.CharField(
        max_length=100,
        blank=True,
        editable=False,
        help_text="The site's Last-Modified header, sent back as If-Modified-Since.",
    )
    site_modified_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text="When the site says the page last changed (Last-Modified, or its "
        "sitemap's lastmod): a hint, not a verified change.",
    )
    last_crawled_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text="When the crawl behind the current state was requested; older "
        "deliveries arriving later are ignored.",
    )
    last_failure_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.TextField(blank=True, editable=False)
    failure_count = models.PositiveIntegerField(
        default=0, editable=False, help_text="Failed crawls since the last good one."
    )
    recrawl_every = models.DurationField(
        null=True,
        blank=True,
        help_text="Overrides the source's interval for this page, e.g. 1 00:00:00.",
    )
    next_crawl_at = models.DateTimeField(null=True, blank=True, editable=False)
    check_hours = ArrayField(
        models.FloatField(),
        default=list,
        editable=False,
        help_text="Hours between consecutive successful checks, oldest first.",
    )
    check_changed = ArrayField(
        models.BooleanField(),
        default=list,
        editable=False,
        help_text="Whether each of those checks found new content.",
    )
    check_quiet_hours = ArrayField(
        models.FloatField(),
        default=list,
        editable=False,
        help_text="For each of those checks that found new content, how many "
        "hours it had stood by the site's Last-Modified (0: not said), e.g. 5.5.",
    )
    change_rate = models.FloatField(
        null=True,
        blank=True,
        editable=False,
        help_text="Estimated changes per hour, from the checks.",
    )
    embedding_tokens = models.PositiveBigIntegerField(
        default=0, editable=False, help_text="Tokens embedded for this page, ever."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = PageQuerySet.as_manager()

    class Meta:
        ordering = ["url"]
        indexes = [
            models.Index(fields=["next_crawl_at"], name="page_next_crawl_idx"),
            models.Index(fields=["source", "status"], name="page_source_status_idx"),
            GinIndex(fields=["line_shapes"], name="page_line_shapes_idx"),
            models.Index(
                fields=["source", "content_hash"], name="page_source_hash_idx"
            ),
            GinIndex(fields=["minhash_bands"], name="page_minhash_bands_idx"),
        ]

    def __str__(self) -> str:
        return self.url

    @property
    def interval(self) -> timedelta:
        """Time until the next check: the page's own interval if set, else the
        adaptive schedule's for its change rate, else the source's."""
        if self.recrawl_every:
            return self.recrawl_every
        source = self.source
        if source.adaptive_recrawl and self.change_rate is not None:
            plan = source.plan()
            if plan is not None:
                return HOUR * schedule.next_interval(self.change_rate, plan)
        return source.recrawl_every

    def _record_check(
        self, *, at: datetime, changed: bool, modified_at: datetime | None = None
    ) -> None:
        """One more observation of how often the page changes; ``modified_at``,
        the site's Last-Modified of new content, tells when it changed."""
        quiet = self._quiet_hours()
        if self.last_verified_at is not None and at > self.last_verified_at:
            hours = (at - self.last_verified_at) / HOUR
            stood = self._stood_hours(at, modified_at) if changed else 0.0
            self.check_hours = [*self.check_hours, hours][-CHECKS_KEPT:]
            self.check_changed = [*self.check_changed, changed][-CHECKS_KEPT:]
            quiet = [*quiet, stood][-CHECKS_KEPT:]
        self.check_quiet_hours = quiet
        checks = zip(self.check_hours, self.check_changed, quiet, strict=True)
        self.change_rate = schedule.estimate_rate(
            [schedule.Check(*check) for check in checks],
            default_hours=self.source.recrawl_every / HOUR,
        )

    def _quiet_hours(self) -> list[float]:
        """The quiet hours of the kept checks, one each (checks recorded before
        they were kept have none: 0, not said)."""
        kept = len(self.check_hours)
        quiet = list(self.check_quiet_hours)[-kept:] if kept else []
        return [0.0] * (kept - len(quiet)) + quiet

    def _stood_hours(self, at: datetime, modified_at: datetime | None) -> float:
        """Hours new content found at ``at`` had stood, by the site's
        modification time: only a time after the previous check (else the site's
        clock or cache disagrees with what that check saw) and not a generated
        page's "now"; 0 when not known."""
        if modified_at is None or self.last_verified_at is None:
            return 0.0
        if not self.last_verified_at < modified_at <= at - GENERATED_WITHIN:
            return 0.0
        return (at - modified_at) / HOUR

    @property
    def is_live(self) -> bool:
        return self.status == self.Status.LIVE

    def is_newer_than(self, crawled_at: datetime) -> bool:
        """Whether the state shown comes from a crawl asked for after ``crawled_at``."""
        return self.last_crawled_at is not None and self.last_crawled_at > crawled_at

    # -- transitions, each saved by the caller inside its transaction --------------

    def mark_verified(
        self,
        *,
        at: datetime,
        crawled_at: datetime,
        changed: bool = False,
        modified_at: datetime | None = None,
    ) -> None:
        """A crawl saw the content the index holds (``changed``: new content,
        last modified at ``modified_at`` by the site's word, if it said)."""
        self._record_check(at=at, changed=changed, modified_at=modified_at)
        self.last_verified_at = at
        self.last_crawled_at = crawled_at
        self.original_status = 200
        self.failure_count = 0
        self.last_error = ""
        self.next_crawl_at = at + self.interval

    def mark_changed(
        self,
        *,
        at: datetime,
        crawled_at: datetime,
        title: str,
        markdown: str,
        digest: str,
        modified_at: datetime | None = None,
    ) -> None:
        self.mark_verified(
            at=at, crawled_at=crawled_at, changed=True, modified_at=modified_at
        )
        self.status = self.Status.LIVE
        self.deleted_at = None
        self.redirect_to = None
        self.duplicate_of = None
        self.title = title[:500]
        self.markdown = markdown
        self.content_hash = digest
        self.last_changed_at = at

    def mark_gone(
        self, *, at: datetime, crawled_at: datetime, original_status: int
    ) -> None:
        """404/410: out of search until a later crawl finds it again."""
        self.status = self.Status.GONE
        self.deleted_at = at
        self.content_hash = ""
        self.markdown = ""
        self.raw_body = None
        self.reading_key = ""
        self.forget_validators()
        self.original_status = original_status
        self.last_crawled_at = crawled_at
        self.last_changed_at = at
        self.failure_count = 0
        self.next_crawl_at = at + self.source.recrawl_max

    def mark_out_of_scope(self, *, at: datetime) -> None:
        """No source's scope holds the URL any more (a deny pattern, a narrower
        seed): out of search, its content dropped, never checked again; a later
        delivery in scope brings it back as a crawl of a new page would."""
        self.status = self.Status.GONE
        self.deleted_at = at
        self.content_hash = ""
        self._content_drop()
        self.forget_validators()
        self.last_changed_at = at
        self.next_crawl_at = None

    def _content_drop(self) -> None:
        """The page's text and what was learned from it leave the row."""
        self.markdown = ""
        self.raw_body = None
        self.reading_key = ""
        self.minhash = None
        self.minhash_bands = []
        self.near_duplicate_of = None
        self.near_duplicate_score = None

    def mark_rederived(self, *, title: str, markdown: str, digest: str) -> None:
        """New Markdown from the same delivered body (new boilerplate rules or a new
        extractor): the site did not change, so the freshness dates stay."""
        self.title = title[:500]
        self.markdown = markdown
        self.content_hash = digest

    def mark_redirected(self, *, to: Page, at: datetime, crawled_at: datetime) -> None:
        self.status = self.Status.REDIRECTED
        self.redirect_to = to
        self.content_hash = ""
        self.markdown = ""
        self.reading_key = ""
        self.forget_validators()
        self.last_crawled_at = crawled_at
        self.last_changed_at = at
        self.next_crawl_at = at + self.source.recrawl_max

    def mark_duplicate(
        self, *, of: Page, at: datetime, crawled_at: datetime, digest: str
    ) -> None:
        """Its content is the same as ``of``'s, which is indexed in its place: the
        crawl verified it, and it leaves search."""
        was_live = self.is_live
        self.mark_verified(at=at, crawled_at=crawled_at)
        self.status = self.Status.DUPLICATE
        self.duplicate_of = of
        self.redirect_to = None
        self.deleted_at = None
        self.content_hash = digest
        self._content_drop()
        # Fetched in full next time: the original may have moved on since.
        self.forget_validators()
        if was_live or self.last_changed_at is None:
            self.last_changed_at = at

    def remember_validators(
        self, *, etag: str, last_modified: str, site_modified_at: datetime | None
    ) -> None:
        """What the site said about the version held, for the next conditional
        request; a 304 that repeats none of them keeps the ones stored."""
        if etag:
            self.etag = etag
        if last_modified:
            self.last_modified = last_modified
        if site_modified_at is not None:
            self.site_modified_at = site_modified_at

    def forget_validators(self) -> None:
        self.etag = ""
        self.last_modified = ""

    def mark_failed(
        self, *, at: datetime, error: str, original_status: int | None
    ) -> None:
        """The crawl failed: keep the content, remember why, try again sooner."""
        self.failure_count += 1
        self.last_failure_at = at
        self.last_error = error[:2000]
        if original_status is not None:
            self.original_status = original_status
        backoff = FAILURE_RETRY * 2 ** min(self.failure_count - 1, 10)
        self.next_crawl_at = at + min(backoff, self.interval)


class PageVersion(models.Model):
    """One step in a page's history, and so one change: a new page, new content, a
    tombstone, a return, a move or a duplicate. A crawl that finds the same text
    (or text that differs only in learned boilerplate) records none."""

    class Kind(models.TextChoices):
        NEW = "new", "New page"
        CHANGED = "changed", "Content changed"
        DELETED = "deleted", "Gone (404/410)"
        RESTORED = "restored", "Back after being gone"
        MOVED = "moved", "Moved (redirects to another page)"
        DUPLICATE = "duplicate", "Became a duplicate of another page"
        OUT_OF_SCOPE = "out_of_scope", "Left every source's scope"

    # Steps that leave the page without content (nothing to compare).
    TOMBSTONES = frozenset({Kind.DELETED, Kind.OUT_OF_SCOPE, Kind.MOVED})

    page = models.ForeignKey(Page, on_delete=models.CASCADE, related_name="versions")
    # The page's source when the step was recorded: feeds filter by it.
    source = models.ForeignKey(
        Source, on_delete=models.CASCADE, related_name="changes", null=True
    )
    kind = models.CharField(max_length=20, choices=Kind.choices)
    content_hash = models.CharField(max_length=64, blank=True)
    markdown = models.TextField(blank=True, help_text="The content, kept for diffs.")
    recorded_at = models.DateTimeField(default=timezone.now)
    # What the step changed, from the version before (None: recorded before steps
    # were measured).
    lines_added = models.PositiveIntegerField(null=True)
    lines_removed = models.PositiveIntegerField(null=True)
    words_added = models.PositiveIntegerField(null=True)
    words_removed = models.PositiveIntegerField(null=True)
    sections = models.JSONField(
        default=list, blank=True, help_text="Paths of the sections touched."
    )
    chunks_embedded = models.PositiveIntegerField(
        null=True, help_text="Chunk texts embedded for it (the rest were reused)."
    )

    class Meta:
        ordering = ["-recorded_at"]
        verbose_name = "change"
        indexes = [
            models.Index(fields=["page", "-recorded_at"], name="pageversion_page_idx"),
            models.Index(
                fields=["-recorded_at", "-id"], name="pageversion_recorded_idx"
            ),
            models.Index(
                fields=["source", "-recorded_at", "-id"],
                name="pageversion_source_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.page} {self.kind} at {self.recorded_at:%Y-%m-%d %H:%M}"

    @property
    def summary(self) -> str:
        """A change in a few words: "3 lines changed in Configuration › Options"."""
        if self.kind not in (self.Kind.CHANGED, self.Kind.RESTORED, self.Kind.NEW):
            return str(self.get_kind_display())
        if self.lines_added is None or self.lines_removed is None:
            return str(self.get_kind_display())
        change = Change(
            lines_added=self.lines_added,
            lines_removed=self.lines_removed,
            words_added=self.words_added or 0,
            words_removed=self.words_removed or 0,
            sections=list(self.sections or []),
        )
        if self.kind == self.Kind.NEW:
            return f"New page, {change.lines_added} lines"
        return change.summary()


class FeedToken(models.Model):
    """A user's key to their change feeds, for feed readers, which can only send a
    URL: it reads feeds and nothing else, and only its hash is kept."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="feed_token"
    )
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)

    PREFIX = "kbf_"

    def __str__(self) -> str:
        return f"feed token of {self.user} ({self.created_at:%Y-%m-%d})"

    @classmethod
    def issue(cls, user: AbstractBaseUser) -> str:
        """A new key for ``user``; the one before stops working."""
        key = cls.PREFIX + secrets.token_urlsafe(32)
        cls.objects.update_or_create(
            user=user,
            defaults={"key_hash": sha256_hex(key), "created_at": timezone.now()},
        )
        return key

    @classmethod
    def user_for(cls, key: str) -> AbstractBaseUser | None:
        if not key.startswith(cls.PREFIX) or len(key) > 100:
            return None
        token = (
            cls.objects.select_related("user").filter(key_hash=sha256_hex(key)).first()
        )
        if token is None or not token.user.is_active:
            return None
        return token.user
