from __future__ import annotations

import socket

import pytest
import tiktoken.registry

from ingest import tokens


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
