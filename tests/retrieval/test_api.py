"""The query API through HTTP: auth, validation, the response contract."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient, APIRequestFactory

from kbsite.authentication import TokenAuthentication
from tests.world import HarborWorld, harbor_load, harbor_url

CITATION_FIELDS = {"url", "section_url", "title", "heading", "excerpt", "score",
                   "confident", "pinned_at", "last_verified_at",
                   "last_changed_at"}  # fmt: skip


class ApiTests(HarborWorld):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.user = User.objects.create_user("app", password="a long password 1")
        cls.token = Token.objects.create(user=cls.user)

    def setUp(self):
        self.api = APIClient()
        self.api.credentials(HTTP_AUTHORIZATION=f"Token {self.token.key}")

    def query(self, body):
        return self.api.post("/api/query/", body, format="json")

    def test_a_question_gets_an_answer_with_fresh_citations(self):
        response = self.query({"question": "How do I pause a queue?", "k": 3})

        assert response.status_code == 200
        data = response.json()
        assert set(data) == {"answer", "abstained", "citations", "chunk_ids",
                             "answer_id", "answer_url"}  # fmt: skip
        assert data["abstained"] is False
        assert data["citations"][0]["url"] == harbor_url("queues")
        assert all(set(c) == CITATION_FIELDS for c in data["citations"])
        assert all(
            c["last_verified_at"] and c["last_changed_at"] for c in data["citations"]
        )
        assert all(isinstance(i, int) for i in data["chunk_ids"])

    def test_the_number_of_queries_does_not_grow_with_the_results(self):
        question = "How do I pause a queue?"
        requests = {
            "search": lambda k: self.api.get("/api/search/", {"q": question, "k": k}),
            "query": lambda k: self.query({"question": question, "k": k}),
        }
        for name, request in requests.items():
            request(1)  # sessions, tokens
            counts = {}
            for k in (1, 5):
                with CaptureQueriesContext(connection) as queries:
                    data = request(k).json()
                if name == "search":
                    assert len(data["results"]) == k
                else:
                    assert data["citations"], "the answer cites"
                counts[k] = len(queries)

            # A field of a cited page left unread would cost a query per citation.
            assert counts[1] == counts[5], name

    def test_a_citation_links_to_its_section_when_the_page_names_it(self):
        self.ingest(
            harbor_url("upgrading"),
            "# Upgrading {#top}\n\n## Schema migrations {#schema-migrations}\n\n"
            "Run harbor db upgrade after installing a new release.\n",
            content_type="text/markdown",
        )

        response = self.api.get("/api/search/", {"q": "harbor db upgrade", "k": 3})

        first = response.json()["results"][0]
        assert first["url"] == harbor_url("upgrading")
        assert first["section_url"] == harbor_url("upgrading") + "#schema-migrations"
        assert first["heading"] == "Upgrading › Schema migrations"

    def test_search_returns_one_citation_per_page_best_first(self):
        response = self.api.get("/api/search/", {"q": "queue", "k": 10})

        results = response.json()["results"]
        assert response.status_code == 200
        assert len({r["url"] for r in results}) == len(results) > 1
        scores = [r["score"] for r in results]
        assert scores == sorted(scores, reverse=True)
        assert all("](" not in r["excerpt"] for r in results), "excerpts are plain text"

    def test_search_filters_by_source(self):
        response = self.api.get(
            "/api/search/", {"q": "queue", "sources": [self.source.pk]}
        )

        assert response.json() == {"results": []}

    def test_an_unanswerable_question_abstains(self):
        data = self.query(
            {"question": "Who won the football world cup in 1998?"}
        ).json()

        assert data["abstained"] is True
        assert data["citations"] == []

    def test_bad_input_gets_400_with_field_errors(self):
        cases = [
            ({"question": ""}, "question"),
            ({"question": "   "}, "question"),
            ({}, "question"),
            ({"question": 42}, "question"),
            ({"question": "ok", "k": 0}, "k"),
            ({"question": "ok", "k": 500}, "k"),
            ({"question": "ok", "k": "many"}, "k"),
            ({"question": "ok", "sources": "1"}, "sources"),
            ({"question": "x" * 2001}, "question"),
        ]
        for body, field in cases:
            with self.subTest(body=body):
                response = self.query(body)
                assert response.status_code == 400
                assert response.json()["error"] == "invalid"
                assert field in response.json()["fields"]

    def test_search_without_q_gets_400(self):
        response = self.api.get("/api/search/", {"k": "3"})

        assert response.status_code == 400
        assert "q" in response.json()["fields"]

    def test_a_body_that_is_not_json_gets_400(self):
        response = self.api.post(
            "/api/query/", "{not json", content_type="application/json"
        )

        assert response.status_code == 400
        assert response.json()["error"] == "parse_error"

    def test_a_deeply_nested_body_gets_400_not_500(self):
        nested = "[" * 100_000 + "]" * 100_000
        for depth_body in [
            '{"question": "x", "sources": ' + nested + "}",
            '{"question": "x", "sources": ' + "[" * 100 + "1" + "]" * 100 + "}",
        ]:
            response = self.api.post(
                "/api/query/", depth_body, content_type="application/json"
            )

            assert response.status_code == 400, response.content
            assert response.json()["error"] == "parse_error"
            assert "nested" in response.json()["detail"]

    def test_no_token_gets_401(self):
        for response in [
            APIClient().post("/api/query/", {"question": "x"}, format="json"),
            APIClient().get("/api/search/", {"q": "x"}),
        ]:
            assert response.status_code == 401
            assert response.json()["error"] == "not_authenticated"

    def test_a_wrong_token_gets_401(self):
        self.api.credentials(HTTP_AUTHORIZATION="Token nope")

        response = self.query({"question": "x"})
        assert response.status_code == 401
        assert response.json()["detail"] == "Invalid token."

    def test_the_token_of_an_inactive_user_gets_401(self):
        User.objects.filter(pk=self.user.pk).update(is_active=False)

        response = self.query({"question": "x"})
        assert response.status_code == 401
        assert response.json()["detail"] == "User inactive or deleted."

    def test_a_token_authenticates_its_own_user_in_one_query(self):
        other = User.objects.create_user("other")
        Token.objects.create(user=other)
        request = APIRequestFactory().get(
            "/", HTTP_AUTHORIZATION=f"Token {self.token.key}"
        )
        with CaptureQueriesContext(connection) as queries:
            user, token = TokenAuthentication().authenticate(request)

        assert len(queries) == 1
        assert (user, user.username, token, token.user) == (
            self.user, "app", self.token, self.user,
        )  # fmt: skip
        assert token.created == self.token.created

    def test_the_schema_documents_both_endpoints(self):
        schema = self.api.get("/api/schema/", {"format": "json"}).json()

        assert {"/api/query/", "/api/search/"} <= set(schema["paths"])
        assert "QueryResponse" in schema["components"]["schemas"]
        assert schema["components"]["securitySchemes"]["tokenAuth"]["in"] == "header"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_api_answers_over_a_real_socket(live_server):
    harbor_load()
    user = User.objects.create_user("socket", password="a long password 1")
    token = Token.objects.create(user=user)
    request = urllib.request.Request(
        f"{live_server.url}/api/query/",
        data=json.dumps({"question": "What does HB-4042 mean?"}).encode(),
        headers={
            "Authorization": f"Token {token.key}",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        data = json.loads(response.read())

    assert data["citations"][0]["url"] == harbor_url("errors")
    with pytest.raises(urllib.error.HTTPError) as denied:
        urllib.request.urlopen(f"{live_server.url}/api/search/?q=x", timeout=30)
    assert denied.value.code == 401
