"""Who may queue recrawls through /api/recrawl/: staff who may change sources, for
the sources they see; and what the answer tells the others (nothing)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission, User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from ingest.pushing.models import Push
from sources.models import Page, Source

ALPHA = "https://alpha.example.com"
BETA = "https://beta.example.net"
NOWHERE = "https://nowhere.example.org/guide/"


def api_as(user: User) -> APIClient:
    client = APIClient()
    token = Token.objects.create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def staff_user(name: str, *, group: Group | None, may_change: bool = True) -> User:
    user = User.objects.create_user(name, is_staff=True)
    if may_change:
        user.user_permissions.add(Permission.objects.get(codename="change_source"))
    if group is not None:
        user.groups.add(group)
    return user


@pytest.fixture
def world(db):
    """Group A's and group B's Crawlbase sources, B's with a page."""
    groups = {}
    for name, site in [("a", ALPHA), ("b", BETA)]:
        group = groups[name] = Group.objects.create(name=f"readers-{name}")
        source = Source.objects.create(
            name=f"Source {name}", seed_urls=f"{site}/",
            fetcher=Source.Fetcher.CRAWLBASE,
        )  # fmt: skip
        source.allowed_groups.add(group)
    Page.objects.create(
        source=Source.objects.get(name="Source b"), url=f"{BETA}/known/"
    )
    return groups


def recrawl(client: APIClient, body: dict) -> tuple[int, dict]:
    response = client.post("/api/recrawl/", body, format="json")
    return response.status_code, response.json()


def test_recrawl_needs_the_permission_to_change_sources(world):
    looker = api_as(staff_user("looker", group=world["a"], may_change=False))
    alice = api_as(staff_user("alice", group=world["a"]))
    mine = Source.objects.get(name="Source a")
    Page.objects.create(source=mine, url=f"{ALPHA}/known/")

    for body in [{"source": mine.pk, "due": False}, {"urls": [f"{ALPHA}/guide/"]}]:
        status, answer = recrawl(looker, body)

        assert status == 403, body
        assert answer["error"] == "permission_denied"
        assert not Push.objects.exists()
        assert recrawl(alice, body)[1]["queued"] == 1  # who may change sources
        Push.objects.all().delete()


@pytest.mark.parametrize(
    "url",
    [f"{BETA}/known/", f"{BETA}/new/"],
    ids=["a page of another group", "a URL another group's source covers"],
)
def test_a_url_the_caller_may_not_see_answers_as_one_no_source_covers(world, url):
    alice = api_as(staff_user("alice", group=world["a"]))
    pages = set(Page.objects.values_list("url", flat=True))

    theirs, unknown = (
        recrawl(alice, {"urls": [url]}),
        recrawl(alice, {"urls": [NOWHERE]}),
    )

    assert theirs == unknown == (202, {
        "selected": 0, "queued": 0, "in_flight": 0, "fetching": 0, "out_of_scope": 1
    })  # fmt: skip
    assert not Push.objects.exists()
    assert set(Page.objects.values_list("url", flat=True)) == pages
    root = api_as(User.objects.create_superuser("root"))
    assert recrawl(root, {"urls": [url]})[1]["queued"] == 1  # who sees every source


def test_a_source_the_caller_may_not_see_answers_as_an_id_that_does_not_exist(world):
    alice = api_as(staff_user("alice", group=world["a"]))
    theirs = Source.objects.get(name="Source b")

    status, answer = recrawl(alice, {"source": theirs.pk, "due": False})
    missing = recrawl(alice, {"source": 999_999, "due": False})

    assert status == 400
    assert (status, str(answer).replace(str(theirs.pk), "999999")) == (
        missing[0],
        str(missing[1]),
    )
    assert not Push.objects.exists()
