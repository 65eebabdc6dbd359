"""The API's per-user throttles, counted in the database every web process shares,
in one statement per request."""

from __future__ import annotations

from django.db import connection
from psycopg import sql
from rest_framework.throttling import ScopedRateThrottle

from kbsite.models import ThrottleWindow
from kbsite.sqlrows import Insert, column, table

# Count a request, unless the caller already has ``limit`` in the period; a row
# comes back when it was counted.
HIT_INSERT = Insert(
    ThrottleWindow,
    ("key", "hits"),
    """
    INSERT INTO {table} AS t ({columns})
    VALUES (%(key)s, ARRAY[%(now)s::float8])
    ON CONFLICT ({key}) DO UPDATE
    SET {hits} = ARRAY(SELECT h FROM unnest(t.{hits}) h WHERE h > %(since)s)
                 || %(now)s::float8
    WHERE (SELECT count(*) FROM unnest(t.{hits}) h WHERE h > %(since)s)
          < %(limit)s
    RETURNING NULL
    """,
)
HITS_SQL = (
    sql.SQL("SELECT {hits} FROM {table} WHERE {key} = %s")
    .format(
        hits=column(ThrottleWindow, "hits"),
        table=table(ThrottleWindow),
        key=column(ThrottleWindow, "key"),
    )
    .as_string()
)


class SharedRateThrottle(ScopedRateThrottle):
    """DRF's scoped throttle (a view's ``throttle_scope``, at most N requests in
    any period of the rate's length), but counted by one ``INSERT … ON CONFLICT``
    instead of a read and a write of the cache table."""

    def allow_request(self, request, view) -> bool:
        self.scope = getattr(view, self.scope_attr, None)
        if not self.scope:
            return True
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)
        self.key = self.get_cache_key(request, view)
        if self.num_requests is None or self.duration is None or self.key is None:
            return True
        self.now = self.timer()
        self.waiting = request_count(
            self.key, now=self.now, period=self.duration, limit=self.num_requests
        )
        return self.waiting is None

    def wait(self) -> float | None:
        return self.waiting


def request_count(key: str, *, now: float, period: float, limit: int) -> float | None:
    """Count a request at ``now`` if fewer than ``limit`` were counted in the
    ``period`` seconds before it; else the seconds until one of those ages out.

    The row is locked while it is updated, so concurrent requests of one caller
    in any process are counted one after the other."""
    if limit <= 0:
        return float(period)
    since = now - period
    with connection.cursor() as cursor:
        cursor.execute(
            HIT_INSERT.sql, {"key": key, "now": now, "since": since, "limit": limit}
        )
        if cursor.fetchone() is not None:
            return None
        cursor.execute(HITS_SQL, [key])
        row = cursor.fetchone()
    recent = sorted(h for h in (row[0] if row else []) if h > since)
    if len(recent) < limit:  # some aged out meanwhile
        return 0.0
    # Allowed again once all but limit - 1 of them have aged out (more than one
    # when the limit was lowered since they were counted).
    return max(0.0, recent[len(recent) - limit] + period - now)
