"""Change feeds: what changed in the sources a caller may see, newest first, as
Atom for feed readers and as JSON pages for integrators.

A feed shows exactly the sources a search by the same caller would search
(``source_ids_searchable_by``): an anonymous reader's, the public ones. Callers
prove who they are as on the API (a session or ``Authorization: Token …``) or,
since a feed reader can only be given a URL, by a feed token in it
(``?token=kbf_…``, see ``FeedToken``), which reads feeds only.

JSON pages are cut by a keyset cursor (the step's time and id): ``before`` pages
back through older steps, ``since`` keeps only steps newer than one already read,
which is how an integrator polls. Both run on the index the feed is ordered by,
so a page costs the same at 100 steps as at 100,000.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import cast

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import AnonymousUser
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.feedgenerator import Atom1Feed
from django.utils.html import format_html
from django.views.decorators.http import require_GET
from rest_framework import exceptions

from kbsite.authentication import TokenAuthentication
from sources.models import (
    Caller,
    FeedToken,
    PageVersion,
    Source,
    anonymous_readers_welcome,
    sees_every_source,
    source_ids_searchable_by,
)

# Steps in a JSON page unless ``limit`` says otherwise, and at most.
PAGE_SIZE = 50
PAGE_SIZE_MAX = 200
# Steps in an Atom feed: feed readers keep what they have read.
ATOM_ENTRIES = 100
# Steps whose content can be compared with the one before.
COMPARABLE = {PageVersion.Kind.NEW, PageVersion.Kind.CHANGED, PageVersion.Kind.RESTORED}


# A cursor as ``str(Cursor)`` writes it, or with the step's ``changed_at`` before
# the "~" (an offset rather than "Z", no fraction when it is 0); the id is at most
# 18 digits, so it fits a bigint.
CURSOR_SHAPE = re.compile(
    r"(?P<at>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?(?:Z|[+-]\d{2}:\d{2}))"
    r"~(?P<pk>\d{1,18})",
    re.ASCII,
)


class FeedError(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


@dataclass(frozen=True)
class Cursor:
    at: datetime
    pk: int

    def __str__(self) -> str:
        """In UTC with a "Z", so that it goes into a URL as it is."""
        return f"{self.at.astimezone(UTC):%Y-%m-%dT%H:%M:%S.%fZ}~{self.pk}"

    @classmethod
    def of(cls, step: PageVersion) -> Cursor:
        return cls(step.recorded_at, step.pk)

    @classmethod
    def parse(cls, text: str, name: str) -> Cursor:
        """The cursor ``text`` spells, or a 400 naming parameter ``name``. The
        shape is checked first, in ASCII: a date parser raises, rather than
        answers None, for a 30 February or an offset of 99 hours, and
        ``str.isdigit`` takes a superscript two for a digit."""
        shape = CURSOR_SHAPE.fullmatch(text)
        try:
            if shape is None:
                raise ValueError(text)
            # In UTC, as the feed writes it: a moment that is not a year 1 to
            # 9999 there (0001-01-01T00:00+01:00) raises OverflowError.
            at = datetime.fromisoformat(shape["at"]).astimezone(UTC)
        except (ValueError, OverflowError):
            raise FeedError(
                400, f"{name} is not a cursor from this feed: {text[:80]!r}"
            ) from None
        return cls(at, int(shape["pk"]))


def newer_than(c: Cursor) -> Q:
    """Steps newer than the cursor. The bound on the time alone comes first: it
    lets the scan start at the cursor in the index rather than at one end."""
    return Q(recorded_at__gte=c.at) & (Q(recorded_at__gt=c.at) | Q(pk__gt=c.pk))


def older_than(c: Cursor) -> Q:
    """Steps older than the cursor (see ``newer_than``)."""
    return Q(recorded_at__lte=c.at) & (Q(recorded_at__lt=c.at) | Q(pk__lt=c.pk))


def feed_caller(request: HttpRequest) -> Caller:
    """The user of a session, of an API token, or of a feed token; else an
    anonymous visitor."""
    if request.user.is_authenticated:
        return request.user
    key = request.GET.get("token", "")
    if key:
        user = FeedToken.user_for(key)
        if user is None:
            raise FeedError(
                401, "This feed token is not valid (it may have been replaced)."
            )
        return user
    words = (
        request.headers.get("Authorization", "").encode("latin-1", "replace").split()
    )
    if not words or words[0].lower() != b"token":
        return AnonymousUser()
    if len(words) != 2:
        raise FeedError(401, "Send the API token as: Authorization: Token <key>.")
    try:
        user, _ = TokenAuthentication().authenticate_credentials(words[1].decode())
    except (exceptions.AuthenticationFailed, UnicodeDecodeError):
        raise FeedError(401, "Invalid token.") from None
    return user


def feed_steps(caller: Caller, source_id: int | None = None) -> QuerySet[PageVersion]:
    """The steps of the sources ``caller`` may see (of one of them), newest first,
    with what a feed entry shows of their page and source."""
    steps = PageVersion.objects.select_related("page", "source").only(
        "kind", "recorded_at", "lines_added", "lines_removed", "words_added",
        "words_removed", "sections", "chunks_embedded", "page_id", "source_id",
        "page__title", "page__url", "page__last_verified_at",
        "page__last_changed_at", "source__name",
    )  # fmt: skip
    visible = source_ids_searchable_by(caller)
    if visible is not None:
        steps = steps.filter(source_id__in=visible)
    if source_id is not None:
        steps = steps.filter(source_id=source_id)
    return steps.order_by("-recorded_at", "-id")


def _source_or_404(caller: Caller, source_id: int | None) -> Source | None:
    """The source asked for, if the caller may see it: one they may not see is as
    missing as one that does not exist."""
    if source_id is None:
        return None
    source = Source.objects.searchable_by(caller).filter(pk=source_id).first()
    if source is None:
        raise FeedError(404, "No such source.")
    return source


def _admitted(caller: Caller) -> None:
    """A signed-in caller reads the feeds of their sources; an anonymous one those
    of the public sources, while there are any (as they search them)."""
    if sees_every_source(caller) or caller.is_authenticated:
        return
    if anonymous_readers_welcome():
        return
    raise FeedError(
        401,
        "Log in, or send an API token (Authorization: Token …) or a feed token "
        "(?token=…) to read change feeds.",
    )


def change_entry(step: PageVersion, *, absolute: Callable[[str], str]) -> dict:
    """A change as the JSON feed shows it (and notifications send it): ``absolute``
    makes a path of this site into a full URL."""
    page = step.page
    return {
        "id": step.pk,
        "cursor": str(Cursor.of(step)),
        "kind": step.kind,
        "kind_label": step.get_kind_display(),
        "summary": step.summary,
        "title": page.title,
        "page_url": page.url,
        "source": {
            "id": step.source_id,
            "name": step.source.name if step.source else "",
        },
        "sections": list(step.sections or []),
        "lines_added": step.lines_added,
        "lines_removed": step.lines_removed,
        "words_added": step.words_added,
        "words_removed": step.words_removed,
        "chunks_embedded": step.chunks_embedded,
        "changed_at": step.recorded_at.isoformat(),
        "page_verified_at": (
            page.last_verified_at.isoformat() if page.last_verified_at else None
        ),
        "diff_url": _diff_url(step, absolute),
        # What changed, for whoever may read the source (no admin account needed).
        "change_url": absolute(reverse("feeds-change", args=[step.pk])),
    }


def _diff_url(step: PageVersion, absolute: Callable[[str], str]) -> str | None:
    if step.kind not in COMPARABLE:
        return None
    url = reverse("admin:sources_page_diff", args=[step.page_id])
    return absolute(f"{url}?b={step.pk}")


def _limit(request: HttpRequest) -> int:
    text = request.GET.get("limit", "")
    if not text:
        return PAGE_SIZE
    # ASCII digits, and few: int() refuses "²" and 5,000 nines with ValueError.
    if not re.fullmatch(r"[0-9]{1,3}", text) or not 1 <= int(text) <= PAGE_SIZE_MAX:
        raise FeedError(400, f"limit must be a whole number from 1 to {PAGE_SIZE_MAX}.")
    return int(text)


def _json_error(error: FeedError) -> JsonResponse:
    response = JsonResponse({"detail": error.detail}, status=error.status)
    if error.status == 401:
        response["WWW-Authenticate"] = 'Token realm="feeds"'
    return response


@require_GET
def changes_json(request: HttpRequest, source_id: int | None = None) -> HttpResponse:
    try:
        caller = feed_caller(request)
        _admitted(caller)
        _source_or_404(caller, source_id)
        limit = _limit(request)
        steps = feed_steps(caller, source_id)
        # Present but empty is a bad cursor too, not "from the start".
        if (since := request.GET.get("since")) is not None:
            steps = steps.filter(newer_than(Cursor.parse(since, "since")))
        if (before := request.GET.get("before")) is not None:
            steps = steps.filter(older_than(Cursor.parse(before, "before")))
    except FeedError as error:
        return _json_error(error)
    page = list(steps[: limit + 1])
    more, page = len(page) > limit, page[:limit]
    next_url = None
    if more:
        query = request.GET.copy()
        query["before"] = str(Cursor.of(page[-1]))
        query.pop("token", None)  # the reader adds their own
        next_url = request.build_absolute_uri(f"{request.path}?{query.urlencode()}")
    return JsonResponse(
        {
            "changes": [
                change_entry(step, absolute=request.build_absolute_uri) for step in page
            ],
            "next": next_url,
            "latest": str(Cursor.of(page[0])) if page else request.GET.get("since"),
        }
    )


@require_GET
def changes_atom(request: HttpRequest, source_id: int | None = None) -> HttpResponse:
    try:
        caller = feed_caller(request)
        _admitted(caller)
        source = _source_or_404(caller, source_id)
    except FeedError as error:
        return HttpResponse(
            error.detail, status=error.status, content_type="text/plain"
        )
    name = source.name if source else "every source you may read"
    here = request.build_absolute_uri(request.path)
    feed = Atom1Feed(
        title=f"Changes in {name}",
        link=request.build_absolute_uri(reverse("feeds")),
        description=f"Pages added, changed, moved and gone in {name}.",
        feed_url=here,
        feed_guid=here,
        language="en",
    )
    for step in feed_steps(caller, source_id)[:ATOM_ENTRIES]:
        entry = change_entry(step, absolute=request.build_absolute_uri)
        feed.add_item(
            title=f"{entry['title'] or entry['page_url']}: {entry['summary']}",
            link=entry["change_url"],
            description=_entry_html(entry),
            unique_id=f"{here}#change-{step.pk}",
            unique_id_is_permalink=False,
            pubdate=step.recorded_at,
            updateddate=step.recorded_at,
            categories=[step.kind],
        )
    # Written to a string first: the generator writes each piece of markup apart.
    return HttpResponse(
        feed.writeString("utf-8"), content_type="application/atom+xml; charset=utf-8"
    )


def _entry_html(entry: dict) -> str:
    """An entry's summary and its links: the lines that changed are one click
    away (``change_url``), not copied into every entry of the feed."""
    verified = entry["page_verified_at"] or "never"
    return format_html(
        '<p>{} <a href="{}">{}</a> ({}): {}. <a href="{}">What changed</a>.</p>'
        "<p>Changed {}; page last verified {}.</p>",
        entry["kind_label"], entry["page_url"], entry["title"] or entry["page_url"],
        entry["source"]["name"], entry["summary"], entry["change_url"],
        entry["changed_at"], verified,
    )  # fmt: skip


@login_required
def feeds_page(request: HttpRequest) -> HttpResponse:
    """The caller's feed links, for every source they may read and for each; a
    POST makes a new feed token (the old one stops working), shown this once."""
    user = cast(AbstractBaseUser, request.user)  # logged in
    key = ""
    if request.method == "POST":
        key = FeedToken.issue(user)
    elif request.method != "GET":
        return HttpResponseNotAllowed(["GET", "POST"])
    token = FeedToken.objects.filter(user_id=user.pk).first()

    def links(source: Source | None) -> dict[str, str]:
        args = [source.pk] if source else []
        suffix = f"?token={key}" if key else ""
        return {
            kind: request.build_absolute_uri(
                reverse(f"feeds-{kind}" if source is None else f"feeds-source-{kind}",
                        args=args)
            ) + suffix
            for kind in ("atom", "json")
        }  # fmt: skip

    sources = Source.objects.searchable_by(user).order_by("name")
    return render(
        request,
        "sources/feeds.html",
        {
            "key": key,
            "token": token,
            "every": links(None),
            "sources": [(source, links(source)) for source in sources],
        },
    )
