"""No source takes another group's pages: "the most specific source wins" holds
only among sources the same groups manage. Group B's docs own /docs/ and deny
/docs/private/; group A's source reaches into them by a seed, an allow pattern or a
pattern naming a denied URL, and whatever path a URL comes by (the webhook, the
crawler's frontier, a link or sitemap push, a recrawl by URL, a re-scope), no page
changes group. The admin refuses such a source when it is saved."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse
from django.utils import timezone

from ingest.crawl.admission import Found, urls_admit
from ingest.crawl.models import CrawlUrl
from ingest.crawl.services import crawl_start
from ingest.delivery.models import Delivery
from ingest.delivery.rescope import pages_rescope
from ingest.planning.discovery import source_urls_push
from ingest.planning.recrawl import urls_recrawl
from retrieval.questions import search_run
from sources.admin.sources import OVERLAP
from sources.models import SYSTEM, Page, PageVersion, Source
from sources.scope import ScopeMap
from tests.admin_world import editor_create
from tests.world import TOKEN, page_html, webhook_deliver

DOCS = "https://docs.example.com"
PAGE = f"{DOCS}/docs/guide/page17.html"
PRIVATE = f"{DOCS}/docs/private/salaries.html"
TEXT = page_html("Page 17", ("Bands", "Quarterly zebrafish salary bands."))

# Group A's source, each way it could reach into group B's docs.
TAKERS = {
    "seed": {"seed_urls": f"{DOCS}/docs/guide/"},
    "allow": {
        "seed_urls": f"{DOCS}/docs/guide/page17.html",
        "allow_patterns": r"^https://docs\.example\.com/docs/guide/page17\.html",
    },
    "allow naming a denied URL": {
        "seed_urls": f"{DOCS}/docs/private/",
        "allow_patterns": r"^https://docs\.example\.com/docs/private/",
    },
    "unanchored allow": {"allow_patterns": r"page17\.html$"},
}


@pytest.fixture
def world(db):
    """Group B's docs with page 17 indexed, and an editor of group A."""
    group_a, group_b = Group.objects.create(name="A"), Group.objects.create(name="B")
    docs = Source.objects.create(
        name="Docs B",
        seed_urls=f"{DOCS}/docs/",
        deny_patterns=r"^https://docs\.example\.com/docs/private/",
        fetcher=Source.Fetcher.CRAWLBASE,
    )
    docs.allowed_groups.add(group_b)
    alice = editor_create("alice")
    alice.groups.add(group_a)
    return {"docs": docs, "a": group_a, "b": group_b, "alice": alice}


def taker(world, how: str) -> Source:
    """Group A's source reaching into B's docs, saved past the admin (as before
    the admin refused it, or by hand)."""
    source = Source.objects.create(
        name="Take A", fetcher=Source.Fetcher.CRAWLBASE, **TAKERS[how]
    )
    source.allowed_groups.add(world["a"])
    return source


def deliver(client, settings, url: str) -> Delivery:
    settings.WEBHOOK_TOKEN = TOKEN
    return webhook_deliver(client, url, TEXT)


def held_by(url: str) -> str | None:
    page = Page.objects.filter(url=url).select_related("source").first()
    return None if page is None else page.source.name


def by_webhook(world, client, settings, url):
    deliver(client, settings, url)


def by_frontier(world, client, settings, url):
    for source in Source.objects.all():
        source.fetcher = Source.Fetcher.DIRECT
        source.save()
        crawl = crawl_start(source=source)[0]
        urls_admit(crawl=crawl, found=[Found(url, depth=1)], scope=ScopeMap())


def by_link_or_sitemap(world, client, settings, url):
    for source in Source.objects.all():
        source_urls_push(source=source, urls=[url])


def by_recrawl(world, client, settings, url):
    urls_recrawl(urls=[url], user=SYSTEM)


def by_rescope(world, client, settings, url):
    pages_rescope()


ENTRIES = [by_webhook, by_frontier, by_link_or_sitemap, by_recrawl, by_rescope]


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("how", TAKERS)
def test_no_page_of_group_b_ever_lands_in_group_as_source(
    world, client, settings, how, entry
):
    deliver(client, settings, PAGE)
    assert held_by(PAGE) == "Docs B"
    taker(world, how)

    for url in [PAGE, PRIVATE]:
        entry(world, client, settings, url)

    assert held_by(PAGE) == "Docs B"
    assert held_by(PRIVATE) is None
    assert not Page.objects.filter(source__name="Take A").exists()
    assert not CrawlUrl.objects.filter(crawl__source__name="Take A", depth=1).exclude(
        result=CrawlUrl.Result.SCOPE
    )


def test_the_page_stays_searchable_by_group_b_and_never_by_group_a(
    world, client, settings
):
    deliver(client, settings, PAGE)
    taker(world, "allow")
    deliver(client, settings, PAGE)
    deliver(client, settings, PRIVATE)
    pages_rescope()
    bob = editor_create("bob")
    bob.groups.add(world["b"])

    def found(user) -> list[str]:
        hits = search_run(query="zebrafish salary bands", user=user, k=5, log=False)
        return [hit.page.url for hit in hits]

    assert found(world["alice"]) == []
    assert found(bob) == [PAGE]


def test_a_page_whose_source_no_longer_reaches_it_crosses_without_its_text(
    world, client, settings
):
    """B's docs narrowed away from page 17, which group A's source reaches: the
    page goes to A's source, but not B's copy of it; A's crawl reads it afresh."""
    deliver(client, settings, PAGE)
    taker(world, "seed")
    Source.objects.filter(pk=world["docs"].pk).update(seed_urls=f"{DOCS}/docs/api/")

    pages_rescope()

    page = Page.objects.get(url=PAGE)
    assert page.source.name == "Take A"
    assert page.markdown == "" and page.status == Page.Status.GONE
    assert not page.chunks.exists()
    assert page.next_crawl_at is not None and page.next_crawl_at <= timezone.now()
    assert PageVersion.objects.filter(
        page=page, kind=PageVersion.Kind.OUT_OF_SCOPE
    ).exists()
    assert deliver(client, settings, PAGE).outcome == Delivery.Outcome.EMBEDDED
    assert Page.objects.get(url=PAGE).source.name == "Take A"


def docs_b_made_after(world, source: Source) -> Source:
    """Group B's docs made again after ``source`` (which is then the older)."""
    Source.objects.filter(pk=world["docs"].pk).delete()
    docs = Source.objects.create(
        name="Docs B",
        seed_urls=f"{DOCS}/docs/",
        deny_patterns=r"^https://docs\.example\.com/docs/private/",
        fetcher=Source.Fetcher.CRAWLBASE,
    )
    docs.allowed_groups.add(world["b"])
    assert docs.pk > source.pk
    return docs


def test_a_page_never_moves_to_a_source_of_other_groups_while_its_own_reaches_it(
    world, client, settings
):
    """Whichever way a page came to a source, an older source of other groups
    (and a narrower one) does not take it."""
    older = Source.objects.create(
        name="Older A", seed_urls=f"{DOCS}/", fetcher=Source.Fetcher.CRAWLBASE
    )
    older.allowed_groups.add(world["a"])
    docs = docs_b_made_after(world, older)
    Page.objects.create(url=PAGE, source=docs)
    deliver(client, settings, PAGE)
    taker(world, "allow")

    pages_rescope()
    deliver(client, settings, PAGE)

    assert held_by(PAGE) == "Docs B"
    assert Page.objects.get(url=PAGE).markdown


def test_an_older_source_of_other_groups_takes_no_url_a_newer_one_denies(
    world, client, settings
):
    """Group A's source made first, an unanchored pattern reaching into what
    group B's docs, made later, deny: the denied URL is nobody's."""
    first = Source.objects.create(
        name="Take A", allow_patterns="/docs/private/", fetcher=Source.Fetcher.CRAWLBASE
    )
    first.allowed_groups.add(world["a"])
    docs_b_made_after(world, first)

    for entry in ENTRIES:
        entry(world, client, settings, PRIVATE)

    assert held_by(PRIVATE) is None


def test_a_group_source_inside_an_older_open_one_keeps_its_pages(
    world, client, settings
):
    """Made before the admin refused such overlaps: a group's source nested in
    an older source of no group keeps its pages, and takes the new ones."""
    open_site = Source.objects.create(
        name="Open site", seed_urls=f"{DOCS}/", fetcher=Source.Fetcher.CRAWLBASE
    )
    docs = docs_b_made_after(world, open_site)
    Page.objects.create(url=PAGE, source=docs)
    deliver(client, settings, PAGE)

    pages_rescope()
    deliver(client, settings, PAGE)

    assert held_by(PAGE) == "Docs B"
    assert Page.objects.get(url=PAGE).markdown
    fresh = f"{DOCS}/docs/guide/page18.html"
    deliver(client, settings, fresh)
    assert held_by(fresh) == "Docs B"


def test_a_source_managed_by_the_same_groups_still_takes_the_narrower_urls(
    world, client, settings
):
    deliver(client, settings, PAGE)
    narrower = Source.objects.create(
        name="Guide B", fetcher=Source.Fetcher.CRAWLBASE, **TAKERS["seed"]
    )
    narrower.allowed_groups.add(world["b"])

    pages_rescope()

    assert held_by(PAGE) == "Guide B"
    assert Page.objects.get(url=PAGE).markdown  # moved with its text


FORM = {
    "name": "Take A", "fetcher": "crawlbase", "recrawl_every": "7 days",
    "max_pages": "100", "max_depth": "3", "crawlbase_format": "html",
    "recrawl_min": "1 hour", "recrawl_max": "30 days",
}  # fmt: skip


def add_source(client, **fields):
    return client.post(reverse("admin:sources_source_add"), FORM | fields)


@pytest.mark.parametrize("how", TAKERS)
def test_the_admin_refuses_an_overlap_with_another_groups_source_naming_nothing(
    world, client, settings, how
):
    deliver(client, settings, PAGE)  # the unanchored pattern meets a known page
    client.force_login(world["alice"])

    response = add_source(client, allowed_groups=[world["a"].pk], **TAKERS[how])

    assert response.status_code == 200
    content = response.content.decode()
    assert "Another source already covers some of these addresses" in content
    assert "Docs B" not in content and ">B<" not in content
    assert not Source.objects.filter(name="Take A").exists()


def test_the_admin_takes_a_source_beside_another_groups_one(world, client):
    client.force_login(world["alice"])

    response = add_source(
        client,
        allowed_groups=[world["a"].pk],
        seed_urls=f"{DOCS}/blog/\nhttps://other.example.org/docs/",
        allow_patterns=r"^https://docs\.example\.com/blog/",
    )

    assert response.status_code == 302, response.content.decode()[:3000]
    assert Source.objects.filter(name="Take A").exists()


def test_a_superuser_is_told_which_source_overlaps(world, client, django_user_model):
    root = django_user_model.objects.create_superuser("root", "r@example.com", "pw")
    client.force_login(root)

    response = add_source(client, allowed_groups=[world["a"].pk], **TAKERS["seed"])

    assert "\u201cDocs B\u201d already covers some of these addresses" in (
        response.content.decode()
    )
    assert not Source.objects.filter(name="Take A").exists()


def test_widening_a_source_into_another_groups_docs_is_refused(world, client):
    mine = Source.objects.create(name="Mine", seed_urls=f"{DOCS}/blog/")
    mine.allowed_groups.add(world["a"])
    client.force_login(world["alice"])
    url = reverse("admin:sources_source_change", args=[mine.pk])

    response = client.post(
        url,
        FORM
        | {"name": "Mine", "seed_urls": f"{DOCS}/", "allowed_groups": [world["a"].pk]},
    )

    assert OVERLAP.split(",")[0] in response.content.decode()
    mine.refresh_from_db()
    assert mine.seed_urls == f"{DOCS}/blog/"


# Item 2: the groups an editor may give a source.


def test_an_editor_is_offered_only_their_own_groups(world, client):
    client.force_login(world["alice"])

    content = client.get(reverse("admin:sources_source_add")).content.decode()

    assert f'value="{world["a"].pk}"' in content
    assert f'value="{world["b"].pk}"' not in content


@pytest.mark.parametrize("groups", [["b"], ["a", "b"]])
def test_an_editor_cannot_give_a_source_to_a_group_they_are_not_in(
    world, client, groups
):
    client.force_login(world["alice"])

    response = add_source(
        client,
        seed_urls="https://other.example.org/",
        allowed_groups=[world[g].pk for g in groups],
    )

    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()
    assert not Source.objects.filter(name="Take A").exists()


def test_a_superuser_may_give_a_source_to_any_group(world, client, django_user_model):
    root = django_user_model.objects.create_superuser("root", "r@example.com", "pw")
    client.force_login(root)

    response = add_source(
        client, seed_urls="https://other.example.org/", allowed_groups=[world["b"].pk]
    )

    assert response.status_code == 302
    assert Source.objects.get(name="Take A").manager_ids == {world["b"].pk}


def test_an_editor_saving_a_shared_source_keeps_the_groups_they_are_not_in(
    world, client
):
    shared = Source.objects.create(
        name="Shared", seed_urls="https://other.example.org/"
    )
    shared.allowed_groups.add(world["a"], world["b"])
    client.force_login(world["alice"])
    url = reverse("admin:sources_source_change", args=[shared.pk])

    response = client.post(
        url,
        FORM
        | {
            "name": "Shared",
            "seed_urls": "https://other.example.org/",
            "allowed_groups": [world["a"].pk],
        },
    )

    assert response.status_code == 302, response.content.decode()[:3000]
    assert shared.manager_ids == {world["a"].pk, world["b"].pk}


def test_an_editor_in_groups_gives_a_new_source_to_one_of_them(world, client):
    """A source of no group is read by every signed-in user, other groups' too."""
    client.force_login(world["alice"])

    refused = add_source(client, seed_urls="https://other.example.org/")
    taken = add_source(
        client, seed_urls="https://other.example.org/", allowed_groups=[world["a"].pk]
    )

    assert "Choose at least one of your groups" in refused.content.decode()
    assert taken.status_code == 302
    assert Source.objects.get(name="Take A").manager_ids == {world["a"].pk}


def test_the_change_page_shows_no_lines_of_a_page_that_left_its_source(
    world, client, settings
):
    """A page moved to another source, or denied since: its old change keeps its
    summary but not its text."""
    deliver(client, settings, PAGE)
    step = PageVersion.objects.get(page__url=PAGE, kind=PageVersion.Kind.NEW)
    bob = editor_create("bob")
    bob.groups.add(world["b"])
    client.force_login(bob)
    assert "zebrafish" in client.get(f"/feeds/changes/{step.pk}/").content.decode()
    Source.objects.filter(pk=world["docs"].pk).update(
        deny_patterns=r"^https://docs\.example\.com/docs/guide/"
    )
    pages_rescope()

    shown = client.get(f"/feeds/changes/{step.pk}/").content.decode()

    assert "zebrafish" not in shown and 'id="diff"' not in shown
