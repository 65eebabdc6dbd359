"""Sections pinned to answer groups of readers' questions.

From a group on *Questions readers asked*, an editor finds the section that answers
it and pins it (``pin_create``): the group's questions are kept with the pin, and
a question asked later gets that section first, cited, when it is as near one of
them as a question the group would take (``retrieval.grouping.group_similarity``).
The pin holds the section as it was: when a recrawl changes or removes it, the pin
stops answering and waits in the admin for an editor to look again
(``pins_review``), rather than vouching for text nobody read.

Who may pin what is the admin's rule (the editor sees the page's source); who is
answered from a pin is search's: a pin answers only a search that may return its
section (the asker may read the source, the filters take it in).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import Q
from pgvector.django import CosineDistance

from kbsite.models import TransactionNow
from kbsite.text import count_tokens
from retrieval.grouping import group_similarity, question_key
from retrieval.models import Chunk, Pin, PinQuestion
from retrieval.searchable import Searchable
from retrieval.spaces import serving, usage_record
from sources.models import Caller, Page

# A question gets a pinned section when it is as similar to one of the pin's
# questions as the questions page needs to count two questions as the same request
# (``retrieval.grouping.group_similarity``, which follows the space's floor), so a
# pin answers what its group would take in. Lower bars were tried on the question
# vectors of the BorgBackup set (docs/quality.md): at 0.55 the second phrasings of
# 35% of the pinned questions reached their pin, and 15% of the other questions
# reached a pin of another page; at 0.70, 12% and none.
# Pinned questions read per search, nearest first: a question near several pins
# takes the nearest whose section the search may return.
PIN_CANDIDATES = 5
# Characters of the section kept with the pin, for its review.
EXCERPT_CHARS = 600
# Questions of a group kept with its pin, the most asked first.
PIN_QUESTIONS = 50


@dataclass(frozen=True)
class PinMatch:
    pin_id: int
    chunk_id: int
    similarity: float  # of the question to the pinned question it is nearest
    question: str  # that pinned question
    pinned_at: datetime


def section_chunks(chunk: Chunk) -> list[Chunk]:
    """The chunks of ``chunk``'s section: its page's run of chunks under the same
    heading path, around it."""
    chunks = list(
        Chunk.objects.filter(page_id=chunk.page_id)
        .only("position", "heading", "embed_hash", "text", "anchor")
        .order_by("position")
    )
    at = next(i for i, c in enumerate(chunks) if c.pk == chunk.pk)
    first = at
    while first > 0 and chunks[first - 1].heading == chunk.heading:
        first -= 1
    last = at
    while last + 1 < len(chunks) and chunks[last + 1].heading == chunk.heading:
        last += 1
    return chunks[first : last + 1]


def _section_held(chunk: Chunk) -> dict[str, object]:
    """What a pin holds of ``chunk``'s section as it reads now: the chunk picked,
    every chunk of the section by text hash, its anchor and an excerpt."""
    section = section_chunks(chunk)
    return {
        "chunk_hash": chunk.embed_hash,
        "section_hashes": [c.embed_hash for c in section],
        "anchor": chunk.anchor,
        "excerpt": "\n\n".join(c.text for c in section)[:EXCERPT_CHARS],
    }


def pin_create(*, chunk: Chunk, questions: Sequence[str], user: Caller) -> Pin:
    """Pin ``chunk``'s section to answer ``questions`` (each distinct question
    once, as first spelled). The questions are embedded before the transaction:
    the model may be an API."""
    distinct: dict[str, str] = {}
    for text in (q.strip() for q in questions):
        if text:
            distinct.setdefault(question_key(text), text)
    texts = list(distinct.values())[:PIN_QUESTIONS]
    if not texts:
        raise ValueError("A pin needs at least one question.")
    vectors = _embedded(texts)
    page = chunk.page
    with transaction.atomic():
        pin = Pin.objects.create(
            page=page,
            url=page.url,
            title=page.title[:500],
            heading=chunk.heading,
            created_by_id=getattr(user, "pk", None),
            **_section_held(chunk),
        )
        PinQuestion.objects.bulk_create(
            PinQuestion(pin=pin, text=text, space=space, vector=vector)
            for text, (space, vector) in zip(texts, vectors, strict=True)
        )
    return pin


def pin_renew(pin: Pin) -> bool:
    """Pin the section as it reads now (an editor reviewed it): the pin answers
    again. False when the page no longer has a section of that heading."""
    if pin.page_id is None:
        return False
    chunk = (
        Chunk.objects.filter(page_id=pin.page_id, heading=pin.heading)
        .order_by("position")
        .first()
    )
    if chunk is None or pin.page is None or not pin.page.is_live:
        return False
    for name, value in _section_held(chunk).items():
        setattr(pin, name, value)
    pin.state = Pin.State.ACTIVE
    pin.reason = ""
    pin.review_since = None
    pin.save()
    return True


def pin_match(
    *,
    vector: Sequence[float],
    space: str,
    searchable: Searchable,
    floor: float | None = None,
) -> PinMatch | None:
    """The pinned section a question of this vector gets first, if any: that of
    the nearest pinned question at least ``group_similarity(floor)`` similar whose
    section the search may return."""
    rows = (
        PinQuestion.objects.filter(
            _answering(searchable),
            space=space,
            vector__isnull=False,
        )
        .annotate(distance=CosineDistance("vector", list(vector)))
        .filter(distance__lte=1 - group_similarity(floor))
        .order_by("distance")
        .values_list("pin_id", "text", "distance", "pin__page_id", "pin__chunk_hash",
                     "pin__created_at")[:PIN_CANDIDATES]
    )  # fmt: skip
    for pin_id, text, distance, page_id, chunk_hash, created_at in rows:
        chunk_id = (
            Chunk.objects.filter(page_id=page_id, embed_hash=chunk_hash)
            .order_by("position")
            .values_list("pk", flat=True)
            .first()
        )
        if chunk_id is not None:
            return PinMatch(pin_id, chunk_id, 1 - distance, text, created_at)
    return None


def _answering(searchable: Searchable) -> Q:
    """Questions of pins in force whose page a search of ``searchable`` returns."""
    condition = Q(pin__state=Pin.State.ACTIVE, pin__page__status=Page.Status.LIVE)
    if searchable.source_ids is not None:
        condition &= Q(pin__page__source_id__in=searchable.source_ids)
    if searchable.verified_since is not None:
        condition &= Q(pin__page__last_verified_at__gte=searchable.verified_since)
    return condition


def pins_review(*, page_id: int, removed: set[str], headings: Iterable[str]) -> int:
    """Pins of the page whose section lost one of the ``removed`` texts stop
    answering and wait for review: *changed* when the page still has a section
    of that heading (``headings``: those it holds now), else *gone*. Call in the
    transaction that swaps the page's chunks. Returns how many."""
    if not removed:
        return 0
    pins = Pin.objects.filter(
        page_id=page_id,
        state=Pin.State.ACTIVE,
        section_hashes__overlap=sorted(removed),
    )
    held = set(headings)
    changed = pins.filter(heading__in=held).update(
        state=Pin.State.REVIEW, reason=Pin.Reason.CHANGED, review_since=TransactionNow()
    )
    gone = pins.update(
        state=Pin.State.REVIEW, reason=Pin.Reason.GONE, review_since=TransactionNow()
    )
    return changed + gone


def pin_vectors_fill(*, limit: int) -> int:
    """Embed the pinned questions that have no vector in the serving space (the
    model changed since they were pinned); returns how many were."""
    embedder, _ = serving()
    rows = list(
        PinQuestion.objects.exclude(space=embedder.space)
        .order_by("pk")
        .values_list("pk", "text")[:limit]
    )
    if not rows:
        return 0
    vectors = embedder.embed_queries([text for _, text in rows])
    for (pk, _), vector in zip(rows, vectors, strict=True):
        PinQuestion.objects.filter(pk=pk).update(space=embedder.space, vector=vector)
    usage_record(
        space=embedder.space,
        requests=1,
        inputs=len(rows),
        tokens=sum(count_tokens(text) for _, text in rows),
    )
    return len(rows)


def _embedded(texts: list[str]) -> list[tuple[str, list[float]]]:
    embedder, _ = serving()
    vectors = embedder.embed_queries(texts)
    usage_record(
        space=embedder.space,
        requests=1,
        inputs=len(texts),
        tokens=sum(count_tokens(text) for text in texts),
    )
    return [(embedder.space, list(vector)) for vector in vectors]
