"""Normalize Markdown so that the same content always hashes the same."""

from __future__ import annotations

import re
import unicodedata

TRAILING_SPACE = re.compile(r"[ \t\u00a0]+$", re.MULTILINE)
MANY_BLANK_LINES = re.compile(r"\n{4,}")


def normalize(text: str) -> str:
    """NFC, LF line ends, no trailing whitespace, at most two blank lines in a row."""
    text = unicodedata.normalize("NFC", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = TRAILING_SPACE.sub("", text)
    text = MANY_BLANK_LINES.sub("\n\n\n", text)
    return text.strip("\n") + "\n" if text.strip() else ""
