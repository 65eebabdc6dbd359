"""The Ask widget: its script, CORS for the sites its sources allow, widget keys
scoped to sources and sites, its questions logged as anonymous ones, and the
admin where editors allow a site and make a key. (What it never shows of a
private source is in the table of tests/retrieval/test_public_sources.py; a browser on a
page of another site is in tests/retrieval/test_widget_browser.py.)"""

from __future__ import annotations

import gzip
import re
import time
from datetime import timedelta
from pathlib import Path
from unittest.mock import patch

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core import signing as django_signing
from django.forms.models import model_to_dict
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from ingest.notify import signing
from ingest.publish.models import PublishToken
from kbsite.canonical import web_origin
from kbsite.text import sha256_hex
from kbsite.throttling import SharedRateThrottle
from retrieval.models import QueryLog, WidgetKey
from retrieval.questions import feedback_ticket, question_answer
from retrieval.views import WIDGET_SCRIPT
from retrieval.widget import widget_key_create
from sources.models import SYSTEM, FeedToken, Source
from tests.admin_world import editor_create
from tests.retrieval.test_public_sources import (
    OPEN,
    PUBLIC,
    SITES,
    VAULT,
    WIDGET_ORIGIN,
    PublicSourceWorld,
    widget_answer,
    widget_citations,
)
from tests.world import ingest_markdown

ENDPOINT = "/api/widget/query/"
FEEDBACK = "/api/widget/feedback/"
ELSEWHERE = "https://elsewhere.example.com"  # a site no source allows
DOCS = Path(__file__).resolve().parents[2] / "docs"


def ask(origin: str | None = WIDGET_ORIGIN, client: Client | None = None, **body):
    headers = {"HTTP_ORIGIN": origin} if origin is not None else {}
    return (client or Client()).post(
        ENDPOINT,
        {"question": PUBLIC.question, **body},
        content_type="application/json",
        **headers,
    )


def rate(origin: str | None = WIDGET_ORIGIN, client: Client | None = None, **body):
    headers = {"HTTP_ORIGIN": origin} if origin is not None else {}
    return (client or Client()).post(
        FEEDBACK, body, content_type="application/json", **headers
    )


def preflight(origin: str, endpoint: str = ENDPOINT):
    return Client().options(
        endpoint,
        HTTP_ORIGIN=origin,
        HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST",
        HTTP_ACCESS_CONTROL_REQUEST_HEADERS="content-type",
    )


def varies_by_origin(response) -> bool:
    return "origin" in response.get("Vary", "").lower()


class WidgetWorld(PublicSourceWorld):
    """The public sources' world, each source allowing the help site."""

    def key_make(self, sites, origins=(WIDGET_ORIGIN,)) -> str:
        sources = [self.sources[site] for site in sites]
        return widget_key_create(
            name="help site", sources=sources, origins=list(origins), user=SYSTEM
        )[1]


class CorsTests(WidgetWorld):
    def test_a_preflight_from_an_allowed_site_is_answered_for_it_alone(self):
        response = preflight(WIDGET_ORIGIN)

        assert response.status_code == 204
        assert response["Access-Control-Allow-Origin"] == WIDGET_ORIGIN
        assert response["Access-Control-Allow-Methods"] == "POST"
        assert response["Access-Control-Allow-Headers"].lower() == "content-type"
        assert int(response["Access-Control-Max-Age"]) > 0
        assert "Access-Control-Allow-Credentials" not in response
        assert varies_by_origin(response)

    def test_a_question_from_an_allowed_site_is_answered_with_its_citations(self):
        response = ask()

        assert response.status_code == 200
        assert response["Access-Control-Allow-Origin"] == WIDGET_ORIGIN
        assert "Access-Control-Allow-Credentials" not in response
        assert varies_by_origin(response)
        body = response.json()
        assert PUBLIC.marker in body["answer"] and not body["abstained"]
        cited = body["citations"][0]
        assert cited["url"] == PUBLIC.url
        assert cited["section"] == f"The {PUBLIC.word} gauge"
        assert cited["last_verified_at"] and cited["last_changed_at"]

    def test_a_site_no_source_allows_gets_403_and_no_cors_header(self):
        for response in [preflight(ELSEWHERE), ask(ELSEWHERE)]:
            with self.subTest(method=response.request["REQUEST_METHOD"]):
                assert response.status_code == 403
                assert response.json() == {
                    "error": "origin_not_allowed",
                    "detail": f"The Ask widget is not allowed on {ELSEWHERE}: no "
                    "source lists it among its Ask widget origins.",
                }
                assert "Access-Control-Allow-Origin" not in response
                assert varies_by_origin(response)
        assert not QueryLog.objects.exists(), "nothing was asked"

    def test_an_origin_matches_exactly_scheme_host_and_port(self):
        for origin in [
            "http://help.example.net",
            "https://help.example.net:8443",
            "https://www.help.example.net",
            "https://example.net",
        ]:
            with self.subTest(origin=origin):
                assert ask(origin).status_code == 403  # fmt: skip

    def test_a_request_that_names_no_site_is_refused(self):
        for origin in [None, "null", "file://"]:
            with self.subTest(origin=origin):
                response = ask(origin)
                assert response.status_code == 403
                assert response.json()["error"] == "origin_required"
                assert "Access-Control-Allow-Origin" not in response

    def test_an_allowed_sites_pages_can_read_its_errors(self):
        bad = ask(question="")
        rates = {**SharedRateThrottle.THROTTLE_RATES, "anon_query": "1/min"}
        with patch.object(SharedRateThrottle, "THROTTLE_RATES", rates):
            first = ask(client=Client(REMOTE_ADDR="198.51.100.9"))
            throttled = ask(client=Client(REMOTE_ADDR="198.51.100.9"))

        assert (bad.status_code, bad.json()["error"]) == (400, "invalid")
        assert first.status_code == 200
        assert (throttled.status_code, throttled.json()["error"]) == (429, "throttled")
        for response in [bad, throttled]:
            assert response["Access-Control-Allow-Origin"] == WIDGET_ORIGIN
        assert throttled["Access-Control-Expose-Headers"] == "Retry-After"
        assert 0 < int(throttled["Retry-After"]) <= 60

    def test_widget_questions_count_with_anonymous_readers_api_questions(self):
        client = Client(REMOTE_ADDR="198.51.100.10")
        rates = {**SharedRateThrottle.THROTTLE_RATES, "anon_query": "2/min"}
        with patch.object(SharedRateThrottle, "THROTTLE_RATES", rates):
            api = client.post(
                "/api/query/", {"question": "x"}, content_type="application/json"
            )
            widget = ask(client=client)
            refused = ask(client=client)

        assert (api.status_code, widget.status_code) == (200, 200)
        assert refused.status_code == 429

    def test_a_preflight_is_not_counted_as_a_question(self):
        rates = {**SharedRateThrottle.THROTTLE_RATES, "anon_query": "1/min"}
        with patch.object(SharedRateThrottle, "THROTTLE_RATES", rates):
            preflights = [preflight(WIDGET_ORIGIN).status_code for _ in range(3)]
            asked = ask()

        assert preflights == [204, 204, 204]
        assert asked.status_code == 200

    def test_a_widget_question_is_logged_with_no_one_and_no_site(self):
        client = Client(REMOTE_ADDR="198.51.100.77")
        key = self.key_make([VAULT])

        ask(client=client)
        ask(client=client, question=VAULT.question, key=key)

        logs = list(QueryLog.objects.filter(kind=QueryLog.Kind.QUERY))
        assert len(logs) == 2
        for log in logs:
            stored = str(model_to_dict(log))
            assert log.user_id is None
            assert "198.51.100.77" not in stored
            assert "help.example.net" not in stored and key not in stored
        answers = " ".join(log.answer for log in logs)
        assert PUBLIC.marker in answers and VAULT.marker in answers


class FeedbackTests(WidgetWorld):
    """*Useful* / *Not useful* under a widget's answer: the answer carries a
    ticket (its reader is anonymous) that rates it from the same sites, with the
    same CORS answers, as the question was asked."""

    def asked(self, **body) -> tuple[QueryLog, str]:
        response = ask(**body)
        assert response.status_code == 200, response.content
        return QueryLog.objects.latest("pk"), response.json()["ticket"]

    def test_an_allowed_sites_reader_rates_the_answer_by_its_ticket(self):
        log, ticket = self.asked()

        unhelpful = rate(ticket=ticket, helpful=False)
        log.refresh_from_db()
        first = log.feedback
        helpful = rate(ticket=ticket, helpful=True)
        log.refresh_from_db()

        assert unhelpful.status_code == 204 and not unhelpful.content
        assert unhelpful["Access-Control-Allow-Origin"] == WIDGET_ORIGIN
        assert "Access-Control-Allow-Credentials" not in unhelpful
        assert varies_by_origin(unhelpful)
        assert first == QueryLog.Feedback.UNHELPFUL
        assert helpful.status_code == 204
        assert log.feedback == QueryLog.Feedback.HELPFUL, "the last rating is kept"
        assert log.user_id is None

    def test_a_key_rates_where_it_asks(self):
        key = self.key_make([VAULT])
        log, ticket = self.asked(question=VAULT.question, key=key)

        without_key = rate(ticket=ticket, helpful=False, key="kba_" + "a" * 43)
        rated = rate(ticket=ticket, helpful=False, key=key)

        assert without_key.status_code == 403
        assert without_key.json()["error"] == "key_refused"
        assert rated.status_code == 204
        log.refresh_from_db()
        assert log.feedback == QueryLog.Feedback.UNHELPFUL

    def test_a_preflight_from_an_allowed_site_is_answered_for_it_alone(self):
        allowed = preflight(WIDGET_ORIGIN, FEEDBACK)
        other = preflight(ELSEWHERE, FEEDBACK)

        assert allowed.status_code == 204
        assert allowed["Access-Control-Allow-Origin"] == WIDGET_ORIGIN
        assert allowed["Access-Control-Allow-Methods"] == "POST"
        assert allowed["Access-Control-Allow-Headers"].lower() == "content-type"
        assert int(allowed["Access-Control-Max-Age"]) > 0
        assert varies_by_origin(allowed)
        assert other.status_code == 403
        assert "Access-Control-Allow-Origin" not in other and varies_by_origin(other)

    def test_a_site_no_source_allows_cannot_rate(self):
        log, ticket = self.asked()

        for origin in [ELSEWHERE, None]:
            with self.subTest(origin=origin):
                response = rate(origin, ticket=ticket, helpful=False)
                assert response.status_code == 403
                assert "Access-Control-Allow-Origin" not in response
                assert varies_by_origin(response)
        log.refresh_from_db()
        assert log.feedback is None

    def test_a_ticket_this_site_did_not_give_for_this_answer_is_not_found(self):
        log, ticket = self.asked()
        signed_in = question_answer(question=PUBLIC.question, user=self.user, k=5)
        two_days_ago = time.time() - 2 * 24 * 3600
        with patch("django.core.signing.time.time", return_value=two_days_ago):
            expired = feedback_ticket(log.pk)

        for name, given in [
            ("altered", ticket + "x"),
            ("another purpose", django_signing.dumps(log.pk, salt="another purpose")),
            ("a signed-in reader's question", feedback_ticket(signed_in.log_id)),
            ("no such question", feedback_ticket(10**9)),
            ("more than a day old", expired),
            ("not a ticket", "hello"),
        ]:
            with self.subTest(name):
                response = rate(ticket=given, helpful=False)
                assert response.status_code == 404
                assert response.json()["error"] == "not_found"
                assert response["Access-Control-Allow-Origin"] == WIDGET_ORIGIN
        assert not QueryLog.objects.exclude(feedback=None).exists()

    def test_a_malformed_rating_is_400_that_its_page_can_read(self):
        log, ticket = self.asked()

        for name, body in [
            ("nothing", {}),
            ("no verdict", {"ticket": ticket}),
            ("no ticket", {"helpful": False}),
            ("a verdict in words", {"ticket": ticket, "helpful": "no"}),
            ("a verdict as a number", {"ticket": ticket, "helpful": 0}),
            ("a null verdict", {"ticket": ticket, "helpful": None}),
            ("a ticket as a number", {"ticket": log.pk, "helpful": False}),
            ("an overlong ticket", {"ticket": "x" * 201, "helpful": False}),
        ]:
            with self.subTest(name):
                response = rate(**body)
                assert response.status_code == 400
                assert response.json()["error"] == "invalid"
                assert response["Access-Control-Allow-Origin"] == WIDGET_ORIGIN
        not_json = Client().post(
            FEEDBACK, "{", content_type="application/json", HTTP_ORIGIN=WIDGET_ORIGIN
        )
        assert (not_json.status_code, not_json.json()["error"]) == (400, "parse_error")
        log.refresh_from_db()
        assert log.feedback is None

    def test_ratings_count_with_the_widgets_questions(self):
        client = Client(REMOTE_ADDR="198.51.100.11")
        rates = {**SharedRateThrottle.THROTTLE_RATES, "anon_query": "2/min"}
        with patch.object(SharedRateThrottle, "THROTTLE_RATES", rates):
            ticket = ask(client=client).json()["ticket"]
            preflights = [preflight(WIDGET_ORIGIN, FEEDBACK) for _ in range(3)]
            rated = rate(client=client, ticket=ticket, helpful=True)
            throttled = rate(client=client, ticket=ticket, helpful=False)

        assert [p.status_code for p in preflights] == [204, 204, 204]
        assert rated.status_code == 204
        assert (throttled.status_code, throttled.json()["error"]) == (429, "throttled")
        assert throttled["Access-Control-Allow-Origin"] == WIDGET_ORIGIN
        assert QueryLog.objects.get().feedback == QueryLog.Feedback.HELPFUL


class KeyTests(WidgetWorld):
    def test_a_key_reads_the_sources_it_names_and_no_other(self):
        key = self.key_make([VAULT])
        for site in SITES:
            for channel in [widget_answer, widget_citations]:
                with self.subTest(source=site.name, channel=channel.__name__):
                    shown = channel(Client(), site, key)
                    reached = site.marker in shown or site.host in shown
                    assert reached is (site is VAULT)

    def test_a_source_filter_never_widens_what_a_key_reads(self):
        key = self.key_make([VAULT])
        others = [self.sources[OPEN].pk, self.sources[PUBLIC].pk]

        response = ask(question=OPEN.question, key=key, sources=others)

        assert response.status_code == 200
        assert response.json()["citations"] == []
        assert OPEN.marker not in response.json()["answer"]

    def test_a_key_used_on_a_site_it_does_not_name_is_refused(self):
        Source.objects.filter(pk=self.sources[VAULT].pk).update(
            widget_origins=[WIDGET_ORIGIN, ELSEWHERE]
        )
        key = self.key_make([VAULT])

        response = ask(ELSEWHERE, question=VAULT.question, key=key)

        assert response.status_code == 403
        assert response.json() == {
            "error": "origin_not_allowed",
            "detail": f"This widget key is not for {ELSEWHERE}.",
        }
        assert response["Access-Control-Allow-Origin"] == ELSEWHERE, "readable"
        assert VAULT.marker not in response.content.decode()

    def test_a_key_reaches_only_the_sources_that_allow_the_site_themselves(self):
        Source.objects.filter(pk=self.sources[VAULT].pk).update(widget_origins=[])
        both = self.key_make([VAULT, OPEN])
        vault_only = self.key_make([VAULT])

        answered = ask(question=OPEN.question, key=both)
        asked_vault = ask(question=VAULT.question, key=both)
        refused = ask(question=VAULT.question, key=vault_only)

        assert OPEN.marker in answered.json()["answer"]
        assert VAULT.marker not in asked_vault.content.decode()
        assert refused.status_code == 403
        assert refused.json()["detail"] == (
            f"None of this widget key's sources allows {WIDGET_ORIGIN}."
        )

    def test_an_unknown_or_revoked_key_is_refused(self):
        key = self.key_make([VAULT])
        revoked_key = self.key_make([VAULT])
        WidgetKey.objects.get(key_hash=sha256_hex(revoked_key)).revoke(
            at=timezone.now()
        )

        for given in [revoked_key, key + "x", "kba_" + "a" * 43, "kbp_" + key[4:]]:
            with self.subTest(key=given[:8]):
                response = ask(question=VAULT.question, key=given)
                assert response.status_code == 403
                assert response.json()["error"] == "key_refused"
                assert VAULT.marker not in response.content.decode()

    def test_only_the_keys_hash_is_kept_and_its_use_is_written_once_an_hour(self):
        key = self.key_make([VAULT])
        row = WidgetKey.objects.get()
        assert key not in str(model_to_dict(row))
        assert row.key_hash == sha256_hex(key) and key.startswith(row.key_start)

        ask(question=VAULT.question, key=key)
        first = WidgetKey.objects.get().last_used_at
        ask(question=VAULT.question, key=key)
        again = WidgetKey.objects.get().last_used_at
        WidgetKey.objects.update(last_used_at=first - timedelta(hours=2))
        ask(question=VAULT.question, key=key)

        assert first is not None and again == first
        assert WidgetKey.objects.get().last_used_at > first


# A public page whose answer holds emphasis, code and the HTML a scraped page can
# carry as text.
RENDERED_URL = "https://handbook.example.org/flush/"
RENDERED = """# Tide handbook guide

## Flushing the gauge {#flushing}

Flush the gauge *without* stopping it (`tide flush`) <img src=x onerror=alert(1)>
<script>alert(1)</script>; to flush the gauge, run this command:

```sh
tide flush --all
```
"""


class AnswerRenderingTests(WidgetWorld):
    """The widget's answer comes as the Ask page renders it, from the same
    renderer: Markdown as HTML, scraped HTML as text."""

    def setUp(self):
        super().setUp()
        ingest_markdown(RENDERED_URL, RENDERED)

    def test_the_answer_comes_as_html_with_emphasis_and_code(self):
        body = ask(question="How do I flush the gauge without stopping it?").json()

        html = body["answer_html"]
        assert "<em>without</em>" in html and "*without*" not in html
        assert "(<code>tide flush</code>)" in html
        assert '<pre><code class="language-sh">tide flush --all' in html
        assert f'<a href="{RENDERED_URL}#flushing" class="marker">[1]</a>' in html
        assert body["answer"].count("*without*") == 1, "the Markdown is kept too"

    def test_scraped_html_arrives_escaped_and_unsafe_links_as_text(self):
        body = ask(question="How do I flush the gauge without stopping it?").json()

        html = body["answer_html"]
        assert "onerror=alert(1)" in body["answer"], "the scraped text is answered"
        assert "<img" not in html and "<script" not in html
        assert "&lt;img src=x onerror=alert(1)&gt;" in html
        assert "javascript:" not in html


class ScriptTests(WidgetWorld):
    def test_the_script_is_served_to_any_page_and_revalidated_by_its_etag(self):
        response = Client().get("/widget.js")
        again = Client().get("/widget.js", HTTP_IF_NONE_MATCH=response["ETag"])

        assert response.status_code == 200
        assert response["Content-Type"] == "text/javascript; charset=utf-8"
        assert response["Cross-Origin-Resource-Policy"] == "cross-origin"
        assert "max-age=300" in response["Cache-Control"]
        assert response.content == WIDGET_SCRIPT.read_bytes()
        assert again.status_code == 304

    def test_the_script_is_as_small_as_the_editors_guide_says(self):
        """The guide states the size; a change to the script changes both."""
        script = WIDGET_SCRIPT.read_bytes()
        guide = (DOCS / "editors.md").read_text()
        stated = re.search(r"widget\.js` is ([\d,]+) bytes \(([\d,]+) gzipped\)", guide)

        assert stated is not None, "docs/editors.md states the size"
        size, gzipped = (int(n.replace(",", "")) for n in stated.groups())
        assert size == len(script)
        assert gzipped == len(gzip.compress(script, compresslevel=9, mtime=0))
        assert size < 12_000

    def test_the_script_sets_as_html_only_its_markup_and_the_rendered_answer(self):
        script = WIDGET_SCRIPT.read_text()
        writes = re.findall(r"\.(innerHTML|outerHTML|insertAdjacentHTML)\b", script)

        assert writes == ["innerHTML", "innerHTML"]
        assert re.search(r'root\.innerHTML = "<style>" \+ CSS \+ "', script)
        assert 'answer.innerHTML = result.answer_html || "";' in script
        assert "document.write" not in script and "eval(" not in script


@pytest.mark.parametrize(
    ("typed", "origin"),
    [
        ("https://docs.example.com", "https://docs.example.com"),
        ("HTTPS://Docs.Example.COM:443/", "https://docs.example.com"),
        ("http://127.0.0.1:8001", "http://127.0.0.1:8001"),
        ("http://localhost:80", "http://localhost"),
        ("http://[::1]:8000", "http://[::1]:8000"),
        ("https://bücher.example", "https://xn--bcher-kva.example"),
    ],
)
def test_an_origin_is_spelled_as_browsers_send_it(typed, origin):
    assert web_origin(typed) == origin


@pytest.mark.parametrize(
    ("typed", "reason"),
    [
        ("docs.example.com", "starts with https://"),
        ("ftp://docs.example.com", "starts with https://"),
        ("https://docs.example.com/guide/", "no path"),
        ("https://docs.example.com/?a=1", "no path"),
        ("https://*.example.com", "no wildcard"),
        ("https://user@docs.example.com", "no user name"),
        ("https://docs.example.com:70000", "port"),
        ("null", "starts with https://"),
    ],
)
def test_what_is_not_an_origin_is_refused_saying_why(typed, reason):
    with pytest.raises(ValueError, match=reason):
        web_origin(typed)


class AdminTests(WidgetWorld):
    def setUp(self):
        super().setUp()
        self.editor = editor_create("ed")
        self.client.force_login(self.editor)

    def source_form(self, source: Source) -> dict:
        url = reverse("admin:sources_source_change", args=[source.pk])
        form = self.client.get(url).context["adminform"].form
        return {
            name: value
            for name in form.fields
            if (value := form[name].value()) not in (None, False)
        }

    def test_an_editor_allows_a_site_on_a_source(self):
        source = self.sources[OPEN]
        url = reverse("admin:sources_source_change", args=[source.pk])
        data = self.source_form(source)

        saved = self.client.post(
            url,
            {**data, "widget_origins": "HTTPS://Intranet.Example.com/\n\n"
             "https://help.example.net\nhttp://127.0.0.1:8001"},
        )  # fmt: skip
        refused = self.client.post(
            url, {**data, "widget_origins": "https://intranet.example.com/guide/"}
        )

        assert data["widget_origins"] == WIDGET_ORIGIN, "one a line in the form"
        assert saved.status_code == 302, saved.content[:2000]
        source.refresh_from_db()
        assert source.widget_origins == [
            "https://intranet.example.com", WIDGET_ORIGIN, "http://127.0.0.1:8001"
        ]  # fmt: skip
        assert refused.status_code == 200
        assert "no path" in str(refused.context["adminform"].form.errors)

    def test_an_editor_makes_a_key_shown_once_in_its_script_tag(self):
        add = reverse("admin:retrieval_widgetkey_add")
        response = self.client.post(
            add,
            {"name": "Intranet", "sources": [self.sources[OPEN].pk],
             "origins": "https://intranet.example.com\n" + WIDGET_ORIGIN},
        )  # fmt: skip

        html = response.content.decode()
        tag = re.search(r'<pre id="widget-tag">(.*?)</pre>', html).group(1)
        key = re.search(r"kba_[\w-]+", tag).group(0)
        made = WidgetKey.objects.get()
        change = self.client.get(
            reverse("admin:retrieval_widgetkey_change", args=[made.pk])
        )
        assert response.status_code == 200
        assert tag == (
            f"&lt;script src=&quot;{settings.PUBLIC_URL}/widget.js&quot; "
            f"data-key=&quot;{key}&quot; async&gt;&lt;/script&gt;"
        )
        assert made.key_hash == sha256_hex(key)
        assert made.origins == ["https://intranet.example.com", WIDGET_ORIGIN]
        assert made.created_by == self.editor
        # Where it answers: OPEN allows the help site, not the intranet.
        assert "<code>https://intranet.example.com</code>: <strong" in html
        assert f"<code>{WIDGET_ORIGIN}</code>: {OPEN.name}" in html
        assert key not in change.content.decode()
        assert widget_answer(Client(), OPEN, key).count(OPEN.marker) == 1

    def test_an_editor_keys_only_the_sources_they_see(self):
        vault = self.sources[VAULT]
        WidgetKey.objects.all().delete()
        theirs = widget_key_create(
            name="open",
            sources=[self.sources[OPEN]],
            origins=[WIDGET_ORIGIN],
            user=SYSTEM,
        )[0]
        widget_key_create(
            name="vault and open", sources=[vault, self.sources[OPEN]],
            origins=[WIDGET_ORIGIN], user=SYSTEM,
        )  # fmt: skip

        listed = self.client.get(reverse("admin:retrieval_widgetkey_changelist"))
        refused = self.client.post(
            reverse("admin:retrieval_widgetkey_add"),
            {"name": "x", "sources": [vault.pk], "origins": WIDGET_ORIGIN},
        )

        assert [k.pk for k in listed.context["cl"].result_list] == [theirs.pk]
        assert refused.status_code == 200, "the form again"
        assert "sources" in refused.context["adminform"].form.errors
        assert WidgetKey.objects.count() == 2

    def test_revoking_a_key_refuses_the_widget_with_it(self):
        key = widget_key_create(
            name="x", sources=[self.sources[OPEN]], origins=[WIDGET_ORIGIN], user=SYSTEM
        )[1]
        made = WidgetKey.objects.get()

        response = self.client.post(
            reverse("admin:retrieval_widgetkey_changelist"),
            {"action": "revoke", "_selected_action": [made.pk]},
            follow=True,
        )

        assert "Revoked 1 widget keys" in response.content.decode()
        assert ask(question=OPEN.question, key=key).status_code == 403

    def test_a_superuser_sees_every_key(self):
        widget_key_create(
            name="vault", sources=[self.sources[VAULT]], origins=[WIDGET_ORIGIN],
            user=SYSTEM,
        )  # fmt: skip
        self.client.force_login(User.objects.create_superuser("root"))

        listed = self.client.get(reverse("admin:retrieval_widgetkey_changelist"))

        assert [k.name for k in listed.context["cl"].result_list] == ["vault"]


def test_every_kind_of_secret_starts_with_a_prefix_of_its_own():
    # A key found in a page, a log or a paste says what it opens.
    prefixes = [
        WidgetKey.PREFIX,
        PublishToken.PREFIX,
        FeedToken.PREFIX,
        signing.SECRET_PREFIX,
    ]
    assert len(set(prefixes)) == len(prefixes), prefixes
