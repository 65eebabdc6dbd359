"""Which changes a subscription's filters let through, as a table."""

from __future__ import annotations

import pytest

from ingest.notify.filters import ChangeFilter, heading_normal, url_pattern

DOCS = "https://docs.example.com"
URL = f"{DOCS}/config/workers.html"
EDIT = {
    "kind": "changed",
    "url": URL,
    "sections": ["Configuration › Options › timeout", "Configuration › Workers"],
    "lines_added": 2,
    "lines_removed": 1,
}
GONE = {
    "kind": "deleted",
    "url": URL,
    "sections": [],
    "lines_added": None,
    "lines_removed": None,
}


@pytest.mark.parametrize(
    ("name", "filters", "change", "passes"),
    [
        ("no filter", {}, EDIT, True),
        ("kind ticked", {"kinds": ["changed", "new"]}, EDIT, True),
        ("kind not ticked", {"kinds": ["deleted"]}, EDIT, False),
        ("glob over the whole URL", {"url_patterns": f"{DOCS}/config/*"}, EDIT, True),
        ("glob crosses slashes", {"url_patterns": "*/workers.html"}, EDIT, True),
        ("glob of another directory", {"url_patterns": f"{DOCS}/api/*"}, EDIT, False),
        ("glob matches it all", {"url_patterns": f"{DOCS}/config/"}, EDIT, False),
        ("regex searched", {"url_patterns": r"re:/config/\w+\.html$"}, EDIT, True),
        ("regex not found", {"url_patterns": "re:/api/"}, EDIT, False),
        ("one line of several", {"url_patterns": "re:/api/\n*/config/*"}, EDIT, True),
        ("top heading", {"headings": "Configuration"}, EDIT, True),
        ("inner heading, any case", {"headings": "options"}, EDIT, True),
        ("path with >", {"headings": "configuration > options"}, EDIT, True),
        ("path with ›", {"headings": "Configuration › Workers"}, EDIT, True),
        ("a heading's start", {"headings": "Conf"}, EDIT, True),
        ("mid-word is no heading", {"headings": "figuration"}, EDIT, False),
        ("another section", {"headings": "Install"}, EDIT, False),
        ("path out of order", {"headings": "Options > Configuration"}, EDIT, False),
        ("gone names no section", {"headings": "Configuration"}, GONE, False),
        ("big enough", {"min_lines": 2}, EDIT, True),
        ("too small", {"min_lines": 3}, EDIT, False),
        ("gone is not measured", {"min_lines": 50}, GONE, True),
        ("every filter passes", {"kinds": ["changed"], "url_patterns": "*/config/*",
                                 "headings": "Workers", "min_lines": 1}, EDIT, True),
        ("one filter fails", {"kinds": ["changed"], "url_patterns": "*/config/*",
                              "headings": "Install", "min_lines": 1}, EDIT, False),
    ],
)  # fmt: skip
def test_a_filter(name, filters, change, passes):
    assert ChangeFilter.build(**filters).passes(**change) is passes, name


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("re:(unclosed", "is not a regular expression"),
        ("re:", "has no regular expression after re:"),
    ],
)
def test_a_bad_pattern_says_why(line, message):
    with pytest.raises(ValueError, match=message):
        url_pattern(line)


def test_a_stored_bad_pattern_matches_nothing_rather_than_everything():
    only_bad = ChangeFilter.build(url_patterns="re:(unclosed")

    assert not only_bad.passes(**EDIT)


def test_a_heading_path_is_compared_in_one_spelling():
    assert heading_normal("  Configuration >  Options›timeout ") == (
        "configuration › options › timeout"
    )
