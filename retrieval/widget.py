"""The Ask widget: what a page of another site may read through it, and its keys.

A browser asking from a page names the page's site in its ``Origin`` header; the
widget's endpoint reads no cookie and no token, so that is all it knows of the
asker, besides a widget key the page may carry. On an origin, the widget reads:

- without a key, the public sources that list the origin among their Ask widget
  origins (``Source.widget_origins``);
- with a key, the key's sources that list the origin, if the key names the
  origin too. A key is public (it is in the page), so it never reaches a
  source, public or not, that it does not name, nor a site it does not name.

An origin no source lists is refused outright, and gets no CORS header: its
pages cannot read the answer. The reader is a ``WidgetReader`` holding those
sources' ids, which the one rule of who reads what (``Source.objects
.searchable_by``) and every search read through.

What the origin check is worth: browsers send ``Origin`` and scripts cannot
change it, so another site's pages cannot use a key; a program outside a browser
can send any origin, so whatever a key names is readable by whoever has the key,
as the pages that carry it are.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from kbsite.canonical import web_origin
from retrieval.models import WidgetKey
from sources.models import Caller, Source, WidgetReader

# A key's last use is written at most this often: not on every question.
LAST_USED_EVERY = timedelta(hours=1)


class WidgetRefused(Exception):
    """The widget may not read anything here: ``code`` and ``detail`` for the
    asker (and the site's owner reading the browser's console)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code, self.detail = code, detail


def widget_origin(header: str | None) -> str:
    """The asking page's origin from a request's ``Origin`` header; refused when
    there is none (not a browser, or a page of no site, whose origin is
    ``null``)."""
    try:
        return web_origin(header or "")
    except ValueError:
        raise WidgetRefused(
            "origin_required",
            "The Ask widget answers pages of the sites its sources allow, and "
            "this request names no site (Origin header). Programs ask "
            "/api/query/.",
        ) from None


def widget_origin_allowed(*, origin: str) -> bool:
    """Whether some source allows the widget on ``origin``: such an origin gets
    CORS headers (its preflight, and errors its pages can read); any other is
    refused."""
    return Source.objects.allowing_origin(origin).exists()


def widget_reader(*, origin: str, key: str = "") -> WidgetReader:
    """The reader a page of ``origin`` is, with ``key`` if it gave one: the
    sources it may read (see the module's docstring), or ``WidgetRefused``."""
    if not key:
        sources = Source.objects.filter(public=True)
        missing = f"No public source allows the Ask widget on {origin}."
    else:
        found = widget_key_find(key=key)
        if found is None:
            raise WidgetRefused("key_refused", "This widget key is unknown or revoked.")
        if not found.allows(origin):
            raise WidgetRefused(
                "origin_not_allowed", f"This widget key is not for {origin}."
            )
        sources = found.sources.all()
        missing = f"None of this widget key's sources allows {origin}."
    ids = list(sources.allowing_origin(origin).values_list("pk", flat=True))
    if not ids:
        raise WidgetRefused("origin_not_allowed", missing)
    return WidgetReader(ids)


# -- keys ----------------------------------------------------------------------------


def widget_key_create(
    *, name: str, sources: Iterable[Source], origins: list[str], user: Caller
) -> tuple[WidgetKey, str]:
    """A new key: the row, and the key, to be shown once."""
    editor = user.pk if user.is_authenticated else None
    row = WidgetKey(name=name, origins=origins, created_by_id=editor)
    key = row.key_set()
    row.full_clean(exclude=["sources"])
    row.save()
    row.sources.set(sources)
    return row, key


def widget_key_find(*, key: str) -> WidgetKey | None:
    """The active key ``key`` is. Looked up by the key's SHA-256 (no comparison
    runs on the key itself); its last use is written once an hour at most."""
    if not key.startswith(WidgetKey.PREFIX) or len(key) > 200:
        return None
    found = WidgetKey.objects.active().filter(key_hash=WidgetKey.digest(key)).first()
    if found is not None:
        now = timezone.now()
        not_lately = Q(last_used_at=None) | Q(last_used_at__lt=now - LAST_USED_EVERY)
        WidgetKey.objects.filter(not_lately, pk=found.pk).update(last_used_at=now)
    return found
