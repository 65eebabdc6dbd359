"""The Ask page, for people: a question in the URL, the answer as Markdown, its
sources with their sections and freshness, a source filter and feedback."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone

from retrieval.models import QueryLog
from sources.models import Page, Source
from tests.world import HarborWorld, harbor_url

UPGRADE = """# Upgrading

## Schema migrations {#schema-migrations}

Each release may change the database schema. To upgrade it, run a command such as this:

```sh
harbor db upgrade --to latest
```

Run it once, from one machine.
"""


class AskPageTests(HarborWorld):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.reader = User.objects.create_user("reader", password="a long password 1")

    def setUp(self):
        self.client.force_login(self.reader)

    def ask(self, question: str, **params: str) -> str:
        response = self.client.get("/", {"q": question, **params})
        assert response.status_code == 200
        return response.content.decode()

    def test_it_asks_visitors_to_log_in(self):
        self.client.logout()

        response = self.client.get("/?q=queues")

        assert response.status_code == 302
        assert response["Location"] == "/accounts/login/?next=/%3Fq%3Dqueues"

    def test_it_shows_a_form_that_asks_by_get(self):
        html = self.client.get("/").content.decode()

        assert '<form class="ask" method="get"' in html
        assert 'name="q"' in html and 'id="answer"' not in html

    def test_an_answer_loads_from_its_url(self):
        html = self.ask("How do I pause a queue?")

        assert "<code>harbor queue pause NAME</code>" in html
        assert 'value="How do I pause a queue?"' in html
        assert f'href="{harbor_url("queues")}' in html
        assert "verified <time" in html and "changed <time" in html

    def test_the_answer_is_markdown_rendered_with_its_code_block(self):
        self.ingest(harbor_url("upgrading"), UPGRADE, content_type="text/markdown")

        html = self.ask("How do I upgrade the schema?")

        assert '<pre><code class="language-sh">harbor db upgrade --to latest' in html
        assert "```" not in html and "**" not in html

    def test_markers_link_to_their_citations_and_citations_to_their_section(self):
        self.ingest(harbor_url("upgrading"), UPGRADE, content_type="text/markdown")

        html = self.ask("How do I upgrade the schema?")

        assert '<a href="#citation-1" class="marker">[1]</a>' in html
        assert '<li id="citation-1">' in html
        assert f'href="{harbor_url("upgrading")}#schema-migrations"' in html
        assert "› Schema migrations" in html
        assert "› Upgrading ›" not in html, "the title is not repeated as heading"

    def test_scraped_html_is_escaped_and_unsafe_links_are_text(self):
        self.ingest(
            harbor_url("xss"),
            "# <script>alert(1)</script> Queues\n\n## Pausing\n\n"
            "Pause queues <img src=x onerror=alert(1)> with harbor queue pause; "
            "[click](javascript:alert(1)).\n",
            content_type="text/markdown",
        )

        html = self.ask("pause queues with harbor queue pause")

        assert "<script>alert(1)</script>" not in html
        assert "<img src=x" not in html
        assert "&lt;img src=x" in html or "&lt;script&gt;" in html
        assert 'href="javascript:' not in html

    def test_dates_are_relative_with_the_absolute_date_on_hover(self):
        three_hours_ago = timezone.now() - timedelta(hours=3, minutes=1)
        Page.objects.filter(url=harbor_url("queues")).update(
            last_verified_at=three_hours_ago
        )
        html = self.ask("How do I pause a queue?")

        assert f'title="{three_hours_ago:%Y-%m-%d %H:%M} UTC">3\xa0hours ago<' in html

    def test_a_page_whose_latest_crawl_failed_is_flagged(self):
        page = Page.objects.get(url=harbor_url("queues"))
        page.mark_failed(at=timezone.now() + timedelta(minutes=1), error="timeout",
                         original_status=503)  # fmt: skip
        page.save()

        html = self.ask("How do I pause a queue?")

        assert "The latest crawl of this page failed" in html

    def test_a_fresh_page_is_not_flagged(self):
        assert "latest crawl" not in self.ask("How do I pause a queue?")

    def test_the_source_filter_lists_visible_sources_and_narrows_the_answer(self):
        hidden = Source.objects.create(
            name="Internal runbooks", seed_urls="https://runbooks.example/"
        )
        hidden.allowed_groups.add(Group.objects.create(name="ops"))
        example = Source.objects.get(name="Example docs")

        html = self.ask("How do I pause a queue?", source=str(example.pk))

        assert f'<option value="{self.harbor.pk}">Harbor docs</option>' in html
        assert "Internal runbooks" not in html
        assert f'<option value="{example.pk}" selected>' in html
        assert 'id="citation-1"' not in html, "nothing from Harbor"

    def test_an_empty_question_is_an_error_not_a_crash(self):
        response = self.client.get("/", {"q": "   "})

        assert response.status_code == 200
        assert b'role="alert"' in response.content

    def test_feedback_is_stored_with_the_question_and_needs_the_csrf_token(self):
        self.ask("How do I pause a queue?")
        log = QueryLog.objects.get(kind=QueryLog.Kind.QUERY)
        strict = Client(enforce_csrf_checks=True)
        strict.force_login(self.reader)

        refused = strict.post("/feedback/", {"log": log.pk, "helpful": "1"})
        response = self.client.post(
            "/feedback/",
            {"log": log.pk, "helpful": "0", "next": "/?q=How+do+I+pause+a+queue%3F"},
        )

        assert refused.status_code == 403
        assert response.status_code == 302
        assert response["Location"] == "/?q=How+do+I+pause+a+queue%3F"
        log.refresh_from_db()
        assert log.feedback == QueryLog.Feedback.UNHELPFUL and log.feedback_at

    def test_nobody_rates_someone_elses_question_or_leaves_the_site(self):
        self.ask("How do I pause a queue?")
        log = QueryLog.objects.get(kind=QueryLog.Kind.QUERY)
        other = User.objects.create_user("other", password="a long password 1")
        self.client.force_login(other)

        assert (
            self.client.post("/feedback/", {"log": log.pk, "helpful": "1"}).status_code
            == 404
        )
        self.client.force_login(self.reader)
        response = self.client.post(
            "/feedback/",
            {"log": log.pk, "helpful": "1", "next": "https://evil.example/"},
        )
        assert response["Location"] == "/"
