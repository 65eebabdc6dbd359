"""A space's name says everything that makes its vectors what they are.

The settings name it without loading the model (the space registered after
``migrate``), the embedder the settings build fills it, and an embedder built
from the name alone is the same embedder: a space keeps serving, through its own
embedder, while the settings already name the next one (``reembed``).
"""

from __future__ import annotations

import pytest
from django.test import override_settings

from retrieval.embedder import space_parts
from retrieval.embeddings import build_embedder, configured_space_name, get_embedder
from retrieval.models import EmbeddingSpace
from retrieval.spaces import configured_space_register

OPENAI = {"EMBEDDING_BACKEND": "openai", "OPENAI_API_KEY": "sk-test"}
LOCAL = {"EMBEDDING_BACKEND": "local", "EMBEDDING_MODEL": "all-MiniLM-L6-v2"}
# Every setting that could mark a name, off unless a case turns it on.
UNMARKED = {
    "EMBEDDING_INPUT_TYPES": False,
    "EMBEDDING_LOCAL_INT8": False,
    "EMBEDDING_MAX_INPUT_TOKENS": 0,
}

CASES = [
    pytest.param(
        {"EMBEDDING_BACKEND": "hashing", "EMBEDDING_MODEL": "hashing-v2",
         "EMBEDDING_DIMENSIONS": 64},
        "hashing/hashing-v2/64", {}, id="hashing",
    ),
    pytest.param(
        {**OPENAI, "EMBEDDING_MODEL": "text-embedding-3-small",
         "EMBEDDING_DIMENSIONS": 64},
        "openai/text-embedding-3-small/64", {"input_types": False}, id="openai",
    ),
    pytest.param(
        {**OPENAI, "EMBEDDING_MODEL": "e5-small", "EMBEDDING_DIMENSIONS": 64,
         "EMBEDDING_INPUT_TYPES": True},
        "openai/e5-small+input_type/64", {"input_types": True, "model": "e5-small"},
        id="openai, questions and passages sent as such",
    ),
    pytest.param(
        {**OPENAI, "EMBEDDING_MODEL": "e5-small", "EMBEDDING_DIMENSIONS": 64,
         "EMBEDDING_INPUT_TYPES": True, "EMBEDDING_MAX_INPUT_TOKENS": 400},
        "openai/e5-small+input_type/64/w400", {"input_types": True},
        id="openai, typed, with a window",
    ),
    pytest.param(
        {**OPENAI, "EMBEDDING_MODEL": "e5-small", "EMBEDDING_DIMENSIONS": 64,
         "EMBEDDING_LOCAL_INT8": True},
        "openai/e5-small/64", {"input_types": False},
        id="openai, the local model's setting marks nothing",
    ),
    pytest.param(
        {**LOCAL, "EMBEDDING_DIMENSIONS": 384},
        "local/all-MiniLM-L6-v2/384/w254", {"int8": False},
        id="local", marks=pytest.mark.slow,
    ),
    pytest.param(
        {**LOCAL, "EMBEDDING_DIMENSIONS": 384, "EMBEDDING_LOCAL_INT8": True},
        "local/all-MiniLM-L6-v2+int8/384/w254",
        {"int8": True, "model": "all-MiniLM-L6-v2"},
        id="local, weights in 8 bits", marks=pytest.mark.slow,
    ),
    pytest.param(
        {**LOCAL, "EMBEDDING_DIMENSIONS": 384, "EMBEDDING_LOCAL_INT8": True,
         "EMBEDDING_INPUT_TYPES": True, "EMBEDDING_MAX_INPUT_TOKENS": 126},
        "local/all-MiniLM-L6-v2+int8/384/w126", {"int8": True},
        id="local, int8, a window, and the openai backend's setting",
        marks=pytest.mark.slow,
    ),
]  # fmt: skip


def _int8(embedder) -> bool:
    import torch

    return any(
        isinstance(module, torch.ao.nn.quantized.dynamic.Linear)
        for module in embedder.encoder.modules()
    )


def _traits(embedder, wanted: dict) -> dict:
    found = {}
    for trait in wanted:
        if trait == "int8":
            found[trait] = _int8(embedder)
        else:
            found[trait] = getattr(embedder, trait)
    return found


@pytest.mark.django_db
@pytest.mark.parametrize(("chosen", "name", "traits"), CASES)
def test_the_settings_the_embedder_and_the_name_agree(chosen, name, traits):
    with override_settings(**{**UNMARKED, **chosen}):
        assert configured_space_name() == name
        configured = get_embedder()
        assert configured.space == name
        assert _traits(configured, traits) == traits

        backend, model, dimensions, window = space_parts(name)
        rebuilt = build_embedder(backend, model, dimensions, window)
        assert rebuilt.space == name
        assert _traits(rebuilt, traits) == traits

        configured_space_register()
        assert EmbeddingSpace.objects.filter(name=name).exists()


@pytest.mark.slow
def test_the_8_bit_model_embeds_near_the_full_one_but_not_the_same():
    texts = [
        "Use pg_dump to back up one database into a script file.",
        "How do I restore a backup made with pg_dump?",
    ]
    with override_settings(**{**UNMARKED, **LOCAL, "EMBEDDING_DIMENSIONS": 384}):
        full = get_embedder().embed(texts)
    with override_settings(
        **{
            **UNMARKED,
            **LOCAL,
            "EMBEDDING_DIMENSIONS": 384,
            "EMBEDDING_LOCAL_INT8": True,
        }
    ):
        small = get_embedder().embed(texts)
    for a, b in zip(full, small, strict=True):
        cosine = sum(x * y for x, y in zip(a, b, strict=True))
        assert 0.8 < cosine < 0.9999
