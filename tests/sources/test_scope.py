"""Which source a URL belongs to, and so who may find it: one rule for the webhook,
the crawler's frontier, link and sitemap pushes, recrawls and existing pages."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser, Group, User
from django.urls import reverse

from ingest.crawl.admission import Found, urls_admit
from ingest.crawl.models import CrawlUrl
from ingest.crawl.services import crawl_start
from ingest.crawl.setup import CrawlRequestError, source_for_crawl
from ingest.delivery.models import Delivery
from ingest.delivery.rescope import pages_rescope
from ingest.planning.discovery import source_urls_push
from ingest.planning.recrawl import urls_recrawl
from retrieval.questions import search_run
from sources.admin.pages import NOT_ITS_SOURCE
from sources.models import SYSTEM, Page, PageVersion, Source, source_ids_searchable_by
from sources.scope import Scope, ScopeMap, scope_owner, seed_directory
from tests.world import TOKEN, IngestWorld, page_html, run_queued, webhook_deliver

CORP = "https://corp.example.com"
INTRANET = "https://intranet.example.com"
SALARIES = page_html("Salaries", ("Bands", "Salary bands for the engineering ladder."))

# Every URL of the two-group world, and the source it belongs to (None: to none).
# HR (group B) is seeded at /hr/ and denies /hr/private; Eng (group A) at /eng/;
# Audit names /hr/private/audit/ in an allow pattern.
BELONGS = [
    (f"{CORP}/hr/private/salaries", None),
    (f"{CORP}/hr/%70rivate/x", None),
    (f"{CORP}/hr/./private/x", None),
    (f"{CORP}/hr/%2e/private/x", None),
    (f"{CORP}/eng/../hr/private/x", None),
    (f"{CORP}/hr//private/x", None),
    (f"{CORP}/hr/x%2F..%2Fprivate/salaries", None),
    (f"{CORP}/hr/x/..%2fprivate/salaries", None),
    (f"{CORP}/HR/private/x", None),
    ("https://CORP.example.com:443/hr/private/x", None),
    (f"{CORP}/hr", None),
    (f"{CORP}/hrx/y", None),
    (f"{CORP}/eng", None),
    (f"{CORP}/", None),
    ("http://corp.example.com/eng/setup", None),
    (f"{CORP}:8443/eng/setup", None),
    (f"{CORP}/hr/handbook", "HR"),
    ("HTTPS://CORP.EXAMPLE.COM:443/hr/handbook", "HR"),
    (f"{CORP}/eng/../hr/handbook", "HR"),
    (f"{CORP}/eng/setup", "Eng"),
    (f"{CORP}/hr/../eng/setup", "Eng"),
    (f"{CORP}/eng/%73etup", "Eng"),
    (f"{CORP}/hr/private/audit/2026", "Audit"),
    (f"{CORP}/audit/plan", "Audit"),
]


@pytest.fixture
def corp(db):
    """Two groups with a source each on one host, and an auditors' source."""
    alpha, beta = Group.objects.create(name="A"), Group.objects.create(name="B")
    hr = Source.objects.create(
        name="HR",
        seed_urls=f"{CORP}/hr/",
        deny_patterns=r"^https://corp\.example\.com/hr/private",
    )
    hr.allowed_groups.add(beta)
    eng = Source.objects.create(name="Eng", seed_urls=f"{CORP}/eng/")
    eng.allowed_groups.add(alpha)
    audit = Source.objects.create(
        name="Audit",
        seed_urls=f"{CORP}/audit/",
        allow_patterns="\n".join(
            [
                r"^https://corp\.example\.com/audit/",
                r"^https://corp\.example\.com/hr/private/audit/",
            ]
        ),
    )
    audit.allowed_groups.add(beta)
    ann = User.objects.create_user("ann")
    ann.groups.add(alpha)
    return {"HR": hr, "Eng": eng, "Audit": audit, "ann": ann}


def deliver(url: str, client, settings) -> Delivery:
    """Deliver the page through the webhook and run its job, as the worker would."""
    settings.WEBHOOK_TOKEN = TOKEN
    return webhook_deliver(client, url, SALARIES)


def delivered_to(url: str, client, settings) -> str | None:
    """The name of the source that holds the page once delivered, or None."""
    delivery = deliver(url, client, settings)
    if delivery.outcome == Delivery.Outcome.OUT_OF_SCOPE:
        assert not Page.objects.exists()
        return None
    assert delivery.outcome == Delivery.Outcome.EMBEDDED, delivery.error
    return Page.objects.select_related("source").get().source.name


@pytest.mark.parametrize(("url", "owner"), BELONGS)
def test_a_delivery_goes_to_the_source_its_url_belongs_to_or_to_none(
    corp, client, settings, url, owner
):
    assert delivered_to(url, client, settings) == owner


@pytest.mark.parametrize(("url", "owner"), BELONGS)
def test_the_crawler_takes_a_link_only_into_the_crawl_of_the_source_it_belongs_to(
    corp, url, owner
):
    crawls = {
        name: crawl_start(source=corp[name])[0] for name in ["HR", "Eng", "Audit"]
    }
    scope = ScopeMap()

    taken = {
        name: urls_admit(crawl=crawl, found=[Found(url, depth=1)], scope=scope)
        for name, crawl in crawls.items()
    }

    assert taken == {name: int(name == owner) for name in crawls}
    skipped = CrawlUrl.objects.filter(result=CrawlUrl.Result.SCOPE, depth=1)
    assert skipped.count() == (3 if owner is None else 2)


@pytest.mark.parametrize(("url", "owner"), BELONGS)
def test_a_link_or_sitemap_entry_is_pushed_only_for_the_source_it_belongs_to(
    corp, url, owner
):
    for name in ["HR", "Eng", "Audit"]:
        corp[name].fetcher = Source.Fetcher.CRAWLBASE
        corp[name].save()
        source_urls_push(source=corp[name], urls=[url])

    holders = set(Page.objects.values_list("source__name", flat=True))
    assert holders == ({owner} if owner else set())


@pytest.mark.parametrize(("url", "owner"), BELONGS)
def test_a_recrawl_by_url_makes_a_page_only_in_the_source_it_belongs_to(
    corp, url, owner
):
    plan = urls_recrawl(urls=[url], user=SYSTEM)

    holders = list(Page.objects.values_list("source__name", flat=True))
    assert holders == ([owner] if owner else [])
    assert plan.out_of_scope == (owner is None)


def test_a_denied_page_of_one_group_is_never_found_by_the_other(corp, client, settings):
    for url in [u for u, owner in BELONGS if owner != "Eng"]:
        deliver(url, client, settings)

    found = search_run(query="salary bands", user=corp["ann"], k=10, log=False)

    assert found == []
    assert not Page.objects.filter(source=corp["Eng"]).exists()


def test_a_url_that_cannot_be_parsed_belongs_to_no_source(corp):
    scopes = ScopeMap().scopes

    for url in ["http://[::1", "http://x.example:99999/", "", "not a url"]:
        assert scope_owner(url, scopes) is None


@pytest.mark.parametrize(
    ("seed", "directory"),
    [
        ("https://A.example/docs/index.html", "https://a.example/docs/"),
        ("https://a.example/docs/", "https://a.example/docs/"),
        ("https://a.example/docs", "https://a.example/"),
        ("https://a.example", "https://a.example/"),
        ("https://a.example:443/x/../guide/", "https://a.example/guide/"),
        ("http://[::1", None),
    ],
)
def test_a_seed_reaches_its_directory(seed, directory):
    assert seed_directory(seed) == directory


def test_the_longest_seed_directory_wins_over_an_allow_pattern_of_the_whole_host():
    whole_host = Scope.compile(
        1, seeds=[f"{CORP}/"], allow=[r"^https://corp\."], deny=[]
    )
    hr = Scope.compile(2, seeds=[f"{CORP}/hr/"], allow=[], deny=[])

    assert scope_owner(f"{CORP}/hr/handbook", [whole_host, hr]) == 2
    assert scope_owner(f"{CORP}/eng/setup", [whole_host, hr]) == 1


def test_an_allow_pattern_of_a_whole_host_takes_nothing_a_narrower_source_denies():
    hr = Scope.compile(1, seeds=[f"{CORP}/hr/"], allow=[], deny=["/hr/private"])
    host = Scope.compile(2, seeds=[], allow=[r"^https://corp\.example\.com/"], deny=[])
    unanchored = Scope.compile(3, seeds=[], allow=["/hr/private/"], deny=[])
    audit = Scope.compile(
        4, seeds=[], allow=[r"^https://corp\.example\.com/hr/private/audit/"], deny=[]
    )

    assert scope_owner(f"{CORP}/eng/x", [hr, host, unanchored]) == 2
    assert scope_owner(f"{CORP}/hr/private/x", [hr, host, unanchored]) is None
    assert scope_owner(f"{CORP}/hr/private/audit/x", [hr, host, audit]) == 4


def test_crawling_a_url_a_source_denies_is_refused(corp, monkeypatch):
    # corp.example.com resolves nowhere, and tests look nothing up.
    monkeypatch.setattr("ingest.crawl.setup.url_check", lambda url, **kw: None)
    with pytest.raises(CrawlRequestError, match="denied by the deny patterns of"):
        source_for_crawl(url=f"{CORP}/hr/private/salaries")

    source, created = source_for_crawl(url=f"{CORP}/")
    assert created and ScopeMap().source_for(f"{CORP}/hr/private/x") is None


def test_a_page_added_in_the_admin_is_canonical_and_in_the_source_it_belongs_to(
    corp, admin_client
):
    add = reverse("admin:sources_page_add")
    fields = {"recrawl_every": "", "_save": "Save", "versions-TOTAL_FORMS": "0",
              "versions-INITIAL_FORMS": "0"}  # fmt: skip

    refused = admin_client.post(
        add,
        {"url": f"{CORP}/hr/%70rivate/x", "source": corp["Eng"].pk, **fields},
    )
    taken = admin_client.post(
        add,
        {"url": "HTTPS://CORP.example.com:443/eng/./setup", **fields,
         "source": corp["Eng"].pk},
    )  # fmt: skip

    assert refused.context["adminform"].form.errors["url"] == [NOT_ITS_SOURCE]
    assert taken.status_code == 302, taken.context["adminform"].form.errors
    assert list(Page.objects.values_list("url", "source__name")) == [
        (f"{CORP}/eng/setup", "Eng")
    ]


def test_a_scope_changed_while_a_delivery_runs_is_applied_to_its_page(
    corp, client, settings, monkeypatch
):
    class ReadJustBeforeAnEdit(ScopeMap):
        def __init__(self) -> None:
            super().__init__()
            corp["HR"].deny_patterns += "\n/hr/pay"
            corp["HR"].save()
            pages_rescope()  # the edit's job, before this delivery's page exists

    monkeypatch.setattr("ingest.delivery.job.ScopeMap", ReadJustBeforeAnEdit)

    delivery = deliver(f"{CORP}/hr/pay", client, settings)

    page = Page.objects.get()
    assert delivery.outcome == Delivery.Outcome.EMBEDDED
    assert (page.status, page.chunks.count()) == (Page.Status.GONE, 0)
    assert search_run(query="salary bands", user=SYSTEM, k=5, log=False) == []


def test_a_tie_goes_to_the_oldest_source_unless_one_of_them_denies_the_url():
    older = Scope.compile(1, seeds=[f"{CORP}/hr/"], allow=[], deny=[])
    newer = Scope.compile(2, seeds=[f"{CORP}/hr/"], allow=[], deny=["/private"])

    assert scope_owner(f"{CORP}/hr/a", [older, newer]) == 1
    assert scope_owner(f"{CORP}/hr/private/a", [older, newer]) is None


class RescopeTests(IngestWorld):
    """Pages the old rule (a seed's whole host) gave to a neighbour."""

    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.hr = Source.objects.create(
            name="HR", seed_urls=f"{CORP}/hr/", deny_patterns="/hr/private"
        )
        cls.eng = Source.objects.create(name="Eng", seed_urls=f"{CORP}/eng/")

    def held_by_eng(self, url: str) -> Page:
        """A page of Eng's as the old rule made it: indexed, with chunks."""
        Source.objects.filter(pk=self.hr.pk).update(seed_urls="")
        delivery = self.ingest(url, SALARIES)
        Source.objects.filter(pk=self.hr.pk).update(seed_urls=f"{CORP}/hr/")
        Page.objects.filter(url=url).update(source=self.eng)
        page = Page.objects.get(url=url)
        assert delivery.outcome == Delivery.Outcome.REJECTED or page.chunks.exists()
        return page

    def test_a_page_another_source_owns_now_moves_there_with_its_chunks(self):
        self.eng.seed_urls = f"{CORP}/"
        self.eng.save()
        page = self.held_by_eng(f"{CORP}/hr/handbook")
        self.eng.seed_urls = f"{CORP}/eng/"
        self.eng.save()
        chunks = set(page.chunks.values_list("pk", flat=True))

        done = pages_rescope()

        page.refresh_from_db()
        assert (page.source, page.status) == (self.hr, Page.Status.LIVE)
        assert set(page.chunks.values_list("pk", flat=True)) == chunks
        assert done.moved == [(page.url, "HR")] and done.retired == []

    def test_a_page_no_source_owns_now_leaves_search_with_its_content(self):
        self.eng.seed_urls = f"{CORP}/"
        self.eng.save()
        page = self.held_by_eng(f"{CORP}/hr/private/salaries")
        self.eng.seed_urls = f"{CORP}/eng/"
        self.eng.save()
        assert search_run(query="salary bands", user=SYSTEM, k=5, log=False)

        done = pages_rescope()

        page.refresh_from_db()
        assert (page.status, page.markdown, page.next_crawl_at) == ("gone", "", None)
        assert not page.chunks.exists()
        assert page.versions.first().kind == PageVersion.Kind.OUT_OF_SCOPE
        assert search_run(query="salary bands", user=SYSTEM, k=5, log=False) == []
        assert done.retired == [page.url]
        assert str(pages_rescope()) == "0 pages moved, 0 left every scope"

    def test_a_delivery_of_a_page_that_belongs_to_none_now_takes_it_out_of_search(
        self,
    ):
        page = self.ingest(f"{CORP}/hr/pay", SALARIES).page
        assert page is not None and page.source == self.hr
        self.hr.deny_patterns = "/hr/pay"
        self.hr.save()

        delivery = self.ingest(f"{CORP}/hr/pay", SALARIES)

        page.refresh_from_db()
        assert delivery.outcome == Delivery.Outcome.REJECTED
        assert (page.status, page.chunks.count()) == (Page.Status.GONE, 0)
        assert search_run(query="salary bands", user=SYSTEM, k=5, log=False) == []

    def test_a_delivery_of_a_page_another_source_owns_now_moves_it_first(self):
        page = self.ingest(f"{CORP}/eng/hr/pay", SALARIES).page
        assert page is not None and page.source == self.eng
        nested = Source.objects.create(name="Eng HR", seed_urls=f"{CORP}/eng/hr/")

        delivery = self.ingest(f"{CORP}/eng/hr/pay", SALARIES)

        page.refresh_from_db()
        assert delivery.outcome == Delivery.Outcome.UNCHANGED
        assert page.source == nested

    def test_a_change_of_seeds_or_patterns_queues_a_check_of_every_page(self):
        with self.captureOnCommitCallbacks(execute=True):
            self.hr.deny_patterns = "/hr/old"
            self.hr.save()
        with self.captureOnCommitCallbacks(execute=True):
            self.hr.save(update_fields=["common_shapes"])

        assert run_queued("ingest.tasks.pages_rescope_task") == [
            "0 pages moved, 0 left every scope"
        ]


def test_anonymous_callers_find_nothing_of_a_group_source(corp, client, settings):
    delivered_to(f"{CORP}/hr/handbook", client, settings)

    assert search_run(query="salary bands", user=AnonymousUser(), k=5, log=False) == []
    assert search_run(query="salary bands", user=SYSTEM, k=5, log=False)


def test_a_pending_page_made_for_a_url_no_source_owns_now_is_retired(corp):
    page = Page.objects.create(source=corp["HR"], url=f"{CORP}/hr/private/x")

    pages_rescope()

    page.refresh_from_db()
    assert (page.status, page.next_crawl_at) == (Page.Status.GONE, None)
    assert page.versions.get().kind == PageVersion.Kind.OUT_OF_SCOPE


class VisibilityTests(IngestWorld):
    """Who sees which source: the Ask page's source filter and every search's
    queries use the same condition, which counts public sources; the admin's
    reading of it does not."""

    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        alpha, beta = (
            Group.objects.create(name="alpha"),
            Group.objects.create(name="beta"),
        )
        cls.both = Source.objects.create(name="Both", seed_urls=f"{INTRANET}/both/")
        cls.both.allowed_groups.add(alpha, beta)
        cls.hr = Source.objects.create(name="HR", seed_urls=f"{INTRANET}/hr/")
        cls.hr.allowed_groups.add(alpha)
        cls.users = {
            "alice": User.objects.create_user("alice"),  # alpha and beta
            "bob": User.objects.create_user("bob"),  # beta
            "carol": User.objects.create_user("carol"),  # no group
            "root": User.objects.create_superuser("root"),
        }
        cls.users["alice"].groups.add(alpha, beta)
        cls.users["bob"].groups.add(beta)

    def seen(self, rule: str) -> dict[str, list[str]]:
        callers = {**self.users, "anonymous": AnonymousUser()}
        return {
            name: sorted(
                getattr(Source.objects, rule)(user).values_list("name", flat=True)
            )
            for name, user in callers.items()
        }

    def test_each_caller_sees_the_open_sources_and_those_of_their_groups(self):
        open_ = self.source.name  # the world's source, open to all

        expected = {
            "alice": sorted(["Both", "HR", open_]),
            "bob": sorted(["Both", open_]),
            "carol": [open_],
            "root": sorted(["Both", "HR", open_]),
            "anonymous": [],
        }
        assert self.seen("searchable_by") == expected
        assert self.seen("visible_to") == expected

    def test_a_public_source_is_searched_by_everyone_and_managed_as_before(self):
        open_ = self.source.name
        Source.objects.filter(pk=self.hr.pk).update(public=True)  # group alpha's

        assert self.seen("searchable_by") == {
            "alice": sorted(["Both", "HR", open_]),
            "bob": sorted(["Both", "HR", open_]),
            "carol": sorted(["HR", open_]),
            "root": sorted(["Both", "HR", open_]),
            "anonymous": ["HR"],
        }
        assert self.seen("visible_to") == {
            "alice": sorted(["Both", "HR", open_]),
            "bob": sorted(["Both", open_]),
            "carol": [open_],
            "root": sorted(["Both", "HR", open_]),
            "anonymous": [],
        }
        assert source_ids_searchable_by(AnonymousUser()) == [self.hr.pk]
        assert source_ids_searchable_by(SYSTEM) is None

    def test_a_search_finds_only_what_its_caller_sees(self):
        for source, path in [(self.both, "both"), (self.hr, "hr")]:
            delivery = self.ingest(
                f"{INTRANET}/{path}/bands",
                page_html(f"Bands {path}", ("Bands", "Salary bands for the ladder.")),
            )
            assert Page.objects.get(url=delivery.url).source == source
        found = {
            name: sorted(
                c.page.url.rsplit("/", 2)[1]
                for c in search_run(query="salary bands", user=user, k=5, log=False)
            )
            for name, user in {**self.users, "anonymous": AnonymousUser()}.items()
        }

        assert found == {
            "alice": ["both", "hr"],
            "bob": ["both"],
            "carol": [],
            "root": ["both", "hr"],
            "anonymous": [],
        }
