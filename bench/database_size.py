"""What a benchmark database holds, table by table, per page and per vector.

    .venv/bin/python -u -m bench.database_size [--database kb_bench]

Run after a benchmark that ingested a corpus (``bench.recrawl``, which leaves the
PostgreSQL manual in ``kb_bench``). For each of the product's tables over 1 MB:
its rows, the bytes of its rows (TOAST included) and of its indexes; then the
totals, the bytes per live page, and the vectors: how many, per page, and the
dimensions of each embedding space. Reads only.
"""

from __future__ import annotations

import argparse
import os
import sys

from bench.common import BENCH_DB, ROOT

SHOWN = 2**20  # tables smaller than this are summed as "others"


def tables() -> list[tuple[str, int, int, int]]:
    """(name, rows, table bytes, index bytes) of every table, largest first."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, c.reltuples::bigint, pg_table_size(c.oid), "
            "pg_indexes_size(c.oid) FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE c.relkind = 'r' "
            "AND n.nspname = 'public' "
            "ORDER BY pg_total_relation_size(c.oid) DESC"
        )
        return cursor.fetchall()


def django_on(database: str) -> None:
    """Django on ``database`` as it is: no migration (which would register the
    configured embedding space), nothing written."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbsite.settings")
    os.environ.update(EMBEDDED_DB_NAME=database, EMBEDDING_BACKEND="hashing")
    import django

    django.setup()


def indexes_of(table: str) -> list[tuple[str, int]]:
    """(name, bytes) of each index of ``table``, largest first."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) "
            "FROM pg_index WHERE indrelid = %s::regclass "
            "ORDER BY pg_relation_size(indexrelid) DESC",
            [table],
        )
        return cursor.fetchall()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", default=BENCH_DB,
                        help="the benchmark database to read")  # fmt: skip
    args = parser.parse_args()
    django_on(args.database)
    from django.db import connection

    from retrieval.models import Chunk, Embedding, EmbeddingSpace
    from sources.models import Page

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # row estimates brought up to date
    rows = tables()
    pages = Page.objects.filter(status=Page.Status.LIVE).count()
    chunks = Chunk.objects.count()
    mb = 2**20
    others = [0, 0]
    for name, count, table, indexes in rows:
        if table + indexes < SHOWN:
            others[0] += table
            others[1] += indexes
            continue
        print(f"{name}: {count:,} rows, table {table / mb:,.1f} MB, "
              f"indexes {indexes / mb:,.1f} MB")  # fmt: skip
    print(f"others: table {others[0] / mb:,.1f} MB, indexes {others[1] / mb:,.1f} MB")
    total = sum(table + indexes for _, _, table, indexes in rows)
    print(f"total {total / mb:,.1f} MB for {pages:,} live pages and {chunks:,} "
          f"chunks: {total / pages / 1024:,.1f} kB a page")  # fmt: skip
    for name, size in indexes_of(Embedding._meta.db_table):
        print(f"  index {name}: {size / mb:,.1f} MB")
    for space in EmbeddingSpace.objects.order_by("name"):
        vectors = Embedding.objects.filter(space=space.name).count()
        if not vectors:
            continue
        print(f"space {space.name}: {space.dimensions} dimensions, {vectors:,} "
              f"vectors, {vectors / pages:.2f} a page, {vectors / chunks:.2f} a "
              "chunk")  # fmt: skip


if __name__ == "__main__":
    main()
