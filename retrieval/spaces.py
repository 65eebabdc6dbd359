"""Which embedding space serves queries, and which ones ingest must fill."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from retrieval import sql
from retrieval.codes import directions_ready
from retrieval.embedder import Embedder, model_unmarked, space_name, space_parts
from retrieval.embeddings import cached_embedder, configured_space_name, get_embedder
from retrieval.models import Embedding, EmbeddingSpace
from retrieval.searchable import Searchable

logger = logging.getLogger(__name__)


def embedding_index_name(space: str) -> str:
    half = "half_" if sql.INDEX_PRECISION == "halfvec" else ""
    return f"embedding_hnsw_{half}{hashlib.sha1(space.encode()).hexdigest()[:12]}"


def embedding_index_ensure(*, space: str, dimensions: int) -> str:
    """Create the HNSW cosine index for one embedding space if it is missing.

    The vector column has no fixed size, so the index is on the column cast to this
    space's size, limited to this space's rows. It holds the vectors at half
    precision (``halfvec``, ``retrieval.sql.INDEX_PRECISION``): 57 % of the size
    of single precision at about the same recall and speed (docs/benchmarks.md),
    and up to 4,000 dimensions instead of 2,000. The table keeps them whole.
    Queries use the same cast and filter (``retrieval.sql.nearest_statement``) so
    that PostgreSQL picks this index.
    """
    name = embedding_index_name(space)
    with connection.cursor() as cursor, index_build_memory(cursor):
        sql.hnsw_index_create(name=name, space=space, dimensions=dimensions)
    return name


@contextmanager
def index_build_memory(cursor) -> Iterator[None]:
    """The session's ``maintenance_work_mem`` at INDEX_BUILD_MEMORY, if set, for
    the block: pgvector builds an HNSW graph in that memory, and far more slowly
    once the graph outgrows it. Set and reset, not ``SET LOCAL``: a build may run
    outside a transaction (a migration that is not atomic)."""
    if not settings.INDEX_BUILD_MEMORY:
        yield  # the server's own
        return
    sql.build_memory_set(cursor, settings.INDEX_BUILD_MEMORY)
    try:
        yield
    finally:
        sql.build_memory_set(cursor, None)


def nearest_similarities(
    embedder: Embedder, vector: list[float], *, limit: int, searchable: Searchable
) -> dict[str, float]:
    """Cosine similarity by text hash of the ``limit`` nearest searchable vectors
    in the embedder's space (a text with several windows counts by its nearest)."""
    rows = sql.nearest(
        embedder.space,
        embedder.dimensions,
        vector,
        limit=limit,
        searchable=searchable,
    )
    similarity: dict[str, float] = {}
    for row in rows:
        similarity.setdefault(row.text_hash, 1.0 - row.distance)
    return similarity


def embedding_index_drop(*, space: str) -> None:
    sql.index_drop(name=embedding_index_name(space))


def space_register(*, name: str, dimensions: int) -> EmbeddingSpace:
    """The row for this space, with its HNSW index. The first space ever registered
    serves at once; later ones start out building. Runs DDL: called by ``migrate``,
    ``reembed`` and, once per new space, by ingest; never by a search."""
    with transaction.atomic():
        serving = EmbeddingSpace.objects.select_for_update().filter(
            state=EmbeddingSpace.State.SERVING
        )
        state = (
            EmbeddingSpace.State.BUILDING
            if serving.exists()
            else EmbeddingSpace.State.SERVING
        )
        backend, model, _, max_input_tokens = space_parts(name)
        space, _ = EmbeddingSpace.objects.get_or_create(
            name=name,
            defaults={
                "backend": backend,
                "model": model,
                "dimensions": dimensions,
                "max_input_tokens": max_input_tokens,
                "state": state,
            },
        )
    embedding_index_ensure(space=space.name, dimensions=space.dimensions)
    return space


def configured_space_register() -> EmbeddingSpace:
    """Register the space the settings name (without loading its model)."""
    return space_register(
        name=configured_space_name(), dimensions=settings.EMBEDDING_DIMENSIONS
    )


def unmarked_serving_repair() -> EmbeddingSpace | None:
    """Serve the configured space where an earlier release registered it under
    its model's unmarked name, and return it; None when there is nothing to mend.

    With EMBEDDING_INPUT_TYPES on from the first ``migrate``, that release
    registered ``openai/<model>/…``, which served, empty, while every vector went
    to ``openai/<model>+input_type/…``: its searches reached them only because
    the embedder marked its own space. A space's name now builds its embedder,
    so the empty space would answer nothing. When the serving space is the
    configured space's unmarked twin, holds no vector and the configured space
    does, the configured space serves (the empty one is retired)."""
    serving = space_serving()
    configured = configured_space_name()
    if serving is None or serving.name == configured:
        return None
    backend, model, dimensions, window = space_parts(configured)
    bare, marked = model_unmarked(backend, model)
    if not marked or serving.name != space_name(backend, bare, dimensions, window):
        return None
    target = EmbeddingSpace.objects.filter(name=configured).first()
    vectors = Embedding.objects.filter
    if (
        target is None
        or vectors(space=serving.name).exists()
        or not vectors(space=configured).exists()
    ):
        return None
    space_switch(to=target, keep_old=False)
    return target


def embedder_register(embedder: Embedder) -> EmbeddingSpace:
    """Register the space of a built embedder (reembed, ingest)."""
    return space_register(name=embedder.space, dimensions=embedder.dimensions)


def floor_in_force(
    space: EmbeddingSpace | None, source_ids: Sequence[int] | None = None
) -> float | None:
    """RELEVANCE_FLOOR if set, else the floor the space learned (None: none): for
    a search of one source (``source_ids``), the floor learned within it if it
    was large enough to learn one (``retrieval.statistics``), else the index's."""
    if settings.RELEVANCE_FLOOR is not None:
        return settings.RELEVANCE_FLOOR
    if space is None:
        return None
    if source_ids is not None and len(source_ids) == 1:
        own = (space.source_floors or {}).get(str(source_ids[0]))
        if own is not None:
            return float(own)
    return space.floor


def space_serving() -> EmbeddingSpace | None:
    return sql.space_in_state(EmbeddingSpace.State.SERVING)


def _embedder_for(space: EmbeddingSpace) -> Embedder:
    configured = get_embedder()
    if space.name == configured.space:
        return configured
    return cached_embedder(
        space.backend, space.model, space.dimensions, space.max_input_tokens
    )


def serving_embedder() -> Embedder:
    """The embedder of the space that answers queries; the configured one while the
    index has no space yet (it is empty then, and a search writes nothing)."""
    return serving()[0]


def serving_embedder_load() -> None:
    """Build the serving space's embedder in this process before the first question
    needs it (the local model's libraries take seconds to import), on a thread of
    the caller's. The configured embedder first, which needs no database (it is
    the serving one but during a re-embedding); then the serving space is read,
    and the thread's connection closed, and the directions of its codes drawn
    (``retrieval.codes``). If it cannot, it says why, and the first question
    tries again."""
    try:
        get_embedder()
        directions_ready(serving_embedder().dimensions)
    except Exception:
        logger.exception("could not load the serving embedder before a first question")
    finally:
        connection.close()


def serving() -> tuple[Embedder, EmbeddingSpace | None]:
    """The serving space's embedder and row (None while there is none)."""
    space = space_serving()
    return (get_embedder() if space is None else _embedder_for(space)), space


def ingest_embedders() -> list[Embedder]:
    """The serving space, and the configured one while it is not yet serving: new
    text lands in both, so neither is missing anything when the switch comes. A
    space seen for the first time is registered, once."""
    configured = get_embedder()
    known = {space.name: space for space in EmbeddingSpace.objects.all()}
    if configured.space not in known:
        known[configured.space] = embedder_register(configured)
    serving = next(
        (s for s in known.values() if s.state == EmbeddingSpace.State.SERVING), None
    )
    if serving is None or serving.name == configured.space:
        return [configured]
    return [_embedder_for(serving), configured]


def space_switch(*, to: EmbeddingSpace, keep_old: bool) -> EmbeddingSpace | None:
    """Make ``to`` the serving space; retire (and unless kept, delete) the old one."""
    with transaction.atomic():
        old = (
            EmbeddingSpace.objects.select_for_update()
            .filter(state=EmbeddingSpace.State.SERVING)
            .exclude(pk=to.pk)
            .first()
        )
        if old is not None:
            old.state = EmbeddingSpace.State.RETIRED
            old.save(update_fields=["state"])
        to.state = EmbeddingSpace.State.SERVING
        to.switched_at = timezone.now()
        to.save(update_fields=["state", "switched_at"])
    if old is not None and not keep_old:
        Embedding.objects.filter(space=old.name).delete()
        embedding_index_drop(space=old.name)
    return old


def usage_record(*, space: str, requests: int, inputs: int, tokens: int) -> None:
    """Add to today's embedding usage (one upsert; concurrent jobs add up)."""
    sql.usage_add(
        day=timezone.localdate(),
        space=space,
        requests=requests,
        inputs=inputs,
        tokens=tokens,
    )
