"""The API's throttles, counted in the database every web process shares, in one
statement per request: a signed-in caller by user, an anonymous reader by client
address, in a scope (and at a rate) of their own."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import time
from types import SimpleNamespace
from typing import Any

from django.conf import settings
from django.db import connection
from django.http import HttpRequest
from psycopg import sql
from rest_framework.throttling import ScopedRateThrottle

from kbsite.models import ThrottleWindow
from kbsite.sqlrows import Insert, column, table

# The longest period a rate may have (N/day): a caller with no request counted
# within it has nothing left to count, and their row is forgotten.
LONGEST_PERIOD = 24 * 3600

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


IDLE_DELETE = (
    sql.SQL(
        "DELETE FROM {table} t WHERE NOT EXISTS "
        "(SELECT FROM unnest(t.{hits}) h WHERE h > %s)"
    )
    .format(table=table(ThrottleWindow), hits=column(ThrottleWindow, "hits"))
    .as_string()
)


class SharedRateThrottle(ScopedRateThrottle):
    """DRF's scoped throttle (a view's ``throttle_scope``, at most N requests in
    any period of the rate's length), but counted by one ``INSERT … ON CONFLICT``
    instead of a read and a write of the cache table.

    A signed-in caller is counted by user. An anonymous one is counted by client
    address (``address_key``), in the view's ``anonymous_throttle_scope`` when it
    has one (anonymous readers' own rates), else in its ``throttle_scope``.
    """

    anonymous_scope_attr = "anonymous_throttle_scope"

    def allow_request(self, request, view) -> bool:
        self.scope = self.scope_of(request, view)
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

    def scope_of(self, request, view) -> str | None:
        scope = getattr(view, self.scope_attr, None)
        if not _signed_in(request):
            scope = getattr(view, self.anonymous_scope_attr, None) or scope
        return scope

    def get_cache_key(self, request, view) -> str:
        if _signed_in(request):
            ident = str(request.user.pk)
        else:
            ident = address_key(self.get_ident(request))
        return self.cache_format % {"scope": self.scope, "ident": ident}


def _signed_in(request: Any) -> bool:
    user = getattr(request, "user", None)
    return bool(user and user.is_authenticated)


def address_key(address: str | None) -> str:
    """A client address as a throttle counts it: an IPv6 address by its /64 (what
    one subscriber is given, whose other addresses would otherwise each get a
    count of their own), and stored only as a keyed hash (HMAC-SHA256 with
    SECRET_KEY), so the table of counts holds no address.

    The address is the one DRF takes (``NUM_PROXIES``): the connection's, or the
    one that many proxies back in ``X-Forwarded-For``."""
    text = (address or "").strip()
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        pass  # not an address (a proxy's port, or nothing): counted as given
    else:
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is None:
            text = str(ipaddress.IPv6Network((ip, 64), strict=False))
        else:
            text = str(getattr(ip, "ipv4_mapped", None) or ip)
    digest = hmac.new(settings.SECRET_KEY.encode(), text.encode(), hashlib.sha256)
    return "a" + digest.hexdigest()[:32]


def request_wait(request: HttpRequest, *, anonymous_scope: str) -> float | None:
    """For a page outside DRF (the Ask page): None when an anonymous caller's
    request is counted in ``anonymous_scope`` within its rate (the same count as
    the API's), else the seconds to wait. Signed-in callers are not counted."""
    view = SimpleNamespace(
        throttle_scope=None, anonymous_throttle_scope=anonymous_scope
    )
    throttle = SharedRateThrottle()
    if throttle.allow_request(request, view):
        return None
    return throttle.wait()


def throttle_windows_sweep() -> str:
    """Forget the callers with no request counted within the longest period a rate
    may have: an anonymous reader's row (a hash of their address) is kept at most a
    day after their last request. A periodic job (see ``kbsite.apps``)."""
    with connection.cursor() as cursor:
        cursor.execute(IDLE_DELETE, [time.time() - LONGEST_PERIOD])
        return f"{cursor.rowcount} idle throttle windows forgotten"


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
