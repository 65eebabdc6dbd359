"""Heading-aware chunking of normalized Markdown.

A page is cut at every H1–H3 heading (never inside a fenced code block), so an edit in
one section leaves the chunks of every other section, and their hashes, as they were.
A section longer than a chunk is packed into several chunks from whole blocks (see
``retrieval.packing`` for how a block too long is cut).

Each chunk keeps two texts: ``text``, the Markdown shown to users, and ``embed_text``,
what is embedded and hashed: the page title and heading path, then the text without
link targets and permalink symbols, which cost tokens and carry no meaning. Neither
is over ``retrieval.packing.MAX_TOKENS``, counted as everything else counts them
(``count_tokens``): the chunk's ``token_count`` is its embedded text's, title and
heading path included, so the text is packed in the room they leave.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kbsite.text import (
    HEADING,
    clean_inline,
    count_tokens,
    sha256_hex,
    truncate_tokens,
    unmark_headings,
)
from retrieval import packing
from retrieval.packing import chunk_texts
from retrieval.sections import split_blocks, split_sections

# The title and heading path put before each embedded text: bounded too, so that
# every embedded text stays far under any provider's per-input limit.
PREFIX_TOKENS = 200
SEPARATOR = " › "


def section_of(heading: str, title: str) -> str:
    """A chunk's heading path without a first heading that only repeats its
    page's title ("Backups › Restoring" on the page "Backups": "Restoring")."""
    parts = heading.split(SEPARATOR) if heading else []
    title = " ".join(title.split())
    if parts and title and " ".join(parts[0].split()) in title:
        parts = parts[1:]
    return SEPARATOR.join(parts)


@dataclass(frozen=True)
class ChunkDraft:
    position: int
    heading: str
    text: str
    embed_text: str
    embed_hash: str
    token_count: int
    anchor: str = ""  # id of the section's heading in the page's HTML, if any


def chunk_markdown(markdown: str, *, title: str = "") -> list[ChunkDraft]:
    drafts: list[ChunkDraft] = []
    title = clean_inline(title)
    for section in split_sections(markdown):
        heading = SEPARATOR.join(section.path)
        prefix = truncate_tokens(
            SEPARATOR.join(_prefix_parts(title, section.path)), PREFIX_TOKENS
        )
        room = packing.MAX_TOKENS - (count_tokens(f"{prefix}\n\n") if prefix else 0)
        blocks = split_blocks(section.lines)
        for packed in chunk_texts(blocks, headed=bool(section.path), limit=room):
            for text, embed_text, tokens in _fitted(packed, prefix, room):
                drafts.append(
                    ChunkDraft(
                        position=len(drafts),
                        heading=heading,
                        text=text,
                        embed_text=embed_text,
                        embed_hash=sha256_hex(embed_text),
                        token_count=tokens,
                        anchor=section.anchor,
                    )
                )
    return drafts


def _fitted(text: str, prefix: str, room: int) -> Iterator[tuple[str, str, int]]:
    """The chunk text with its embedded text and that text's tokens; cut again,
    in less room, in the rare case where either is over the cap: dropping link
    targets, heading marks and the text's outer spaces can make a text longer
    (" naïve" is one token fewer than "naïve")."""
    body = unmark_headings(clean_inline(text))
    embed_text = f"{prefix}\n\n{body}" if prefix else body
    tokens, counted = count_tokens(embed_text), count_tokens(text)
    excess = max(tokens, counted) - packing.MAX_TOKENS
    if excess <= 0:
        yield text, embed_text, tokens
        return
    blocks = split_blocks(text.split("\n"))
    headed = HEADING.match(blocks[0]) is not None
    limit = min(room, counted) - excess
    for part in chunk_texts(blocks, headed=headed, limit=limit):
        yield from _fitted(part, prefix, limit)


def _prefix_parts(title: str, path: list[str]) -> list[str]:
    """Title, then heading path, without the H1 when the title already says it
    (titles often add the site's name: "os.path — … — Python 3.11 documentation")."""
    if path and title and " ".join(path[0].split()) in " ".join(title.split()):
        path = path[1:]
    return [part for part in [title, *path] if part]


def embed_texts(drafts: list[ChunkDraft]) -> dict[str, str]:
    """What to embed for these chunks: text by hash (identical texts once)."""
    return {draft.embed_hash: draft.embed_text for draft in drafts}
