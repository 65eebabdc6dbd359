from __future__ import annotations

from ingest.reading.normalize import normalize
from kbsite.text import sha256_hex as content_hash


def test_it_composes_unicode_and_unifies_line_ends():
    decomposed = "Cafe\u0301\r\nnext\rline"

    assert normalize(decomposed) == "Café\nnext\nline\n"


def test_it_strips_trailing_whitespace_and_keeps_at_most_two_blank_lines():
    assert normalize("a  \t\n\n\n\n\nb\u00a0\n") == "a\n\n\nb\n"


def test_it_keeps_leading_indentation_of_code():
    assert normalize("```\n    indented\n```") == "```\n    indented\n```\n"


def test_blank_input_normalizes_to_nothing():
    assert normalize(" \n\t\n") == ""


def test_equal_content_hashes_equal_whatever_its_line_ends():
    assert content_hash(normalize("a\r\nb")) == content_hash(normalize("a\nb\n"))
    assert content_hash("a") != content_hash("b")
    assert len(content_hash("a")) == 64
