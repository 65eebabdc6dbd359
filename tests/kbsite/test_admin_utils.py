"""The admin's pure pieces: diffs, charts, durations in words, short paths."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError

from kbsite.admin_utils import (
    ReadableDurationField,
    parse_readable_duration,
    readable_duration,
    short_path,
)
from kbsite.charts import Series, axis, grouped_bars, horizontal_bars, stacked_bars
from kbsite.textdiff import markdown_diff
from tests.sources.test_changes import EDITS, SECTIONS

LONG = "\n".join(f"Line {n} of a long section." for n in range(40))


def test_an_unchanged_text_has_no_changes_and_shows_folded():
    diff = markdown_diff(LONG, LONG)

    assert diff.unchanged
    assert [block.folded for block in diff.blocks] == [True]


def test_a_change_shows_with_three_lines_of_context_and_the_rest_folded():
    new = LONG.replace("Line 20 of", "Line twenty of")

    diff = markdown_diff(LONG, new)

    assert (diff.added, diff.removed) == (1, 1)
    shown = [b for b in diff.blocks if not b.folded]
    assert len(shown) == 1
    assert [line.kind for line in shown[0].lines] == (
        ["same"] * 3 + ["removed", "added"] + ["same"] * 3
    )
    assert [len(b.lines) for b in diff.blocks if b.folded] == [17, 16]


def test_only_the_words_that_changed_are_marked_in_an_edited_line():
    diff = markdown_diff("Run pip install.", "Run uv pip install.")

    (block,) = diff.blocks
    removed, added = block.lines
    assert [(s.text, s.changed) for s in added.segments] == [
        ("Run", False),
        (" uv", True),
        (" pip install.", False),
    ]
    assert not any(s.changed for s in removed.segments)


def test_lines_too_different_to_pair_are_shown_whole():
    (block,) = markdown_diff("Completely old text", "Nothing alike here!").blocks

    assert [line.kind for line in block.lines] == ["removed", "added"]
    assert not any(s.changed for line in block.lines for s in line.segments)


def test_a_change_is_named_after_its_section():
    old = "# Title\n\n## Install\n\nRun it.\n\n## Use\n\nCall it."
    new = old.replace("Call it.", "Call it twice.")

    shown = [b for b in markdown_diff(old, new).blocks if not b.folded]

    assert [b.heading for b in shown] == ["Title › Use"]


@pytest.mark.parametrize("edit", EDITS)
def test_a_change_is_shown_under_the_section_it_touched_not_a_neighbour(edit):
    new, sections = EDITS[edit]

    shown = [b for b in markdown_diff(SECTIONS, new).blocks if not b.folded]

    assert [b.heading for b in shown] == sections


@pytest.mark.parametrize(
    ("old", "new", "shown"),
    [
        (  # a heading added: its id is for links, not for eyes
            "# Harbor\n\nIntro.",
            "# Harbor\n\nIntro.\n\n## Backups {#_backups_anchor}\n\nKeep copies.",
            ["", "## Backups", "", "Keep copies."],
        ),
        (  # a heading renamed: the words that changed, no id
            "## Install {#install}\n\nRun it.",
            "## Installing {#installing}\n\nRun it.",
            ["## Install", "## Installing"],
        ),
        (  # "{#id}" in code is code
            "```\nx\n```",
            "```\n## Not a heading {#kept}\n```",
            ["x", "## Not a heading {#kept}"],
        ),
    ],
)
def test_a_diff_shows_headings_without_their_ids(old, new, shown):
    diff = markdown_diff(old, new)

    lines = [line for block in diff.blocks for line in block.lines]
    assert [line.text for line in lines if line.kind != "same"] == shown
    assert not any("{#" in line.text for line in lines if line.kind == "same")


def test_a_first_version_is_all_added():
    diff = markdown_diff("", "# Title\n\nText.")

    assert (diff.added, diff.removed) == (3, 0)


def test_axes_end_on_round_numbers():
    assert axis(3) == (3, 3)
    assert axis(420) == (500, 5)
    assert axis(0) == (1, 1)
    assert axis(1_234_567) == (1_500_000, 3)


def test_charts_are_svg_with_a_tooltip_per_bar_and_escaped_labels():
    series = [Series("<b>embedded</b>", "#00f", [1, 2]), Series("kept", "#0f0", [0, 3])]

    stacked = stacked_bars(labels=["<i>", "b"], series=series, title="t <x>")
    grouped = grouped_bars(labels=["a", "b"], series=series, title="t")
    bars = horizontal_bars(rows=[("fresh <now>", 5, "#0f0")], title="t")

    assert stacked.startswith("<svg ") and stacked.count("<rect ") == 3
    assert "&lt;b&gt;embedded&lt;/b&gt;" in stacked and "<b>" not in stacked
    assert "&lt;i&gt;" in stacked and "t &lt;x&gt;" in stacked
    assert grouped.count("<rect ") == 4
    assert "fresh &lt;now&gt;" in bars


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (timedelta(days=7), "7 days"),
        (timedelta(days=1, hours=12), "1 day 12 hours"),
        (timedelta(seconds=90), "1 minute 30 seconds"),
        (timedelta(0), "0 seconds"),
        (timedelta(days=21), "21 days"),
    ],
)
def test_durations_read_as_words(value, words):
    assert readable_duration(value) == words
    assert parse_readable_duration(words) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2 weeks", timedelta(days=14)),
        ("12 hours", timedelta(hours=12)),
        ("1 day, 6 hours", timedelta(hours=30)),
        ("90 min", timedelta(minutes=90)),
        ("7 00:00:00", timedelta(days=7)),
        ("soon", None),
        ("7 days and more", None),
    ],
)
def test_durations_are_typed_as_people_write_them(text, value):
    assert parse_readable_duration(text) == value


def test_a_duration_that_cannot_be_read_is_a_form_error():
    field = ReadableDurationField()

    assert field.clean("3 days") == timedelta(days=3)
    with pytest.raises(ValidationError, match="7 days, 12 hours"):
        field.clean("next week")


def test_short_paths_keep_the_query_and_cut_long_ones_in_the_middle():
    assert short_path("https://a.example/docs/x?b=2") == "/docs/x?b=2"
    assert short_path("https://a.example") == "/"
    cut = short_path("https://a.example/" + "a" * 100 + "/end.html", limit=20)
    assert len(cut) <= 20 and cut.startswith("/aaa") and cut.endswith("end.html")
