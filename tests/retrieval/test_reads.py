"""Searching and answering read the index: they never register, index or change it."""

from __future__ import annotations

import re

from django.db import connection
from django.test.utils import CaptureQueriesContext

from retrieval.models import EmbeddingSpace
from retrieval.questions import question_answer, search_run
from sources.models import SYSTEM
from tests.world import HarborWorld

WRITE = re.compile(
    r"^\s*(INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|TRUNCATE|COPY)\b", re.IGNORECASE
)


def writes(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if WRITE.match(q["sql"])]


class ReadsAreReadsTests(HarborWorld):
    def test_a_search_and_a_question_write_nothing(self):
        with CaptureQueriesContext(connection) as queries:
            results = search_run(
                query="how do I retry a job", user=SYSTEM, k=5, log=False
            )
            answer = question_answer(
                question="How are failed jobs retried?", user=SYSTEM, k=5, log=False
            )

        assert results and answer.citations, "the index answered"
        assert writes(queries) == []

    def test_a_logged_question_writes_its_log_row_and_nothing_else(self):
        with CaptureQueriesContext(connection) as queries:
            question_answer(question="How are failed jobs retried?", user=SYSTEM, k=5)

        (insert,) = writes(queries)
        assert insert.startswith('INSERT INTO "retrieval_querylog" ')

    def test_searching_an_index_with_no_embedding_space_creates_none(self):
        EmbeddingSpace.objects.all().delete()

        with CaptureQueriesContext(connection) as queries:
            search_run(query="how do I retry a job", user=SYSTEM, k=5, log=False)

        assert writes(queries) == []
        assert not EmbeddingSpace.objects.exists()
