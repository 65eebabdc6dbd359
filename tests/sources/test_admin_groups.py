"""Who sees what in the admin: an editor of group A over group B's rows. Lists,
change pages, diffs, the dashboard, actions and search all read through one rule,
the one search uses without its public sources (``Source.objects.visible_to``);
superusers see everything."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.db import transaction
from django.urls import reverse

from ingest.crawl.models import Crawl
from ingest.delivery.models import Delivery
from ingest.publish.models import PublishToken
from ingest.pushing.models import Push
from retrieval.models import QueryLog
from sources.admin.visibility import VisibleRowsAdmin
from sources.models import Page, Source
from tests.admin_world import BETA_MARKS, TwoGroupsWorld, editor_create

EDITORS_APPS = {"sources", "ingest", "retrieval"}

# Each editors' list, with what it shows of group A's rows and of group B's.
LISTS = [
    ("sources_source", "Alpha handbook", "Beta secrets"),
    ("sources_page", "alpha.example.com", "beta.example.net"),
    ("sources_pageversion", "alpha.example.com", "beta.example.net"),
    ("sources_lineshape", "Alpha handbook menu", "Beta secrets menu"),
    ("ingest_push", "alpha.example.com", "beta.example.net"),
    ("ingest_delivery", "alpha.example.com", "beta.example.net"),
    ("ingest_crawl", "Alpha handbook", "Beta secrets"),
    ("ingest_crawlurl", "alpha.example.com", "beta.example.net"),
    ("retrieval_chunk", "alpha.example.com", "beta.example.net"),
    ("retrieval_embedding", "a1a1a1a1a1a1", "b1b1b1b1b1b1"),
    ("retrieval_querylog", "alpha.example.com", "beta.example.net"),
    ("retrieval_embeddingusage", "Alpha handbook", "Beta secrets"),
    ("ingest_publishtoken", "Alpha handbook deploy", "Beta secrets deploy"),
    ("ingest_publishcheck", "Alpha handbook", "Beta secrets"),
]
# Each list's search, for a term only one of group B's rows holds.
SEARCHES = [
    ("sources_source", "Beta secrets"),
    ("sources_page", "beta.example.net"),
    ("sources_pageversion", "beta.example.net"),
    ("sources_lineshape", "Beta secrets menu"),
    ("ingest_push", "push-b1"),
    ("ingest_delivery", "rid-b1"),
    ("ingest_crawlurl", "beta.example.net"),
    ("retrieval_chunk", "b1" * 32),
    ("retrieval_embedding", "b1" * 32),
    ("retrieval_querylog", "beta.example.net"),
]


def queued_pushes(source: Source) -> int:
    return Push.objects.filter(page__source=source, state=Push.State.QUEUED).count()


class GroupEditorTests(TwoGroupsWorld):
    def setUp(self):
        self.client.force_login(self.alice)

    def assert_nothing_of_group_b(self, content: str) -> None:
        for mark in BETA_MARKS:
            assert mark not in content, mark

    def test_every_list_shows_group_as_rows_and_none_of_group_bs(self):
        for name, shown, hidden in LISTS:
            url = reverse(f"admin:{name}_changelist")
            with self.subTest(list=name):
                response = self.client.get(url)

                content = response.content.decode()
                assert response.status_code == 200
                assert shown in content
                assert hidden not in content
                self.assert_nothing_of_group_b(content)  # filters' choices too
                self.client.force_login(self.root)  # who sees every group's
                assert hidden in self.client.get(url).content.decode()
                self.client.force_login(self.alice)

    def screens(self) -> list[tuple[str, str, int, int]]:
        """Every screen of one row: (method, URL name, group A's row, group B's)."""
        a, b, rows = self.a, self.b, []
        for name, ours, theirs in [
            ("sources_source", a.source, b.source),
            ("sources_page", a.page, b.page),
            ("sources_pageversion", a.versions[1], b.versions[1]),
            ("sources_lineshape", a.shape, b.shape),
            ("ingest_push", a.push, b.push),
            ("ingest_delivery", a.delivery, b.delivery),
            ("ingest_crawl", a.crawl, b.crawl),
            ("ingest_crawlurl", a.crawl_url, b.crawl_url),
            ("retrieval_chunk", a.chunk, b.chunk),
            ("retrieval_embedding", a.embedding, b.embedding),
            ("retrieval_querylog", a.log, b.log),
            ("ingest_publishtoken", a.token, b.token),
            ("ingest_publishcheck", a.check, b.check),
        ]:
            for view in ["change", "history"]:
                rows.append(("get", f"{name}_{view}", ours.pk, theirs.pk))
        pages, sources = (a.page.pk, b.page.pk), (a.source.pk, b.source.pk)
        return [
            *rows,
            ("get", "sources_page_diff", *pages),
            ("get", "sources_page_delete", *pages),
            ("get", "sources_source_delete", *sources),
            ("post", "sources_source_crawl_now", *sources),
            ("post", "sources_source_check", *sources),
        ]

    @pytest.mark.slow  # every admin screen, three times
    def test_group_bs_rows_answer_404_as_ids_that_do_not_exist(self):
        for method, name, ours, theirs in self.screens():
            call = getattr(self.client, method)
            with self.subTest(screen=name):
                mine, other, missing = (
                    call(reverse(f"admin:{name}", args=[pk])).status_code
                    for pk in (ours, theirs, 999_999)
                )
                assert mine in (200, 302)  # a crawl button redirects
                assert other == missing == 404

    def test_the_dashboard_counts_only_what_the_editor_may_see(self):
        response = self.client.get(reverse("admin-dashboard"), {"days": 14})

        context = response.context
        shown = {"Alpha handbook", self.source.name}
        assert {row["source"].name for row in context["sources"]} == shown
        assert {source.name for source in context["failing"]} == shown
        assert {page for page, _, _ in context["oldest"]} == {self.page, self.a.page}
        assert context["freshness"].live == 2
        outcomes: dict[str, int] = {}
        for day in context["per_day"]:
            for group, count in day.outcomes.items():
                outcomes[group] = outcomes.get(group, 0) + count
        assert outcomes == {"new": 2, "failed": 1}  # the stray one is not
        # Both are their pages' first crawls: 321 + 55, not B's 55.
        assert context["first"]["tokens"] == "376"
        # What the whole index spent cannot be split by source: not shown.
        assert {usage for *_, usage in context["token_rows"]} == {"—"}
        self.assert_nothing_of_group_b(response.content.decode())

        self.client.force_login(self.root)
        context = self.client.get(reverse("admin-dashboard"), {"days": 14}).context
        assert len(context["sources"]) == 3
        assert context["freshness"].live == 3
        assert context["first"]["tokens"] == "431"
        assert "1,234,567" in {usage for *_, usage in context["token_rows"]}

    def test_actions_on_selected_rows_leave_group_bs_alone(self):
        a, b = self.a, self.b
        table = [
            ("sources_source", "crawl_now", a.source, b.source, queued_pushes),
            ("sources_source", "recrawl_due_pages", a.source, b.source,
             queued_pushes),
            ("sources_source", "check_for_changes", a.source, b.source,
             lambda source: source.publish_checks.count()),
            ("ingest_publishtoken", "revoke", a.token, b.token,
             lambda t: PublishToken.objects.get(pk=t.pk).revoked_at is None),
            ("sources_page", "crawl_now", a.page, b.page,
             lambda page: queued_pushes(page.source)),
            ("ingest_delivery", "requeue", a.failed, b.failed,
             lambda d: Delivery.objects.get(pk=d.pk).state),
            ("ingest_crawl", "cancel", a.crawl, b.crawl,
             lambda crawl: Crawl.objects.get(pk=crawl.pk).state),
        ]  # fmt: skip
        for name, action, ours, theirs, state in table:
            with self.subTest(list=name, action=action), transaction.atomic():
                before = state(ours), state(theirs)

                self.client.post(
                    reverse(f"admin:{name}_changelist"),
                    {"action": action, "_selected_action": [ours.pk, theirs.pk]},
                )

                assert state(ours) != before[0], "the editor's own row is acted on"
                assert state(theirs) == before[1]
                transaction.set_rollback(True)

    def test_searches_find_nothing_of_group_b(self):
        for name, term in SEARCHES:
            url = reverse(f"admin:{name}_changelist")
            with self.subTest(list=name):
                found = self.client.get(url, {"q": term}).context["cl"].result_list
                assert list(found) == []
                self.client.force_login(self.root)
                assert len(self.client.get(url, {"q": term}).context["cl"].result_list)
                self.client.force_login(self.alice)

    def test_a_page_can_be_added_only_to_a_source_the_editor_sees(self):
        url = reverse("admin:sources_page_add")
        form = self.client.get(url).content.decode()
        assert "Alpha handbook" in form
        self.assert_nothing_of_group_b(form)

        response = self.client.post(
            url,
            {"source": self.b.source.pk, "url": "https://beta.example.net/new/",
             "versions-TOTAL_FORMS": "0", "versions-INITIAL_FORMS": "0"},
        )  # fmt: skip

        assert response.status_code == 200  # the form again, with its error
        assert "Select a valid choice" in response.content.decode()
        assert not Page.objects.filter(url="https://beta.example.net/new/").exists()

    def test_rows_no_source_holds_are_shown_only_to_who_sees_every_source(self):
        deliveries = reverse("admin:ingest_delivery_changelist")
        usage = reverse("admin:retrieval_embeddingusage_changelist")

        def shown() -> tuple[bool, int]:
            listed = self.client.get(deliveries).context["cl"].result_list
            spent = self.client.get(usage).context["cl"].result_list
            return self.stray in listed, len(spent)

        assert shown() == (False, 0)
        self.alice.groups.add(self.group_b)  # now no source is hidden from her
        assert shown() == (True, 1)

    def test_editors_who_may_not_change_sources_cannot_crawl_from_the_lists(self):
        viewer = editor_create("viewer")
        viewer.user_permissions.remove(
            *viewer.user_permissions.filter(codename="change_source")
        )
        viewer.groups.add(self.group_a)
        self.client.force_login(viewer)
        for name, action, row in [
            ("sources_source", "crawl_now", self.a.source),
            ("sources_source", "recrawl_due_pages", self.a.source),
            ("sources_source", "check_for_changes", self.a.source),
            ("sources_page", "crawl_now", self.a.page),
        ]:
            with self.subTest(list=name, action=action):
                self.client.post(
                    reverse(f"admin:{name}_changelist"),
                    {"action": action, "_selected_action": [row.pk]},
                )
                assert queued_pushes(self.a.source) == 0
                assert self.a.source.publish_checks.count() == 1  # its own, done

    def test_every_editors_admin_reads_through_the_visibility_rule(self):
        for model, model_admin in admin.site._registry.items():
            if model._meta.app_label in EDITORS_APPS:
                with self.subTest(model=model._meta.model_name):
                    assert isinstance(model_admin, VisibleRowsAdmin)

    def test_a_log_is_shown_when_its_asker_and_its_chunks_reveal_nothing_hidden(self):
        # A log shows what was asked and answered: it is shown when its asker
        # could search no source hidden from the editor, and no chunk it
        # retrieved is in one.
        a, b, open_chunk = self.a.chunk.pk, self.b.chunk.pk, self.chunk.pk
        cases = {
            "Alice's, from group A": (self.alice, [a], True),
            "Bob's, from group B": (self.bob, [b], False),
            "Bob's, abstained": (self.bob, [], False),
            "Alice's, from group B (she was in it then)": (self.alice, [b], False),
            "an anonymous one, from the open source": (None, [open_chunk], True),
            "an anonymous one, abstained": (None, [], True),
            "an anonymous one, from a chunk replaced since": (None, [999_999], True),
            "a superuser's, from the open source": (self.root, [open_chunk], False),
        }
        logs = {
            name: QueryLog.objects.create(
                kind=QueryLog.Kind.QUERY, text=name, user=user, chunk_ids=chunks,
                abstained=not chunks, latency_ms=1,
            )
            for name, (user, chunks, _) in cases.items()
        }  # fmt: skip
        self.client.force_login(self.alice)

        listed = (
            self.client.get(
                reverse("admin:retrieval_querylog_changelist"), {"kind": "query"}
            )
            .context["cl"]
            .result_list
        )
        seen = QueryLog.objects.visible_to(self.alice)

        expected = {name for name, (*_, shown) in cases.items() if shown}
        assert {name for name, log in logs.items() if log in seen} == expected
        assert {log.text for log in listed} >= expected
        assert not {log.text for log in listed} & (set(cases) - expected)
        assert set(logs.values()) <= set(QueryLog.objects.visible_to(self.root))

    def test_a_public_source_of_group_b_is_still_group_bs_to_manage(self):
        # Public: anyone may read it, so what was asked of it hides nothing from
        # Alice; but only group B's editors see and change it in the admin.
        Source.objects.filter(pk=self.b.source.pk).update(public=True)
        anonymous = QueryLog.objects.create(
            kind=QueryLog.Kind.QUERY, text="Asked of the public beta source",
            chunk_ids=[self.b.chunk.pk], latency_ms=1,
        )  # fmt: skip

        for method, name, _, theirs in self.screens():
            if name.startswith("retrieval_querylog"):
                continue  # see below
            with self.subTest(screen=name):
                call = getattr(self.client, method)
                assert call(reverse(f"admin:{name}", args=[theirs])).status_code == 404
        assert not Source.objects.visible_to(self.alice).filter(pk=self.b.source.pk)
        assert set(QueryLog.objects.visible_to(self.alice)) >= {anonymous, self.b.log}
