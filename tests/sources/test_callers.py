"""Who is asking is always named: a user, an anonymous visitor, or the system
itself (``SYSTEM``), which sees every source. No caller at all (None) is refused
by every entry point of the visibility rule, so that a code path that lost its
user fails instead of reading every group's sources."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import Group, User

from retrieval.models import QueryLog
from retrieval.permissions import reader_admitted
from retrieval.questions import query_feedback_record, question_answer, search_run
from retrieval.rechecks import answer_for
from retrieval.search import chunks_search
from retrieval.searchable import searchable_chunks
from sources.feeds import feed_steps
from sources.models import SYSTEM, Page, Source, source_ids_searchable_by
from sources.visibility import rows_visible_to, sees_every_row
from tests.world import page_html, receive_delivery

HR = "https://intranet.example.com/hr/"
BANDS = f"{HR}bands"
QUESTION = "What are the salary bands of the engineering ladder?"


@pytest.fixture
def hr(db) -> Source:
    """A private source of the HR group with one page, and a question its member
    asked of it: nothing an anonymous visitor or another group may read."""
    from ingest.delivery.job import delivery_process

    group = Group.objects.create(name="hr")
    source = Source.objects.create(name="HR", seed_urls=HR)
    source.allowed_groups.add(group)
    member = User.objects.create_user("harriet")
    member.groups.add(group)
    bands = ("Bands", "Salary bands for the engineering ladder.")
    delivery = receive_delivery(BANDS, page_html("Salary bands", bands))
    delivery_process(delivery_id=delivery.pk)
    question_answer(question=QUESTION, user=member, k=5)
    return source


def _cited(result) -> bool:
    return any(c.page.url == BANDS for c in result.citations)


# Every way in to the rule of who sees which source, and what the system sees
# through it: the private source, its page, its text and its changes.
ENTRY_POINTS: list[tuple[str, Callable]] = [
    ("Source.objects.searchable_by",
     lambda u: Source.objects.searchable_by(u).filter(name="HR").exists()),
    ("Source.objects.visible_to",
     lambda u: Source.objects.visible_to(u).filter(name="HR").exists()),
    ("Source.objects.hidden_from", lambda u: not Source.objects.hidden_from(u)),
    ("Source.objects.unsearchable_by",
     lambda u: not Source.objects.unsearchable_by(u)),
    ("source_ids_searchable_by", lambda u: source_ids_searchable_by(u) is None),
    ("sees_every_row", sees_every_row),
    ("rows_visible_to", lambda u: rows_visible_to(
        Page.objects.filter(url=BANDS), source_path="source", user=u).exists()),
    ("QueryLog.objects.visible_to",
     lambda u: QueryLog.objects.visible_to(u).filter(text=QUESTION).exists()),
    ("searchable_chunks", lambda u: searchable_chunks(u).source_ids is None),
    ("the search service", lambda u: any(
        c.page.url == BANDS
        for c in search_run(query="salary bands", user=u, k=5, log=False))),
    ("the search service's chunks", lambda u: any(
        h.chunk.page.url == BANDS
        for h in chunks_search(query="salary bands", user=u, k=5).hits)),
    ("the answer service",
     lambda u: _cited(question_answer(question=QUESTION, user=u, k=5, log=False))),
    ("the change feeds",
     lambda u: feed_steps(u).filter(page__url=BANDS).exists()),
]  # fmt: skip
# Entry points that have nothing to give the system, which asks no question of
# its own and is no reader, but must refuse no caller all the same.
REFUSING_ONLY: list[tuple[str, Callable]] = [
    ("answer_for", lambda u: answer_for(u, QueryLog.objects.get().pk)),
    ("reader_admitted", reader_admitted),
    ("query_feedback_record", lambda u: query_feedback_record(
        log_id=QueryLog.objects.get().pk, user=u, helpful=False)),
]  # fmt: skip


@pytest.mark.parametrize(
    "entry", [e for _, e in ENTRY_POINTS + REFUSING_ONLY],
    ids=[name for name, _ in ENTRY_POINTS + REFUSING_ONLY],
)  # fmt: skip
def test_no_caller_is_refused_never_read_as_the_system(hr, entry):
    with pytest.raises(TypeError, match="a caller is required"):
        entry(None)

    assert QueryLog.objects.count() == 1, "nothing logged for nobody"
    assert QueryLog.objects.get().feedback is None


@pytest.mark.parametrize(
    "entry", [e for _, e in ENTRY_POINTS], ids=[name for name, _ in ENTRY_POINTS]
)
def test_the_system_named_as_such_sees_every_source(hr, entry):
    outsider = User.objects.create_user("olive")

    assert entry(SYSTEM) is True
    assert entry(outsider) is False
