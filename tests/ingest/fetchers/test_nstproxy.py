"""Nstproxy's crawl API as a fetcher, behind the same crawl engine, against a local
fake of its (assumed) wire format."""

from __future__ import annotations

from django.test import override_settings

from ingest.crawl.models import Crawl
from ingest.crawl.progress import crawl_progress
from ingest.crawl.services import crawl_start
from ingest.fetchers.http import FetchError
from ingest.fetchers.nstproxy import NstproxyFetcher
from sources.models import Page, Source
from tests.fakes.nstproxy import FakeNstproxy
from tests.ingest.crawl.test_crawl import CrawlWorld, crawl_through

SITE = "https://js.example.com"


class NstproxyTests(CrawlWorld):
    def setUp(self) -> None:
        super().setUp()
        self.api = self.enterContext(FakeNstproxy())
        self.enterContext(
            override_settings(
                NSTPROXY_API_KEY=self.api.key,
                NSTPROXY_API_URL=self.api.base_url,
                CRAWL_ALLOW_PRIVATE_ADDRESSES=False,
            )
        )
        self.api.add(f"{SITE}/robots.txt", "User-agent: *\nDisallow: /admin/\n")

    def nst_source(self) -> Source:
        return Source.objects.create(
            name="JS app docs",
            fetcher=Source.Fetcher.NSTPROXY,
            seed_urls=f"{SITE}/docs/",
            allow_patterns=r"^https://js\.example\.com/docs/",
        )

    def test_a_site_is_crawled_through_the_api_as_markdown(self):
        self.api.add(
            f"{SITE}/docs/",
            "# Docs\n\nRendered by a browser.",
            links=[f"{SITE}/docs/a", f"{SITE}/admin/", "https://elsewhere.example/"],
        )
        self.api.add(f"{SITE}/docs/a", "# A\n\nPage A.", by_reference=True)

        crawl, _ = crawl_start(source=self.nst_source())
        crawl = crawl_through(crawl)

        assert crawl.state == Crawl.State.DONE
        live = Page.objects.filter(status=Page.Status.LIVE)
        assert set(live.values_list("url", flat=True)) == {
            f"{SITE}/docs/",
            f"{SITE}/docs/a",
        }
        markdown = Page.objects.get(url=f"{SITE}/docs/a").markdown
        assert markdown.strip().endswith("Page A."), markdown
        assert f"{SITE}/admin/" not in self.api.scraped_urls(), "robots.txt obeyed"
        assert "https://elsewhere.example/" not in self.api.scraped_urls()
        first = self.api.requests[1]
        assert first["formats"] == ["markdown", "links"]
        assert self.api.requests[0]["formats"] == ["rawData"], "robots.txt, raw"
        assert self.site.paths() == [], "nothing is fetched directly"
        assert all(
            d.rid.startswith("nstproxy-") for p in live for d in p.deliveries.all()
        )

    def test_a_rate_limit_is_waited_out_and_a_404_tombstones(self):
        self.api.rate_limited = 2
        self.api.add(f"{SITE}/docs/", "# Docs\n\nHere.", links=[f"{SITE}/docs/gone"])
        self.api.add(f"{SITE}/docs/gone", "", status=404)
        Page.objects.create(
            source=self.nst_source(), url=f"{SITE}/docs/gone", status=Page.Status.LIVE
        )

        crawl, _ = crawl_start(source=Source.objects.get())
        crawl = crawl_through(crawl)

        assert crawl_progress(crawl=crawl).pages["gone"] == 1
        assert Page.objects.get(url=f"{SITE}/docs/gone").status == Page.Status.GONE

    def test_an_address_written_in_the_url_is_refused_without_asking_the_api(self):
        source = self.nst_source()
        source.allow_patterns = "^http"
        source.save()
        crawl, _ = crawl_start(source=source, seeds=["http://169.254.169.254/latest/"])
        crawl = crawl_through(crawl)

        row = crawl.urls.get()
        assert row.result == "refused" and "metadata" in row.error
        assert self.api.requests == []

    def test_a_wrong_key_fails_the_page_without_retrying(self):
        with override_settings(NSTPROXY_API_KEY="wrong"):
            fetcher = NstproxyFetcher()
            try:
                fetcher.get(f"{SITE}/docs/")
            except FetchError as exc:
                assert not exc.retryable and "NSTPROXY_API_KEY" in str(exc)
            else:
                raise AssertionError("a refused key must fail")
            finally:
                fetcher.close()

    def test_a_crawl_without_a_key_stops_with_the_reason(self):
        with override_settings(NSTPROXY_API_KEY=""):
            crawl, _ = crawl_start(source=self.nst_source())
            crawl = crawl_through(crawl)

        assert crawl.state == Crawl.State.DONE
        assert "NSTPROXY_API_KEY is not set" in crawl.urls.get().error
