"""Release notes mention what other pages define: they are recognised, and a
question about an option finds the page that defines it first unless it asks
about a version or a change."""

from __future__ import annotations

import pytest

from ingest.reading.release_notes import is_release_notes
from retrieval.search import (
    ABOUT_CHANGE,
    RELEASE_NOTES_WEIGHT,
    VECTOR_WEIGHT,
    Hit,
    _fuse,
    chunks_search,
)
from sources.models import SYSTEM
from tests.world import SITE, IngestWorld, page_html


@pytest.mark.parametrize(
    ("url", "title"),
    [
        ("https://www.sphinx-doc.org/en/5.x/changes.html", "Sphinx documentation"),
        ("https://docs.python.org/3.11/whatsnew/3.11.html", "Python docs"),
        ("https://docs.python.org/3.11/whatsnew/changelog.html", "Python docs"),
        ("https://docs.djangoproject.com/en/3.2/releases/3.2.4/", "Django"),
        ("https://www.postgresql.org/docs/15/release-15-5.html", "E.1. Release"),
        ("https://github.example/project/blob/main/CHANGELOG.md", "project"),
        ("https://docs.example.com/release-notes/", "Docs"),
        ("https://docs.example.com/guide/", "Changelog — Example"),
        ("https://docs.example.com/guide/", "What’s New In Example 2.0"),
        ("https://docs.example.com/guide/", "Release 4.2 (2026-01-02)"),
    ],
)
def test_release_notes_are_known_by_their_address_or_title(url, title):
    assert is_release_notes(url=url, title=title)


@pytest.mark.parametrize(
    ("url", "title"),
    [
        ("https://docs.djangoproject.com/en/3.2/internals/release-process/", "x"),
        ("https://docs.gitlab.example/ee/api/releases/links.html", "Release links API"),
        ("https://docs.example.com/news/2020/tutorial.html", "A tutorial"),
        ("https://www.postgresql.org/docs/15/history.html", "A Brief History"),
        ("https://docs.example.com/guide/changing-passwords.html", "Passwords"),
        ("https://docs.example.com/newsletter/", "Our newsletter"),
        ("https://docs.example.com/guide/", "Releasing a package"),
        ("https://docs.example.com/guide/", "Changes to the data model"),
    ],
)
def test_pages_that_only_talk_about_changes_are_not_release_notes(url, title):
    assert not is_release_notes(url=url, title=title)


class DefinitionFirstTests(IngestWorld):
    def setUp(self):
        self.ingest(
            f"{SITE}/changes.html",
            page_html(
                "Changelog",
                ("Release 5.1", "#9075: autodoc_typehints now takes 'both'; "
                 "autodoc_typehints with 'description' shows the typehints of "
                 "overloads; autodoc_typehints_format is added."),
                ("Release 5.0", "autodoc_typehints ignores overloads. "
                 "Dropped Python 3.6."),
            ),
        )  # fmt: skip
        self.ingest(
            f"{SITE}/autodoc.html",
            page_html(
                "autodoc",
                ("Configuration", "The extension reads these settings."),
                ("autodoc_typehints", "This value controls how to represent "
                 "the hints of a function: in its signature, as content of the "
                 "function or method, or not at all. The setting takes "
                 "'signature' (the default), 'description', 'none' or 'both'. "
                 "New in version 2.1."),
            ),
        )  # fmt: skip

    def first(self, question: str) -> str:
        hits = chunks_search(query=question, user=SYSTEM, k=5).hits
        return hits[0].chunk.page.url

    def test_the_page_that_defines_an_option_comes_before_a_changelog(self):
        assert self.page(f"{SITE}/changes.html").release_notes
        assert not self.page(f"{SITE}/autodoc.html").release_notes

        assert self.first("autodoc_typehints") == f"{SITE}/autodoc.html"
        assert self.first("What does autodoc_typehints do?") == f"{SITE}/autodoc.html"

    def test_a_question_about_a_version_or_a_change_may_find_the_changelog(self):
        assert self.first("What changed about autodoc_typehints in 5.1?") == (
            f"{SITE}/changes.html"
        )


def fused_order(release_notes_weight: float) -> list[int]:
    # Page 1 (release notes) first in both lists, page 2 (its definition) second.
    vector = [
        Hit(pk=10, page_id=1, similarity=0.9, vector_rank=1, release_notes=True),
        Hit(pk=20, page_id=2, similarity=0.8, vector_rank=2),
    ]
    keyword = [
        Hit(pk=10, page_id=1, keyword_rank=1, release_notes=True),
        Hit(pk=20, page_id=2, keyword_rank=2),
    ]
    fused = _fuse(vector, keyword, vector_weight=VECTOR_WEIGHT,
                  release_notes_weight=release_notes_weight)  # fmt: skip
    return [hit.page_id for hit in fused]


def test_release_notes_ranked_alike_come_after_the_page_that_defines():
    assert fused_order(1.0) == [1, 2]
    assert fused_order(RELEASE_NOTES_WEIGHT) == [2, 1]


@pytest.mark.parametrize(
    ("question", "about_change"),
    [
        ("What changed in autodoc_typehints?", True),
        ("autodoc_typehints in 5.1", True),
        ("Is autodoc_typehints deprecated?", True),
        ("What is new in Python 3.11?", True),
        ("What's new in 5.0?", True),
        ("Which settings were removed in Django 4.0?", True),
        ("autodoc_typehints since 4.1", True),
        ("autodoc_typehints", False),
        ("How do I show type hints in the description?", False),
        ("How do I squash migrations?", False),
        ("How do I create a new app?", False),
        ("How do I change the admin site header?", False),
        ("How do I release a lock in asyncio?", False),
        ("Bind the server to 127.0.0.1", False),
        ("What happens to files that are removed from the temporary directory?", False),
    ],
)
def test_a_question_asks_about_a_change_in_its_own_words(question, about_change):
    assert (ABOUT_CHANGE.search(question) is not None) is about_change
