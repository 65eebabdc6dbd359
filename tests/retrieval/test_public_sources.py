"""Public sources: anonymous readers ask and search them, on the Ask page and over
the API without a token, and reach nothing else; signed-in users see what they
saw before, and the public sources too. Anonymous readers' questions are logged
without anyone's identity."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from unittest.mock import patch

import pytest
from django.contrib.auth.models import Group, User
from django.core import signing
from django.forms.models import model_to_dict
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from kbsite.models import ThrottleWindow
from kbsite.throttling import SharedRateThrottle
from retrieval.models import QueryLog
from retrieval.questions import feedback_ticket
from sources.models import Source
from tests.admin_world import editor_create
from tests.world import IngestWorld, ingest_markdown, ingest_markdowns


@dataclass(frozen=True)
class Site:
    """A source with one page, whose text holds a word no other page holds (what
    is asked) and a marker that only reaching the page's text can show."""

    name: str
    host: str
    word: str
    marker: str

    @property
    def url(self) -> str:
        return f"https://{self.host}/guide/"

    @property
    def question(self) -> str:
        return f"What does the {self.word} gauge read?"

    def markdown(self) -> str:
        return (
            f"# {self.name} guide\n\n## The {self.word} gauge\n\n"
            f"The {self.word} gauge reads the tide; its reference code is "
            f"{self.marker}.\n"
        )


PUBLIC = Site("Tide handbook", "handbook.example.org", "zorblax", "PB-PUBLIC-4410")
# Open to every signed-in user (no allowed groups), not public.
OPEN = Site("Staff runbooks", "runbooks.example.org", "quindlewort", "QX-OPEN-7781")
# Of one group only.
VAULT = Site("Vault notes", "vault.example.org", "vexmoor", "VM-GROUP-2093")
SITES = [PUBLIC, OPEN, VAULT]

# Every way text reaches a reader: what each gives back for a question.
Ask = Callable[[Client, Site], str]


def api_search(client: Client, site: Site) -> str:
    response = client.get("/api/search/", {"q": f"{site.word} gauge"})
    assert response.status_code == 200, response.content
    return json.dumps(response.json()["results"])


def api_answer(client: Client, site: Site) -> str:
    response = client.post(
        "/api/query/", {"question": site.question}, content_type="application/json"
    )
    assert response.status_code == 200, response.content
    return response.json()["answer"]


def api_citations(client: Client, site: Site) -> str:
    response = client.post(
        "/api/query/", {"question": site.question}, content_type="application/json"
    )
    assert response.status_code == 200, response.content
    return json.dumps(response.json()["citations"])


def ask_page(client: Client, site: Site) -> str:
    response = client.get("/", {"q": site.question})
    assert response.status_code == 200
    return response.content.decode()


def change_feeds(client: Client, site: Site) -> str:
    """Every feed the reader may read: of every source, and of the site's own."""
    source = Source.objects.get(name=site.name)
    shown = []
    for path in [
        "/feeds/changes.json",
        f"/feeds/sources/{source.pk}/changes.json",
        "/feeds/changes.atom",
        f"/feeds/sources/{source.pk}/changes.atom",
    ]:
        response = client.get(path)
        assert response.status_code in (200, 404), (path, response.status_code)
        shown.append(response.content.decode())
    return "".join(shown)


CHANNELS: dict[str, Ask] = {
    "search results": api_search,
    "an answer": api_answer,
    "an answer's citations": api_citations,
    "the Ask page": ask_page,
    "change feeds": change_feeds,
}

# A site every source of the world allows the Ask widget on: what the widget reads
# there is decided by being public or by a key, never by the browser's session.
WIDGET_ORIGIN = "https://help.example.net"


def widget_ask(client: Client, site: Site, key: str = "") -> dict:
    response = client.post(
        "/api/widget/query/",
        {"question": site.question, **({"key": key} if key else {})},
        content_type="application/json",
        HTTP_ORIGIN=WIDGET_ORIGIN,
    )
    assert response.status_code == 200, response.content
    assert response["Access-Control-Allow-Origin"] == WIDGET_ORIGIN
    return response.json()


def widget_answer(client: Client, site: Site, key: str = "") -> str:
    return widget_ask(client, site, key)["answer"]


def widget_answer_html(client: Client, site: Site, key: str = "") -> str:
    return widget_ask(client, site, key)["answer_html"]


def widget_citations(client: Client, site: Site, key: str = "") -> str:
    return json.dumps(widget_ask(client, site, key)["citations"])


WIDGET_CHANNELS: dict[str, Ask] = {
    "the widget's answer": widget_answer,
    "the widget's answer as HTML": widget_answer_html,
    "the widget's citations": widget_citations,
}


class PublicSourceWorld(IngestWorld):
    """Three sources (public, open to signed-in users, one group's), each with its
    page; the world's own example source is open too."""

    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.vault_group = Group.objects.create(name="vault keepers")
        cls.sources = {}
        for site in SITES:
            source = Source.objects.create(
                name=site.name,
                seed_urls=f"https://{site.host}/",
                widget_origins=[WIDGET_ORIGIN],
            )
            cls.sources[site] = source
        ingest_markdowns((site.url, site.markdown()) for site in SITES)
        cls.sources[VAULT].allowed_groups.add(cls.vault_group)
        cls.user = User.objects.create_user("reader", password="a long password 1")
        cls.keeper = User.objects.create_user("keeper", password="a long password 1")
        cls.keeper.groups.add(cls.vault_group)

    def setUp(self):
        self.publish(PUBLIC)

    def publish(self, site: Site, public: bool = True) -> None:
        Source.objects.filter(pk=self.sources[site].pk).update(public=public)

    def reaches(self, client: Client, channel: Ask, site: Site) -> bool:
        """Whether the site's text (its marker) or its page (its address) reached
        the reader by this channel."""
        shown = channel(client, site)
        return site.marker in shown or site.host in shown


class AnonymousReaderTests(PublicSourceWorld):
    def test_an_anonymous_reader_reaches_the_public_source_and_nothing_else(self):
        for channel_name, channel in CHANNELS.items():
            for site in SITES:
                with self.subTest(channel=channel_name, source=site.name):
                    expected = site is PUBLIC
                    assert self.reaches(Client(), channel, site) is expected

    def test_signed_in_users_see_what_they_saw_before_and_the_public_source(self):
        cases = {
            "a user of no group": (self.user, {PUBLIC, OPEN}),
            "a member of the vault's group": (self.keeper, {PUBLIC, OPEN, VAULT}),
        }
        for who, (user, seen) in cases.items():
            client = Client()
            client.force_login(user)
            for channel_name, channel in CHANNELS.items():
                for site in SITES:
                    with self.subTest(who=who, channel=channel_name, source=site):
                        assert self.reaches(client, channel, site) is (site in seen)

    def test_the_widget_reaches_the_public_source_and_nothing_else_for_anyone(self):
        root = User.objects.create_superuser("root")
        clients = {"nobody": Client()}
        for who, user in [("a vault keeper", self.keeper), ("a superuser", root)]:
            clients[who] = Client()
            clients[who].force_login(user)
        for who, client in clients.items():
            for channel_name, channel in WIDGET_CHANNELS.items():
                for site in SITES:
                    with self.subTest(who=who, channel=channel_name, source=site):
                        assert self.reaches(client, channel, site) is (site is PUBLIC)

    def test_no_longer_public_the_source_is_closed_to_anonymous_readers(self):
        self.publish(PUBLIC, public=False)
        # Tokens and sessions as before; an anonymous reader is asked to sign in.
        client = Client()
        client.force_login(self.user)
        assert self.reaches(client, api_answer, PUBLIC)

        search = Client().get("/api/search/", {"q": "zorblax"})
        query = Client().post(
            "/api/query/", {"question": "x"}, content_type="application/json"
        )
        page = Client().get("/", {"q": "zorblax"})
        feed = Client().get("/feeds/changes.json")

        assert (search.status_code, query.status_code) == (401, 401)
        assert feed.status_code == 401
        assert search.json()["error"] == query.json()["error"] == "not_authenticated"
        assert page.status_code == 302
        assert page["Location"] == "/accounts/login/?next=/%3Fq%3Dzorblax"

    def test_a_source_filter_never_widens_what_an_anonymous_reader_sees(self):
        hidden = [self.sources[OPEN].pk, self.sources[VAULT].pk]

        search = Client().get("/api/search/", {"q": "quindlewort", "sources": hidden})
        answer = Client().post(
            "/api/query/",
            {"question": OPEN.question, "sources": hidden},
            content_type="application/json",
        )
        page = Client().get("/", {"q": OPEN.question, "source": hidden[0]})

        assert search.json() == {"results": []}
        assert answer.json()["abstained"] is True and answer.json()["citations"] == []
        assert page.status_code == 200
        assert b'role="alert"' in page.content, "not a source it may choose"
        assert OPEN.marker.encode() not in page.content

    def test_the_ask_page_lists_only_the_public_sources_and_offers_a_login(self):
        html = Client().get("/").content.decode()

        assert f'<option value="{self.sources[PUBLIC].pk}">{PUBLIC.name}' in html
        assert OPEN.name not in html and VAULT.name not in html
        assert self.source.name not in html, "the open example source"
        assert 'href="/accounts/login/">Log in</a>' in html

    def test_the_schema_says_search_and_questions_need_no_token(self):
        schema = Client().get("/api/schema/", {"format": "json"}).json()

        for path, method in [("/api/search/", "get"), ("/api/query/", "post")]:
            security = schema["paths"][path][method]["security"]
            assert {} in security and {"tokenAuth": []} in security, path
        recrawl = schema["paths"]["/api/recrawl/"]["post"]["security"]
        assert {} not in recrawl


class AnonymousLogTests(PublicSourceWorld):
    def test_an_anonymous_question_is_logged_with_no_user_and_no_address(self):
        address = "198.51.100.77"
        client = Client(REMOTE_ADDR=address, HTTP_X_FORWARDED_FOR="192.0.2.5")

        client.post(
            "/api/query/",
            {"question": PUBLIC.question},
            content_type="application/json",
        )
        client.get("/", {"q": PUBLIC.question})

        logs = list(QueryLog.objects.filter(kind=QueryLog.Kind.QUERY))
        assert len(logs) == 2
        for log in logs:
            stored = str(model_to_dict(log))
            assert log.user_id is None
            assert address not in stored and "192.0.2.5" not in stored
            assert not log.abstained and PUBLIC.marker in log.answer
        throttled = str(list(ThrottleWindow.objects.values_list("key", "hits")))
        assert address not in throttled

    def test_an_anonymous_asker_rates_their_answer_with_its_ticket_only(self):
        client = Client()
        html = client.get("/", {"q": PUBLIC.question}).content.decode()
        log = QueryLog.objects.get(kind=QueryLog.Kind.QUERY)
        ticket = html.split('name="ticket" value="', 1)[1].split('"', 1)[0]
        signed_in = Client()
        signed_in.force_login(self.user)
        signed_in.get("/", {"q": PUBLIC.question})
        theirs = QueryLog.objects.exclude(pk=log.pk).get()

        refused = [
            client.post("/feedback/", {**body, "helpful": "0"}).status_code
            for body in [
                {"log": log.pk},  # an id alone proves nothing
                {"ticket": ticket + "x"},
                {"ticket": signing.dumps(log.pk, salt="another purpose")},
                # Signed, but for a signed-in user's question: never an anonymous's.
                {"ticket": feedback_ticket(theirs.pk)},
            ]
        ]
        rated = client.post(
            "/feedback/",
            {"ticket": ticket, "helpful": "0"},
            HTTP_X_REQUESTED_WITH="fetch",
        )

        assert f'name="log" value="{log.pk}"' not in html
        assert refused == [404, 404, 404, 404]
        assert rated.status_code == 204
        log.refresh_from_db()
        theirs.refresh_from_db()
        assert log.feedback == QueryLog.Feedback.UNHELPFUL
        assert theirs.feedback is None

    def test_the_ask_page_counts_anonymous_questions_with_the_apis(self):
        client = Client(REMOTE_ADDR="198.51.100.8")
        rates = {**SharedRateThrottle.THROTTLE_RATES, "anon_query": "2/min"}
        with patch.object(SharedRateThrottle, "THROTTLE_RATES", rates):
            api = client.post(
                "/api/query/",
                {"question": PUBLIC.question},
                content_type="application/json",
            )
            first = client.get("/", {"q": PUBLIC.question})
            refused = client.get("/", {"q": PUBLIC.question})
            form_only = client.get("/")  # no question asked, nothing counted

        assert (api.status_code, first.status_code) == (200, 200)
        assert refused.status_code == 429
        assert 0 < int(refused["Retry-After"]) <= 60
        assert b"Too many questions" in refused.content
        assert PUBLIC.marker.encode() not in refused.content
        assert form_only.status_code == 200


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_anonymous_reader_asks_over_a_real_socket(live_server):
    public = Source.objects.create(
        name=PUBLIC.name, seed_urls=f"https://{PUBLIC.host}/", public=True
    )
    Source.objects.create(name=OPEN.name, seed_urls=f"https://{OPEN.host}/")
    for site in (PUBLIC, OPEN):
        ingest_markdown(site.url, site.markdown())

    def ask(site: Site) -> dict:
        request = urllib.request.Request(
            f"{live_server.url}/api/query/",
            data=json.dumps({"question": site.question}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    answered, refused = ask(PUBLIC), ask(OPEN)

    assert answered["citations"][0]["url"] == PUBLIC.url
    assert PUBLIC.marker in answered["answer"]
    assert refused["abstained"] is True and refused["citations"] == []
    public.public = False
    public.save(update_fields=["public"])
    with pytest.raises(urllib.error.HTTPError) as denied:
        ask(PUBLIC)
    assert denied.value.code == 401
    assert json.loads(denied.value.read())["error"] == "not_authenticated"


def test_tokens_still_work_beside_anonymous_access(db):
    Source.objects.create(name="Public docs", public=True)
    token = Token.objects.create(user=User.objects.create_user("app"))
    api = APIClient()

    anonymous = api.get("/api/search/", {"q": "x"})
    api.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    signed = api.get("/api/search/", {"q": "x"})
    api.credentials(HTTP_AUTHORIZATION="Token wrong")
    wrong = api.get("/api/search/", {"q": "x"})

    assert (anonymous.status_code, signed.status_code) == (200, 200)
    assert wrong.status_code == 401, "a wrong token is not taken as no token"


class EditorTests(PublicSourceWorld):
    def test_an_editor_makes_a_source_public_in_the_admin(self):
        editor = editor_create("ed")
        self.client.force_login(editor)
        source = self.sources[OPEN]
        url = reverse("admin:sources_source_change", args=[source.pk])
        form = self.client.get(url).context["adminform"].form
        data = {
            name: value
            for name in form.fields
            if (value := form[name].value()) not in (None, False)
        }

        response = self.client.post(url, {**data, "public": "on"})
        listed = self.client.get(
            reverse("admin:sources_source_changelist"), {"public__exact": "1"}
        )

        assert "public" not in data, "off by default"
        assert response.status_code == 302, response.content[:3000]
        source.refresh_from_db()
        assert source.public
        assert {s.name for s in listed.context["cl"].result_list} == {
            PUBLIC.name,
            OPEN.name,
        }
        assert self.reaches(Client(), api_answer, OPEN), "anonymous readers now"
