"""Patterns editors write run in linear time (RE2), wherever they are saved: a
source's allow, deny and boilerplate patterns, a subscription's URL patterns. Those
RE2 cannot run are refused when saved, saying why; one stored before runs as
nothing (or, a deny pattern, as everything) and a system check names it."""

from __future__ import annotations

import fnmatch
import re

import pytest
import re2
from django.contrib.auth import get_user_model
from django.test import TestCase, override_settings
from django.urls import reverse
from django.utils.html import escape

from ingest.checks import refused_url_patterns_check
from ingest.crawl.setup import CrawlRequestError, source_for_crawl
from ingest.notify.filters import ChangeFilter
from ingest.notify.models import Subscription
from ingest.reading.rules import source_content
from kbsite.patterns import PatternError, glob_compile, pattern_compile
from sources.checks import refused_patterns_check
from sources.models import Source
from sources.scope import Scope, ScopeMap
from tests.admin_world import PASSWORD

# A host without the letters the hostile patterns look for (a, x, y).
SITE = "https://docs.tech.org"
RE2_PATTERN = type(re2.compile("x"))
SUPPORTED = "backreferences and lookarounds are not supported"


def is_re2(pattern: object) -> bool:
    return isinstance(pattern, RE2_PATTERN)


def compiled_by(place: str, pattern: str) -> list:
    """The compiled patterns the code of ``place`` runs for ``pattern`` saved there."""
    if place == "subscription":
        return [u.regex for u in ChangeFilter.build(url_patterns=pattern).urls]
    source = source_with(place, pattern)
    if place == "boilerplate":
        return source.boilerplate_regexes
    scope = ScopeMap(sources=[source]).scopes[0]
    return list(scope.allow if place == "allow" else scope.deny)


def source_with(place: str, pattern: str) -> Source:
    fields = {
        "allow": {"allow_patterns": pattern},
        "deny": {"seed_urls": f"{SITE}/", "deny_patterns": pattern},
        "boilerplate": {"seed_urls": f"{SITE}/", "boilerplate_patterns": pattern},
    }[place]
    return Source(pk=1, name="Docs", **fields)


def matched(place: str, pattern: str, text: str) -> bool:
    """Whether the pattern saved at ``place`` matched ``text`` (a URL, or a line of
    a page), found by the functions a delivery calls."""
    if place == "subscription":
        change = {"kind": "changed", "sections": [], "lines_added": 1}
        return ChangeFilter.build(url_patterns=pattern).passes(
            url=text, lines_removed=0, **change
        )
    source = source_with(place, pattern)
    if place == "boilerplate":
        page = f"# Title\n\nA first line of prose.\n\n{text}\n"
        content = source_content(
            source=source, url=f"{SITE}/p", raw=page.encode(),
            content_type="text/markdown",
        )  # fmt: skip
        return text not in content.markdown
    owner = ScopeMap(sources=[source]).source_for(text)
    return owner is not None if place == "allow" else owner is None


# The patterns of the issue and others that backtrack in Python's re, each with a
# text built to make it (2,000 characters: centuries there, but for the polynomial
# (.*a){12}, about a second), and a short text each matches.
HOSTILE = [
    (r"^\S*\S*\S*\S*\S*\S*\S*\S*x", f"{SITE}/{'a' * 2000}", f"{SITE}/x"),
    (r"(a+)+$", f"{SITE}/{'a' * 2000}/", f"{SITE}/aaa"),
    (r"(x+x+)+y", f"{SITE}/{'x' * 2000}", f"{SITE}/xxy"),
    (r"(a|aa)+$", f"{SITE}/{'a' * 2000}/", f"{SITE}/aa"),
    (r"(.*a){12}", f"{SITE}/{'b' * 2000}{'a' * 11}", f"{SITE}/{'a' * 12}"),
    (r"(.*a){12}$", f"{SITE}/{'a' * 2000}/", f"{SITE}/{'a' * 12}"),
]
PLACES = ["allow", "deny", "boilerplate", "subscription"]


def saved_as(place: str, pattern: str) -> str:
    return f"re:{pattern}" if place == "subscription" else pattern


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize(("pattern", "crafted", "plain"), HOSTILE)
def test_a_hostile_pattern_runs_in_linear_time_wherever_it_is_saved(
    place, pattern, crafted, plain
):
    saved = saved_as(place, pattern)
    # First: a regression to Python's re fails here rather than hanging below.
    assert all(map(is_re2, compiled_by(place, saved))), place

    assert not matched(place, saved, crafted)
    assert matched(place, saved, plain)


@pytest.mark.parametrize(
    ("place", "pattern", "text", "matches"),
    [
        ("allow", r"(?i)^HTTPS://DOCS\.TECH\.ORG/", f"{SITE}/guide", True),
        ("allow", r"^https://docs\.tech\.org/$", f"{SITE}/guide", False),
        ("allow", r"/guide\Z", f"{SITE}/guide", True),
        ("allow", r"/guide\\Z", f"{SITE}/guide", False),
        ("deny", r"/(?P<part>private|drafts)/", f"{SITE}/drafts/x", True),
        ("deny", r"/v[0-9]{1,3}/", f"{SITE}/v12/x", True),
        ("boilerplate", r"^Last updated on .*$", "Last updated on 2026-01-02", True),
        ("boilerplate", r"(?i)^last UPDATED", "Last updated on 2026-01-02", True),
        ("subscription", r"re:/config/\w+\.html$", f"{SITE}/config/w.html", True),
        ("subscription", f"{SITE}/config/*", f"{SITE}/config/a/b.html", True),
        ("subscription", "*/v?/*", f"{SITE}/v12/x", False),
    ],
)
def test_patterns_written_for_python_mean_the_same_to_re2(
    place, pattern, text, matches
):
    assert all(map(is_re2, compiled_by(place, pattern))), place
    assert matched(place, pattern, text) is matches


@pytest.mark.parametrize(
    "glob",
    [
        "*/config/*", f"{SITE}/config/*", "*.html", "*/v?/*", "*/[abc]*",
        "*/[!a-c]*", "*[]]*", "*[!]]*", "*[a-]*", "*[-a]*", "*[*", "*[", "*(x)*",
        "*{2}*", "*^*", "*$", "*\\*", "*.html?q=*", "*/[^a]*", "*/[[:alpha:]]*",
    ],
)  # fmt: skip
def test_a_glob_matches_what_fnmatch_matches(glob):
    urls = [
        f"{SITE}/config/a.html", f"{SITE}/v1/x", f"{SITE}/b]", f"{SITE}/d-",
        f"{SITE}/a[", f"{SITE}/(x)", f"{SITE}/{{2}}", f"{SITE}/^a$", f"{SITE}/\\",
        f"{SITE}/a.html?q=1", f"{SITE}/[:", f"{SITE}/z\n",
    ]  # fmt: skip
    compiled = glob_compile(glob)

    assert is_re2(compiled)
    for url in urls:
        expected = re.match(fnmatch.translate(glob), url) is not None
        assert (compiled.match(url) is not None) is expected, (glob, url)


REFUSED = [
    (r"(a)\1", SUPPORTED),
    (r"(?P<x>a)(?P=x)", SUPPORTED),
    (r"^https://a\.b/(?=docs)", SUPPORTED),
    (r"/(?!public)", SUPPORTED),
    (r"(?<=/)private", SUPPORTED),
    (r"(?<!x)y", SUPPORTED),
    (r"(?>a+)b", SUPPORTED),
    (r"a*+b", SUPPORTED),
    (r"(a?){400}a{400}", "is too large to run quickly: it compiles to 2,004 steps"),
    (r"\pL", "is too large to run quickly: it compiles to 1,200 steps"),
    (r"(unclosed", "is not a regular expression: missing )"),
]


@pytest.mark.parametrize(("pattern", "message"), REFUSED)
def test_a_pattern_re2_cannot_run_is_refused_naming_it(pattern, message):
    with pytest.raises(PatternError, match=re.escape(message)) as refused:
        pattern_compile(pattern)

    assert str(refused.value).startswith(f"'{pattern}' ")


@pytest.mark.parametrize(
    ("place", "text", "matches"),
    [
        # A stored allow pattern RE2 cannot run allows nothing, ...
        ("allow", f"{SITE}/docs/x", False),
        # ... a deny pattern denies everything (it must not let pages in), ...
        ("deny", f"{SITE}/public/x", True),
        # ... a boilerplate pattern removes no line, a URL pattern matches none.
        ("boilerplate", "Read the docs/ of it.", False),
        ("subscription", f"{SITE}/docs/x", False),
    ],
)
def test_a_stored_pattern_re2_cannot_run_never_runs_in_pythons_re(place, text, matches):
    # Saved before RE2 checked patterns: Python's re would match the docs.
    pattern = saved_as(place, r"docs(?=/)")

    assert all(map(is_re2, compiled_by(place, pattern)))
    assert matched(place, pattern, text) is matches


def test_a_crawl_asked_with_a_pattern_re2_cannot_run_is_refused():
    pattern = r"(a)\1"
    refusal = f"'{pattern}' cannot be used: {SUPPORTED}"
    with pytest.raises(CrawlRequestError, match=re.escape(refusal)):
        source_for_crawl(url=f"{SITE}/", allow=[pattern])


def test_scope_compile_runs_text_patterns_with_re2():
    scope = Scope.compile(1, seeds=[], allow=[r"(a+)+$"], deny=[r"(?=x)"])

    assert is_re2(scope.allow[0]) and is_re2(scope.deny[0])
    assert scope.denies(f"{SITE}/anything")  # refused: it denies everything


class SavedPatternTests(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.admin = get_user_model().objects.create_superuser(
            "admin", "admin@example.com", PASSWORD
        )
        cls.source = Source.objects.create(name="Docs", seed_urls=f"{SITE}/")

    def setUp(self):
        self.client.force_login(self.admin)

    def test_the_source_form_refuses_a_pattern_re2_cannot_run(self):
        for field in ["allow_patterns", "deny_patterns", "boilerplate_patterns"]:
            for pattern in [r"(a)\1", "/docs/(?=x)"]:
                with self.subTest(field=field, pattern=pattern):
                    response = self.client.post(
                        reverse("admin:sources_source_add"),
                        source_form(**{field: f"^{SITE}/\n{pattern}"}),
                    )
                    page = response.content.decode()

                    assert response.status_code == 200
                    assert f"{SUPPORTED}, nor atomic groups" in page
                    assert escape(f"'{pattern}' cannot be used") in page
                    assert not Source.objects.filter(name="Other docs").exists()

    @override_settings(CRAWL_ALLOW_PRIVATE_ADDRESSES=True)
    def test_the_subscription_form_refuses_a_pattern_re2_cannot_run(self):
        for line in [r"re:(a)\1", "re:/docs/(?=x)", "re:(?<!a)b"]:
            with self.subTest(line=line):
                response = self.client.post(
                    reverse("admin:ingest_subscription_add"),
                    subscription_form(self.source, url_patterns=f"*/docs/*\n{line}"),
                )
                page = response.content.decode()

                assert response.status_code == 200
                assert SUPPORTED in page
                assert escape(f"'{line}' cannot be used") in page
                assert not Subscription.objects.exists()

    def test_the_system_checks_name_each_stored_pattern_re2_cannot_run(self):
        Source.objects.filter(pk=self.source.pk).update(
            allow_patterns=f"^{SITE}/", deny_patterns=r"/(?!public)"
        )
        subscription = Subscription.objects.create(
            source=self.source, name="Hook", url="https://hooks.example.com/"
        )
        Subscription.objects.filter(pk=subscription.pk).update(
            url_patterns="*/docs/*\nre:(a)\\1"
        )

        sources = refused_patterns_check(None, databases=["default"])
        subscriptions = refused_url_patterns_check(None, databases=["default"])

        assert [(w.id, w.obj) for w in sources] == [("sources.W001", self.source)]
        assert "'/(?!public)' cannot be used" in sources[0].msg
        assert "denies every URL" in sources[0].hint
        assert [(w.id, w.obj) for w in subscriptions] == [("ingest.W004", subscription)]
        assert "'re:(a)\\1' cannot be used" in subscriptions[0].msg
        assert refused_patterns_check(None, databases=None) == []


def source_form(**fields) -> dict:
    return {
        "name": "Other docs", "fetcher": "crawlbase", "seed_urls": f"{SITE}/",
        "recrawl_every": "7 00:00:00", "max_pages": "100", "crawlbase_format": "html",
        "adaptive_recrawl": "on", "recrawl_min": "01:00:00",
        "recrawl_max": "30 00:00:00", "max_depth": "10", **fields,
    }  # fmt: skip


def subscription_form(source: Source, **fields) -> dict:
    return {
        "source": source.pk, "name": "Docs team", "channel": "webhook",
        "url": "http://127.0.0.1:9/hook", "emails": "", "active": "on",
        "url_patterns": "", "headings": "", "min_lines": "0", **fields,
    }  # fmt: skip
