"""The local model in the worker against the same model in one plain call.

Delivers the first pages of the PostgreSQL manual to a real ``qcluster`` (the
product's path: webhook service, delivery jobs, embedding in the workers) with the
local model, and measures, in one run on the same machine:

- the worker: chunk texts (windows) embedded and their tokens, from the embedding
  usage the product records, over the time from the first delivery to the last job
  done; this is end to end, reading and storing included;
- the product's embedder in this process, with a thread per core: the same windows,
  in the batches a delivery sends them (``retrieval.indexing``);
- one plain ``SentenceTransformer.encode`` call over the same windows (batch 32,
  the library's default; normalized), the model's own speed here, with a thread
  per core (this process is no job worker, and the cluster has stopped); and the
  same call in the product's batches (``retrieval.backends.LOCAL_BATCH``);
- the product's embedder with the model's weights in 8 bits
  (EMBEDDING_LOCAL_INT8), in the same batches.

The windows are those the index embedded: each page's chunk texts as ingest makes
them, once each, cut into the windows the model reads. Prints texts/s and tokens/s
of each, and the ratios to the plain call. ``--embedding-threads`` gives the
workers another ``EMBEDDING_THREADS`` than the product's default, to compare.

    .venv/bin/python -m bench.embedding [--limit 100] [--workers 2]
                                        [--embedding-threads N]
"""

from __future__ import annotations

import argparse
import time

from bench.common import (
    cluster_ready,
    deliver_all,
    django_fresh,
    start_cluster,
    stop_cluster,
)
from bench.corpus import BASE_URL, pages
from retrieval.backends import LOCAL_BATCH


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=100, help="pages delivered")
    parser.add_argument("--workers", type=int, default=2, help="cluster workers")
    parser.add_argument(
        "--embedding-threads",
        type=int,
        default=0,
        help="EMBEDDING_THREADS of the cluster's processes (default: the product's)",
    )
    args = parser.parse_args()

    corpus = [(url, html, 200) for url, html in pages()[: args.limit]]
    django_fresh(EMBEDDING_BACKEND="local")
    import torch

    from sources.models import Source

    Source.objects.create(name="PostgreSQL 15 manual", seed_urls=BASE_URL)
    threads = args.embedding_threads
    chosen = {"EMBEDDING_THREADS": str(threads)} if threads else {}
    cluster = start_cluster(workers=args.workers, **chosen)
    try:
        cluster_ready(cluster.pid, args.workers)
        worker = deliver_all("first", corpus)
    finally:
        stop_cluster(cluster)
    from retrieval.spaces import serving_embedder

    embedder = serving_embedder()
    windows, batches, tokens = _windows_embedded(embedder)
    worker_texts = _texts_embedded()
    print(
        f"corpus: {len(corpus)} pages, {len(windows):,} windows of chunk texts, "
        f"{tokens:,} tokens ({worker_texts:,} and {worker.tokens:,} embedded by the "
        "workers); "
        f"{args.workers} workers computing with {threads or 'the default'} "
        f"threads each; here, alone, {torch.get_num_threads()}"
    )
    rates = {"worker, end to end": (worker_texts, worker.tokens, worker.seconds)}
    rates["product embedder, one process"] = _timed_batches(embedder, batches, tokens)
    rates["plain encode, one call"] = _timed_plain(embedder, windows, tokens)
    rates[f"plain encode, batches of {LOCAL_BATCH}"] = _timed_plain(
        embedder, windows, tokens, batch=LOCAL_BATCH
    )
    rates["product embedder, int8"] = _timed_batches(
        _int8_twin(embedder), batches, tokens
    )
    plain_texts_per_second = _per_second(rates["plain encode, one call"])[0]
    for name, measured in rates.items():
        texts_s, tokens_s = _per_second(measured)
        print(
            f"{name:>30}: {measured[0]:,} texts in {measured[2]:.1f} s = "
            f"{texts_s:.1f} texts/s, {tokens_s:,.0f} tokens/s; "
            f"{texts_s / plain_texts_per_second:.2f} of the plain call"
        )


def _windows_embedded(embedder) -> tuple[list[str], list[list[str]], int]:
    """The windows the index embedded for the pages now live, each text once, as a
    flat list and in the batches ``embeddings_ensure`` sends, and their tokens."""
    from retrieval.chunking import chunk_markdown, embed_texts
    from retrieval.indexing import _batches
    from sources.models import Page

    texts: dict[str, str] = {}
    for page in Page.objects.filter(status=Page.Status.LIVE).order_by("pk"):
        texts.update(embed_texts(chunk_markdown(page.markdown, title=page.title)))
    sent = list(_batches(sorted(texts), texts, embedder))
    batches = [
        [window for _, windows, _ in batch for window in windows] for batch in sent
    ]
    tokens = sum(sum(counts) for batch in sent for _, _, counts in batch)
    return [window for batch in batches for window in batch], batches, tokens


def _texts_embedded() -> int:
    from django.db.models import Sum

    from retrieval.models import EmbeddingUsage

    return EmbeddingUsage.objects.aggregate(n=Sum("inputs"))["n"] or 0


def _timed_batches(
    embedder, batches: list[list[str]], tokens: int
) -> tuple[int, int, float]:
    embedder.embed(["warm the model up"])
    started = time.perf_counter()
    for batch in batches:
        embedder.embed(batch)
    return sum(len(b) for b in batches), tokens, time.perf_counter() - started


def _timed_plain(
    embedder, windows: list[str], tokens: int, batch: int = 32
) -> tuple[int, int, float]:
    """One ``encode`` call of the product's own sentence-transformers model, in
    batches of ``batch`` (32: the library's default)."""
    model = embedder.encoder
    model.encode(["warm the model up"])
    started = time.perf_counter()
    model.encode(
        windows, batch_size=batch, normalize_embeddings=True, show_progress_bar=False
    )
    return len(windows), tokens, time.perf_counter() - started


def _int8_twin(embedder):
    """The same local model with its linear layers' weights in 8 bits
    (EMBEDDING_LOCAL_INT8)."""
    from retrieval.backends import LocalEmbedder
    from retrieval.embedder import model_marked

    return LocalEmbedder(
        model_marked("local", embedder.model, True),
        embedder.dimensions,
        embedder.max_input_tokens,
    )


def _per_second(measured: tuple[int, int, float]) -> tuple[float, float]:
    texts, tokens, seconds = measured
    return texts / seconds, tokens / seconds


if __name__ == "__main__":
    main()
