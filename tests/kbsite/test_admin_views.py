"""What editors do in the admin: read a page's changes, a source's overview and the
dashboard; crawl a source; find stripped lines; read what questions were answered
from; re-queue what no source covered."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import User
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from ingest.crawl.models import CrawlHost
from ingest.delivery.job import delivery_process
from ingest.delivery.models import Delivery
from ingest.delivery.queue import deliveries_bodies_expire
from ingest.publish.models import PublishCheck
from ingest.pushing.models import Push
from retrieval.answer import cited_count
from retrieval.models import QueryLog
from retrieval.questions import question_answer
from sources.models import Source
from tests.admin_world import ESCAPED, AdminWorld, editor_create
from tests.world import INSTALL, HarborWorld, IngestWorld


class PageDiffTests(AdminWorld):
    def setUp(self):
        self.client.force_login(self.editor)
        self.url = reverse("admin:sources_page_diff", args=[self.page.pk])

    def test_it_compares_the_latest_version_with_the_one_before_by_default(self):
        response = self.client.get(self.url)

        assert response.context["older"] == self.v1
        assert response.context["newer"] == self.v2
        diff = response.context["diff"]
        assert (diff.added, diff.removed) == (2, 2)

    def test_changed_words_are_highlighted_and_unchanged_lines_folded(self):
        content = self.client.get(self.url).content.decode()

        assert '<tr class="kb-added">' in content
        assert "Run<mark> uv</mark> pip install" in content
        assert "<mark>start</mark>" in content
        assert "<mark>run</mark>" in content  # in the removed line
        assert (  # the section's path in plain words, escaped
            '<div class="kb-hunk">in Guide &lt;script&gt;alert(1)&lt;/script&gt; › '
            "Install</div>"
        ) in content
        assert "<summary>4 unchanged lines</summary>" in content

    def test_it_shows_the_chunks_and_tokens_the_change_cost(self):
        response = self.client.get(self.url)

        change = response.context["change"]
        assert change["delivery"] == self.delivery
        assert [c["heading"] for c in change["chunks"]] == [
            "Guide <script>alert(1)</script> › Install",
            "Guide <script>alert(1)</script> › Use <script>alert(1)</script>",
        ]
        content = response.content.decode()
        assert "<strong>321</strong> tokens embedded in 1 request" in content
        assert f"Guide {ESCAPED} › Install" in content

    def test_any_two_versions_can_be_compared_either_way(self):
        response = self.client.get(self.url, {"a": self.v2.pk, "b": self.v1.pk})

        assert response.context["older"] == self.v1
        assert response.context["newer"] == self.v2

    def test_the_first_version_is_all_new(self):
        response = self.client.get(self.url, {"b": self.v1.pk})

        assert response.context["older"] is None
        assert response.context["diff"].removed == 0
        assert b"The first version" in response.content

    def test_a_page_links_to_its_changes(self):
        response = self.client.get(
            reverse("admin:sources_page_change", args=[self.page.pk])
        )

        assert f'href="{self.url}"'.encode() in response.content
        assert f'href="{self.url}?b={self.v2.pk}"'.encode() in response.content


@override_settings(
    WEBHOOK_TOKEN="secret-webhook-token",
    CRAWLBASE_TOKEN="",
    CRAWLBASE_CRAWLER="",
    EMBEDDING_COST_PER_MILLION_TOKENS=2.5,
)
class SourceOverviewTests(AdminWorld):
    def setUp(self):
        self.client.force_login(self.editor)
        self.url = reverse("admin:sources_source_change", args=[self.source.pk])

    def test_it_counts_pages_by_condition_and_shows_what_the_source_costs(self):
        content = self.client.get(self.url).content.decode()

        for text in ["1 live</a>", "1 stale</a>", "1 failing</a>", "1 gone</a>",
                     "0 waiting for a first crawl</a>", "1 chunks", "1,234 ever",
                     "(≈ 0.00)"]:  # fmt: skip
            assert text in content, text
        assert f"site status 503 {ESCAPED}" in content  # the last error
        last = content.split("Last delivery:")[1].split("</div>")[0]
        assert "https://docs.example.com/guide/</a>" in last
        assert "1\xa0week ago</span>: Embedded (content changed)" in last
        assert "/webhooks/crawlbase/?token=secr…" in content
        assert "Missing: CRAWLBASE_TOKEN is not set" in content

    def test_a_host_paused_for_a_hostile_wait_is_shown_with_its_reason(self):
        reason = "Retry-After of 99999999999 s is beyond CRAWL_MAX_DELAY"
        CrawlHost.objects.create(
            origin="https://docs.example.com",
            paused_until=timezone.now() + timedelta(days=1),
            pause_reason=reason,
        )

        content = self.client.get(self.url).content.decode()

        shown = content.split("Hosts paused:")[1].split("</div>")[0]
        assert reason in shown

    def test_its_crawl_buttons_push_and_report_counts(self):
        content = self.client.get(self.url).content.decode()
        seeds = reverse("admin:sources_source_crawl_now", args=[self.source.pk])
        check = reverse("admin:sources_source_check", args=[self.source.pk])
        assert f'action="{seeds}"' in content and f'action="{check}"' in content
        assert content.index(check) < content.index(seeds)  # the first button
        Push.objects.all().delete()

        response = self.client.post(seeds, follow=True)

        assert b"1 page selected: 1 queued for Crawlbase" in response.content
        assert self.client.get(seeds).status_code == 405

    def test_check_for_changes_says_what_a_crawlbase_source_will_push(self):
        check = reverse("admin:sources_source_check", args=[self.source.pk])

        first = self.client.post(check, follow=True).content.decode()
        again = self.client.post(check, follow=True).content.decode()

        assert "Check for changes: Queued: the sitemaps of Example docs" in first
        assert "pushed to Crawlbase first, then those of its 2 pages no " in first
        assert "not pushed: each push is a paid crawl" in first
        assert "already queued (asked 2 times)" in again
        queued = PublishCheck.objects.get(state=PublishCheck.State.QUEUED)
        assert (queued.requests, queued.requested_by) == (2, self.editor)

    def test_the_overview_shows_the_last_check_for_changes_and_its_tokens(self):
        content = self.client.get(self.url).content.decode()

        shown = content.split("Last check for changes:")[1].split("</div>")[0]
        assert "No sitemap read; could not read: " + ESCAPED + ": HTTP 404" in shown
        assert "1 active publish token</a>" in shown

    def fetcher_settings_line(self) -> str:
        content = self.client.get(self.url).content.decode()
        return content.split("Fetcher settings:")[1].split("</div>")[0]

    def test_only_what_stops_the_fetcher_is_red_and_advice_reads_as_advice(self):
        # (fetcher, settings, red, advice)
        table = [
            (Source.Fetcher.DIRECT, {"CRAWL_CONTACT_URL": ""},
             None, "CRAWL_CONTACT_URL"),
            (Source.Fetcher.DIRECT, {"CRAWL_CONTACT_URL": "https://kb.example/bot"},
             None, None),
            (Source.Fetcher.CRAWLBASE, {"CRAWL_CONTACT_URL": ""},
             "CRAWLBASE_TOKEN is not set; CRAWLBASE_CRAWLER is not set", None),
            (Source.Fetcher.CRAWLBASE,
             {"CRAWLBASE_TOKEN": "t", "CRAWLBASE_CRAWLER": "c", "WEBHOOK_TOKEN": ""},
             "WEBHOOK_TOKEN is not set", None),
            (Source.Fetcher.NSTPROXY, {"NSTPROXY_API_KEY": ""},
             "NSTPROXY_API_KEY is not set", None),
        ]  # fmt: skip
        for fetcher, values, red, advice in table:
            Source.objects.filter(pk=self.source.pk).update(fetcher=fetcher)
            with self.subTest(fetcher=fetcher, values=values), self.settings(**values):
                line = self.fetcher_settings_line()

                warned = line.split('<strong class="kb-warning">')[1:]
                if red is None:
                    assert not warned, line
                    assert "Complete." in line
                else:
                    assert warned[0].startswith(f"Missing: {red}</strong>"), line
                    assert "nothing is fetched until then" in line
                if advice is None:
                    assert "Advice" not in line
                else:
                    assert f"Advice: set {advice}: " in line
                    assert advice not in "".join(warned)

    def test_a_source_of_the_built_in_fetcher_has_no_callback_url(self):
        Source.objects.filter(pk=self.source.pk).update(fetcher=Source.Fetcher.DIRECT)

        content = self.client.get(self.url).content.decode()

        assert "crawl-now" in content and f"/{self.source.pk}/check/" in content
        assert "this source&#x27;s fetcher is Built-in polite fetcher" in content

    def test_editors_who_may_only_look_get_no_buttons(self):
        viewer = editor_create("viewer")
        viewer.user_permissions.remove(
            *viewer.user_permissions.filter(codename="change_source")
        )
        self.client.force_login(viewer)

        content = self.client.get(self.url).content.decode()
        seeds = reverse("admin:sources_source_crawl_now", args=[self.source.pk])

        assert "crawl-now" not in content
        assert self.client.post(seeds).status_code == 403

    def test_the_list_shows_counts_interval_in_words_and_tokens(self):
        response = self.client.get(reverse("admin:sources_source_changelist"))

        content = response.content.decode()
        assert "1 <small>of 2</small>" in content  # live of all pages
        assert "7 days" in content
        assert "condition=failing" in content and "condition=stale" in content


class DashboardTests(AdminWorld):
    def setUp(self):
        self.client.force_login(self.editor)
        now = timezone.now()
        for n, (outcome, tokens) in enumerate(
            [("embedded", 20), ("unchanged", 0), ("unchanged", 0),
             ("unchanged", 0), ("skipped", 0), ("out_of_scope", 0)]
        ):  # fmt: skip
            Delivery.objects.create(
                rid=f"today-{n}",
                url=self.page.url,
                page=self.page,
                outcome=outcome,
                state=Delivery.State.DONE,
                embedding_tokens=tokens,
                received_at=now - timedelta(minutes=n),
            )

    def test_recrawls_are_set_against_a_full_re_embed_and_page_level_gating(self):
        response = self.client.get(reverse("admin-dashboard"), {"days": 7})

        strategies = {s["name"]: s for s in response.context["strategies"]}
        # The page was crawled before: today's deliveries are recrawls. Its
        # chunks hold 42 tokens: four recrawls brought content, one changed it;
        # this product embedded 20 tokens.
        assert strategies["full re-embed"]["tokens"] == "168"
        assert strategies["page-level hash gating"]["tokens"] == "42"
        assert response.context["spent"]["tokens"] == "20"
        assert response.context["recrawls"] == "6"
        assert strategies["full re-embed"]["share"] == "this product spent 11.9% of it"

    def test_each_day_counts_its_outcomes(self):
        response = self.client.get(reverse("admin-dashboard"), {"days": 14})

        days = response.context["per_day"]
        assert len(days) == 14
        today = days[-1].outcomes
        assert today == {"changed": 1, "unchanged": 3, "skipped": 1, "rejected": 1}
        assert days[-11].outcomes == {"new": 1}  # the world's first delivery

    def test_charts_are_svg_drawn_on_the_server(self):
        content = self.client.get(reverse("admin-dashboard")).content.decode()

        assert content.count('<svg xmlns="http://www.w3.org/2000/svg" viewBox') == 3
        assert content.count("<rect ") > 3
        assert "<script" not in content.split('id="content-main"')[1]

    def test_it_shows_freshness_the_oldest_pages_and_failing_sources(self):
        response = self.client.get(reverse("admin-dashboard"))

        fresh = response.context["freshness"]
        assert (fresh.live, fresh.stale) == (1, 1)
        assert dict(fresh.buckets)["7–30 days"] == 1
        assert [page for page, _, _ in response.context["oldest"]] == [self.page]
        (failing,) = response.context["failing"]
        assert failing.failing == 1 and failing.failed_week == 1

    @override_settings(EMBEDDING_COST_PER_MILLION_TOKENS=3)
    def test_a_price_turns_tokens_into_money(self):
        response = self.client.get(reverse("admin-dashboard"), {"days": 7})

        strategies = {s["name"]: s for s in response.context["strategies"]}
        assert strategies["full re-embed"]["cost"] == "0.0005"
        assert b"Prices at 3 per million tokens" in response.content

    def test_staff_without_access_to_deliveries_are_refused(self):
        editor = editor_create("nobody")
        editor.user_permissions.clear()
        self.client.force_login(editor)

        assert self.client.get(reverse("admin-dashboard")).status_code == 403


class LineShapeTests(AdminWorld):
    def test_stripped_shapes_are_marked_and_filtered(self):
        self.client.force_login(self.editor)
        url = reverse("admin:sources_lineshape_changelist")

        stripped = self.client.get(url, {"stripped": "yes"}).context["cl"]
        kept = self.client.get(url, {"stripped": "no"}).context["cl"]

        assert [s.pages for s in stripped.result_list] == [57]
        assert [s.pages for s in kept.result_list] == [3]
        assert b'alt="True"' in self.client.get(url).content


class QueryLogTests(AdminWorld):
    def test_an_abstention_shows_as_such_and_answers_are_shown(self):
        self.client.force_login(self.editor)

        listing = self.client.get(reverse("admin:retrieval_querylog_changelist"))
        detail = self.client.get(
            reverse("admin:retrieval_querylog_change", args=[self.answered.pk])
        )

        assert b"Abstained</span><br>" in listing.content
        assert b"no evidence in the index" in listing.content
        assert b'Answered from 1 chunk<br><small class="kb-retrieved">1 retrieved' in (
            listing.content
        )
        content = detail.content.decode()
        assert f"Call example.start() [1] {ESCAPED}" in content
        chunk = reverse("admin:retrieval_chunk_change", args=[self.chunk.pk])
        assert f'<a href="{chunk}">#{self.chunk.pk} (0.500)</a>' in content


class QueryLogCitedTests(HarborWorld):
    def test_an_answer_counts_the_chunks_it_cited_not_all_it_retrieved(self):
        reader = User.objects.create_user("reader")
        result = question_answer(question="How do I pause a queue?", user=reader, k=5)
        log = QueryLog.objects.get(pk=result.log_id)
        assert len(log.chunk_ids) > len(result.citations) >= 1
        self.client.force_login(editor_create())

        listing = self.client.get(reverse("admin:retrieval_querylog_changelist"))

        assert cited_count(log.answer) == len(result.citations)
        cited = len(result.citations)
        expected = (
            f"Answered from {cited} chunk{'s' if cited > 1 else ''}<br>"
            f'<small class="kb-retrieved">{len(log.chunk_ids)} retrieved</small>'
        )
        assert expected in listing.content.decode()

    def test_markers_in_code_are_not_citations(self):
        answer = "Use `items[2]` [1].\n\n```py\nx[3]\n```\n\nThen restart [2] [1]."

        assert cited_count(answer) == 2


class OutOfScopeTests(IngestWorld):
    URL = "https://elsewhere.example.org/install/"

    def setUp(self):
        self.editor = editor_create()
        self.client.force_login(self.editor)
        self.delivery = self.ingest(self.URL, INSTALL)

    def requeue(self) -> bytes:
        response = self.client.post(
            reverse("admin:ingest_delivery_changelist"),
            {"action": "requeue", "_selected_action": [self.delivery.pk]},
            follow=True,
        )
        return response.content

    def test_it_says_no_source_covers_the_host_and_keeps_the_body(self):
        assert self.delivery.outcome == Delivery.Outcome.OUT_OF_SCOPE
        assert self.delivery.get_outcome_display() == (
            "Out of scope (no source covers it)"
        )
        assert self.delivery.error == "no source covers this host"
        assert self.delivery.body is not None

    def test_it_is_requeued_only_once_a_source_covers_it(self):
        assert b"Re-queued 0 deliveries. 1 were left alone" in self.requeue()

        Source.objects.create(
            name="Elsewhere", seed_urls="https://elsewhere.example.org/"
        )
        assert b"Re-queued 1 deliveries." in self.requeue()
        delivery_process(delivery_id=self.delivery.pk)

        self.delivery.refresh_from_db()
        assert self.delivery.outcome == Delivery.Outcome.EMBEDDED
        assert self.delivery.body is None

    @override_settings(REJECTED_BODY_KEEP_DAYS=3)
    def test_its_body_is_dropped_after_the_days_it_is_kept(self):
        assert deliveries_bodies_expire() == 0
        Delivery.objects.filter(pk=self.delivery.pk).update(
            processed_at=timezone.now() - timedelta(days=4)
        )

        assert deliveries_bodies_expire() == 1

        assert b"Re-queued 0 deliveries." in self.requeue()


class DurationFormTests(AdminWorld):
    def test_intervals_are_shown_and_typed_in_words(self):
        self.client.force_login(self.root)
        url = reverse("admin:sources_source_add")

        assert b'value="7 days"' in self.client.get(url).content
        self.client.post(
            url,
            {"name": "Words", "fetcher": "direct", "recrawl_every": "1 day 12 hours",
             "max_pages": "10", "crawlbase_format": "html", "max_depth": "3",
             "recrawl_min": "1 hour", "recrawl_max": "30 days"},
        )  # fmt: skip

        assert Source.objects.get(name="Words").recrawl_every == timedelta(hours=36)
