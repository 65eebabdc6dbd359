from __future__ import annotations

import importlib
import math
import sys
import threading
import time
from collections.abc import Iterator

import openai
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from kbsite.text import count_tokens
from retrieval.backends import HashingEmbedder, OpenAIEmbedder
from retrieval.embedder import space_parts
from retrieval.embeddings import build_embedder
from retrieval.windows import text_windows
from tests.conftest import local_model_require
from tests.fakes.openai_api import FakeOpenAI


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_hashing_vectors_are_deterministic_unit_vectors():
    embedder = HashingEmbedder("hashing-v2", 64)
    first, again, other = embedder.embed(
        ["Install the package", "Install the package", "x"]
    )

    assert first == again
    assert len(first) == 64
    assert math.isclose(math.sqrt(sum(v * v for v in first)), 1.0, rel_tol=1e-9)
    assert first != other
    assert embedder.space == "hashing/hashing-v2/64"


def test_hashing_an_empty_text_still_gives_a_unit_vector():
    (vector,) = HashingEmbedder("hashing-v2", 8).embed([""])

    assert math.isclose(sum(v * v for v in vector), 1.0)


def test_shared_words_make_hashing_vectors_closer():
    embedder = HashingEmbedder("hashing-v2", 384)
    query, near, far = embedder.embed(
        ["configure the database url", "set the database url to configure it", "cats"]
    )

    assert cosine(query, near) > cosine(query, far)


@pytest.fixture
def fake_openai():
    with (
        FakeOpenAI() as fake,
        override_settings(
            OPENAI_API_KEY="sk-test",
            OPENAI_BASE_URL=fake.base_url,
            OPENAI_MAX_RETRIES=2,
        ),
    ):
        yield fake


def test_the_openai_backend_speaks_to_any_compatible_endpoint(fake_openai):
    embedder = OpenAIEmbedder("text-embedding-3-small", 256)

    vectors = embedder.embed(["alpha", "beta gamma"])

    assert [len(v) for v in vectors] == [256, 256]
    assert vectors[0] != vectors[1]
    assert (fake_openai.requests, fake_openai.inputs) == (1, 2)
    assert embedder.space == "openai/text-embedding-3-small/256"


def test_the_openai_client_retries_rate_limits_and_server_errors(fake_openai):
    fake_openai.fail_next(1, status=429)
    fake_openai.fail_next(1, status=503)

    vectors = OpenAIEmbedder("text-embedding-3-small", 32).embed(["alpha"])

    assert len(vectors) == 1
    assert fake_openai.requests == 1, "two failures, then one good answer"


def test_persistent_provider_errors_are_raised(fake_openai):
    fake_openai.fail_next(10, status=500)

    with pytest.raises(openai.InternalServerError):
        OpenAIEmbedder("text-embedding-3-small", 32).embed(["alpha"])


@pytest.mark.usefixtures("fake_openai")
def test_a_model_returning_the_wrong_size_is_an_error():
    # Only text-embedding-3 models are asked for a size; this one answers with 1536.
    with pytest.raises(ValueError, match="EMBEDDING_DIMENSIONS is 32"):
        OpenAIEmbedder("some-compatible-model", 32).embed(["alpha"])


@pytest.mark.parametrize(
    ("required", "outcome"),
    [("", pytest.skip.Exception), ("1", pytest.fail.Exception)],
)
def test_a_local_model_test_without_the_model_fails_when_ci_requires_it(
    monkeypatch, required, outcome
):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # not installed
    monkeypatch.setenv("KB_REQUIRE_LOCAL_MODEL", required)

    # BaseException: a skip must not end this test as skipped, it is the answer.
    with pytest.raises(BaseException) as raised:
        local_model_require()

    assert raised.type is outcome


@pytest.mark.slow
def test_the_local_backend_loads_its_model_offline_and_understands_meaning():
    local_model_require()
    embedder = build_embedder("local", "all-MiniLM-L6-v2", 384)

    query, near, far = embedder.embed(
        [
            "How do I install the library?",
            "Installation guide for the package",
            "Weather",
        ]
    )

    assert len(query) == 384
    assert cosine(query, near) > cosine(query, far) + 0.2


@pytest.mark.slow
def test_the_local_backends_vectors_do_not_depend_on_the_texts_read_with_them():
    local_model_require()
    embedder = build_embedder("local", "all-MiniLM-L6-v2", 384)
    # Lengths far apart, more than one batch: each is padded with others.
    texts = [
        f"Word {n}. " + "A longer sentence about indexes. " * (n * 7) for n in range(9)
    ]

    together = embedder.embed(texts)
    alone = [embedder.embed([text])[0] for text in texts]

    for mixed, own in zip(together, alone, strict=True):
        assert max(abs(a - b) for a, b in zip(mixed, own, strict=True)) < 1e-5


@pytest.mark.slow
@pytest.mark.django_db  # a worker's start resumes its crawls too
@pytest.mark.parametrize(
    ("in_a_worker", "threads"), [(True, 1), (True, 3), (False, None)]
)
def test_a_job_worker_computes_with_its_share_of_the_cores(
    in_a_worker, threads, monkeypatch
):
    """A worker process django-q2 starts takes EMBEDDING_THREADS for the local
    model, at once or when the model loads; a process that has the machine to
    itself (a command, the web server) keeps torch's thread per core."""
    local_model_require()
    import torch
    from django_q.signals import post_spawn

    from retrieval import backends

    monkeypatch.setattr(backends, "_threads", None)
    own = torch.get_num_threads()
    try:
        with override_settings(EMBEDDING_THREADS=threads or 1):
            if in_a_worker:
                post_spawn.send(sender="django_q", proc_name="Process-1")
            torch.set_num_threads(own)  # as a process starts, the model unloaded
            build_embedder("local", "all-MiniLM-L6-v2", 384)
        assert torch.get_num_threads() == (threads or own)
    finally:
        torch.set_num_threads(own)


@pytest.fixture
def worker_threads_restored(monkeypatch) -> Iterator[None]:
    """A worker's start limits the local model's threads: undone after the test."""
    from retrieval import backends

    monkeypatch.setattr(backends, "_threads", None)
    torch = sys.modules.get("torch")
    own = torch.get_num_threads() if torch else None
    yield
    if torch is not None:
        torch.set_num_threads(own)


def test_threads_asking_for_an_embedder_at_once_build_it_once(monkeypatch):
    """A web process's loading thread and its first questions: one build (seconds,
    and a copy of the model each), the others wait for it."""
    from retrieval import embeddings

    built = []

    def slow(backend, model, dimensions, max_input_tokens=0):
        built.append(model)
        time.sleep(0.2)
        return object()

    monkeypatch.setattr(embeddings, "build_embedder", slow)
    embeddings.embedder_built.cache_clear()
    got = []

    def ask() -> None:
        got.append(embeddings.cached_embedder("hashing", "slow", 64))

    try:
        threads = [threading.Thread(target=ask) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10)
    finally:
        embeddings.embedder_built.cache_clear()

    assert built == ["slow"]
    assert len(got) == 4
    assert len({id(embedder) for embedder in got}) == 1


def worker_start() -> None:
    from django_q.signals import post_spawn

    post_spawn.send(sender="django_q", proc_name="Process-1")


def web_process_start() -> None:
    from kbsite.webserver import embedder_load_start

    embedder_load_start().join(timeout=60)


# Who builds an embedder before its first use (the local model's libraries take
# seconds to import), the function a failure is raised from, and what it logs.
STARTS = {
    "a job worker": (
        worker_start,
        ("retrieval.embeddings", "get_embedder"),
        ("retrieval.apps", "could not build the embedder as the worker started"),
    ),
    "a web server process": (
        web_process_start,
        ("retrieval.spaces", "serving_embedder"),
        (
            "retrieval.spaces",
            "could not load the serving embedder before a first question",
        ),
    ),
}


# A worker's start resumes its crawls too; a web process loads on a thread with a
# connection of its own.
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("worker_threads_restored")
@pytest.mark.parametrize("who", STARTS)
def test_a_process_builds_its_embedder_before_its_first_use(who):
    from retrieval.embeddings import embedder_built
    from retrieval.spaces import serving_embedder

    start, _, _ = STARTS[who]
    embedder_built.cache_clear()

    start()

    assert embedder_built.cache_info().currsize == 1
    hits = embedder_built.cache_info().hits
    serving_embedder()  # as a job or a question does
    assert embedder_built.cache_info().hits == hits + 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("worker_threads_restored")
@pytest.mark.parametrize("who", STARTS)
def test_a_process_that_cannot_build_its_embedder_starts_and_says_why(
    who, monkeypatch, caplog
):
    start, (module, name), (logger, message) = STARTS[who]

    def missing():
        raise ImproperlyConfigured(
            "EMBEDDING_BACKEND='local' needs sentence-transformers"
        )

    monkeypatch.setattr(importlib.import_module(module), name, missing)

    start()  # no error escapes

    (record,) = [r for r in caplog.records if r.name == logger]
    assert record.getMessage() == message
    assert "needs sentence-transformers" in str(record.exc_info[1])


@pytest.mark.slow
def test_the_local_backend_draws_no_progress_bar_when_logging_at_info(capfd):
    # The web server logs at INFO: a bar there would be a line per question.
    local_model_require()
    import logging

    embedder = build_embedder("local", "all-MiniLM-L6-v2", 384)
    logger = logging.getLogger("sentence_transformers")
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        capfd.readouterr()
        embedder.embed(["one sentence", "and another"])
    finally:
        logger.setLevel(level)

    assert capfd.readouterr().err == ""


@pytest.mark.slow
def test_the_local_backend_refuses_a_wrong_dimension():
    local_model_require()

    with pytest.raises(ImproperlyConfigured, match="EMBEDDING_DIMENSIONS=512"):
        build_embedder("local", "all-MiniLM-L6-v2", 512)


@pytest.mark.slow
def test_the_local_backend_refuses_an_unknown_model_name():
    local_model_require()

    with pytest.raises(ImproperlyConfigured, match="neither all-MiniLM-L6-v2"):
        build_embedder("local", "bert-on-the-hub", 384)


def test_batches_respect_the_input_and_token_limits(monkeypatch):
    from retrieval import indexing

    monkeypatch.setattr(indexing, "EMBED_BATCH", 3)
    monkeypatch.setattr(indexing, "EMBED_BATCH_TOKENS", 10)
    texts = {f"h{i}": "word " * (4 if i != 5 else 12) for i in range(7)}

    embedder = HashingEmbedder("hashing-v2", 8)

    batches = list(indexing._batches(sorted(texts), texts, embedder))

    assert [h for batch in batches for h, _, _ in batch] == sorted(texts)
    for batch in batches:
        tokens = sum(count_tokens(w) for _, windows, _ in batch for w in windows)
        assert all(
            counts == [count_tokens(w) for w in windows] for _, windows, counts in batch
        ), "each window's tokens counted once, kept for its row"
        assert len(batch) <= 3
        assert tokens <= 10 or len(batch) == 1, "an oversized text goes alone"


def test_the_windows_of_one_text_share_a_request(monkeypatch):
    from retrieval import indexing

    monkeypatch.setattr(indexing, "EMBED_BATCH", 4)
    embedder = HashingEmbedder("hashing-v2", 8, max_input_tokens=20)
    long = "Title\n\n" + " ".join(f"w{n}" for n in range(60))
    texts = {"a": "short", "b": long, "c": "short too"}

    batches = list(indexing._batches(sorted(texts), texts, embedder))

    windows = {h: len(w) for batch in batches for h, w, _ in batch}
    assert windows["b"] > 2
    assert [[h for h, _, _ in batch] for batch in batches] == [["a"], ["b"], ["c"]]


def test_a_text_the_model_reads_whole_is_one_window():
    embedder = HashingEmbedder("hashing-v2", 64, max_input_tokens=50)

    assert text_windows(embedder, "Title › Section\n\nShort text.") == [
        "Title › Section\n\nShort text."
    ]


def test_a_long_text_gets_overlapping_windows_each_with_its_title_line():
    body = " ".join(f"word{n}" for n in range(400))
    embedder = HashingEmbedder("hashing-v2", 64, max_input_tokens=100)

    windows = text_windows(embedder, f"Guide › Install\n\n{body}")

    assert len(windows) > 3
    assert all(w.startswith("Guide › Install\n\n") for w in windows)
    assert all(count_tokens(w) <= 100 for w in windows)
    seen = " ".join(w.removeprefix("Guide › Install\n\n") for w in windows).split()
    assert set(seen) == set(body.split()), "every word is in some window"
    first = windows[0].split()[-1]
    assert first in windows[1].split()[3:], "windows overlap"
    bodies = [w.removeprefix("Guide › Install\n\n") for w in windows]
    assert all(f" {b} " in f" {body} " for b in bodies), "cut between words"


def test_a_chosen_window_size_names_its_own_space():
    assert HashingEmbedder("hashing-v2", 64).space == "hashing/hashing-v2/64"
    assert HashingEmbedder("hashing-v2", 64, 128).space == "hashing/hashing-v2/64/w128"
    assert space_parts("openai/org/model/64/w128") == ("openai", "org/model", 64, 128)
    assert space_parts("local/all-MiniLM-L6-v2/384") == (
        "local",
        "all-MiniLM-L6-v2",
        384,
        0,
    )
