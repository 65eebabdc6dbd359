"""Answers checked again when what they quoted changes.

A logged answer keeps the text hashes of the chunks its cited passages were made of
(``QueryLog.cited_hashes``) and their pages. When a page's chunks are replaced and
one of those texts is gone (edited, or the page gone, moved or kept out), every
current answer that quoted it becomes *stale*, with the change that did it. A
periodic job asks stale questions again, as their asker (an anonymous asker's as
an anonymous reader, never as the system, which sees every source): the same
citations and the same answer make the answer current again ("still holds,
re-verified at …"); otherwise the new answer is logged as a recheck of the old
(for its asker, but of its own kind: counted with no reader's questions), which
is *superseded* by it.

Re-asking costs an embedding and a search each, so it is bounded: at most
``ANSWER_RECHECKS_PER_HOUR`` an hour, the most asked questions first, then the
most recent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.db.models import (
    Count,
    IntegerField,
    OuterRef,
    Subquery,
)
from django.db.models.functions import Coalesce
from django.utils import timezone

from kbsite.models import TransactionNow
from retrieval import sql
from retrieval.models import QueryLog
from sources.models import Caller, Page, PageVersion, Source, System, caller_check

logger = logging.getLogger(__name__)


HOUR = timedelta(hours=1)
# Passages for a question whose first answer retrieved none (the API's default).
DEFAULT_K = 5
Status = QueryLog.Status


def answers_mark_stale(
    *, page_id: int, removed: set[str], change: PageVersion | None = None
) -> int:
    """Current answers that quoted one of the ``removed`` texts of the page become
    stale, at the time the transaction began, by ``change`` (the page's version
    that removed them) if given; returns how many."""
    if not removed:
        return 0
    return QueryLog.objects.filter(
        kind__in=QueryLog.ANSWERS,
        status=Status.CURRENT,
        cited_hashes__overlap=sorted(removed),
        cited_pages__contains=[page_id],
    ).update(status=Status.STALE, stale_at=TransactionNow(), stale_change=change)


@dataclass
class Rechecked:
    asked: int = 0
    held: int = 0  # same citations, same answer
    changed: int = 0  # a new answer supersedes the old
    seconds: float = 0.0
    left: int = 0  # stale answers still waiting


def answers_recheck(*, budget: int | None = None) -> Rechecked:
    """Ask stale questions again, within this hour's budget."""
    started = time.perf_counter()
    per_hour = settings.ANSWER_RECHECKS_PER_HOUR if budget is None else budget
    now = timezone.now()
    spent = QueryLog.objects.filter(rechecked_at__gte=now - HOUR).count()
    done = Rechecked()
    for log in _stale_first(max(0, per_hour - spent)):
        done.asked += 1
        if _recheck(log, now):
            done.changed += 1
        else:
            done.held += 1
    done.left = QueryLog.objects.filter(status=Status.STALE).count()
    done.seconds = time.perf_counter() - started
    if done.asked:
        logger.info(
            "answers rechecked: %d asked, %d still hold, %d changed, %d left (%.1f s)",
            done.asked, done.held, done.changed, done.left, done.seconds,
        )  # fmt: skip
    return done


def _stale_first(count: int) -> list[QueryLog]:
    """Up to ``count`` stale answers, the most asked question first (asked by
    anyone, in any words' case), then the most recent."""
    if count <= 0:
        return []
    asked = (
        QueryLog.objects.filter(kind=QueryLog.Kind.QUERY, text__iexact=OuterRef("text"))
        .order_by()
        .values("kind")
        .annotate(n=Count("pk"))
        .values("n")
    )
    stale = QueryLog.objects.filter(status=Status.STALE).annotate(
        asked=Coalesce(Subquery(asked, output_field=IntegerField()), 1)
    )
    return list(stale.select_related("user").order_by("-asked", "-created_at")[:count])


def _recheck(log: QueryLog, now: datetime) -> bool:
    """Ask the question again as its asker; True when the answer changed."""
    from retrieval.questions import question_answer  # it imports this module's app

    user = log.user if log.user is not None and log.user.is_active else AnonymousUser()
    started = time.perf_counter()
    # From the primary: a recheck follows a change a replica may not have yet.
    result = question_answer(
        question=log.text, user=user, k=_k(log), log=False, replica=False
    )
    same = (
        list(result.quoted.hashes) == list(log.cited_hashes)
        and result.answer == log.answer
    )
    if same:
        QueryLog.objects.filter(pk=log.pk).update(
            status=Status.CURRENT, rechecked_at=now
        )
        return False
    # Logged for the asker (whose sources it searched, and who reads it again),
    # as a recheck: no reader typed it, so it counts as nobody's question.
    new_id = sql.query_log_insert(
        kind=QueryLog.Kind.RECHECK,
        text=log.text,
        answer=result.answer,
        user=log.user_id,
        chunk_ids=result.chunk_ids,
        scores=result.scores,
        abstained=result.abstained,
        latency_ms=round((time.perf_counter() - started) * 1000),
        created_at=now,
        cited_hashes=list(result.quoted.hashes),
        cited_pages=list(result.quoted.pages),
        recheck_of=log.pk,
        **asdict(result.confidence),
    )
    QueryLog.objects.filter(pk=log.pk).update(
        status=Status.SUPERSEDED, superseded_by=new_id, rechecked_at=now
    )
    return True


def _k(log: QueryLog) -> int:
    """As many passages as the first answer was given (its retrieved chunks)."""
    return max(1, min(20, len(log.chunk_ids) or DEFAULT_K))


def answer_history(log: QueryLog) -> list[QueryLog]:
    """The answer and those that superseded it, oldest first (back to the first
    answer the question got, then on to the current one)."""
    first = log
    seen = {log.pk}
    while first.recheck_of_id is not None and first.recheck_of_id not in seen:
        seen.add(first.recheck_of_id)
        first = QueryLog.objects.get(pk=first.recheck_of_id)
    chain = [first]
    while chain[-1].superseded_by_id is not None and len(chain) < 50:
        following = QueryLog.objects.filter(pk=chain[-1].superseded_by_id).first()
        if following is None or following.pk in {c.pk for c in chain}:
            break
        chain.append(following)
    return chain


def answer_for(user: Caller, log_id: int) -> QueryLog | None:
    """A logged answer its asker may read again (and a superuser); an anonymous
    asker's cannot be told from another's, so it is nobody's (nor the system's,
    which asks no question of its own)."""
    caller = caller_check(user)
    if isinstance(caller, System) or not caller.is_authenticated:
        return None
    answers = QueryLog.objects.filter(kind__in=QueryLog.ANSWERS).select_related(
        "stale_change__page"
    )
    if not getattr(caller, "is_superuser", False):
        answers = answers.filter(user_id=caller.pk)
    return answers.filter(pk=log_id).first()


def change_readable(change: PageVersion, *, user: Caller) -> bool:
    """Whether ``user`` may read the source of ``change`` now: the one where it
    was recorded and the one its page is in (whose title and address it shows),
    by the rule every search reads through."""
    sources = {change.source_id or change.page.source_id, change.page.source_id}
    readable = Source.objects.searchable_by(user).filter(pk__in=sources)
    return readable.count() == len(sources)


def answer_sources(log: QueryLog, *, user: Caller) -> list[Page | None]:
    """The pages an answer cited, in the order of its [n] markers (renumbered 1 to
    n when it was given): each as it is now, or None where ``user`` may no longer
    read it (or it left the index), so that the numbers still line up."""
    readable = Page.objects.filter(
        pk__in=log.cited_pages, source__in=Source.objects.searchable_by(user)
    ).only("url", "title", "status", "last_verified_at", "last_changed_at")
    pages = {page.pk: page for page in readable}
    return [pages.get(pk) for pk in log.cited_pages]


def _sources_report(log: QueryLog, *, user: Caller) -> list[dict | None]:
    return [
        None
        if page is None
        else {
            "url": page.url,
            "title": page.title,
            "live": page.status == Page.Status.LIVE,
            "last_verified_at": page.last_verified_at,
            "last_changed_at": page.last_changed_at,
        }
        for page in answer_sources(log, user=user)
    ]


def answer_report(
    log: QueryLog, diff_url: Callable[[PageVersion], str], *, user: Caller
) -> dict:
    """What became of an answer, as ``user`` may read it now: its status, the
    change that made it stale, and every answer the question got since, oldest
    first. The change is shown only while ``user`` may read its source: an asker
    who lost access to it learns nothing of it (its page, title or summary)."""
    history = answer_history(log)
    current = history[-1]
    change = log.stale_change or next(
        (a.stale_change for a in reversed(history) if a.stale_change_id), None
    )
    if change is not None and not change_readable(change, user=user):
        change = None
    return {
        "id": log.pk,
        "question": log.text,
        "answer": log.answer,
        "abstained": log.abstained,
        "asked_at": log.created_at,
        "status": log.status,
        "stale_at": log.stale_at,
        "rechecked_at": log.rechecked_at,
        "superseded_by": log.superseded_by_id,
        "change": None if change is None else {
            "kind": change.kind,
            "summary": change.summary,
            "title": change.page.title,
            "page_url": change.page.url,
            "changed_at": change.recorded_at,
            "diff_url": diff_url(change),
        },
        "sources": (sources := _sources_report(log, user=user)),
        # When the sources it quoted were last found unchanged (the oldest).
        "checked_at": min(
            (s["last_verified_at"] for s in sources if s and s["last_verified_at"]),
            default=None,
        ),
        "current": {"id": current.pk, "answer": current.answer,
                    "asked_at": current.created_at,
                    "sources": _sources_report(current, user=user)},
        "history": [
            {"id": a.pk, "answer": a.answer, "status": a.status,
             "asked_at": a.created_at, "rechecked_at": a.rechecked_at}
            for a in history
        ],
    }  # fmt: skip
