from __future__ import annotations

import socket

import pytest
import tiktoken.registry

from ingest.reading.boilerplate import line_shape, shape_hash, strip
from kbsite import text as tokens
from kbsite.text import count_tokens, fenced, sentences, split_tokens
from retrieval.chunking import chunk_markdown


@pytest.fixture
def no_network(monkeypatch, tmp_path):
    """Any attempt to open a connection fails, and tiktoken's cache is empty."""

    def refuse(*args, **kwargs):
        raise OSError("network access is disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    tokens.encoding.cache_clear()
    yield tmp_path
    tokens.encoding.cache_clear()


def test_the_network_guard_really_blocks_tiktoken_downloads(no_network):
    with pytest.raises(OSError):
        tiktoken.get_encoding("cl100k_base")


def test_tiktoken_encodes_with_networking_disabled(no_network):
    encoding = tokens.encoding()

    assert tokens.count_tokens("hello world") == 2
    assert encoding.decode(encoding.encode_ordinary("héllo wörld")) == "héllo wörld"


def test_special_token_text_in_scraped_pages_is_counted_as_plain_text():
    assert tokens.count_tokens("a <|endoftext|> b") > 3


def test_a_fence_closes_only_on_the_same_character_at_least_as_long():
    lines = ["````", "```", "still code", "````", "prose", "~~~", "```", "~~~"]

    flags = [code for _, code in fenced(lines)]

    assert flags == [True, True, True, True, False, True, True, True]


def test_stripping_and_chunking_agree_on_what_is_code():
    markdown = (
        "# Page\n\nIntro paragraph long enough to count.\n\n````\n```\n"
        "## Not a heading\nboilerplate line inside code\n````\n\nAfter the code."
    )

    chunks = chunk_markdown(markdown, title="Page")
    kept = strip(
        markdown,
        common={shape_hash(line_shape("boilerplate line inside code"))},
        patterns=[],
    )

    assert [c.heading for c in chunks] == ["Page"]
    assert "boilerplate line inside code" in kept


def test_sentences_split_where_a_new_sentence_starts():
    assert sentences("It works. Then e.g. this. 3 more") == [
        "It works.",
        "Then e.g. this.",
        "3 more",
    ]


def test_split_tokens_cuts_lines_into_pieces_under_the_limit_losing_nothing():
    lines = [f"line {i}: ünïcödé 東京 text" for i in range(3000)]

    pieces = split_tokens("\n".join(lines), 100, lines=True)

    assert all(count_tokens(text) == tokens <= 100 for text, tokens in pieces)
    assert "\n".join(text for text, _ in pieces).split("\n") == lines
    sizes = [tokens for _, tokens in pieces[:-1]]
    assert min(sizes) > 50, "about equal shares, no sliver"


def test_split_tokens_cuts_a_word_longer_than_the_limit_between_characters():
    text = "start " + "東京" * 5000 + "é" * 5000 + " end"

    pieces = [piece for piece, _ in split_tokens(text, 100)]

    assert all(count_tokens(piece) <= 100 for piece in pieces)
    assert "".join(pieces).replace(" ", "") == text.replace(" ", ""), "none broken"
