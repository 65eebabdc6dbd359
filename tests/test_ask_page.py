"""The Ask page, for people: a form, the answer, its sources and their freshness."""

from __future__ import annotations

from django.contrib.auth.models import User

from tests.world import HarborWorld, harbor_url


class AskPageTests(HarborWorld):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.reader = User.objects.create_user("reader", password="a long password 1")

    def test_it_asks_visitors_to_log_in(self):
        response = self.client.get("/")

        assert response.status_code == 302
        assert response["Location"] == "/accounts/login/?next=/"

    def test_it_shows_a_form(self):
        self.client.force_login(self.reader)

        response = self.client.get("/")

        assert response.status_code == 200
        assert b'name="question"' in response.content
        assert b"csrfmiddlewaretoken" in response.content

    def test_a_question_shows_the_answer_and_fresh_sources(self):
        self.client.force_login(self.reader)

        response = self.client.post("/", {"question": "How do I pause a queue?"})

        html = response.content.decode()
        assert response.status_code == 200
        assert "harbor queue pause NAME" in html
        assert f'href="{harbor_url("queues")}"' in html
        assert "verified <time" in html and "changed <time" in html

    def test_scraped_text_is_escaped(self):
        self.ingest(
            harbor_url("xss"),
            "# <script>alert(1)</script> Queues\n\n## Pausing\n\n"
            "Pause queues <img src=x onerror=alert(1)> with harbor queue pause.\n",
            content_type="text/markdown",
        )
        self.client.force_login(self.reader)

        html = self.client.post("/", {"question": "pause queues"}).content.decode()

        assert "<script>alert(1)</script>" not in html
        assert "<img src=x" not in html
        assert "&lt;script&gt;" in html or "&lt;img" in html

    def test_an_empty_question_is_an_error_not_a_crash(self):
        self.client.force_login(self.reader)

        response = self.client.post("/", {"question": "   "})

        assert response.status_code == 200
        assert b'role="alert"' in response.content
