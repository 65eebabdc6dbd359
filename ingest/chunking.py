"""Heading-aware chunking of normalized Markdown.

A page is cut at every H1–H3 heading (never inside a fenced code block), so an edit in
one section leaves the chunks of every other section, and their hashes, as they were.
A section longer than ``MAX_TOKENS`` is packed into several chunks from whole blocks:
paragraphs, lists, fenced code and tables, which are never cut.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass

from ingest.tokens import count_tokens

MAX_TOKENS = 700
HEADING = re.compile(r"^(#{1,3})[ \t]+(.+?)[ \t]*#*[ \t]*$")
FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})")
SEPARATOR = " › "


@dataclass(frozen=True)
class ChunkDraft:
    position: int
    heading: str
    text: str
    embed_text: str
    embed_hash: str
    token_count: int


@dataclass
class _Section:
    path: list[str]
    lines: list[str]


def chunk_markdown(markdown: str, *, title: str = "") -> list[ChunkDraft]:
    drafts: list[ChunkDraft] = []
    for section in _sections(markdown):
        heading = SEPARATOR.join(section.path)
        for text in _pack(_blocks(section.lines)):
            prefix = SEPARATOR.join(part for part in [title, heading] if part)
            embed_text = f"{prefix}\n\n{text}" if prefix else text
            drafts.append(
                ChunkDraft(
                    position=len(drafts),
                    heading=heading,
                    text=text,
                    embed_text=embed_text,
                    embed_hash=hashlib.sha256(embed_text.encode()).hexdigest(),
                    token_count=count_tokens(embed_text),
                )
            )
    return drafts


def _sections(markdown: str) -> Iterator[_Section]:
    path: list[str] = []
    current = _Section(path=[], lines=[])
    fence = ""
    for line in markdown.split("\n"):
        opener = FENCE.match(line)
        if fence:
            if (
                opener
                and opener.group(1)[0] == fence[0]
                and len(opener.group(1)) >= len(fence)
            ):
                fence = ""
        elif opener:
            fence = opener.group(1)
        elif match := HEADING.match(line):
            yield current
            level = len(match.group(1))
            path = [*path[: level - 1], match.group(2).strip()]
            current = _Section(path=list(path), lines=[line])
            continue
        current.lines.append(line)
    yield current


def _blocks(lines: list[str]) -> list[str]:
    """Blank-line separated blocks; a fenced block is one block, blank lines and all."""
    blocks: list[str] = []
    current: list[str] = []
    fence = ""
    for line in lines:
        opener = FENCE.match(line)
        if fence:
            current.append(line)
            if opener and opener.group(1)[0] == fence[0]:
                fence = ""
            continue
        if opener:
            fence = opener.group(1)
            current.append(line)
        elif line.strip():
            current.append(line)
        elif current:
            blocks.append("\n".join(current))
            current = []
    if current:
        blocks.append("\n".join(current))
    return blocks


def _pack(blocks: list[str]) -> Iterator[str]:
    """Whole blocks, greedily, into pieces of at most MAX_TOKENS (a lone block may
    exceed it rather than be cut)."""
    piece: list[str] = []
    size = 0
    for block in blocks:
        tokens = count_tokens(block)
        if piece and size + tokens > MAX_TOKENS:
            yield "\n\n".join(piece)
            piece, size = [], 0
        piece.append(block)
        size += tokens
    if piece:
        yield "\n\n".join(piece)
