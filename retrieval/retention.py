"""How long the query log keeps its rows.

Every search and question adds a row, and one address may add about 150 a minute
within its throttle, so rows older than ``QUERY_LOG_DAYS`` are deleted by a
periodic job (and ``manage.py prune_query_log``). Two kinds stay:

- a row a reader rated (useful or not): the docs owner's material;
- every answer of a question asked again (``retrieval.rechecks``) while one of them
  stays: the answers of one question are one history, linked by ``recheck_of`` and
  ``superseded_by``, and ``/answers/<id>/`` shows it whole from any of them. A
  question asked long ago whose answer changed last week keeps its first answer,
  so the link its asker kept still opens.

Rows go a batch at a time, each batch its own transaction, in the order they were
made (a keyset on the time and id, so rows kept stay behind and are not read
again by the next batch).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from retrieval.models import QueryLog

# Rows read, and at most deleted, in one transaction.
PRUNE_BATCH = 1_000


@dataclass(frozen=True)
class PruneBatch:
    examined: int  # unrated rows older than the cutoff
    deleted: int


def query_log_cutoff(
    *, now: datetime | None = None, days: int | None = None
) -> datetime | None:
    """When rows older than ``days`` (``QUERY_LOG_DAYS`` unless given) were made
    before; None when 0 keeps every row."""
    days = settings.QUERY_LOG_DAYS if days is None else days
    return (now or timezone.now()) - timedelta(days=days) if days else None


def query_log_prune(*, now: datetime | None = None) -> int:
    """Delete the rows older than ``QUERY_LOG_DAYS`` that nothing keeps; how many."""
    before = query_log_cutoff(now=now)
    if before is None:
        return 0
    return sum(done.deleted for done in query_log_prune_batches(before=before))


def query_log_prune_batches(
    *, before: datetime, batch: int = PRUNE_BATCH
) -> Iterator[PruneBatch]:
    """Delete the unrated rows made before ``before``, oldest first, a batch at
    a time, but those an answer's history keeps; what each batch did."""
    unrated = QueryLog.objects.unrated_before(before).order_by("created_at", "pk")
    rows = unrated
    columns = ("pk", "created_at", "recheck_of_id", "superseded_by_id")
    while found := list(rows.values_list(*columns)[:batch]):
        linked = {pk for pk, _, back, ahead in found if back or ahead}
        doomed = {pk for pk, *_ in found} - _kept_by_history(linked, before=before)
        # Only the ids: the collector reads the rows it deletes, text and all.
        deleted = QueryLog.objects.filter(pk__in=doomed).only("pk").delete()[1]
        yield PruneBatch(len(found), deleted.get(QueryLog._meta.label, 0))
        last_pk, last_at = found[-1][:2]
        # The bound on the time alone first: the scan starts there in the index.
        rows = unrated.filter(
            Q(created_at__gte=last_at) & (Q(created_at__gt=last_at) | Q(pk__gt=last_pk))
        )


def _kept_by_history(ids: set[int], *, before: datetime) -> set[int]:
    """Of ``ids`` (answers of questions asked again), those whose history holds
    a row made since ``before`` or rated. A history is walked both ways, a step
    per query for all of them at once; it is as long as its question was asked
    again with a new answer, a handful of times."""
    links: dict[int, tuple[int | None, int | None]] = {}
    keeps: set[int] = set()
    asked: set[int] = set()  # a row deleted meanwhile is not asked for again
    frontier = set(ids)
    while frontier:
        asked |= frontier
        rows = QueryLog.objects.filter(pk__in=frontier).values_list(
            "pk", "recheck_of_id", "superseded_by_id", "created_at", "feedback"
        )
        for pk, back, ahead, created_at, feedback in rows:
            links[pk] = (back, ahead)
            if created_at >= before or feedback is not None:
                keeps.add(pk)
        ends = {n for pair in links.values() for n in pair if n is not None}
        frontier = ends - asked
    return {pk for pk in ids if _reachable(pk, links) & keeps}


def _reachable(start: int, links: dict[int, tuple[int | None, int | None]]) -> set[int]:
    """The rows linked to ``start``, itself included, through ``links``."""
    seen, todo = {start}, [start]
    while todo:
        for n in links.get(todo.pop(), (None, None)):
            if n is not None and n not in seen:
                seen.add(n)
                todo.append(n)
    return seen
