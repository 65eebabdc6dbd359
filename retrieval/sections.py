"""A page's Markdown as sections, cut at every H1–H3 heading (never inside a
fenced code block), and a section's lines as blank-line separated blocks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kbsite.text import ADMONITIONS, HEADING, clean_inline, fenced, heading_id

# Sections start at H1–H3; deeper headings stay inside their section.
SECTION_LEVELS = 3


@dataclass
class Section:
    path: list[str]
    lines: list[str]
    anchor: str = ""


def split_sections(markdown: str) -> Iterator[Section]:
    """Sections by H1–H3; a heading with no text of its own lives on in the path.

    The path follows heading levels, not positions: a heading closes every open
    heading of its level or deeper, so a page that starts at H2 or skips from H1 to
    H3 still gets sibling sections, never one nested in the other. Admonition titles
    ("Tip", "Note") are not sections. A section's anchor is its heading's ``{#id}``,
    else the nearest enclosing heading's."""
    open_headings: list[tuple[int, str, str]] = []  # (level, text, id)
    current = Section(path=[], lines=[])
    for line, code in fenced(markdown.split("\n")):
        match = None if code else HEADING.match(line)
        if match is None:
            current.lines.append(line)
            continue
        text, anchor = heading_id(match.group(2))
        level = len(match.group(1))
        title = clean_inline(text)
        if title.lower().rstrip(":") in ADMONITIONS:
            current.lines.append(f"**{title}**")
            continue
        line = f"{match.group(1)} {text}"
        if level > SECTION_LEVELS:
            current.lines.append(line)
            continue
        if _has_body(current):
            yield current
        while open_headings and open_headings[-1][0] >= level:
            open_headings.pop()
        open_headings.append((level, title, anchor))
        current = Section(
            path=[t for _, t, _ in open_headings],
            lines=[line],
            anchor=next((a for _, _, a in reversed(open_headings) if a), ""),
        )
    if _has_body(current):
        yield current


def _has_body(section: Section) -> bool:
    body = section.lines[1:] if section.path else section.lines
    return any(line.strip() for line in body)


def split_blocks(lines: list[str]) -> list[str]:
    """Blank-line separated blocks; a fenced block is one block, blank lines and all."""
    blocks: list[str] = []
    current: list[str] = []
    for line, code in fenced(lines):
        if code or line.strip():
            current.append(line)
        elif current:
            blocks.append("\n".join(current))
            current = []
    if current:
        blocks.append("\n".join(current))
    return blocks
