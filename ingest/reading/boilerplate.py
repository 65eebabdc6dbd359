"""Lines a site repeats on many pages (menus, footers, "last updated" stamps).

A line's *shape* is the line with every digit replaced by 0 and spaces collapsed, so
"Last updated 2026-11-01" and "Last updated 2026-11-29" are one shape. Each source
keeps a count of the pages each shape appears on; shapes common enough are stripped
before hashing and chunking, along with lines matching the source's own patterns.
Code blocks and headings are never touched.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator

from kbsite.patterns import Pattern
from kbsite.text import HEADING, fenced

DIGITS = re.compile(r"\d")
SPACES = re.compile(r"\s+")
# Lines shorter than this are too generic ("Note", "}") to call boilerplate.
MIN_LENGTH = 12


def line_shape(line: str) -> str:
    return SPACES.sub(" ", DIGITS.sub("0", line.strip())).lower()


def shape_hash(shape: str) -> int:
    """A signed 64-bit number, for a bigint column."""
    digest = hashlib.blake2b(shape.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _prose_lines(markdown: str) -> Iterator[tuple[int, str]]:
    """(index, line) for lines outside fenced code that are not headings."""
    for index, (line, code) in enumerate(fenced(markdown.split("\n"))):
        if code or HEADING.match(line) or len(line.strip()) < MIN_LENGTH:
            continue
        yield index, line


def page_shapes(markdown: str) -> dict[int, str]:
    """The shapes a page contributes to its source's counts, each with an example."""
    return {
        shape_hash(line_shape(line)): line.strip() for _, line in _prose_lines(markdown)
    }


def strip(markdown: str, *, common: set[int], patterns: Iterable[Pattern]) -> str:
    """The Markdown without lines of a common shape or matching a pattern (the
    source's, compiled by RE2: ``kbsite.patterns``)."""
    patterns = list(patterns)
    if not common and not patterns:
        return markdown
    lines = markdown.split("\n")
    drop = {
        index
        for index, line in _prose_lines(markdown)
        if shape_hash(line_shape(line)) in common
        or any(p.search(line.strip()) for p in patterns)
    }
    return "\n".join(line for index, line in enumerate(lines) if index not in drop)
