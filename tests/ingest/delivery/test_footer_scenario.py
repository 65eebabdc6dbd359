"""The footer scenario of the editors' admin issue, replayed: a site's pages are
crawled, then crawled again with a few real edits, one page gone, and a new footer
line on every page, which the source learns as boilerplate on the way.

Only the edits and the tombstone are content changes. The footer costs the chunks
re-embedded before it was learned, and nothing once it is."""

from __future__ import annotations

from django.conf import settings

from ingest.delivery.job import delivery_process
from ingest.delivery.models import Delivery
from sources.models import Page, PageVersion
from tests.world import SITE, IngestWorld, receive_delivery, run_queued

PAGES = 30
EDITED = {3, 21}  # one edited before the footer is learned, one after
GONE = 8
MENU = "Home · Guide · API reference · Changelog · Community"
FOOTER = "Questions? Join the community forum at forum.example.com today."
REDERIVE = "ingest.tasks.source_pages_rederive_task"
# Distinct words, so that no two pages share a line of the same shape by accident.
TOPICS = """tables indexes views triggers roles schemas types functions queries backups
replication extensions sequences domains operators casts collations policies
publications subscriptions tablespaces statistics vacuum analyze cursors savepoints
locks notifications partitions constraints""".split()


def doc(number: int, *, footer: bool = False, edited: bool = False) -> str:
    topic = TOPICS[number]
    intro = f"This page explains {topic} in detail."
    if edited:
        intro += " It now also covers the new release."
    usage = f"Use {topic} with care; the examples show {topic} at work."
    return (
        f"<html><head><title>{topic.title()}</title></head><body><main>"
        f"<h1>{topic.title()}</h1><p>{MENU}</p>"
        f"<h2>About</h2><p>{intro}</p><h2>Usage</h2><p>{usage}</p>"
        + (f"<p>{FOOTER}</p>" if footer else "")
        + "</main></body></html>"
    )


def deliver(url: str, body: str, **kwargs) -> Delivery:
    """A delivery, then the jobs a worker would run right after it."""
    delivery = receive_delivery(url, body, **kwargs)
    delivery_process(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    run_queued(REDERIVE)
    return delivery


class FooterScenarioTests(IngestWorld):
    # Both rounds once for the class (sixty deliveries): the tests only read them.
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.urls = [f"{SITE}/topic{n}/" for n in range(PAGES)]
        for number, url in enumerate(cls.urls):
            deliver(url, doc(number))
        cls.before = {url: Page.objects.get(url=url) for url in cls.urls}
        cls.round_two = []
        for number, url in enumerate(cls.urls):
            if number == GONE:
                cls.round_two.append(deliver(url, "gone", original_status=404))
            else:
                body = doc(number, footer=True, edited=number in EDITED)
                cls.round_two.append(deliver(url, body))

    def untouched(self) -> list[str]:
        return [u for n, u in enumerate(self.urls) if n not in EDITED | {GONE}]

    def test_the_footer_is_learned_as_boilerplate_and_kept_out_of_the_index(self):
        for url in self.urls:
            assert FOOTER not in self.page(url).markdown
        threshold = max(settings.BOILERPLATE_MIN_PAGES, PAGES // 2)
        embedded = [n for n, d in enumerate(self.round_two) if d.outcome == "embedded"]
        # Pages crawled before the footer crossed the line changed for a while.
        assert len(set(embedded) - EDITED) < threshold

    def test_pages_that_only_gained_the_footer_record_no_content_change(self):
        for url in self.untouched():
            page, before = self.page(url), self.before[url]
            with self.subTest(url=url):
                assert page.versions.count() == 1
                assert page.last_changed_at == before.last_changed_at
                assert page.content_hash == before.content_hash
                assert page.markdown == before.markdown
                latest = page.versions.get()
                assert latest.content_hash == page.content_hash

    def test_real_edits_and_the_tombstone_are_the_only_versions_recorded(self):
        added = PageVersion.objects.filter(
            recorded_at__gt=max(p.last_changed_at for p in self.before.values())
        )
        assert sorted(added.values_list("kind", flat=True)) == [
            "changed",
            "changed",
            "deleted",
        ]
        for number in EDITED:
            page = self.page(self.urls[number])
            new, old = page.versions.order_by("-recorded_at")
            assert "new release" in new.markdown
            assert FOOTER not in new.markdown
            assert new.markdown.replace(" It now also covers the new release.", "") == (
                old.markdown
            )
            assert page.last_changed_at > self.before[page.url].last_changed_at

    def test_once_learned_the_footer_costs_no_tokens(self):
        footer_only = [
            d for n, d in enumerate(self.round_two) if n not in EDITED | {GONE}
        ]
        early = [d for d in footer_only if d.outcome == Delivery.Outcome.EMBEDDED]
        late = [d for d in footer_only if d.outcome == Delivery.Outcome.UNCHANGED]

        assert len(early) + len(late) == len(footer_only)
        assert late, "some pages arrived after the footer was learned"
        assert sum(d.embedding_tokens for d in late) == 0
        for delivery in early:
            delivery.refresh_from_db()
            with self.subTest(url=delivery.url):
                # Only the section the footer joined was embedded, not the page.
                assert delivery.error == (
                    "1 new chunk texts, 1 reused; only boilerplate, learned later"
                )
                assert delivery.embedding_tokens > 0
                assert delivery.version is None  # dropped once learned


class PatternTests(IngestWorld):
    def test_a_pattern_added_by_an_editor_changes_no_freshness_date(self):
        body = doc(0, footer=True)
        first = self.ingest(f"{SITE}/tables/", body)
        self.source.boilerplate_patterns = "^Questions\\? Join"
        self.source.save()

        again = self.ingest(f"{SITE}/tables/", body)

        page = self.page(f"{SITE}/tables/")
        assert again.outcome == Delivery.Outcome.UNCHANGED
        assert FOOTER not in page.markdown
        assert page.last_changed_at == first.received_at
        assert page.last_verified_at == again.received_at
        (version,) = page.versions.all()
        assert version.content_hash == page.content_hash
