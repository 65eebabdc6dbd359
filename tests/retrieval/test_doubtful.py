"""Doubtful answers: what a logged answer keeps of how sure its search was, and
the rule that reads it (``retrieval.asked.doubtful``)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from django.utils import timezone

from retrieval.asked import DOUBTFUL_LEAD, DOUBTFUL_SIMILARITY, doubtful
from retrieval.models import Chunk, QueryLog
from retrieval.questions import question_answer
from retrieval.search import Hit, chunks_search, page_lead
from tests.world import HarborWorld

QUERY, RECHECK, SEARCH = (
    QueryLog.Kind.QUERY,
    QueryLog.Kind.RECHECK,
    QueryLog.Kind.SEARCH,
)
HELPFUL, UNHELPFUL = QueryLog.Feedback.HELPFUL, QueryLog.Feedback.UNHELPFUL
FLOOR = 0.40
# A confident answer: far above the floor, its words held, its page well ahead.
SURE = {"similarity": 0.70, "floor": FLOOR, "held": 1.0, "lead": 0.20}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("logged", "expected"),
    [
        ({}, False),
        ({"similarity": 0.42, "held": 0.3}, True),
        ({"similarity": FLOOR, "held": 0.3}, True),  # at the floor: it counts
        ({"similarity": FLOOR + DOUBTFUL_SIMILARITY - 0.001, "held": 0.3}, True),
        ({"similarity": FLOOR + DOUBTFUL_SIMILARITY + 0.001, "held": 0.3}, False),
        # Near the floor, but one passage holds enough of its words to answer.
        ({"similarity": 0.42, "held": 0.6}, False),
        # Under the floor: the answer stood on its words alone.
        ({"similarity": 0.38, "held": 0.9}, False),
        # No floor learned: nothing to be near.
        ({"similarity": 0.42, "floor": None, "held": 0.3}, False),
        ({"lead": 0.01}, True),
        ({"lead": 0.0}, True),  # a tie
        ({"lead": DOUBTFUL_LEAD - 0.001}, True),
        ({"lead": 0.0455}, False),  # both lists put the same two pages first
        ({"lead": -0.05}, False),  # put first by a word of the question's own
        ({"lead": 0.01, "abstained": True}, False),
        ({"similarity": 0.42, "held": 0.3, "abstained": True}, False),
        ({"lead": 0.01, "kind": RECHECK}, False),
        ({"similarity": 0.42, "held": 0.3, "kind": SEARCH}, False),
        ({"lead": 0.01, "feedback": HELPFUL}, False),
        ({"lead": 0.01, "feedback": UNHELPFUL}, False),  # in its own section
        # Logged before the confidence was kept.
        ({"similarity": None, "floor": None, "held": None, "lead": None}, False),
    ],
)
def test_which_answers_are_doubtful(logged: dict, expected: bool):
    row = {"kind": QUERY, "abstained": False, **SURE, **logged}
    log = QueryLog.objects.create(text="How do I pause a queue?", latency_ms=5, **row)

    assert QueryLog.objects.filter(doubtful(), pk=log.pk).exists() is expected


def hit(page_id: int, score: float) -> Hit:
    return Hit(pk=page_id * 10 + round(score * 1000), page_id=page_id, score=score)


@pytest.mark.parametrize(
    ("hits", "lead"),
    [
        ([], None),
        ([hit(1, 0.119)], 1.0),  # no other page came
        ([hit(1, 0.119), hit(1, 0.119), hit(2, 0.1136)], 0.0454),
        ([hit(1, 0.1169), hit(2, 0.1158), hit(3, 0.05)], 0.0094),
        ([hit(1, 0.1), hit(2, 0.1)], 0.0),
        # First by a word of its own, though another page scored more.
        ([hit(1, 0.09), hit(2, 0.1)], -0.1111),
    ],
)
def test_the_first_pages_lead_is_over_the_next_page_not_its_own_chunks(hits, lead):
    assert page_lead(hits) == lead


class LoggedConfidenceTests(HarborWorld):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.reader = User.objects.create_user("reader")

    @override_settings(RELEVANCE_FLOOR=0.2)
    def test_an_answer_keeps_how_sure_its_search_was(self):
        question = "How do I pause a queue?"
        search = chunks_search(query=question, user=self.reader, k=5)

        answer = question_answer(question=question, user=self.reader, k=5)

        log = QueryLog.objects.get(pk=answer.log_id)
        evidence = search.evidence
        assert not log.abstained and log.created_at <= timezone.now()
        assert (log.similarity, log.floor, log.held) == (
            round(evidence.similarity, 4), 0.2, evidence.held,
        )  # fmt: skip
        # The lead, from the log's own scores: its first two pages'.
        pages = dict(
            Chunk.objects.filter(pk__in=log.chunk_ids).values_list("pk", "page")
        )
        first: dict[int, float] = {}
        for pk, score in zip(log.chunk_ids, log.scores, strict=True):
            first.setdefault(pages[pk], score)
        top, second = list(first.values())[:2]
        assert log.lead == pytest.approx((top - second) / top, abs=1e-3)
        assert log.lead == answer.confidence.lead

    def test_an_abstention_keeps_its_evidence_and_no_lead(self):
        answer = question_answer(
            question="What is the boiling point of tungsten?", user=self.reader, k=5
        )

        log = QueryLog.objects.get(pk=answer.log_id)
        assert log.abstained and log.lead is None
        assert log.similarity is not None and log.held is not None
