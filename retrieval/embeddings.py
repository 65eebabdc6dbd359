"""Embedding backends, chosen by the EMBEDDING_BACKEND setting.

Every backend turns texts into unit vectors of a fixed size. Its ``space`` names
backend, model and size together: vectors from different spaces never mix.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

WORD = re.compile(r"\w+", re.UNICODE)


class Embedder(Protocol):
    space: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def space_name(backend: str, model: str, dimensions: int) -> str:
    return f"{backend}/{model}/{dimensions}"


def _unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0.0:
        # A text with no words still needs a valid direction for cosine distance.
        vector = [1.0] + [0.0] * (len(vector) - 1)
        norm = 1.0
    return [x / norm for x in vector]


class HashingEmbedder:
    """Signed feature hashing of words and word pairs: deterministic, no model files.

    Good enough to test the whole product and to run it with zero set-up; it knows
    nothing of synonyms, so use ``local`` or ``openai`` for real retrieval quality.
    """

    def __init__(self, model: str, dimensions: int) -> None:
        self.model = model
        self.dimensions = dimensions
        self.space = space_name("hashing", model, dimensions)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._embed_one(text) for text in texts]

    def _embed_one(self, text: str) -> list[float]:
        vector = [0.0] * self.dimensions
        words = WORD.findall(text.lower())
        features = words + [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]
        for feature in features:
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            number = int.from_bytes(digest, "little")
            sign = 1.0 if number & 1 else -1.0
            vector[(number >> 1) % self.dimensions] += sign
        return _unit(vector)


BACKENDS = {"hashing": HashingEmbedder}


def build_embedder(backend: str, model: str, dimensions: int) -> Embedder:
    try:
        factory = BACKENDS[backend]
    except KeyError:
        raise ImproperlyConfigured(
            f"EMBEDDING_BACKEND={backend!r} is not one of: {', '.join(BACKENDS)}"
        ) from None
    return factory(model, dimensions)


@lru_cache(maxsize=4)
def _cached(backend: str, model: str, dimensions: int) -> Embedder:
    return build_embedder(backend, model, dimensions)


def get_embedder() -> Embedder:
    """The embedder configured by the settings (one instance per process)."""
    return _cached(
        settings.EMBEDDING_BACKEND,
        settings.EMBEDDING_MODEL,
        settings.EMBEDDING_DIMENSIONS,
    )
