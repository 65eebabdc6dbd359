"""Each model's admin is registered once, where it is defined, and never swapped
for another: the screens that need several apps (the editors' Source and Page
admins) are composed above the apps, in ``kbsite.admin``, so no app has to
unregister what an app below it registered."""

from __future__ import annotations

import ast
from collections import Counter

import pytest
from django.contrib import admin

from sources.models import Page, Source
from tests.conftest import ROOT

SCANNED = ("kbsite", "sources", "ingest", "retrieval", "bench")


def site_calls(source: str) -> dict[str, list[str]]:
    """The models ``source`` registers and unregisters with an admin site (by
    name, once per call: ``admin.register``, ``admin.site.register``,
    ``site.unregister``, ...). Other registries (``atexit``, system checks,
    ``super()`` inside a site) are not admin calls."""
    found: dict[str, list[str]] = {"register": [], "unregister": []}
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        receiver = ast.unparse(node.func.value)
        if node.func.attr not in found or not receiver.endswith(("admin", "site")):
            continue
        first = node.args[0] if node.args else None
        models = first.elts if isinstance(first, ast.List | ast.Tuple) else [first]
        found[node.func.attr] += [ast.unparse(m) for m in models if m is not None]
    return found


def calls_in_tree() -> dict[str, Counter[str]]:
    calls: dict[str, Counter[str]] = {"register": Counter(), "unregister": Counter()}
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for kind, models in site_calls(path.read_text()).items():
                calls[kind].update(f"{model} ({path.relative_to(ROOT)})"
                                   for model in models)  # fmt: skip
    return calls


@pytest.mark.parametrize(
    "line, registered, unregistered",
    [
        ("@admin.register(Source)\nclass A: pass", ["Source"], []),
        ("admin.site.register(Page, PageAdmin)", ["Page"], []),
        ("site.register([Source, Page])", ["Source", "Page"], []),
        ("admin.site.register((Source,), A)", ["Source"], []),
        ("admin.site.unregister(Source)", [], ["Source"]),
        ("self.admin_site.unregister(Page)", [], ["Page"]),
        ("atexit.register(release, pid)", [], []),
        ("super().register(model, chosen)", [], []),
        ("@register(Tags.database)\ndef check(): pass", [], []),
    ],
)
def test_the_scan_finds_admin_registrations_in_each_spelling(
    line, registered, unregistered
):
    found = site_calls(line)

    assert (found["register"], found["unregister"]) == (registered, unregistered)


def test_no_module_unregisters_an_admin():
    assert list(calls_in_tree()["unregister"]) == []


def test_no_model_is_registered_by_two_modules():
    by_model = Counter(entry.split(" (")[0] for entry in calls_in_tree()["register"])

    assert [model for model, count in by_model.items() if count > 1] == []


@pytest.mark.parametrize(
    "model, editing, crawling",
    [
        (Source, {"list": "live_count", "action": None, "readonly": "created_at"},
         {"list": "tokens_week", "action": "crawl_now",
          "readonly": "crawl_overview"}),
        (Page, {"list": "next_check", "action": None, "readonly": "chunk_list"},
         {"list": None, "action": "crawl_now", "readonly": "recent_deliveries"}),
    ],
)  # fmt: skip
def test_the_editors_screens_are_the_top_layers_with_each_apps_part(
    model, editing, crawling
):
    registered = admin.site._registry[model]
    actions = registered.actions or []

    assert type(registered).__module__ == "kbsite.admin"
    for part in (editing, crawling):
        assert part["list"] is None or part["list"] in registered.list_display
        assert part["action"] is None or part["action"] in actions
        assert part["readonly"] in registered.readonly_fields
