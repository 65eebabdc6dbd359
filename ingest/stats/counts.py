"""The numbers editors read in the admin: per source, per day, across the index.

Reads only. A delivery is a **first crawl** of its page unless an earlier delivery
of the page brought content (outcomes *embedded*, *unchanged*, *duplicate*); then
it is a **recrawl**. A page's first crawl costs every strategy the same (its text
must be embedded once), so savings are counted on recrawls alone, against what
the same recrawls would have cost otherwise. A page costs, embedded whole, the
tokens of its current chunks (``Chunk.token_count`` is counted on the text that is
embedded, title and heading path included). So, for the same recrawls,

* a **full re-embed** (every recrawled page embedded again) would have spent the
  page's tokens on every recrawl that brought content (outcomes *embedded* and
  *unchanged*);
* **page-level hash gating** (a page embedded again whenever its hash changed)
  would have spent them on every *embedded* recrawl;
* this product spent what each delivery recorded (``Delivery.embedding_tokens``):
  only the chunk texts that had no vector yet.

A page's current size stands for its size on the day of the delivery; pages gone
since count as empty. Spending outside deliveries (re-derivations after learned
boilerplate, ``reembed``) is in the day's *Embedding usage*, shown beside it.

The dashboard's figures count what its ``user`` sees (``sources.visibility``):
the rows of their sources; the whole index's usage only for whoever sees every
source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone

from ingest.crawl.models import Crawl
from ingest.crawl.progress import crawl_errors
from ingest.delivery.models import Delivery
from retrieval.models import Chunk, EmbeddingUsage
from sources.models import Caller, Page, Source, stale_condition
from sources.visibility import rows_visible_to, sees_every_row

WEEK = timedelta(days=7)
Outcome = Delivery.Outcome
# Earlier outcomes that make a delivery of the same page a recrawl.
CONTENT_OUTCOMES = [Outcome.EMBEDDED, Outcome.UNCHANGED, Outcome.DUPLICATE]
# How the dashboard groups outcomes, in stacking order (bottom first). A page's
# content embedded is *new* on its first crawl and *changed* on a recrawl.
OUTCOME_GROUPS: dict[str, list[str]] = {
    "new": [Outcome.EMBEDDED],
    "changed": [Outcome.EMBEDDED],
    "unchanged": [Outcome.UNCHANGED],
    "duplicates": [Outcome.DUPLICATE],
    "deleted": [Outcome.DELETED],
    "skipped": [Outcome.SKIPPED],
    "failed": [Outcome.FAILED],
    "rejected": [Outcome.REJECTED, Outcome.OUT_OF_SCOPE],
    "in progress": [""],
}


def outcome_group(outcome: str, *, recrawl: bool) -> str:
    if outcome == Outcome.EMBEDDED:
        return "changed" if recrawl else "new"
    for group, outcomes in OUTCOME_GROUPS.items():
        if outcome in outcomes:
            return group
    return "rejected"


@dataclass(frozen=True)
class Problem:
    """The latest thing that went wrong with a source: a failing page, or a URL
    its latest crawl could not fetch (a new source's seeds have no page yet)."""

    url: str
    title: str
    at: datetime | None
    error: str
    page_id: int | None = None
    crawl_url_id: int | None = None


@dataclass
class SourceOverview:
    live: int
    gone: int
    redirected: int
    pending: int
    failing: int
    stale: int
    chunks: int
    tokens_week: int
    tokens_ever: int
    last_delivery: Delivery | None
    last_error: Problem | None
    crawl: Crawl | None  # the latest one of the built-in crawler


def source_overview(*, source: Source, now: datetime) -> SourceOverview:
    status = Page.Status
    counts = source.pages.aggregate(
        live=Count("pk", filter=Q(status=status.LIVE)),
        gone=Count("pk", filter=Q(status=status.GONE)),
        redirected=Count("pk", filter=Q(status=status.REDIRECTED)),
        pending=Count("pk", filter=Q(status=status.PENDING)),
        failing=Count("pk", filter=Q(failure_count__gt=0)),
        stale=Count("pk", filter=stale_condition(now=now)),
        tokens=Coalesce(Sum("embedding_tokens"), 0),
    )
    deliveries = Delivery.objects.filter(page__source=source).defer("body")
    crawl = source.crawls.order_by("-started_at", "-pk").first()
    week = deliveries.filter(received_at__gte=now - WEEK)
    return SourceOverview(
        live=counts["live"],
        gone=counts["gone"],
        redirected=counts["redirected"],
        pending=counts["pending"],
        failing=counts["failing"],
        stale=counts["stale"],
        chunks=Chunk.objects.filter(page__source=source).count(),
        tokens_week=week.aggregate(t=Coalesce(Sum("embedding_tokens"), 0))["t"],
        tokens_ever=counts["tokens"],
        last_delivery=deliveries.order_by("-received_at").first(),
        last_error=_last_problem(source, crawl),
        crawl=crawl,
    )


def _last_problem(source: Source, crawl: Crawl | None) -> Problem | None:
    """The newer of the latest failing page's error and the latest crawl's."""
    failing = source.pages.filter(failure_count__gt=0).exclude(last_error="")
    page = (
        failing.only("pk", "url", "title", "last_error", "last_failure_at")
        .order_by(F("last_failure_at").desc(nulls_last=True))
        .first()
    )
    row = crawl_errors(crawl=crawl).first() if crawl is not None else None
    problems = []
    if page is not None:
        problems.append(
            Problem(
                page.url, page.title, page.last_failure_at, page.last_error, page.pk
            )
        )
    if row is not None:
        problems.append(Problem(row.url, "", row.done_at, row.error, None, row.pk))
    if not problems:
        return None
    return max(problems, key=lambda p: p.at or datetime.min.replace(tzinfo=UTC))


# -- the dashboard -----------------------------------------------------------------


@dataclass
class Day:
    day: date
    outcomes: dict[str, int] = field(default_factory=dict)
    first_pages: int = 0  # pages whose content was embedded for the first time
    first_spent: int = 0  # what their first crawls cost (the same for any strategy)
    recrawls: int = 0  # deliveries of pages crawled before
    spent: int = 0  # what this product embedded for the day's recrawls
    page_gated: int = 0  # page-level hash gating, same recrawls
    full: int = 0  # a full re-embed of the recrawled pages
    # Every embedding request of the day (Embedding usage); None when not shown.
    usage: int | None = 0

    @property
    def deliveries(self) -> int:
        return sum(self.outcomes.values())

    def add(
        self, *, outcome: str, recrawl: bool, n: int, spent: int, whole: int
    ) -> None:
        """Count ``n`` deliveries of one outcome, which spent ``spent`` tokens, of
        pages whose current chunks hold ``whole`` tokens in all."""
        group = outcome_group(outcome, recrawl=recrawl)
        self.outcomes[group] = self.outcomes.get(group, 0) + n
        if not recrawl:
            self.first_spent += spent
            self.first_pages += n if outcome == Outcome.EMBEDDED else 0
            return
        self.recrawls += n
        self.spent += spent
        if outcome in (Outcome.EMBEDDED, Outcome.UNCHANGED):
            self.full += whole
        if outcome == Outcome.EMBEDDED:
            self.page_gated += whole


def _page_tokens() -> Subquery:
    """Tokens of the delivery's page embedded whole: its current chunks."""
    per_page = (
        Chunk.objects.filter(page=OuterRef("page"))
        .order_by()
        .values("page")
        .annotate(total=Sum("token_count"))
        .values("total")
    )
    return Subquery(per_page)


def _crawled_before() -> Exists:
    """Whether an earlier delivery of the delivery's page brought content."""
    earlier = Q(received_at__lt=OuterRef("received_at")) | Q(
        received_at=OuterRef("received_at"), pk__lt=OuterRef("pk")
    )
    return Exists(
        Delivery.objects.filter(
            earlier, page=OuterRef("page"), outcome__in=CONTENT_OUTCOMES
        )
    )


def deliveries_per_day(*, since: datetime, now: datetime, user: Caller) -> list[Day]:
    """Every day from ``since`` to ``now`` (local time), with its deliveries'
    outcomes, its first crawls and their tokens, and its recrawls' tokens with
    what the two other strategies would have spent on them."""
    tz = timezone.get_current_timezone()
    days = _day_range(since, now)
    deliveries = Delivery.objects.filter(received_at__gte=since)
    rows = (
        rows_visible_to(deliveries, source_path="page__source", user=user)
        .annotate(
            day=TruncDate("received_at", tzinfo=tz),
            whole=_page_tokens(),
            recrawl=_crawled_before(),
        )
        .values("day", "outcome", "recrawl")
        .annotate(
            n=Count("pk"),
            spent=Coalesce(Sum("embedding_tokens"), 0),
            whole_sum=Coalesce(Sum("whole"), 0),
        )
    )
    for row in rows:
        day = days.get(row["day"])
        if day is not None:
            day.add(
                outcome=row["outcome"],
                recrawl=row["recrawl"],
                n=row["n"],
                spent=row["spent"],
                whole=row["whole_sum"],
            )
    if not sees_every_row(user):
        for day in days.values():
            day.usage = None
        return list(days.values())
    usage = EmbeddingUsage.objects.filter(day__gte=min(days, default=now.date()))
    for day_value, tokens in usage.values_list("day").annotate(t=Sum("tokens")):
        if day_value in days:
            days[day_value].usage = tokens
    return list(days.values())


def _day_range(since: datetime, now: datetime) -> dict[date, Day]:
    first, last = timezone.localdate(since), timezone.localdate(now)
    count = (last - first).days + 1
    return {
        first + timedelta(days=n): Day(day=first + timedelta(days=n))
        for n in range(count)
    }


@dataclass
class Freshness:
    live: int
    stale: int
    pending: int
    buckets: list[tuple[str, int]]  # (age of last verification, live pages)


FRESHNESS_BUCKETS = [
    ("within a day", timedelta(days=1)),
    ("1–7 days", timedelta(days=7)),
    ("7–30 days", timedelta(days=30)),
    ("30–90 days", timedelta(days=90)),
]


def freshness(*, now: datetime, user: Caller) -> Freshness:
    """Live pages by how long ago a crawl last saw their content."""
    pages = rows_visible_to(Page.objects.all(), source_path="source", user=user)
    aggregates = {}
    lower = timedelta(0)
    for number, (_, age) in enumerate(FRESHNESS_BUCKETS):
        condition = Q(last_verified_at__gte=now - age, last_verified_at__lt=now - lower)
        aggregates[f"bucket{number}"] = Count("pk", filter=condition)
        lower = age
    counts = pages.filter(status=Page.Status.LIVE).aggregate(
        **aggregates,
        older=Count("pk", filter=Q(last_verified_at__lt=now - lower)),
        never=Count("pk", filter=Q(last_verified_at=None)),
        stale=Count("pk", filter=stale_condition(now=now)),
    )
    buckets = [
        *(
            (label, counts[f"bucket{n}"])
            for n, (label, _) in enumerate(FRESHNESS_BUCKETS)
        ),
        ("over 90 days", counts["older"]),
        ("never verified", counts["never"]),
    ]
    return Freshness(
        live=sum(count for _, count in buckets),
        stale=counts["stale"],
        pending=pages.filter(status=Page.Status.PENDING).count(),
        buckets=buckets,
    )


def pages_oldest_unverified(*, user: Caller, limit: int = 10) -> QuerySet[Page]:
    """Live pages whose content was seen longest ago (never, first)."""
    pages = rows_visible_to(Page.objects.all(), source_path="source", user=user)
    return (
        pages.filter(status=Page.Status.LIVE)
        .select_related("source")
        .only(
            "pk",
            "url",
            "title",
            "last_verified_at",
            "recrawl_every",
            "next_crawl_at",
            "source__name",
            "source__recrawl_every",
        )  # fmt: skip
        .order_by(F("last_verified_at").asc(nulls_first=True), "pk")[:limit]
    )


def sources_failing(*, now: datetime, user: Caller) -> QuerySet[Source]:
    """Sources with failing pages or failed deliveries this week, worst first, with
    ``failing`` pages, ``failed_week`` deliveries, and the latest error."""
    failed = (
        Delivery.objects.filter(
            page__source=OuterRef("pk"),
            received_at__gte=now - WEEK,
            outcome__in=[Outcome.SKIPPED, Outcome.FAILED],
        )
        .order_by()
        .values("page__source")
        .annotate(n=Count("pk"))
        .values("n")
    )
    latest = Page.objects.filter(source=OuterRef("pk"), failure_count__gt=0).order_by(
        F("last_failure_at").desc(nulls_last=True)
    )
    return (
        Source.objects.visible_to(user)
        .annotate(
            failing=Count("pages", filter=Q(pages__failure_count__gt=0)),
            failed_week=Coalesce(Subquery(failed), 0),
            last_error=Subquery(latest.values("last_error")[:1]),
            last_failure_at=Subquery(latest.values("last_failure_at")[:1]),
        )
        .filter(Q(failing__gt=0) | Q(failed_week__gt=0))
        .order_by("-failing", "-failed_week", "name")
    )


def sources_tokens(*, now: datetime, user: Caller) -> QuerySet[Source]:
    """Every source with ``tokens_week`` (its deliveries of the last 7 days),
    ``tokens_ever`` (all its pages' embedding, re-derivations included) and
    ``deliveries_week``."""
    week = Delivery.objects.filter(
        page__source=OuterRef("pk"), received_at__gte=now - WEEK
    ).order_by()
    tokens = week.values("page__source").annotate(t=Sum("embedding_tokens"))
    count = week.values("page__source").annotate(n=Count("pk"))
    ever = (
        Page.objects.filter(source=OuterRef("pk"))
        .order_by()
        .values("source")
        .annotate(t=Sum("embedding_tokens"))
        .values("t")
    )
    return (
        Source.objects.visible_to(user)
        .annotate(
            tokens_week=Coalesce(Subquery(tokens.values("t")), 0),
            deliveries_week=Coalesce(Subquery(count.values("n")), 0),
            tokens_ever=Coalesce(Subquery(ever), 0),
        )
        .order_by("-tokens_week", "name")
    )
