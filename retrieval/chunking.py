"""Heading-aware chunking of normalized Markdown.

A page is cut at every H1–H3 heading (never inside a fenced code block), so an edit in
one section leaves the chunks of every other section, and their hashes, as they were.
A section longer than ``MAX_TOKENS`` is packed into several chunks from whole blocks:
paragraphs and lists (split at sentences or items when one alone is too long), fenced
code and tables (never split). Consecutive pieces of long prose share one sentence.

Each chunk keeps two texts: ``text``, the Markdown shown to users, and ``embed_text``,
what is embedded and hashed: the page title and heading path, then the text without
link targets and permalink symbols, which cost tokens and carry no meaning.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from kbsite.text import (
    ADMONITIONS,
    FENCE,
    HEADING,
    SENTENCE_END,
    clean_inline,
    count_tokens,
    fenced,
    heading_id,
    sentences,
    sha256_hex,
    unmark_headings,
)

MAX_TOKENS = 700
OVERLAP_TOKENS = 60
SEPARATOR = " › "
# Sections start at H1–H3; deeper headings stay inside their section.
SECTION_LEVELS = 3
TABLE_ROW = re.compile(r"^\s*\|")
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s")


@dataclass(frozen=True)
class ChunkDraft:
    position: int
    heading: str
    text: str
    embed_text: str
    embed_hash: str
    token_count: int
    anchor: str = ""  # id of the section's heading in the page's HTML, if any


@dataclass
class _Section:
    path: list[str]
    lines: list[str]
    anchor: str = ""


def chunk_markdown(markdown: str, *, title: str = "") -> list[ChunkDraft]:
    drafts: list[ChunkDraft] = []
    title = clean_inline(title)
    for section in _sections(markdown):
        heading = SEPARATOR.join(section.path)
        prefix = SEPARATOR.join(_prefix_parts(title, section.path))
        blocks = _blocks(section.lines)
        sticky = blocks[0] if section.path and blocks else ""
        for text in _pack(blocks, sticky=sticky):
            body = unmark_headings(clean_inline(text))
            embed_text = f"{prefix}\n\n{body}" if prefix else body
            drafts.append(
                ChunkDraft(
                    position=len(drafts),
                    heading=heading,
                    text=text,
                    embed_text=embed_text,
                    embed_hash=sha256_hex(embed_text),
                    token_count=count_tokens(embed_text),
                    anchor=section.anchor,
                )
            )
    return drafts


def _prefix_parts(title: str, path: list[str]) -> list[str]:
    """Title, then heading path, without the H1 when the title already says it
    (titles often add the site's name: "os.path — … — Python 3.11 documentation")."""
    if path and title and " ".join(path[0].split()) in " ".join(title.split()):
        path = path[1:]
    return [part for part in [title, *path] if part]


def embed_texts(drafts: list[ChunkDraft]) -> dict[str, str]:
    """What to embed for these chunks: text by hash (identical texts once)."""
    return {draft.embed_hash: draft.embed_text for draft in drafts}


def _sections(markdown: str) -> Iterator[_Section]:
    """Sections by H1–H3; a heading with no text of its own lives on in the path.

    The path follows heading levels, not positions: a heading closes every open
    heading of its level or deeper, so a page that starts at H2 or skips from H1 to
    H3 still gets sibling sections, never one nested in the other. Admonition titles
    ("Tip", "Note") are not sections. A section's anchor is its heading's ``{#id}``,
    else the nearest enclosing heading's."""
    open_headings: list[tuple[int, str, str]] = []  # (level, text, id)
    current = _Section(path=[], lines=[])
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
        current = _Section(
            path=[t for _, t, _ in open_headings],
            lines=[line],
            anchor=next((a for _, _, a in reversed(open_headings) if a), ""),
        )
    if _has_body(current):
        yield current


def _has_body(section: _Section) -> bool:
    body = section.lines[1:] if section.path else section.lines
    return any(line.strip() for line in body)


def _blocks(lines: list[str]) -> list[str]:
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


def _is_prose(block: str) -> bool:
    first = block.lstrip().split("\n", 1)[0]
    return not (FENCE.match(first) or TABLE_ROW.match(first) or LIST_ITEM.match(first))


def _split_block(block: str) -> list[str]:
    """A block too long for one chunk, cut where it may be cut: prose at sentences,
    lists at items. Code and tables come back whole."""
    first = block.lstrip().split("\n", 1)[0]
    if FENCE.match(first) or TABLE_ROW.match(first):
        return [block]
    if LIST_ITEM.match(first):
        items: list[str] = []
        for line in block.split("\n"):
            if LIST_ITEM.match(line) and items and not line.startswith((" ", "\t")):
                items.append(line)
            elif items:
                items[-1] += "\n" + line
            else:
                items.append(line)
        return items
    return sentences(block)


def _pieces(blocks: list[str]) -> Iterator[tuple[str, int, bool, str]]:
    """(text, tokens, is prose, what joins it to the piece before)."""
    for block in blocks:
        tokens = count_tokens(block)
        prose = _is_prose(block)
        if tokens <= MAX_TOKENS:
            yield block, tokens, prose, "\n\n"
            continue
        within = " " if prose else "\n"  # sentences of a paragraph, items of a list
        for index, part in enumerate(_split_block(block)):
            yield part, count_tokens(part), prose, within if index else "\n\n"


def _pack(blocks: list[str], *, sticky: str = "") -> Iterator[str]:
    """Whole pieces, greedily, into chunks of at most MAX_TOKENS (a lone code block or
    table may exceed it rather than be cut). A chunk that continues a paragraph starts
    with the paragraph's sentence before, if that sentence is short. The ``sticky``
    heading line is never a chunk on its own."""
    chunk = ""
    size = 0
    last_sentence = ""
    for text, tokens, prose, joiner in _pieces(blocks):
        if chunk and chunk != sticky and size + tokens > MAX_TOKENS:
            yield chunk
            chunk = last_sentence if joiner == " " else ""
            size = count_tokens(chunk) if chunk else 0
        chunk = f"{chunk}{joiner}{text}" if chunk else text
        size += tokens
        tail = SENTENCE_END.split(text)[-1] if prose else ""
        last_sentence = tail if tail and count_tokens(tail) <= OVERLAP_TOKENS else ""
    if chunk:
        yield chunk
