"""What readers asked that the index served badly, for the docs owner: questions
(and searches) it abstained on, answers it gave on evidence that barely held
(doubtful), and answers their askers marked not useful, over a period, grouped by
similarity (``retrieval.grouping``), each group with the pages nearest to it and
those its answers came from.

A question is embedded once, in the serving space, after it was answered: by a
periodic job (``question_vectors_fill``) and, for the few the job has not reached
yet, by the questions page itself. Answering never waits for it: the log row is
written after the answer has gone, and only the questions the page groups (a small
share of the log) are embedded, a few tokens each.

Which questions an editor sees is the query log's rule
(``QueryLogQuerySet.visible_to``): a question belongs to the sources its asker
could search and to those of the chunks it retrieved, and is shown only to editors
who see all of them. The nearest pages are searched among the editor's sources.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import reduce

from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from kbsite.text import count_tokens
from retrieval import sql
from retrieval.evidence import LEXICAL_COVERAGE
from retrieval.grouping import (
    GROUP_SIMILARITY,
    Asked,
    Group,
    group_similarity,
    question_key,
    similar_groups,
)
from retrieval.models import QueryLog, QueryLogQuerySet, QuestionVector
from retrieval.search import KEYWORD_WEIGHT, RRF_K, VECTOR_WEIGHT
from retrieval.searchable import Searchable, searchable_chunks
from retrieval.spaces import floor_in_force, serving, usage_record
from sources.models import Caller, Page, Source

# The periods the page offers, in days; the first page shows DEFAULT_DAYS.
PERIODS = (7, 30, 90)
DEFAULT_DAYS = 30
# Questions embedded per request to the model.
FILL_BATCH = 64
# What the page embeds itself of what the job has not reached: a few minutes'
# questions on a busy site. Past it the page says how many wait for the job.
FILL_AT_VIEW = 500
# What a question is embedded from: a longer one is a paste, not a question.
QUESTION_CHARS = 2000
# Distinct questions grouped at most, the most asked first: the greedy pass
# compares each with every group's leader (5,000 all unlike one another took 2.9 s
# on a loaded 2-core machine, 2,000 0.4 s).
GROUPED_AT_MOST = 5000
# Pages shown near a group, and the nearest chunks they are chosen from.
NEAR_PAGES = 3
NEAR_CANDIDATES = 30
# Pages shown that a group's answers came from (the first each cited).
ANSWERED_FROM_PAGES = 3
# A group's logs its link lists at most, the newest: a long URL, but far under
# what the server reads (waitress: 256 kB of headers).
LINKED_LOGS = 200

# A doubtful answer's best passage was barely above the floor: by less than this
# cosine similarity. The floor is the median of the best similarities of bags of
# unrelated words (``retrieval.statistics``); with the default model on the test
# corpus (tests/fixtures) their 75th percentile is 0.072 above it (0.438 and
# 0.511), so floor + 0.05 is about their 67th: a third of the bags reach it. Not
# tuned on a golden set: on that corpus's, every answered question cleared the
# floor by 0.119 or more and led the next page by 4.5% or more (18 answered, all
# right), so a set of right answers holds nothing near either edge to tune on.
# Tuning needs the wrong answers that got through, and collecting those is what
# this list is for.
DOUBTFUL_SIMILARITY = 0.05
# Its first page was barely ahead of the next: its fused score led by less than
# one place at the top of the keyword list is worth (1/21 - 1/22), as a share of
# the score of a page both lists put first (2.5/21): 1.8%. Under it, one list
# ranking its first two pages the other way round would have put the other page
# first: the two lists disagreed on which page answers. Where both put the same
# two pages first and second, the lead is 4.5%. Derived from the fusion's
# constants, so it follows them.
DOUBTFUL_LEAD = (
    KEYWORD_WEIGHT
    * (1 / (RRF_K + 1) - 1 / (RRF_K + 2))
    / ((VECTOR_WEIGHT + KEYWORD_WEIGHT) / (RRF_K + 1))
)


def doubtful() -> Q:
    """A reader's question (not a search, nor a recheck no reader typed) that was
    answered on evidence that barely held: its best passage within
    DOUBTFUL_SIMILARITY above the floor, with no passage holding enough of its
    words to carry it alone, or its first page less than DOUBTFUL_LEAD ahead of
    the next. A lead below 0 is a page put first by a word of the question's
    own, which is evidence, not a near tie. Logs from before the confidence was
    kept (empty) are never doubtful, and neither is an answer its reader rated:
    their word beats a margin (and a not useful one has its own section)."""
    near_floor = Q(
        floor__isnull=False,
        similarity__gte=F("floor"),
        similarity__lt=F("floor") + DOUBTFUL_SIMILARITY,
        held__lt=LEXICAL_COVERAGE,
    )
    barely_ahead = Q(lead__gte=0, lead__lt=DOUBTFUL_LEAD)
    return Q(
        near_floor | barely_ahead,
        kind=QueryLog.Kind.QUERY,
        abstained=False,
        feedback__isnull=True,
    )


class Concern(models.TextChoices):
    UNANSWERED = "unanswered", "Unanswered: the index held no evidence"
    DOUBTFUL = "doubtful", "Doubtful: answered on evidence that barely held"
    NOT_USEFUL = "not_useful", "Answered, and marked not useful"

    @property
    def condition(self) -> Q:
        if self is Concern.UNANSWERED:
            return Q(abstained=True)
        if self is Concern.DOUBTFUL:
            return doubtful()
        return Q(abstained=False, feedback=QueryLog.Feedback.UNHELPFUL)

    @property
    def answered(self) -> bool:
        return self is not Concern.UNANSWERED


# Every log the page may group: a feedback given after the job ran is caught by
# its next run.
GROUPED_LOGS = reduce(operator.or_, (concern.condition for concern in Concern))


@dataclass
class Logs:
    """What a distinct question keeps of its logs (``Asked.ref``): the newest,
    whose spelling stands for the rest; all of them, newest first; and the page
    each answer cited first (none for an answer citing nothing)."""

    newest: int
    ids: list[int] = field(default_factory=list)
    pages: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class AnsweredFrom:
    page_id: int
    title: str
    url: str
    answers: int  # of the group's, that cited it first


@dataclass(frozen=True)
class NearPage:
    page_id: int
    title: str
    url: str
    similarity: float  # of its nearest chunk to the group's centroid


@dataclass
class QuestionGroups:
    concern: Concern
    groups: list[Group]
    asked: int  # logs grouped
    distinct: int  # distinct questions among them
    left_out: int  # distinct questions past GROUPED_AT_MOST, asked least
    waiting: int  # logs of the period with no vector yet (the job embeds them)
    threshold: float = GROUP_SIMILARITY


def period_start(days: int, *, now: datetime | None = None) -> datetime:
    return (now or timezone.now()) - timedelta(days=days)


def concern_logs(
    *, user: Caller, concern: Concern, since: datetime
) -> QueryLogQuerySet:
    """The logs of ``concern`` since then that ``user`` may see."""
    logs: QueryLogQuerySet = QueryLog.objects.visible_to(user)
    return logs.of_readers().filter(concern.condition, created_at__gte=since)


def question_vectors_fill(*, logs: QueryLogQuerySet | None = None, limit: int) -> int:
    """Embed, newest first, up to ``limit`` of ``logs`` (by default every log) that
    the questions page groups and that have no vector in the serving space; each
    distinct text once. Returns how many logs got one. Runs outside transactions:
    the model may be an API."""
    embedder, _ = serving()
    rows = list(
        (QueryLog.objects.all() if logs is None else logs)
        .of_readers()
        .filter(GROUPED_LOGS)
        .exclude(vector__space=embedder.space)
        .order_by("-created_at")
        .values_list("pk", "text")[:limit]
    )
    done = 0
    for start in range(0, len(rows), FILL_BATCH):
        batch = rows[start : start + FILL_BATCH]
        texts = sorted({text[:QUESTION_CHARS] for _, text in batch})
        vectors = dict(zip(texts, embedder.embed_queries(texts), strict=True))
        QuestionVector.objects.bulk_create(
            [
                QuestionVector(
                    log_id=pk,
                    space=embedder.space,
                    vector=vectors[text[:QUESTION_CHARS]],
                )
                for pk, text in batch
            ],
            update_conflicts=True,
            unique_fields=["log"],
            update_fields=["space", "vector", "created_at"],
        )
        usage_record(
            space=embedder.space,
            requests=1,
            inputs=len(texts),
            tokens=sum(count_tokens(text) for text in texts),
        )
        done += len(batch)
    return done


def question_groups(
    *, user: Caller, concern: Concern, since: datetime, fill: int = FILL_AT_VIEW
) -> QuestionGroups:
    """The questions of ``concern`` since then that ``user`` may see, grouped by
    similarity; first embedding up to ``fill`` of those still without a vector."""
    logs = concern_logs(user=user, concern=concern, since=since)
    if fill:
        question_vectors_fill(logs=logs, limit=fill)
    embedder, serving_space = serving()
    space = embedder.space
    distinct: dict[str, Asked] = {}
    asked = 0
    rows = (
        logs.filter(vector__space=space)
        .order_by("-created_at", "-pk")
        .values_list("pk", "text", "created_at", "vector__vector", "cited_pages")
    )
    for pk, text, created_at, vector, cited in rows.iterator(chunk_size=2000):
        asked += 1
        key = question_key(text)
        if key in distinct:
            distinct[key].count += 1
        else:  # the newest asking: its spelling and its log stand for the rest
            distinct[key] = Asked(text, 1, created_at, vector, ref=Logs(pk))
        logs_of = distinct[key].ref
        logs_of.ids.append(pk)
        logs_of.pages.extend(cited[:1])
    questions = sorted(
        distinct.values(), key=lambda q: (-q.count, -q.latest.timestamp())
    )
    # As alike as the serving model needs to say one request: its floor moves it.
    threshold = group_similarity(floor_in_force(serving_space))
    return QuestionGroups(
        concern=concern,
        groups=similar_groups(questions[:GROUPED_AT_MOST], threshold=threshold),
        asked=asked,
        distinct=len(questions),
        left_out=max(0, len(questions) - GROUPED_AT_MOST),
        waiting=logs.exclude(vector__space=space).count(),
        threshold=threshold,
    )


def chunks_near(*, group: Group, searchable: Searchable) -> list[sql.VectorCandidate]:
    """The NEAR_CANDIDATES chunks of ``searchable`` nearest the group's centroid
    in the serving space, with their similarity."""
    embedder, _ = serving()
    return sql.vector_candidates(
        embedder.space,
        embedder.dimensions,
        group.centroid(),
        limit=NEAR_CANDIDATES,
        searchable=searchable,
        terms=(),
    )


def pages_near(
    *, group: Group, user: Caller, limit: int = NEAR_PAGES
) -> list[NearPage]:
    """The live pages ``user`` may see whose chunks are nearest the group's
    centroid, nearest first, with that similarity: what the index holds closest
    to what was asked (a low similarity: nothing covers it)."""
    rows = chunks_near(group=group, searchable=searchable_chunks(user))
    best: dict[int, float] = {}
    for row in rows:
        best[row.page_id] = max(row.similarity, best.get(row.page_id, -1.0))
    chosen = sorted(best, key=lambda pk: (-best[pk], pk))[:limit]
    pages = Page.objects.only("title", "url").in_bulk(chosen)
    return [
        NearPage(pk, pages[pk].title, pages[pk].url, best[pk])
        for pk in chosen
        if pk in pages
    ]


def group_logs(group: Group, *, limit: int = LINKED_LOGS) -> list[int]:
    """The ids of the group's logs, newest first, at most ``limit``."""
    ids = sorted((pk for q in group.questions for pk in q.ref.ids), reverse=True)
    return ids[:limit]


def answered_from(
    *, group: Group, user: Caller, limit: int = ANSWERED_FROM_PAGES
) -> list[AnsweredFrom]:
    """The pages the group's answers cited first, the most often first, among
    those ``user`` may read: for an answered concern, where the answer came from
    (none for unanswered questions)."""
    counts = Counter(page for q in group.questions for page in q.ref.pages)
    readable = Page.objects.filter(source__in=Source.objects.searchable_by(user))
    pages = readable.only("title", "url").in_bulk(list(counts))
    ranked = sorted(pages, key=lambda pk: (-counts[pk], pk))[:limit]
    return [
        AnsweredFrom(pk, pages[pk].title, pages[pk].url, counts[pk]) for pk in ranked
    ]


# -- the export ----------------------------------------------------------------------

CSV_HEADER = [
    "concern", "group", "times asked in group", "group last asked",
    "group's leading question", "question", "times asked", "last asked",
    "similarity to leading question", "nearest pages", "answered from",
]  # fmt: skip


def csv_rows(*, user: Caller, since: datetime) -> Iterator[list[str]]:
    """The export's rows, header first: one per distinct question, group by group,
    unanswered first. A group's nearest pages are searched as its rows are
    written, so that a long export starts at once. An answered group also names
    the pages its answers cited first (how many did)."""
    yield CSV_HEADER
    for concern in Concern:
        found = question_groups(user=user, concern=concern, since=since)
        for number, group in enumerate(found.groups, start=1):
            near = "; ".join(
                f"{page.url} ({page.similarity:.2f})"
                for page in pages_near(group=group, user=user)
            )
            answered = "; ".join(
                f"{page.url} ({page.answers})"
                for page in answered_from(group=group, user=user)
            )
            for question in group.questions:
                yield [
                    concern.value, str(number), str(group.count),
                    _when(group.latest), _cell(group.leader.text),
                    _cell(question.text), str(question.count),
                    _when(question.latest), f"{question.similarity:.2f}", near,
                    answered,
                ]  # fmt: skip


def _when(moment: datetime) -> str:
    return timezone.localtime(moment).isoformat(timespec="minutes")


def _cell(text: str) -> str:
    """A reader's words as a spreadsheet shows them, never as a formula: a cell
    starting with = + - @ (or a tab or carriage return) is run by Excel and
    LibreOffice, so it gets a leading apostrophe (OWASP's advice on CSV
    injection)."""
    return f"'{text}" if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text
