"""HNSW build time, graph memory and sizes for random vectors, at a few sizes.

    .venv/bin/python -u -m bench.hnsw_build [--dimensions 384] [--sizes 100000,300000]
        [--memory 1GB] [--keep]

In a database of its own (``kb_bench_hnsw`` on the embedded server, or the server
``DATABASE_URL`` names), a table of vectors stored as the product stores them
(``vector``, single precision) is filled with random vectors (components uniform
in [-0.5, 0.5), made by the server) up to each size in turn, and gets the index
the product builds for an embedding space: half precision, ``m = 16``,
``ef_construction = 128``, cosine operators (``retrieval.sql``). Printed for each
size: the table's size (rows and TOAST, no index), the index's build time in
``--memory`` of ``maintenance_work_mem``, and its size, each per vector too. Once
per run, at the first size, the graph's memory per vector: a build in
PostgreSQL's default 64MB is stopped when pgvector says the graph no longer fits,
after how many vectors (a build runs at full speed in that many bytes a vector).

Random vectors have no clusters, unlike embeddings of text, so a build over them is
the slow case. The machine's load average is printed at the start and after
each build.
The table is dropped at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import os
import re
import threading
import time

from bench.common import django_fresh

DATABASE = "kb_bench_hnsw"
TABLE = "bench_hnsw"
INDEX = "bench_hnsw_index"
BATCH = 20_000
DEFAULT_MEMORY = "64MB"
OVERFLOW = re.compile(r"no longer fits into maintenance_work_mem after (\d+) tuples")


def load() -> str:
    return "load average " + " ".join(f"{n:.2f}" for n in os.getloadavg())


def execute(statement: str, params: list | None = None) -> list[tuple]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def filled(size: int, dimensions: int) -> float:
    """Rows up to ``size`` (those there are kept); seconds it took."""
    execute(f"CREATE TABLE IF NOT EXISTS {TABLE} "
            "(id int PRIMARY KEY, v vector NOT NULL)")  # fmt: skip
    # Without the index: it would take each new row far more slowly than a build.
    execute(f"DROP INDEX IF EXISTS {INDEX}")
    ((have,),) = execute(f"SELECT count(*) FROM {TABLE}")
    started = time.perf_counter()
    for first in range(have + 1, size + 1, BATCH):
        last = min(first + BATCH - 1, size)
        # The subquery names the row's id, so it runs once per row.
        execute(
            f"INSERT INTO {TABLE} SELECT i, (SELECT array_agg(random() - 0.5) "
            "FROM generate_series(1, %s) WHERE i > 0)::vector "
            "FROM generate_series(%s, %s) AS i",
            [dimensions, first, last],
        )
        print(f"\r  {last:,} vectors ({time.perf_counter() - started:.0f} s)",
              end="", flush=True)  # fmt: skip
    print()
    execute(f"VACUUM ANALYZE {TABLE}")
    return time.perf_counter() - started


def index_statement(dimensions: int) -> str:
    from retrieval.sql import INDEX_OPERATORS, INDEX_PRECISION

    return (
        f"CREATE INDEX {INDEX} ON {TABLE} USING hnsw "
        f"((v::{INDEX_PRECISION}({dimensions})) {INDEX_OPERATORS[INDEX_PRECISION]}) "
        "WITH (m = 16, ef_construction = 128)"
    )


def built(dimensions: int, memory: str) -> float:
    """Seconds to build the index in ``memory``."""
    execute(f"DROP INDEX IF EXISTS {INDEX}")
    execute(f"SET maintenance_work_mem = '{memory}'")
    started = time.perf_counter()
    execute(index_statement(dimensions))
    return time.perf_counter() - started


def graph_overflow(dimensions: int) -> int | None:
    """After how many vectors the graph outgrew PostgreSQL's default 64MB (the
    build is stopped then); None if the whole table fit."""
    from django.db import connection
    from psycopg.errors import QueryCanceled

    execute(f"DROP INDEX IF EXISTS {INDEX}")
    execute(f"SET maintenance_work_mem = '{DEFAULT_MEMORY}'")
    raw = connection.connection
    found: list[int] = []
    said = threading.Event()
    over = threading.Event()  # the build ended: cancel nothing after it

    def heard(notice) -> None:
        match = OVERFLOW.search(notice.message_primary or "")
        if match:
            found.append(int(match.group(1)))
            said.set()

    def stop() -> None:
        if said.wait(timeout=3600) and found and not over.is_set():
            raw.cancel_safe()

    raw.add_notice_handler(heard)
    stopper = threading.Thread(target=stop, daemon=True)
    stopper.start()
    try:
        execute(index_statement(dimensions))
    except Exception as exc:  # Django wraps the cancellation
        if not isinstance(exc.__cause__, QueryCanceled) or not found:
            raise
    finally:
        over.set()
        said.set()
        stopper.join()
        raw.remove_notice_handler(heard)
    execute(f"DROP INDEX IF EXISTS {INDEX}")
    return found[0] if found else None


def size_of(relation: str) -> int:
    """Bytes of a table's rows (its TOAST table included, its indexes not), or of
    an index."""
    ((size,),) = execute("SELECT pg_table_size(%s)", [relation])
    return size


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Run it with python -u to see the lines as they come.",
    )
    parser.add_argument(
        "--dimensions",
        type=int,
        default=384,
        help="vector size (384: the local model; 1536: text-embedding-3-small)",
    )
    parser.add_argument(
        "--sizes",
        default="100000,300000",
        help="comma-separated numbers of vectors, ascending",
    )
    parser.add_argument(
        "--memory",
        default="1GB",
        help="maintenance_work_mem of the timed builds, in PostgreSQL's units "
        "(the product's INDEX_BUILD_MEMORY)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the table (a later run with as many dimensions adds only the "
        "missing rows)",
    )
    return parser.parse_args()


def measured(size: int, args: argparse.Namespace, *, probe: bool) -> None:
    """Fill to ``size``, print the table's size, the graph's memory (``probe``),
    the build's time and the index's size."""
    seconds = filled(size, args.dimensions)
    table = size_of(TABLE)
    print(
        f"{size:,} vectors: table {table / 2**20:,.1f} MB "
        f"({table / size:,.0f} bytes a vector), filled in {seconds:.0f} s"
    )
    if probe:
        overflow = graph_overflow(args.dimensions)
        if overflow is None:
            print(f"  the graph of {size:,} vectors fits in {DEFAULT_MEMORY}")
        else:
            print(
                f"  the graph outgrew {DEFAULT_MEMORY} after {overflow:,} vectors: "
                f"{64 * 2**20 / overflow:,.0f} bytes a vector"
            )
    seconds = built(args.dimensions, args.memory)
    index = size_of(INDEX)
    print(
        f"  index built in {seconds:.1f} s with {args.memory}: "
        f"{index / 2**20:,.1f} MB ({index / size:,.0f} bytes a vector); {load()}"
    )


def main() -> None:
    args = arguments()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    django_fresh(keep=True, database=DATABASE, EMBEDDING_BACKEND="hashing")
    server = ", ".join(
        f"{name} {execute(f'SHOW {name}')[0][0]}"
        for name in ("shared_buffers", "max_parallel_maintenance_workers")
    )
    print(f"{args.dimensions} dimensions; {load()}; server: {server}")
    try:
        for number, size in enumerate(sizes):
            measured(size, args, probe=number == 0)
    finally:
        if not args.keep:
            execute(f"DROP TABLE IF EXISTS {TABLE}")


if __name__ == "__main__":
    main()
