"""Fetcher kinds are a registry (``ingest.fetchers.kinds``): what each kind can do is
declared there once, and no other module asks which kind a source has. A new
fetcher is then one entry, not a hunt through the modules that branch on it."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.fetchers.http import DirectFetcher
from ingest.fetchers.kinds import BUILT_IN, FETCHERS, fetcher_kind, kinds_where
from ingest.fetchers.nstproxy import NstproxyFetcher
from sources.models import Source
from tests.conftest import ROOT

APPS = ("kbsite", "sources", "ingest", "retrieval", "bench")
REGISTRY = Path("ingest/fetchers/kinds.py")
# The model that defines the kinds (its choices and default) may name them.
CHOICES = Path("sources/models.py")
# Calls that query by their keyword arguments.
QUERIES = {"filter", "exclude", "get", "Q", "update", "count"}
KIND_LOOKUP = re.compile(r"(^|__)fetcher(__(in|exact|iexact))?$")
# Comparisons that ask for a value (``ctx.fetcher is None`` asks for none).
ASKS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)
TEMPLATE_COMPARISON = re.compile(r"\bfetcher\s*(==|!=|\bin\b|\bnot in\b)")


@pytest.mark.parametrize(
    "kind, capabilities",
    [
        (Source.Fetcher.DIRECT, {
            "client": DirectFetcher, "crawled_here": True, "hosted": False,
            "conditional_requests": True, "paid_pushes": False,
            "obeys_robots": True, "reads_sitemaps": True, "follows_links": True,
            "delivers_by_webhook": False, "settings_needed": (),
            "advised": ["CRAWL_CONTACT_URL"], "name": "built-in fetcher",
        }),
        (Source.Fetcher.NSTPROXY, {
            "client": NstproxyFetcher, "crawled_here": True, "hosted": True,
            "conditional_requests": False, "paid_pushes": False,
            "obeys_robots": True, "reads_sitemaps": True, "follows_links": True,
            "delivers_by_webhook": False, "settings_needed": ("NSTPROXY_API_KEY",),
            "advised": [], "name": "Nstproxy crawl API",
        }),
        (Source.Fetcher.CRAWLBASE, {
            "client": None, "crawled_here": False, "hosted": False,
            "conditional_requests": False, "paid_pushes": True,
            "obeys_robots": False, "reads_sitemaps": False, "follows_links": False,
            "delivers_by_webhook": True,
            "settings_needed": ("CRAWLBASE_TOKEN", "CRAWLBASE_CRAWLER",
                                "WEBHOOK_TOKEN"),
            "advised": [], "name": "Crawlbase",
        }),
    ],
)  # fmt: skip
def test_each_kind_declares_what_it_can_do(kind, capabilities):
    declared = fetcher_kind(Source(fetcher=kind))
    found = {
        name: getattr(declared, name) for name in capabilities if name != "advised"
    }
    found["advised"] = [name for name, _ in declared.settings_advised]

    assert found == capabilities


def test_every_choice_of_the_model_has_one_entry_and_no_entry_is_a_stranger():
    assert sorted(FETCHERS) == sorted(Source.Fetcher.values)
    assert BUILT_IN in FETCHERS and FETCHERS[BUILT_IN].crawled_here


def test_queries_get_the_kinds_that_pass_a_test():
    crawled_here = kinds_where(lambda kind: kind.crawled_here)

    assert sorted(crawled_here) == ["direct", "nstproxy"]
    assert kinds_where(lambda kind: kind.delivers_by_webhook) == ["crawlbase"]


def test_a_source_of_a_kind_no_entry_knows_is_named_in_the_error():
    with pytest.raises(ValueError, match="'ftp'.*not one of: direct"):
        fetcher_kind(Source(name="Old", fetcher="ftp"))


# -- no module outside the registry asks which kind a source has -------------------


def kind_questions(tree: ast.Module, *, may_name_kinds: bool) -> Iterator[int]:
    """The lines of ``tree`` that compare a source's fetcher kind, query by a
    literal kind, or (unless ``may_name_kinds``) name a kind of ``Source.Fetcher``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(
            isinstance(op, ASKS) for op in node.ops
        ):
            operands = [node.left, *node.comparators]
            if any(_is_fetcher(operand) for operand in operands):
                yield node.lineno
        elif isinstance(node, ast.Attribute) and _names_a_kind(node):
            if not may_name_kinds:
                yield node.lineno
        elif isinstance(node, ast.Call) and _call_name(node) in QUERIES:
            for keyword in node.keywords:
                if KIND_LOOKUP.search(keyword.arg or "") and _literal(keyword.value):
                    yield node.lineno


def _is_fetcher(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "fetcher") or (
        isinstance(node, ast.Attribute) and _names_a_kind(node)
    )


def _names_a_kind(node: ast.Attribute) -> bool:
    """``Source.Fetcher.CRAWLBASE``, ``Fetcher.DIRECT``, ``obj.Fetcher.X``."""
    owner = node.value
    owner_name = owner.attr if isinstance(owner, ast.Attribute) else ""
    owner_name = owner_name or getattr(owner, "id", "")
    return owner_name == "Fetcher" and node.attr.isupper()


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _literal(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return any(_literal(element) for element in node.elts)
    return isinstance(node, ast.Attribute) and _names_a_kind(node)


@pytest.mark.parametrize(
    "code, asks",
    [
        ("if source.fetcher == Source.Fetcher.CRAWLBASE: pass", True),
        ("if obj.fetcher != Source.Fetcher.CRAWLBASE: pass", True),
        ('if source.fetcher == "nstproxy": pass', True),
        ("x = self.fetcher in {self.Fetcher.DIRECT, self.Fetcher.NSTPROXY}", True),
        ('x = source.fetcher not in ("direct",)', True),
        ("pages.filter(source__fetcher=Source.Fetcher.CRAWLBASE)", True),
        ('pages.exclude(source__fetcher="crawlbase")', True),
        ('Source.objects.filter(fetcher__in=["direct", "nstproxy"])', True),
        ("TABLE = {Source.Fetcher.NSTPROXY: ['NSTPROXY_API_KEY']}", True),
        ("Source(name='x', fetcher=Source.Fetcher.DIRECT)", True),
        ("pages.filter(source__fetcher__in=kinds_where(lambda k: k.crawled_here))",
         False),
        ("if fetcher_kind(source).crawled_here: pass", False),
        ("if ctx.fetcher.hosted: pass", False),
        ("if ctx.fetcher is None: pass", False),
        ('Source.objects.create(name="x", fetcher="crawlbase")', False),
        ("choices = Source.Fetcher.choices", False),
    ],
)  # fmt: skip
def test_the_scan_finds_each_way_of_asking_for_the_kind(code, asks):
    found = list(kind_questions(ast.parse(code), may_name_kinds=False))

    assert bool(found) == asks


def test_no_module_outside_the_registry_asks_which_kind_a_source_has():
    asking = []
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if "migrations" in relative.parts or relative == REGISTRY:
                continue
            tree = ast.parse(path.read_text(), filename=str(path))
            lines = kind_questions(tree, may_name_kinds=relative == CHOICES)
            asking += [f"{relative}:{line}" for line in lines]
    for path in sorted((ROOT / "templates").rglob("*.html")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if TEMPLATE_COMPARISON.search(line):
                asking.append(f"{path.relative_to(ROOT)}:{number}")

    assert asking == [], "ask ingest.fetchers.kinds what the kind can do"
