"""Changes as records: what one step of a page changed, in lines, words and the
sections it touched, named in plain words."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from ingest.delivery.models import Delivery
from kbsite.textdiff import change_measure, plain_heading, section_paths
from sources.models import Page, PageVersion
from tests.world import INSTALL, SITE, IngestWorld

URL = f"{SITE}/install/"

PAGE = """# Configuration

Harbor reads `harbor.toml`.

## Options {#options}

###### `intersphinx_mapping` {#confval-intersphinx_mapping}

A dictionary of other projects.

```python
# not a heading
x = 1
```

## *Workers* and [queues](https://example.com/q)

Each worker takes jobs.
"""


@pytest.mark.parametrize(
    ("heading", "plain"),
    [
        ("`intersphinx_mapping` {#confval-intersphinx_mapping}", "intersphinx_mapping"),
        ("*Workers* and [queues](https://example.com/q)", "Workers and queues"),
        ("max_connections (integer)", "max_connections (integer)"),
        ("Options ¶", "Options"),
        ("**Note**", "Note"),
    ],
)
def test_a_heading_in_plain_words(heading, plain):
    assert plain_heading(heading) == plain


def test_each_line_knows_the_path_of_its_section_and_code_has_no_headings():
    lines = PAGE.split("\n")
    paths = dict(zip(lines, section_paths(lines), strict=True))

    assert paths["Harbor reads `harbor.toml`."] == "Configuration"
    assert paths["A dictionary of other projects."] == (
        "Configuration › Options › intersphinx_mapping"
    )
    assert paths["x = 1"] == "Configuration › Options › intersphinx_mapping"
    assert paths["Each worker takes jobs."] == "Configuration › Workers and queues"


def test_a_one_word_edit_is_one_line_and_one_word_in_its_section():
    new = PAGE.replace("other projects", "other Sphinx projects")

    change = change_measure(PAGE, new)

    assert (change.lines_added, change.lines_removed) == (1, 1)
    assert (change.words_added, change.words_removed) == (1, 0)
    assert change.sections == ["Configuration › Options › intersphinx_mapping"]
    assert change.summary() == (
        "1 line changed in Configuration › Options › intersphinx_mapping"
    )


def test_a_removed_section_is_named_from_the_old_text():
    new = PAGE.split("## *Workers*")[0]

    change = change_measure(PAGE, new)

    assert change.lines_removed == 3 and change.lines_added == 0
    assert change.sections == ["Configuration › Workers and queues"]
    assert change.words_removed == 7  # heading and sentence (the empty line: none)


def test_a_first_version_is_all_added_and_the_summary_counts_sections():
    change = change_measure("", PAGE)

    assert change.lines_added == len(PAGE.splitlines()) and change.lines_removed == 0
    assert change.summary(limit=2) == (
        f"{change.lines_added} lines changed in Configuration, "
        "Configuration › Options and 2 more sections"
    )


def test_the_same_text_is_no_change():
    assert change_measure(PAGE, PAGE).empty


# Three sections that end alike (a code block, then a blank line): an added
# section fits after any of them as well as before it.
SECTIONS = """# Harbor

Intro.

## Install {#install}

Run this:

```sh
pip install harbor
```

## Upgrade {#upgrade}

Run this:

```sh
harbor db upgrade
```

## Queues {#queues}

Pause a queue.
"""
BACKUPS = """## Backups {#backups}

Run this:

```sh
harbor backup
```

"""


UPGRADE_AT, QUEUES_AT = SECTIONS.index("## Upgrade"), SECTIONS.index("## Queues")
# An edit of SECTIONS, and the sections its change names.
EDITS = {
    "a section added between two": (
        SECTIONS.replace("## Upgrade", BACKUPS + "## Upgrade"),
        ["Harbor › Backups"],
    ),
    "a section added before the first": (
        SECTIONS.replace("## Install", BACKUPS + "## Install"),
        ["Harbor › Backups"],
    ),
    "a section added at the end": (
        SECTIONS + "\n" + BACKUPS.rstrip("\n") + "\n",
        ["Harbor › Backups"],
    ),
    "a short section added at the end": (
        SECTIONS + "\n## Backups\n\nKeep copies.\n",
        ["Harbor › Backups"],
    ),
    "a section removed": (
        SECTIONS[:UPGRADE_AT] + SECTIONS[QUEUES_AT:],
        ["Harbor › Upgrade"],
    ),
    "a line edited in the last section": (
        SECTIONS.replace("Pause a queue.", "Pause a queue first."),
        ["Harbor › Queues"],
    ),
    "a line added in the middle section": (
        SECTIONS.replace("db upgrade\n", "db upgrade\nharbor restart\n"),
        ["Harbor › Upgrade"],
    ),
}


@pytest.mark.parametrize("edit", EDITS)
def test_a_change_names_the_sections_it_touched_and_no_neighbour(edit):
    new, sections = EDITS[edit]

    assert change_measure(SECTIONS, new).sections == sections


class ChangeRecordTests(IngestWorld):
    """Each delivery that changes what a page says records one step, measured; one
    that does not records none."""

    def steps(self, url: str = URL) -> list[PageVersion]:
        return list(Page.objects.get(url=url).versions.order_by("recorded_at", "pk"))

    def test_a_first_crawl_is_a_new_page(self):
        self.ingest(URL, body=INSTALL)

        (step,) = self.steps()
        assert step.kind == PageVersion.Kind.NEW and step.lines_removed == 0
        assert step.source_id == self.source.pk and step.chunks_embedded
        assert step.summary == f"New page, {step.lines_added} lines"

    def test_a_one_word_edit_is_one_change_naming_its_section(self):
        self.ingest(URL, body=INSTALL)
        edited = INSTALL.replace("latest release", "latest stable release")

        self.ingest(URL, body=edited)

        new, change = self.steps()
        assert change.kind == PageVersion.Kind.CHANGED
        assert (change.words_added, change.words_removed) == (1, 0)
        assert change.sections == ["Install › With pip"]
        assert change.summary == "1 line changed in Install › With pip"
        assert change.chunks_embedded == 1, "the other section's chunk was reused"

    def test_a_recrawl_that_differs_in_whitespace_only_is_no_change(self):
        self.ingest(URL, body=INSTALL)
        spaced = INSTALL.replace("<p>", "<p>\n   ").replace("</p>", "  \n\n</p>")
        assert spaced != INSTALL

        delivery = self.ingest(URL, body=spaced)

        assert delivery.outcome == Delivery.Outcome.UNCHANGED
        assert len(self.steps()) == 1

    def test_a_move_is_recorded_once_on_the_url_that_moved(self):
        old = f"{SITE}/setup/"
        self.ingest(URL, body=INSTALL)
        for _ in range(2):  # the old address is checked again and still redirects
            self.ingest(URL, rid=self.push(old).rid, body=INSTALL)

        (moved,) = self.steps(old)
        assert moved.kind == PageVersion.Kind.MOVED
        assert moved.summary == "Moved (redirects to another page)"
        assert len(self.steps()) == 1, "the page it moved to did not change"

    def test_gone_and_back_are_steps_of_their_own(self):
        self.ingest(URL, body=INSTALL)
        self.ingest(URL, body="gone", original_status=404)
        self.ingest(URL, body=INSTALL)

        kinds = [step.kind for step in self.steps()]
        assert kinds == ["new", "deleted", "restored"]

    def test_the_admin_lists_changes_with_what_changed_by_source_and_kind(self):
        self.ingest(URL, body=INSTALL)
        self.ingest(
            URL, body=INSTALL.replace("latest release", "latest stable release")
        )
        self.client.force_login(
            User.objects.create_superuser("admin", "a@example.com", "pw")
        )

        changed = self.client.get(
            "/admin/sources/pageversion/",
            {"kind": "changed", "source__id__exact": self.source.pk, "q": "Install"},
        )
        other = self.client.get(
            "/admin/sources/pageversion/", {"source__id__exact": self.source.pk + 1}
        )

        assert changed.status_code == 200
        assert b"1 line changed in Install \xe2\x80\xba With pip" in changed.content
        rows = changed.content.split(b'id="result_list"')[1].split(b"</table>")[0]
        assert b"New page" not in rows and rows.count(b"<tr") == 2  # head, one
        assert b"1 line changed" not in other.content
