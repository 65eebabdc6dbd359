"""Change feeds over HTTP: Atom that a real feed parser reads, JSON pages with
cursors, and exactly the sources the caller may search."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from urllib.parse import parse_qs, quote, urlsplit

import feedparser
import pytest
from django.contrib.auth.models import Group, User
from rest_framework.authtoken.models import Token

from sources.models import FeedToken, PageVersion, Source
from tests.world import INSTALL, SITE, IngestWorld

PRIVATE = "https://private.example"
# Cursors as they stand in a query string; none is one this feed hands out.
BAD_CURSORS = [
    "2026-13-45T00:00:00Z~1",  # no 13th month
    "2026-02-30T00:00:00Z~1",  # no 30 February
    "2026-01-01T25:00:00Z~1",
    "2026-01-01T00:00:00%2B99:00~1",  # an offset of 99 hours
    "",
    "2026-01-01T00:00:00Z",  # no "~"
    "2026-01-01T00:00:00Z~x",
    "2026-01-01T00:00:00Z~-1",
    "2026-01-01T00:00:00Z~9223372036854775808",  # past bigint
    "2026-01-01T00:00:00Z~" + "9" * 30,
    "2026-01-01T00:00:00Z~%C2%B2",  # a superscript two is a digit to str.isdigit
    "0000-01-01T00:00:00Z~1",
    "10000-01-01T00:00:00Z~1",
    "0001-01-01T00:00:00%2B01:00~1",  # before year 1 in UTC
    "9999-12-31T23:59:59-01:00~1",  # after year 9999 in UTC
    "2026-01-01T00:00:00~1",  # naive: which day it is depends on where
    "yesterday",
    "~",
    "9" * 10_000,
    "2026-01-01T00:00:00Z~" + "1" * 10_000,
    "%FF%FE%25%00~1",
    "2026-01-01T00:00:00Z%00~1",  # a NUL byte
]
GUIDE = "# Guide\n\n## Setup\n\nRun the installer.\n\n## Use\n\nCall it twice.\n"


class FeedTests(IngestWorld):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        ops = Group.objects.create(name="operations")
        cls.private = Source.objects.create(name="Runbooks", seed_urls=f"{PRIVATE}/")
        cls.private.allowed_groups.add(ops)
        cls.reader = User.objects.create_user("reader", password="a long password 1")
        cls.operator = User.objects.create_user("operator", password="a long pw 12")
        cls.operator.groups.add(ops)

    def setUp(self):
        self.ingest(f"{SITE}/install/", body=INSTALL)
        self.ingest(f"{SITE}/guide/", body=GUIDE, content_type="text/markdown")
        self.ingest(
            f"{SITE}/guide/",
            body=GUIDE.replace("Call it twice.", "Call it three times."),
            content_type="text/markdown",
        )
        self.ingest(f"{SITE}/install/", body="gone", original_status=404)
        self.ingest(
            f"{PRIVATE}/restore/",
            body="# Restore\n\nSecret runbook.\n",
            content_type="text/markdown",
        )

    def get(self, path: str, user: User | None = None, **headers):
        if user is not None:
            self.client.force_login(user)
        return self.client.get(path, headers=headers)

    def test_the_atom_feed_parses_as_atom_and_shows_only_visible_sources(self):
        response = self.get("/feeds/changes.atom", self.reader)

        assert response["Content-Type"].startswith("application/atom+xml")
        feed = feedparser.parse(response.content)
        assert not feed.bozo, feed.get("bozo_exception")
        assert feed.version == "atom10"
        titles = [entry.title for entry in feed.entries]
        install = PageVersion.objects.get(kind="new", page__url=f"{SITE}/install/")
        assert titles == [
            "Install: Gone (404/410)",
            "Guide: 1 line changed in Guide › Use",
            "Guide: New page, 9 lines",
            f"Install: New page, {install.lines_added} lines",
        ]
        assert all("Runbooks" not in e.summary and "Restore" not in e.title
                   for e in feed.entries)  # fmt: skip
        edit = feed.entries[1]
        assert "1 line changed in Guide › Use" in edit.summary
        step = PageVersion.objects.get(kind="changed")
        assert edit.link == f"http://testserver/feeds/changes/{step.pk}/"
        assert "/admin/" not in response.content.decode()
        assert len({e.id for e in feed.entries}) == 4

    def test_an_anonymous_reader_follows_an_entry_to_what_changed(self):
        Source.objects.filter(pk=self.source.pk).update(public=True)
        feed = feedparser.parse(self.get("/feeds/changes.atom").content)
        edit = next(e for e in feed.entries if "1 line changed" in e.title)

        page = self.client.get(edit.link)

        assert page.status_code == 200
        content = page.content.decode()
        assert "Django administration" not in content and "/admin/" not in content
        diff = content.split('id="diff"')[1]
        assert "<mark>three times</mark>" in diff and "<mark>twice</mark>" in diff
        assert "in Guide › Use" in diff
        assert f'href="{SITE}/guide/"' in content

    def test_the_change_page_is_for_whoever_may_read_its_source(self):
        restore = PageVersion.objects.get(page__url=f"{PRIVATE}/restore/")
        path = f"/feeds/changes/{restore.pk}/"
        root = User.objects.create_superuser("root", "r@example.com", "pw")
        # (who, status, the admin diff linked)
        table = [
            (None, 302, False),
            (self.reader, 404, False),
            (self.operator, 200, False),
            (root, 200, True),
        ]
        for user, status, admin_link in table:
            with self.subTest(user=str(user)):
                self.client.logout()
                response = self.get(path, user)

                assert response.status_code == status
                if status == 302:
                    assert response["Location"].startswith("/accounts/login/")
                content = response.content.decode()
                assert ("Secret runbook." in content) == (status == 200)
                assert ('id="admin-diff"' in content) == admin_link
        assert self.get("/feeds/changes/999999/", self.operator).status_code == 404

    def test_json_entries_name_the_readers_change_page_and_the_editors_diff(self):
        change = self.get("/feeds/changes.json?limit=3", self.reader).json()
        edit = change["changes"][2]

        assert edit["change_url"].startswith("http://testserver/feeds/changes/")
        assert "/admin/sources/page/" in edit["diff_url"]

    def test_a_group_member_reads_the_private_source_too(self):
        feed = feedparser.parse(self.get("/feeds/changes.atom", self.operator).content)

        assert "Restore: New page, 3 lines" in [e.title for e in feed.entries]

    def test_a_source_feed_is_missing_for_who_may_not_read_the_source(self):
        path = f"/feeds/sources/{self.private.pk}/changes.json"
        assert self.get(path, self.reader).status_code == 404
        changes = self.get(path, self.operator).json()["changes"]
        assert [c["title"] for c in changes] == ["Restore"]
        missing = self.get("/feeds/sources/999999/changes.atom", self.operator)
        assert missing.status_code == 404

    def test_json_pages_back_with_next_and_polls_with_since(self):
        first = self.get("/feeds/changes.json?limit=3", self.operator).json()
        assert [c["kind"] for c in first["changes"]] == ["new", "deleted", "changed"]
        assert first["changes"][2]["sections"] == ["Guide › Use"]
        edit = first["changes"][2]
        assert (edit["words_added"], edit["words_removed"]) == (2, 1)  # three times
        second = self.client.get(first["next"]).json()
        assert [c["kind"] for c in second["changes"]] == ["new", "new"]
        assert second["next"] is None

        latest = first["latest"]
        assert self.get(f"/feeds/changes.json?since={latest}").json()["changes"] == []
        self.ingest(f"{SITE}/install/", body=INSTALL)  # back
        polled = self.get(f"/feeds/changes.json?since={latest}").json()
        assert [c["kind"] for c in polled["changes"]] == ["restored"]
        assert polled["latest"] != latest

    def test_bad_parameters_are_400_with_a_json_body(self):
        self.client.force_login(self.reader)
        for query in ["since=yesterday", "before=2026-01-01T00:00:00~x",
                      "since=2026-01-01T00:00:00~1", "limit=0", "limit=500",
                      "limit=ten", "limit=%C2%B2", "limit=" + "9" * 5000,
                      "limit=-1", "limit=%00"]:  # fmt: skip
            response = self.client.get(f"/feeds/changes.json?{query}")
            assert response.status_code == 400, query
            assert response.json()["detail"], query

    @pytest.mark.slow  # every JSON feed, bad cursors and good
    def test_a_bad_cursor_is_400_on_every_json_feed_and_a_good_one_still_works(self):
        Source.objects.filter(pk=self.source.pk).update(public=True)
        feeds = ["/feeds/changes.json", f"/feeds/sources/{self.source.pk}/changes.json"]
        changes = self.get("/feeds/changes.json").json()["changes"]
        at = datetime.fromisoformat(changes[1]["changed_at"])
        # The same moment written with an offset, as changed_at may be, is the same.
        shifted = at.astimezone(timezone(timedelta(hours=2))).isoformat()
        good = [changes[1]["cursor"], f"{quote(shifted)}~{changes[1]['id']}"]
        for caller in [None, self.reader]:
            self.client.logout()
            if caller is not None:
                self.client.force_login(caller)
            for path, name, value in (
                (path, name, value)
                for path in feeds
                for name in ("since", "before")
                for value in BAD_CURSORS
            ):
                with self.subTest(caller=caller, path=path, name=name, value=value):
                    response = self.client.get(f"{path}?{name}={value}")
                    assert response.status_code == 400
                    assert response["Content-Type"] == "application/json"
                    assert name in response.json()["detail"]
            for path, cursor in ((path, cursor) for path in feeds for cursor in good):
                with self.subTest(caller=caller, path=path, cursor=cursor):
                    newer = self.client.get(f"{path}?since={cursor}").json()
                    older = self.client.get(f"{path}?before={cursor}").json()
                    assert newer["changes"] == changes[:1]
                    assert older["changes"] == changes[2:]

    def test_who_is_asking_comes_from_a_session_an_api_token_or_a_feed_token(self):
        api_key = Token.objects.create(user=self.operator).key
        feed_key = FeedToken.issue(self.operator)

        anonymous = self.client.get("/feeds/changes.json")
        by_header = self.client.get(
            "/feeds/changes.json", headers={"Authorization": f"Token {api_key}"}
        )
        by_feed_token = self.client.get(f"/feeds/changes.atom?token={feed_key}")
        FeedToken.issue(self.operator)  # a new one replaces it
        replaced = self.client.get(f"/feeds/changes.atom?token={feed_key}")
        wrong = self.client.get(
            "/feeds/changes.json", headers={"Authorization": "Token nope"}
        )

        assert anonymous.status_code == 401 and anonymous.json()["detail"]
        assert anonymous["WWW-Authenticate"]
        assert by_header.status_code == 200 and len(by_header.json()["changes"]) == 5
        assert by_feed_token.status_code == 200
        assert len(feedparser.parse(by_feed_token.content).entries) == 5
        assert replaced.status_code == 401 and wrong.status_code == 401
        assert not FeedToken.objects.filter(key_hash=feed_key).exists(), "hashed"

    def test_the_feeds_page_gives_links_and_a_feed_token_once(self):
        self.client.force_login(self.reader)

        before = self.client.get("/feeds/")
        made = self.client.post("/feeds/")
        again = self.client.get("/feeds/")

        assert before.status_code == 200 and b"Runbooks" not in before.content
        assert b"Example docs" in before.content and b"token=" not in before.content
        key = made.context["key"]
        assert key.startswith("kbf_") and f"token={key}".encode() in made.content
        assert key.encode() not in again.content
        atom = next(url for url in made.context["every"].values() if "atom" in url)
        assert parse_qs(urlsplit(atom).query)["token"] == [key]
        self.client.logout()
        assert self.client.get(atom).status_code == 200
