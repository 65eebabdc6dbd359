"""Near-duplicate pages: MinHash signatures of word shingles, and locality-sensitive
hashing bands that let the database find candidates with one indexed query.

datasketch computes the signature; its ``MinHashLSH`` chooses how many bands of how
many rows make pages about ``THRESHOLD`` alike share a band. The bands are stored as
integers on the page (an array with a GIN index), so candidates are the pages of the
same source sharing any band, and the signature then estimates the similarity.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

import numpy as np
from datasketch import MinHash, MinHashLSH

from kbsite.text import WORD

THRESHOLD = 0.8
PERMUTATIONS = 128
SHINGLE = 5  # words per shingle
SEED = 1  # fixed: signatures stored today must match those computed tomorrow


@lru_cache(maxsize=1)
def bands_layout() -> tuple[int, int]:
    """(bands, rows per band) datasketch picks for THRESHOLD."""
    lsh = MinHashLSH(threshold=THRESHOLD, num_perm=PERMUTATIONS)
    return lsh.b, lsh.r


def signature(text: str) -> bytes:
    """The MinHash signature of the text's word shingles, as bytes."""
    words = WORD.findall(text.lower())
    size = min(SHINGLE, len(words)) or 1
    shingles = {
        " ".join(words[i : i + size]).encode()
        for i in range(max(len(words) - size + 1, 1))
    }
    minhash = MinHash(num_perm=PERMUTATIONS, seed=SEED)
    minhash.update_batch(list(shingles))
    return minhash.hashvalues.astype("<u8").tobytes()


def bands(sig: bytes) -> list[int]:
    """One signed 64-bit key per band; pages sharing a key are candidates."""
    values = np.frombuffer(sig, dtype="<u8")
    count, rows = bands_layout()
    keys = []
    for band in range(count):
        chunk = values[band * rows : (band + 1) * rows].tobytes()
        digest = hashlib.blake2b(bytes([band]) + chunk, digest_size=8).digest()
        keys.append(int.from_bytes(digest, "little", signed=True))
    return keys


def similarity(a: bytes, b: bytes) -> float:
    """Estimated Jaccard similarity of the shingle sets behind two signatures."""
    left, right = np.frombuffer(a, dtype="<u8"), np.frombuffer(b, dtype="<u8")
    if len(left) != len(right) or not len(left):
        return 0.0
    return float(np.count_nonzero(left == right)) / len(left)
