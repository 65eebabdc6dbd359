from __future__ import annotations

import re

from ingest.reading.boilerplate import line_shape, page_shapes, shape_hash, strip

PAGE = """# Install

Home | Guide | API reference

Run pip install example.

```
Home | Guide | API reference
```

Last updated on 2026-11-01 by the docs team
"""


def test_digits_are_masked_so_dates_share_a_shape():
    assert line_shape("Last updated 2026-11-01") == line_shape(
        "Last  updated 2025-01-30 "
    )


def test_a_page_reports_each_prose_shape_once_with_an_example():
    shapes = page_shapes(PAGE)

    assert shapes[shape_hash(line_shape("Home | Guide | API reference"))] == (
        "Home | Guide | API reference"
    )
    assert shape_hash(line_shape("# Install")) not in shapes, "headings never count"
    assert len(shapes) == 3


def test_common_shapes_are_stripped_outside_code_only():
    common = {shape_hash(line_shape("Home | Guide | API reference"))}

    stripped = strip(PAGE, common=common, patterns=[])

    assert stripped.count("Home | Guide | API reference") == 1, "the code copy stays"
    assert "Run pip install example." in stripped


def test_a_new_date_in_a_learned_footer_is_still_stripped():
    common = {shape_hash(line_shape("Last updated on 2026-11-01 by the docs team"))}
    later = PAGE.replace("2026-11-01", "2026-11-29")

    assert "Last updated" not in strip(later, common=common, patterns=[])


def test_configured_patterns_strip_matching_lines():
    stripped = strip(PAGE, common=set(), patterns=[re.compile(r"^Last updated on")])

    assert "Last updated" not in stripped
    assert "Home | Guide" in stripped


def test_nothing_configured_changes_nothing():
    assert strip(PAGE, common=set(), patterns=[]) == PAGE
