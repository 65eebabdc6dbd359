"""The embedder the settings choose (EMBEDDING_BACKEND, EMBEDDING_MODEL,
EMBEDDING_DIMENSIONS, EMBEDDING_MAX_INPUT_TOKENS), one per process, and the space
it fills, named without loading its model.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import lru_cache

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from retrieval.backends import (
    HashingEmbedder,
    LocalEmbedder,
    OpenAIEmbedder,
    local_window,
)
from retrieval.embedder import Embedder, model_marked, space_name


def configured_model() -> str:
    """EMBEDDING_MODEL, marked as the settings make its vectors other
    (EMBEDDING_INPUT_TYPES, EMBEDDING_LOCAL_INT8)."""
    backend = settings.EMBEDDING_BACKEND
    marked = {
        "openai": settings.EMBEDDING_INPUT_TYPES,
        "local": settings.EMBEDDING_LOCAL_INT8,
    }.get(backend, False)
    return model_marked(backend, settings.EMBEDDING_MODEL, marked)


def configured_space_name() -> str:
    """The space the configured embedder fills, named without loading its model.
    A local model's window is always part of the name: it was not always windowed,
    and vectors of windows must not mix with vectors of cut-off texts."""
    backend = settings.EMBEDDING_BACKEND
    max_input_tokens = settings.EMBEDDING_MAX_INPUT_TOKENS
    if backend == "local":
        max_input_tokens = local_window(settings.EMBEDDING_MODEL, max_input_tokens)
    return space_name(
        backend, configured_model(), settings.EMBEDDING_DIMENSIONS, max_input_tokens
    )


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


# Held while an embedder is looked up or built: threads asking for one being built
# (a web process's loading thread and its first questions) wait for that build
# rather than each making another copy of the model, seconds each.
_building = threading.RLock()


def cached_embedder(
    backend: str, model: str, dimensions: int, max_input_tokens: int = 0
) -> Embedder:
    """One embedder per backend, model, size and window in this process, built
    once however many threads ask for it at the same time."""
    with _building:
        return embedder_built(backend, model, dimensions, max_input_tokens)


@lru_cache(maxsize=4)
def embedder_built(
    backend: str, model: str, dimensions: int, max_input_tokens: int
) -> Embedder:
    """The cache behind ``cached_embedder``: call that one."""
    return build_embedder(backend, model, dimensions, max_input_tokens)


@receiver(setting_changed)
def _forget_embedders(*, setting: str, **kwargs) -> None:
    """Tests (and override_settings) that change the model get a new embedder."""
    if setting.startswith(("EMBEDDING_", "OPENAI_")):
        with _building:
            embedder_built.cache_clear()


def get_embedder() -> Embedder:
    """The embedder configured by the settings (one instance per process)."""
    return cached_embedder(
        settings.EMBEDDING_BACKEND,
        configured_model(),
        settings.EMBEDDING_DIMENSIONS,
        settings.EMBEDDING_MAX_INPUT_TOKENS,
    )
