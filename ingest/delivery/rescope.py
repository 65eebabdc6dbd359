"""Pages put back where the scope rule says they belong (``sources.scope``).

A source's seeds or patterns change, a source is added or removed, and pages held
by one source may belong to another now (they move, with their chunks, vectors and
line shapes) or to none (they leave search and their content is dropped: a deny
pattern is a promise that the text is not served). A page never carries its text
across a group line: given to a source managed by other groups, it leaves search
first, content dropped, and its new source reads it afresh. A delivery of such a
page does the same for that one page before it is ingested.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone
from django_q.tasks import async_task

from ingest.delivery.content import page_lock
from retrieval.indexing import page_chunks_replace
from sources.models import LineShape, Page, PageVersion, Source
from sources.scope import ScopeMap
from sources.services import page_shapes_record

TASK = "ingest.tasks.pages_rescope_task"
BATCH = 2_000


@dataclass
class Rescoped:
    moved: list[tuple[str, str]] = field(default_factory=list)  # (url, to)
    retired: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{len(self.moved)} pages moved, {len(self.retired)} left every scope"


def page_rescope(*, page: Page, owner: Source | None) -> Page:
    """Give the page to ``owner``, the source its URL belongs to, or take it out of
    search if that is none. Returns the page as it is now."""
    with transaction.atomic():
        locked = page_lock(page)
        if owner is None:
            if locked.status != Page.Status.GONE or locked.next_crawl_at is not None:
                _retire(locked)
        elif owner.pk != locked.source_id:
            if owner.manager_ids != locked.source.manager_ids:
                if locked.status == Page.Status.LIVE or locked.markdown:
                    _retire(locked)
                # Its new source reads it afresh at its next crawl.
                locked.next_crawl_at = timezone.now()
            _move(locked, owner)
    return locked


def _retire(page: Page) -> None:
    now = timezone.now()
    change = PageVersion.objects.create(
        page=page,
        source_id=page.source_id,
        kind=PageVersion.Kind.OUT_OF_SCOPE,
        recorded_at=now,
    )
    # The answers that quoted it are stale by this change, as by any other.
    page_chunks_replace(page=page, drafts=[], change=change)
    page_shapes_record(page=page, shapes={})
    page.mark_out_of_scope(at=now)
    page.save()


def _move(page: Page, owner: Source) -> None:
    # The page's line shapes leave the old source's counts and join the new one's,
    # with the example lines the old source kept for them.
    examples = dict(
        LineShape.objects.filter(
            source_id=page.source_id, shape__in=page.line_shapes
        ).values_list("shape", "example")
    )
    shapes = {shape: examples.get(shape, "") for shape in page.line_shapes}
    page_shapes_record(page=page, shapes={})
    page.source = owner
    page_shapes_record(page=page, shapes=shapes)
    page.save(update_fields=["source", "line_shapes", "next_crawl_at"])


def pages_rescope(*, pages: Iterable[Page] | None = None) -> Rescoped:
    """Every page (or these) checked against the scope rule, and moved or retired
    where it no longer belongs to its source. Pages already out of every scope are
    left as they are."""
    scope = ScopeMap()
    done = Rescoped()
    chosen = pages if pages is not None else _pages_held()
    for page in chosen:
        owner = scope.source_for(page.url)
        if owner is not None and owner.pk == page.source_id:
            continue
        if owner is None and page.status == Page.Status.GONE and not page.next_crawl_at:
            continue
        page_rescope(page=page, owner=owner)
        if owner is None:
            done.retired.append(page.url)
        else:
            done.moved.append((page.url, owner.name))
    return done


def _pages_held() -> Iterable[Page]:
    fields = ["pk", "url", "source_id", "status", "next_crawl_at"]
    return Page.objects.only(*fields).order_by("pk").iterator(chunk_size=BATCH)


def pages_rescope_soon() -> None:
    """Queue a check of every page once the transaction that changed a source's
    scope commits."""
    transaction.on_commit(lambda: async_task(TASK, task_name="pages rescoped"))
