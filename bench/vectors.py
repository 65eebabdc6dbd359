"""HNSW indexes at single (``vector``) and half (``halfvec``) precision, side by side.

    .venv/bin/python -m bench.vectors [--sizes 100000,1000000] [--queries 200]

For each size, a table of that many vectors (the ``hashing`` backend's, of synthetic
texts made of three paragraphs of the PostgreSQL manual, as ``bench.query latency``
makes them) gets the index the product builds for an embedding space, once at each
precision: ``m = 16, ef_construction = 128``, the cosine operators, the build's
memory as the product sets it (``INDEX_BUILD_MEMORY``). Printed for each: build
time, index size, recall@10 against an exact scan and the latency of the nearest-10
query in the database (loopback, one session), at ``hnsw.ef_search`` 200 (the
product's) and 400. The table is kept between runs (``--reuse``); only the indexes
are built again.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from bench.common import django_fresh

DATABASE = "kb_bench_vectors"
DIMENSIONS = 384
TABLE = "bench_vectors"
BATCH = 5_000


def filled(size: int, reuse: bool) -> None:
    """``size`` rows in the table, made again unless ``reuse`` finds them."""
    from django.db import connection
    from pgvector.psycopg import register_vector

    from bench.query import paragraphs_and_headings
    from retrieval.embeddings import get_embedder

    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (id int PRIMARY KEY, "
                       f"v vector({DIMENSIONS}) NOT NULL)")  # fmt: skip
        cursor.execute(f"SELECT count(*) FROM {TABLE}")
        if reuse and cursor.fetchone()[0] == size:
            return
        # Filled without its index: an HNSW index takes each row far more slowly
        # than a build takes them all.
        cursor.execute("DROP INDEX IF EXISTS bench_vectors_hnsw")
        cursor.execute(f"TRUNCATE {TABLE}")
    paragraphs, _ = paragraphs_and_headings()
    rng = random.Random(1)
    embedder = get_embedder()
    register_vector(connection.connection)
    started = time.perf_counter()
    for first in range(0, size, BATCH):
        count = min(BATCH, size - first)
        texts = [" ".join(rng.sample(paragraphs, 3)) for _ in range(count)]
        vectors = embedder.embed(texts)
        with connection.connection.cursor() as cursor:
            with cursor.copy(
                f"COPY {TABLE} (id, v) FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.set_types(["int4", "vector"])
                for n, vector in enumerate(vectors):
                    copy.write_row((first + n, vector))
        print(f"\r{first + count:,} vectors ({time.perf_counter() - started:.0f} s)",
              end="", flush=True)  # fmt: skip
    print()
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {TABLE}")


def questions(count: int) -> list[list[float]]:
    """Vectors of headings of the manual: what the latency benchmark asks."""
    from bench.query import paragraphs_and_headings
    from retrieval.embeddings import get_embedder

    _, headings = paragraphs_and_headings()
    return get_embedder().embed(random.Random(2).sample(headings, count))


def index_built(precision: str) -> tuple[float, int]:
    """Build the index at ``precision``; (seconds, bytes)."""
    from django.db import connection

    from retrieval.spaces import index_build_memory
    from retrieval.sql import INDEX_OPERATORS

    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX IF EXISTS bench_vectors_hnsw")
        started = time.perf_counter()
        with index_build_memory(cursor):
            cursor.execute(
                f"CREATE INDEX bench_vectors_hnsw ON {TABLE} USING hnsw "
                f"((v::{precision}({DIMENSIONS})) {INDEX_OPERATORS[precision]}) "
                "WITH (m = 16, ef_construction = 128)"
            )
        seconds = time.perf_counter() - started
        cursor.execute("SELECT pg_relation_size('bench_vectors_hnsw')")
        return seconds, cursor.fetchone()[0]


def nearest(cursor, precision: str, vector, k: int = 10) -> list[int]:
    cursor.execute(
        f"SELECT id FROM {TABLE} ORDER BY v::{precision}({DIMENSIONS}) <=> "
        f"%s::{precision}({DIMENSIONS}) LIMIT %s",
        [str(vector), k],
    )
    return [row[0] for row in cursor.fetchall()]


def exact_tops(vectors: list[list[float]]) -> list[set[int]]:
    """The true 10 nearest of each question, by a full scan at single precision."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_indexscan = off")
        return [set(nearest(cursor, "vector", v)) for v in vectors]


def scored(precision: str, vectors, truth, ef_search: int) -> tuple[float, list]:
    """(recall@10, sorted latencies in ms) of the index at this breadth."""
    from django.db import connection, transaction

    found, took = 0, []
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL hnsw.ef_search = {int(ef_search)}")
        for vector in vectors[:20]:  # the index's pages into the buffers first
            nearest(cursor, precision, vector)
        for vector, true in zip(vectors, truth, strict=True):
            started = time.perf_counter()
            top = nearest(cursor, precision, vector)
            took.append((time.perf_counter() - started) * 1000)
            found += len(true & set(top))
    return found / (10 * len(vectors)), sorted(took)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000",
                        help="comma-separated numbers of vectors")  # fmt: skip
    parser.add_argument("--queries", type=int, default=200,
                        help="questions timed and scored at each size")  # fmt: skip
    parser.add_argument("--reuse", action="store_true",
                        help="keep the table if it holds the size asked")  # fmt: skip
    args = parser.parse_args()
    django_fresh(keep=True, database=DATABASE, EMBEDDING_BACKEND="hashing")
    from django.conf import settings

    vectors = questions(args.queries)
    memory = settings.INDEX_BUILD_MEMORY or "the server's"
    print(f"build memory {memory}; {args.queries} questions")
    for size in (int(s) for s in args.sizes.split(",")):
        filled(size, args.reuse)
        truth = exact_tops(vectors)
        for precision in ("vector", "halfvec"):
            seconds, size_bytes = index_built(precision)
            print(f"{size:,} vectors, {precision}: built in {seconds:.1f} s, "
                  f"{size_bytes / 2**20:,.1f} MB")  # fmt: skip
            for ef_search in (200, 400):
                recall, took = scored(precision, vectors, truth, ef_search)
                print(
                    f"  ef_search {ef_search}: recall@10 {recall:.3f}, "
                    f"p50 {statistics.median(took):.2f} ms, "
                    f"p95 {took[int(0.95 * len(took)) - 1]:.2f} ms"
                )


if __name__ == "__main__":
    main()
