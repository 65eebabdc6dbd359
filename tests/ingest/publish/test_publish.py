"""I just published, look now: a check of one source for changes, asked for in the
admin or by a CI step with a publish token of that source (and of nothing else).
The check reads the sitemaps first, hands over the pages they date after their
last check and new ones, then the rest: by conditional request for the built-in
fetcher, and for Crawlbase only the pages no sitemap dates."""

from __future__ import annotations

import hashlib
from datetime import timedelta

from django.contrib.auth.models import User
from django.test import TestCase
from django.urls import reverse
from django.utils import timezone
from django_q.models import OrmQ
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from ingest.crawl.models import Crawl
from ingest.publish.models import PublishCheck, PublishToken
from ingest.publish.services import (
    PUBLISH_TASK,
    publish_check_request,
    publish_token_create,
)
from ingest.pushing.models import Push
from sources.models import SYSTEM, Page, Source
from tests.admin_world import editor_create
from tests.conftest import at_once
from tests.fakes.site import page, sitemap_xml
from tests.ingest.crawl.test_crawl import CrawlWorld, crawl_through
from tests.world import run_queued

EARLY = "2026-01-01"  # a sitemap's date before every check of these tests


def bearer(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def publish_url(source: Source) -> str:
    return reverse("ingest-api:publish", args=[source.pk])


class PublishApiTests(TestCase):
    """Two built-in sources; a CI step holds a publish token of the first."""

    @classmethod
    def setUpTestData(cls):
        cls.docs = Source.objects.create(
            name="Docs", seed_urls="https://docs.example.com/"
        )
        cls.blog = Source.objects.create(
            name="Blog", seed_urls="https://blog.example.com/"
        )
        cls.token, cls.key = publish_token_create(
            source=cls.docs, name="deploy", user=SYSTEM
        )

    def publish(self, client: APIClient, source: Source):
        with self.captureOnCommitCallbacks(execute=True):
            return client.post(publish_url(source))

    def test_a_token_asks_for_a_check_of_its_own_source(self):
        response = self.publish(bearer(self.key), self.docs)

        assert response.status_code == 202
        answer = response.json()
        assert answer["source"] == self.docs.pk
        assert (answer["state"], answer["already_queued"]) == ("queued", False)
        assert answer["summary"].startswith("Queued: the sitemaps of Docs are read")
        check = PublishCheck.objects.get()
        assert (check.pk, check.token) == (answer["check"], self.token)
        assert [row.task["func"] for row in OrmQ.objects.all()] == [PUBLISH_TASK]
        self.token.refresh_from_db()
        assert self.token.last_used_at is not None

    def test_a_retry_while_the_check_is_queued_joins_it_and_says_so(self):
        self.publish(bearer(self.key), self.docs)

        again = self.publish(bearer(self.key), self.docs).json()

        assert again["already_queued"] is True and again["requests"] == 2
        assert PublishCheck.objects.count() == 1 and OrmQ.objects.count() == 1

    def test_a_token_is_refused_for_another_source_with_a_json_403(self):
        for url in [publish_url(self.blog), "/api/sources/999999/publish/"]:
            with self.subTest(url=url):
                response = bearer(self.key).post(url)

                assert response.status_code == 403
                assert response.json() == {
                    "error": "wrong_source",
                    "detail": "This publish token is for another source.",
                }
        assert not PublishCheck.objects.exists()

    def test_a_missing_or_unknown_token_is_a_json_401(self):
        staff = User.objects.create_user("staff", is_staff=True)
        for client in [
            APIClient(),
            bearer("kbp_not-a-token-of-ours"),
            bearer(self.key + "x"),
            bearer(f"{self.key} {self.key}"),
        ]:
            response = client.post(publish_url(self.docs))

            assert response.status_code == 401
            assert response["WWW-Authenticate"] == 'Bearer realm="api"'
            assert set(response.json()) == {"error", "detail"}
        # A staff member's API token is not a publish token.
        staff_client = APIClient()
        staff_client.credentials(
            HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=staff).key}"
        )
        assert staff_client.post(publish_url(self.docs)).status_code == 401
        assert not PublishCheck.objects.exists()

    def test_a_revoked_token_is_refused(self):
        assert self.token.revoke(at=timezone.now())

        response = bearer(self.key).post(publish_url(self.docs))

        assert response.status_code == 401
        assert response.json()["detail"] == "Invalid or revoked publish token."

    def test_the_token_is_kept_only_as_its_hash(self):
        stored = PublishToken.objects.get()

        assert self.key.startswith("kbp_") and len(self.key) > 40
        assert stored.key_hash == hashlib.sha256(self.key.encode()).hexdigest()
        assert stored.key_start == self.key[:12]
        assert self.key not in str(PublishToken.objects.values().get())

    def test_the_token_opens_no_other_endpoint(self):
        anonymous, holder = APIClient(), bearer(self.key)
        calls = [
            ("get", "/api/search/?q=install", None),
            ("post", "/api/query/", {"question": "How do I install it?"}),
            ("post", "/api/recrawl/", {"source": self.docs.pk}),
            ("get", "/api/crawler-stats/", None),
        ]
        for method, url, body in calls:
            with self.subTest(url=url):
                as_anyone = getattr(anonymous, method)(url, body, format="json")
                with_token = getattr(holder, method)(url, body, format="json")

                assert with_token.status_code == as_anyone.status_code
                assert with_token.status_code in (401, 403)
        assert not PublishCheck.objects.exists()

    def test_the_latest_check_can_be_read_back(self):
        assert bearer(self.key).get(publish_url(self.docs)).status_code == 404
        self.publish(bearer(self.key), self.docs)

        response = bearer(self.key).get(publish_url(self.docs))

        assert response.status_code == 200
        assert response.json()["state"] == "queued"
        assert bearer(self.key).get(publish_url(self.blog)).status_code == 403


class BuiltInCheckTests(CrawlWorld):
    """A site of four pages, indexed; then /docs/a.html is edited and a new page
    published, and the sitemap says so."""

    def setUp(self) -> None:
        super().setUp()
        self.site.robots(f"User-agent: *\nSitemap: {self.site.url('/map.xml')}\n")
        self.site.add(
            "/docs/", page("Docs", "Start.", ["a.html", "b.html"]), etag='"d"'
        )
        self.routes = {
            name: self.site.add(f"/docs/{name}.html", page(name, "Text."), etag='"1"')
            for name in ["a", "b", "c"]
        }
        self.site.add("/map.xml", sitemap_xml([self.site.url("/docs/c.html")]))
        self.docs = self.source()
        self.crawl(self.docs)
        assert Page.objects.filter(status=Page.Status.LIVE).count() == 4
        hour_ago = timezone.now() - timedelta(hours=1)  # indexed an hour ago
        Page.objects.update(last_verified_at=hour_ago, last_crawled_at=hour_ago)

    def publish_edit(self) -> None:
        """a.html edited now and new.html published; the sitemap dates b.html
        long ago and says nothing of c.html's date."""
        now = timezone.now().isoformat(timespec="seconds")
        self.routes["a"].body, self.routes["a"].etag = (
            page("a", "Edited.").encode(),
            '"2"',
        )
        self.site.add("/docs/new.html", page("New", "Just published."))
        urls = [self.site.url(f"/docs/{name}.html") for name in ["b", "c", "a", "new"]]
        dates = {urls[0]: EARLY, urls[2]: now, urls[3]: now}
        self.site.add("/map.xml", sitemap_xml(urls, lastmod=dates))

    def run_check(self) -> PublishCheck:
        before = len(self.site.hits)
        run_queued(PUBLISH_TASK)
        self.sitemap_hits = self.site.paths()[before:]
        return PublishCheck.objects.get()

    def test_the_admin_button_queues_the_check_and_says_what_it_did(self):
        editor = editor_create()
        self.client.force_login(editor)
        self.publish_edit()
        button = reverse("admin:sources_source_check", args=[self.docs.pk])

        with self.captureOnCommitCallbacks(execute=True):
            response = self.client.post(button, follow=True)

        said = response.content.decode()
        assert (
            "Check for changes: Queued: the sitemaps of Docs are read first; the "
            "pages they date after their last check and new pages are fetched "
            "first, then the rest of its 4 pages by conditional request"
        ) in said
        assert PublishCheck.objects.get().requested_by == editor
        check = self.run_check()
        overview = self.client.get(
            reverse("admin:sources_source_change", args=[self.docs.pk])
        ).content.decode()
        assert (
            "1 sitemap read (4 URLs in scope). Queued for the built-in fetcher: "
            "1 page the sitemaps date after their last check and 1 new page first, "
            "then the other 3 pages by conditional request (a 304 when unchanged); "
            "0 of them already queued in a crawl."
        ) in overview
        assert check.state == PublishCheck.State.DONE

    def test_recrawling_the_due_pages_says_when_none_is_due_and_what_would_help(
        self,
    ):
        self.client.force_login(editor_create())

        response = self.client.post(
            reverse("admin:sources_source_changelist"),
            {"action": "recrawl_due_pages", "_selected_action": [self.docs.pk]},
            follow=True,
        )

        [said] = [str(message) for message in response.context["messages"]]
        assert said.startswith("No page of Docs is due (the next is due in 6\xa0days")
        assert said.endswith("use Check the selected sources for changes now.")
        assert "Crawlbase" not in said

    def test_the_sitemap_comes_first_then_what_it_dates_then_the_rest(self):
        self.publish_edit()
        with self.captureOnCommitCallbacks(execute=True):
            publish_check_request(source=self.docs, user=SYSTEM)

        check = self.run_check()
        crawl = crawl_through(check.crawl)

        assert self.sitemap_hits == ["/robots.txt", "/map.xml"]
        order = [url.removeprefix(self.site.url("")) for url in
                 crawl.urls.order_by("id").values_list("url", flat=True)]  # fmt: skip
        assert order[:2] == ["/docs/a.html", "/docs/new.html"]
        assert sorted(order[2:]) == ["/docs/", "/docs/b.html", "/docs/c.html"]
        results = dict(crawl.urls.values_list("url", "result"))
        assert results[self.site.url("/docs/a.html")] == "fetched"
        assert results[self.site.url("/docs/new.html")] == "fetched"
        for path in ["/docs/", "/docs/b.html", "/docs/c.html"]:
            assert results[self.site.url(path)] == "not_modified", path
        edited = Page.objects.get(url=self.site.url("/docs/a.html"))
        assert "Edited." in edited.markdown
        assert Page.objects.get(url=self.site.url("/docs/new.html")).is_live
        assert (check.dated, check.new_pages, check.others) == (1, 1, 3)

    def test_a_site_without_a_sitemap_has_every_page_checked(self):
        self.site.robots("User-agent: *\n")
        self.site.add("/map.xml", "", status=404)
        with self.captureOnCommitCallbacks(execute=True):
            publish_check_request(source=self.docs, user=SYSTEM)

        check = self.run_check()

        assert check.sitemaps_read == 0 and "/sitemap.xml: HTTP 404" in check.note
        assert (check.dated, check.new_pages, check.others) == (0, 0, 4)
        assert check.crawl.urls.count() == 4

    def test_a_check_joins_the_crawl_already_running_and_adds_nothing_twice(self):
        self.publish_edit()
        for _ in range(2):
            PublishCheck.objects.filter(state=PublishCheck.State.DONE).delete()
            with self.captureOnCommitCallbacks(execute=True):
                publish_check_request(source=self.docs, user=SYSTEM)
            check = self.run_check()

        assert check.in_flight == 5  # every page was queued by the first
        assert Crawl.objects.filter(state=Crawl.State.RUNNING).count() == 1
        assert check.crawl.urls.count() == 5


class CrawlbaseCheckTests(CrawlWorld):
    """A Crawlbase source's check pushes what the sitemap dates after its last
    check, then what it does not date; not what it dates before."""

    def test_only_pages_with_no_evidence_against_a_change_are_pushed(self):
        site = self.site
        source = self.source(fetcher=Source.Fetcher.CRAWLBASE)
        checked = timezone.now() - timedelta(days=3)
        for name in ["edited", "old", "unlisted", "undated"]:
            Page.objects.create(
                source=source, url=site.url(f"/docs/{name}/"),
                status=Page.Status.LIVE, last_verified_at=checked,
                next_crawl_at=checked + timedelta(days=7),
            )  # fmt: skip
        urls = [site.url(f"/docs/{n}/") for n in ["old", "undated", "edited", "new"]]
        now = timezone.now().isoformat(timespec="seconds")
        dates = {urls[0]: EARLY, urls[2]: now, urls[3]: now}
        site.add("/sitemap.xml", sitemap_xml(urls, lastmod=dates))
        with self.captureOnCommitCallbacks(execute=True):
            publish_check_request(source=source, user=SYSTEM)

        run_queued(PUBLISH_TASK)

        check = PublishCheck.objects.get()
        pushed = list(Push.objects.order_by("pk").values_list("url", flat=True))
        order = ["edited", "new", "unlisted", "undated"]  # the rest by due time
        assert pushed == [site.url(f"/docs/{name}/") for name in order]
        assert (check.dated, check.new_pages, check.others) == (1, 1, 2)
        assert check.not_pushed == 1
        assert "1 page dated before their last check not pushed" in check.summary()
        assert not Crawl.objects.exists()


def test_requests_at_once_queue_one_check(transactional_db):
    source = Source.objects.create(name="Docs", seed_urls="https://docs.example.com/")

    answers = at_once(lambda: publish_check_request(source=source, user=SYSTEM)[1], 4)

    assert sorted(answers) == [False, False, False, True]
    check = PublishCheck.objects.get()
    assert check.requests == 4
    jobs = [row.task for row in OrmQ.objects.all()]
    assert [job["args"] for job in jobs if job["func"] == PUBLISH_TASK] == [
        (check.pk,)
    ], jobs


class PublishTokenAdminTests(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.editor = editor_create()
        cls.docs = Source.objects.create(
            name="Docs", seed_urls="https://docs.example.com/"
        )

    def setUp(self):
        self.client.force_login(self.editor)

    def test_a_token_is_made_for_a_source_and_shown_once(self):
        url = reverse("admin:ingest_publishtoken_add")

        response = self.client.post(url, {"source": self.docs.pk, "name": "CI"})

        assert response.status_code == 200  # shown here, never redirected with
        key = response.context["key"]
        content = response.content.decode()
        assert key in content and "it is shown this once" in content
        assert f"/api/sources/{self.docs.pk}/publish/" in content
        token = PublishToken.objects.get()
        assert (token.source, token.name, token.created_by) == (
            self.docs, "CI", self.editor,
        )  # fmt: skip
        assert token.key_hash == PublishToken.digest(key)
        change = reverse("admin:ingest_publishtoken_change", args=[token.pk])
        assert key not in self.client.get(change).content.decode()
        assert bearer(key).post(publish_url(self.docs)).status_code == 202

    def test_a_revoked_token_is_refused_from_then_on(self):
        token, key = publish_token_create(source=self.docs, name="CI", user=SYSTEM)

        self.client.post(
            reverse("admin:ingest_publishtoken_changelist"),
            {"action": "revoke", "_selected_action": [token.pk]},
        )

        assert bearer(key).post(publish_url(self.docs)).status_code == 401
        token.refresh_from_db()
        assert token.revoked_at is not None

    def test_editors_who_may_not_change_sources_cannot_make_tokens(self):
        self.editor.user_permissions.remove(
            *self.editor.user_permissions.filter(codename="change_source")
        )
        url = reverse("admin:ingest_publishtoken_add")

        assert (
            self.client.post(url, {"source": self.docs.pk, "name": "CI"}).status_code
            == 403
        )
        assert not PublishToken.objects.exists()
