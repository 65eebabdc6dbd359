"""Texts longer than a model reads, as windows it reads whole.

A model reads a bounded number of its own tokens and silently ignores the rest, so
a text longer than that is embedded as several overlapping windows, each starting
with the text's first line (title and heading path): every part of a chunk is seen
by one of its vectors.
"""

from __future__ import annotations

from kbsite.text import encoding
from retrieval.embedder import Embedder

# Share of a window repeated at the start of the next one, so that a passage cut
# by a window boundary is still whole in one of them.
WINDOW_OVERLAP = 0.125


def tiktoken_starts(text: str) -> list[int]:
    """Where each cl100k token of ``text`` starts."""
    _, starts = encoding().decode_with_offsets(encoding().encode_ordinary(text))
    return starts


def text_windows(embedder: Embedder, text: str) -> list[str]:
    """The inputs that stand for ``text``: the text itself when the model reads it
    whole, else overlapping windows of the body, each after the text's first
    paragraph when that is short (chunks start with title and heading path)."""
    limit = embedder.max_input_tokens
    if not limit:
        return [text]
    starts = embedder.token_starts(text)
    if len(starts) <= limit:
        return [text]
    head, _, body = text.partition("\n\n")
    if not body or len(embedder.token_starts(head)) > limit // 4:
        head, body = "", text
    budget = limit - (len(embedder.token_starts(head)) + 2 if head else 0)
    return [
        f"{head}\n\n{part}" if head else part
        for part in _windows(body, embedder.token_starts(body), budget)
    ]


def _windows(body: str, starts: list[int], size: int) -> list[str]:
    """Pieces of at most ``size`` tokens, overlapping, cut at whitespace."""
    step = max(1, size - int(size * WINDOW_OVERLAP))
    pieces: list[str] = []
    for first in range(0, len(starts), step):
        begin = starts[first]
        end = starts[first + size] if first + size < len(starts) else len(body)
        if end < len(body):
            space = max(body.rfind(" ", begin, end), body.rfind("\n", begin, end))
            end = space if space > begin + (end - begin) // 2 else end
        if begin and not body[begin - 1].isspace():
            space = min(
                (i for i in (body.find(" ", begin, end), body.find("\n", begin, end))
                 if i != -1),
                default=begin,
            )  # fmt: skip
            begin = space if space - begin < (end - begin) // 4 else begin
        pieces.append(body[begin:end].strip())
        if first + size >= len(starts):
            break
    return [piece for piece in pieces if piece]
