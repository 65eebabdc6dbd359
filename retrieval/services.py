from __future__ import annotations

import hashlib

from django.db import connection
from psycopg import sql

from retrieval.models import Embedding


def embedding_index_name(space: str) -> str:
    return f"embedding_hnsw_{hashlib.sha1(space.encode()).hexdigest()[:12]}"


def embedding_index_ensure(*, space: str, dimensions: int) -> str:
    """Create the HNSW cosine index for one embedding space if it is missing.

    The vector column has no fixed size, so the index is on the column cast to this
    space's size, limited to this space's rows. Queries use the same cast and filter
    (``Embedding.objects.nearest``) so that PostgreSQL picks this index.
    """
    name = embedding_index_name(space)
    statement = sql.SQL(
        "CREATE INDEX IF NOT EXISTS {name} ON {table} USING hnsw "
        "((vector::vector({dims})) vector_cosine_ops) WHERE space = {space}"
    ).format(
        name=sql.Identifier(name),
        table=sql.Identifier(Embedding._meta.db_table),
        dims=sql.Literal(int(dimensions)),
        space=sql.Literal(space),
    )
    with connection.cursor() as cursor:
        cursor.execute(statement.as_string(cursor.connection))
    return name
