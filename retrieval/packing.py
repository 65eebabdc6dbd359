"""One section's blocks as chunk texts of at most ``limit`` tokens (``MAX_TOKENS``,
less what the chunk's embedded text puts before it).

Whole blocks are packed greedily. A block too long for one chunk is cut where it may
be cut, prose at sentences, then words, then characters; lists at items; fenced code
and tables at lines (a single monstrous line at characters), each code piece a
fenced block of its own with the opening fence repeated, each table piece with the
header rows repeated. Consecutive pieces of long prose share one sentence.

An edit re-embeds the chunks it touches, so a long table or code block is cut where
its own lines say, not where its length does: a piece ends, once at least half
full, after the line of the lowest hash it could end at. Cutting into equal shares
(or as full as possible) moved every later cut when one row grew, and the reference
table of 400 rows was embedded again whole for one edited cell. A table's cells
lose the spaces that align its columns for the same reason: one wider cell padded
every row again.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from kbsite.text import FENCE, SENTENCE_END, count_tokens, sentences, split_tokens

MAX_TOKENS = 700
OVERLAP_TOKENS = 60
# Tokens a join may add beyond its two sides (the separator, and a seam where the
# tokenizer merges differently); near the cap, chunks are counted exactly instead.
JOIN_TOKENS = 2
TABLE_ROW = re.compile(r"^\s*\|")
TABLE_DELIMITER = re.compile(r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-*:?\s*)*\|?\s*$")
# A cell's edge: a pipe no backslash escapes.
CELL_EDGE = re.compile(r"(?<!\\)\|")
DELIMITER_CELL = re.compile(r"^\s*(:?)-*(:?)\s*$")
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s")


def chunk_texts(blocks: list[str], *, headed: bool, limit: int) -> Iterator[str]:
    """The chunk texts of a section's blocks, of at most ``limit`` tokens each;
    ``headed``: the first block is the section's heading."""
    sticky, room = _heading_room(blocks, headed=headed, limit=limit)
    pieces = _pieces(blocks, room_after_heading=room, limit=limit)
    return _pack(pieces, sticky=sticky, limit=limit)


def _heading_room(blocks: list[str], *, headed: bool, limit: int) -> tuple[str, int]:
    """The heading block that is never a chunk on its own, and the room it leaves
    for what follows it in the first chunk. A heading that would leave less than
    three quarters of a chunk may stand alone."""
    if not (headed and blocks):
        return "", limit
    room = limit - count_tokens(f"{blocks[0]}\n\n")
    if room < limit * 3 // 4:
        return "", limit
    return blocks[0], room


def _is_prose(block: str) -> bool:
    first = block.lstrip().split("\n", 1)[0]
    return not (FENCE.match(first) or TABLE_ROW.match(first) or LIST_ITEM.match(first))


def _split_block(block: str) -> list[str]:
    """Prose at sentences, a list at items."""
    if LIST_ITEM.match(block.lstrip().split("\n", 1)[0]):
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


@dataclass(frozen=True)
class _Piece:
    text: str
    tokens: int
    prose: bool
    joiner: str = "\n\n"  # what joins it to the piece before
    continues: bool = False  # goes on with the paragraph the piece before began
    # Starts a chunk: a later piece of a cut table or code block, which another
    # piece of it beside it would make one chunk of two frames.
    alone: bool = False


def _pieces(
    blocks: list[str], *, room_after_heading: int, limit: int
) -> Iterator[_Piece]:
    """Each block whole, or cut into pieces that fit a chunk. The block after the
    section's heading fits in the room the heading leaves."""
    for index, block in enumerate(blocks):
        room = room_after_heading if index == 1 else limit
        yield from _block_pieces(block, room=room, limit=limit)


def _block_pieces(
    block: str, *, room: int, limit: int, joiner: str = "\n\n"
) -> Iterator[_Piece]:
    if TABLE_ROW.match(block):
        block = table_compact(block)
    tokens = count_tokens(block)
    prose = _is_prose(block)
    if tokens <= room:
        yield _Piece(block, tokens, prose, joiner)
        return
    first = block.lstrip().split("\n", 1)[0]
    if FENCE.match(first):
        yield from _code_pieces(block, room=room, limit=limit, joiner=joiner)
        return
    if TABLE_ROW.match(first):
        yield from _table_pieces(block, room=room, joiner=joiner)
        return
    within = " " if prose else "\n"  # sentences of a paragraph, items of a list
    for index, part in enumerate(_split_block(block)):
        yield from _part_pieces(
            part,
            prose=prose,
            joiner=within if index else joiner,
            continues=index > 0,
            # Only the first part has to share the chunk with the heading.
            room=limit if index else room,
        )


def _part_pieces(
    part: str, *, prose: bool, joiner: str, continues: bool, room: int
) -> Iterator[_Piece]:
    """A sentence or list item, cut at words (then characters) if too long."""
    tokens = count_tokens(part)
    if tokens <= room:
        yield _Piece(part, tokens, prose, joiner, continues)
        return
    for index, (text, tokens) in enumerate(split_tokens(part, room)):
        yield _Piece(
            text,
            tokens,
            prose,
            " " if index else joiner,
            continues or index > 0,
        )


def _code_pieces(block: str, *, room: int, limit: int, joiner: str) -> Iterator[_Piece]:
    """A fenced block cut at lines into fenced blocks, each opened with the same
    fence and info string and closed. Lines after the closing fence (no blank line
    between) go on as a block of their own."""
    lines = block.split("\n")
    opener = lines[0]
    match = FENCE.match(opener)
    marker = match.group(1) if match else "```"
    # An unclosed block (the page ended inside it) gets a closing fence.
    close = next(
        (i for i in range(1, len(lines)) if _closes(lines[i], marker)), len(lines)
    )
    closer = lines[close] if close < len(lines) else marker
    body = "\n".join(lines[1:close])
    parts = _framed(body, head=f"{opener}\n", tail=f"\n{closer}", room=room)
    for index, (text, tokens) in enumerate(parts):
        yield _Piece(text, tokens, False, "\n\n" if index else joiner, alone=index > 0)
    if close + 1 < len(lines):
        after = "\n".join(lines[close + 1 :])
        yield from _block_pieces(after, room=limit, limit=limit, joiner="\n")


def _closes(line: str, marker: str) -> bool:
    """Whether ``line`` closes a block opened by ``marker``, as CommonMark says."""
    fence = FENCE.match(line)
    found = fence.group(1) if fence else ""
    return found[:1] == marker[0] and len(found) >= len(marker)


def _table_pieces(block: str, *, room: int, joiner: str) -> Iterator[_Piece]:
    """A table cut between rows, each piece under the table's header rows."""
    lines = block.split("\n")
    has_header = len(lines) > 2 and bool(TABLE_DELIMITER.match(lines[1]))
    head = "\n".join(lines[:2]) + "\n" if has_header else ""
    body = "\n".join(lines[2:] if has_header else lines)
    for index, (text, tokens) in enumerate(_framed(body, head=head, room=room)):
        yield _Piece(text, tokens, False, "\n\n" if index else joiner, alone=index > 0)


def table_compact(block: str) -> str:
    """A Markdown table's rows with one space either side of each cell's text, and
    ``---`` (with its alignment colons) for each cell of the delimiter row."""
    rows = []
    for line in block.split("\n"):
        cells = CELL_EDGE.split(line.strip())
        if len(cells) < 3 or cells[0] or cells[-1]:
            rows.append(line)  # not a row of pipes at both ends: left as it is
            continue
        inner = cells[1:-1]
        if TABLE_DELIMITER.match(line):
            inner = [
                f"{m.group(1)}---{m.group(2)}" if (m := DELIMITER_CELL.match(c)) else c
                for c in inner
            ]
        rows.append("| " + " | ".join(cell.strip() for cell in inner) + " |")
    return "\n".join(rows)


def _line_groups(body: str, limit: int) -> list[str]:
    """``body``'s lines in groups of at most about ``limit`` tokens (as counted line
    by line; ``_framed`` checks the framed pieces). A group, once half full, ends
    after the line of the lowest hash it could end at, so that a cut depends on
    the lines around it only. A line too long alone is cut at characters."""
    lines = body.split("\n")
    sizes = [count_tokens(line) + 1 for line in lines]  # with its line end
    groups: list[str] = []
    start = 0
    while start < len(lines):
        if sizes[start] > limit:
            groups += [
                text for text, _ in split_tokens(lines[start], limit, lines=True)
            ]
            start += 1
            continue
        end, size, best = start, 0, None
        while end < len(lines) and size + sizes[end] <= limit:
            size += sizes[end]
            if 2 * size >= limit and (
                best is None or _mark(lines[end]) < _mark(lines[best])
            ):
                best = end
            end += 1
        if end < len(lines) and best is not None:
            end = best + 1
        groups.append("\n".join(lines[start:end]))
        start = end
    return groups


def _mark(line: str) -> int:
    return zlib.crc32(line.encode())


def _framed(
    body: str, *, head: str, tail: str = "", room: int
) -> list[tuple[str, int]]:
    """``body`` cut at lines (``_line_groups``) into pieces that fit ``room`` with
    ``head`` before and ``tail`` after each, with their token counts. A frame that
    would leave less than three quarters of the room (a monstrous info string) is
    dropped: the lines are cut bare."""
    frame = count_tokens(head) + count_tokens(tail) + JOIN_TOKENS
    if frame > room // 4:
        return split_tokens(f"{head}{body}{tail}", room, lines=True)
    limit = room - frame
    while True:
        framed = [f"{head}{text}{tail}" for text in _line_groups(body, limit)]
        counted = [(text, count_tokens(text)) for text in framed]
        excess = max(tokens for _, tokens in counted) - room
        if excess <= 0:
            return counted
        limit -= excess


def _grown(chunk: str, bound: int, piece: _Piece, *, limit: int) -> int | None:
    """An upper bound of the tokens of ``chunk`` with ``piece`` joined to it, or
    None if that passes ``limit``. Counted exactly only near the cap: summing
    the parts' counts misses what the joins add."""
    if not chunk:
        return piece.tokens
    estimate = bound + piece.tokens + JOIN_TOKENS
    if estimate <= limit:
        return estimate
    exact = count_tokens(f"{chunk}{piece.joiner}{piece.text}")
    return exact if exact <= limit else None


def _pack(pieces: Iterable[_Piece], *, sticky: str, limit: int) -> Iterator[str]:
    """Whole pieces, greedily, into chunks of at most ``limit`` tokens. A chunk that
    continues a paragraph starts with the paragraph's sentence before, if that
    sentence is short and fits. The ``sticky`` heading line is never a chunk on its
    own (the pieces after it were cut to leave it room)."""
    chunk = ""
    size = bound = 0  # the sum of the pieces' counts; an upper bound of the chunk's
    last_sentence = ""
    for piece in pieces:
        full = (
            bool(chunk)
            and chunk != sticky
            and (piece.alone or size + piece.tokens > limit)
        )
        grown = None if full else _grown(chunk, bound, piece, limit=limit)
        if grown is None:
            # A full chunk; or, where the tokenizer beats the room kept for it, a
            # heading on its own.
            yield chunk
            chunk = last_sentence if piece.continues and piece.prose else ""
            size = bound = count_tokens(chunk)
            grown = _grown(chunk, bound, piece, limit=limit)
            if grown is None:  # no room for the sentence before
                chunk, size, grown = "", 0, piece.tokens
        chunk = f"{chunk}{piece.joiner}{piece.text}" if chunk else piece.text
        size += piece.tokens
        bound = grown
        tail = SENTENCE_END.split(piece.text)[-1] if piece.prose else ""
        last_sentence = tail if tail and count_tokens(tail) <= OVERLAP_TOKENS else ""
    if chunk:
        yield chunk
