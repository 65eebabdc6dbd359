"""Which source a delivered URL belongs to, and so who may find it."""

from __future__ import annotations

import re

from django.contrib.auth.models import AnonymousUser, Group, User

from ingest.models import Delivery
from retrieval.questions import search_run
from sources.models import Page, Source
from sources.scope import scope_rank, source_for_url
from tests.world import IngestWorld, page_html

INTRANET = "https://intranet.example.com"
SALARIES = page_html("Salaries", ("Bands", "Salary bands for the engineering ladder."))


def test_a_seed_prefix_is_more_specific_than_a_host():
    seeds = [f"{INTRANET}/hr/"]

    assert scope_rank(f"{INTRANET}/hr/salaries", seeds=seeds, allow=[], deny=[]) == (
        0,
        len(f"{INTRANET}/hr/"),
    )
    assert scope_rank(f"{INTRANET}/eng/", seeds=seeds, allow=[], deny=[]) == (0, 0)
    assert scope_rank("https://else.where/", seeds=seeds, allow=[], deny=[]) is None


def test_deny_wins_and_allow_patterns_replace_the_seed_hosts():
    seeds = [f"{INTRANET}/"]
    deny, allow = [re.compile("/private/")], [re.compile(r"^https://docs\.")]

    assert scope_rank(f"{INTRANET}/private/x", seeds=seeds, allow=[], deny=deny) is None
    assert scope_rank(f"{INTRANET}/a", seeds=seeds, allow=allow, deny=[]) is None
    assert scope_rank("https://docs.example.com/", seeds=seeds, allow=allow, deny=[])


class GroupScopeTests(IngestWorld):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.alpha, cls.beta = (
            Group.objects.create(name="alpha"),
            Group.objects.create(name="beta"),
        )
        cls.hr = Source.objects.create(name="Intranet HR", seed_urls=f"{INTRANET}/hr/")
        cls.hr.allowed_groups.add(cls.alpha)
        # Created later and listed first by name: neither may decide the owner.
        cls.eng = Source.objects.create(
            name="Intranet Eng", seed_urls=f"{INTRANET}/eng/"
        )
        cls.eng.allowed_groups.add(cls.beta)
        cls.alice = User.objects.create_user("alice")
        cls.alice.groups.add(cls.alpha)
        cls.bob = User.objects.create_user("bob")
        cls.bob.groups.add(cls.beta)

    def test_a_page_belongs_to_the_source_whose_seed_path_covers_it(self):
        assert source_for_url(f"{INTRANET}/hr/salaries") == self.hr
        assert source_for_url(f"{INTRANET}/eng/setup") == self.eng

    def test_a_page_of_one_group_never_reaches_the_other(self):
        delivery = self.ingest(f"{INTRANET}/hr/salaries", SALARIES)

        assert delivery.outcome == Delivery.Outcome.EMBEDDED
        assert Page.objects.get(url=f"{INTRANET}/hr/salaries").source == self.hr
        found_by = {
            user.username: [c.page.url for c in search_run(
                query="salary bands", user=user, k=5, log=False)]
            for user in [self.alice, self.bob]
        }  # fmt: skip
        assert found_by == {"alice": [f"{INTRANET}/hr/salaries"], "bob": []}

    def test_a_denied_url_is_rejected_and_never_searchable(self):
        self.source.deny_patterns = "/private/"
        self.source.save()

        delivery = self.ingest(
            "https://docs.example.com/private/keys",
            page_html("Keys", ("Secret", "The signing keys live here.")),
        )

        assert delivery.outcome == Delivery.Outcome.OUT_OF_SCOPE
        assert not Page.objects.filter(url__contains="/private/").exists()
        assert search_run(query="signing keys", user=None, k=5, log=False) == []


class VisibilityTests(IngestWorld):
    """Who sees which source: the Ask page's source filter and every search's
    queries use the same condition."""

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

    def test_each_caller_sees_the_open_sources_and_those_of_their_groups(self):
        open_ = self.source.name  # the world's source, open to all
        seen = {
            name: sorted(Source.objects.visible_to(user).values_list("name", flat=True))
            for name, user in {**self.users, "anonymous": AnonymousUser()}.items()
        }

        assert seen == {
            "alice": sorted(["Both", "HR", open_]),
            "bob": sorted(["Both", open_]),
            "carol": [open_],
            "root": sorted(["Both", "HR", open_]),
            "anonymous": [open_],
        }

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
