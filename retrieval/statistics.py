"""What the index learns about itself: how many chunks hold each word, and for each
embedding space the similarity that unrelated questions reach (its floor).

Both are computed here and stored, by ``migrate``, ``reembed`` and a periodic job
when the index has grown or shrunk by a tenth since; a search only reads them.
"""

from __future__ import annotations

import logging
import random
import statistics
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.db.models import Count
from django.utils import timezone
from openai import OpenAIError

from kbsite import locks
from kbsite.text import STOPWORDS, WORD
from retrieval import sql
from retrieval.embedder import Embedder
from retrieval.models import Chunk, EmbeddingSpace, IndexStatistics
from retrieval.search import CANDIDATES
from retrieval.searchable import NO_FILTERS, SearchFilters, searchable_chunks
from retrieval.spaces import nearest_similarities, serving, space_serving
from sources.models import SYSTEM

# Relative change in the number of live chunks that makes the statistics stale.
STALE_SHARE = 0.1
# Probe questions per floor, and words in each.
PROBES = 200
PROBE_WORDS = 4
# The floor is this quantile of the probes' best similarities: a question whose best
# chunk is no closer than half of the bags of unrelated words is no evidence.
FLOOR_QUANTILE = 0.5
# A source this large (live chunks) learns a floor of its own (``_source_floors``):
# probes of four words drawn from fewer chunks repeat one chunk's words too often.
SOURCE_FLOOR_CHUNKS = 100
SEED = 20261130
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Refresh:
    chunks: int
    lexemes: int
    floors: dict[str, float | None]


def live_chunk_count() -> int:
    return Chunk.objects.live().count()


def index_statistics_refresh(*, force: bool = False) -> Refresh | None:
    """Count the words of the live chunks and learn the serving space's floor, if
    the index changed by more than STALE_SHARE since (or ``force``). Returns what
    was refreshed, or None."""
    chunks = live_chunk_count()
    space = space_serving()
    if not force and not statistics_stale(chunks=chunks, space=space):
        return None
    chunks, lexemes = lexemes_refresh()
    floors: dict[str, float | None] = {}
    if space is not None:
        try:
            floors[space.name] = space_floor_learn(space, serving()[0])
        except (ImproperlyConfigured, OpenAIError) as exc:
            # The serving model cannot be reached from here (no key in this
            # process, the provider down): the floor it has stays, and `migrate`
            # or the periodic job does not fail for it.
            logger.warning("floor of %s not learned again: %s", space.name, exc)
            floors[space.name] = space.floor
    return Refresh(chunks=chunks, lexemes=lexemes, floors=floors)


def statistics_stale(*, chunks: int, space: EmbeddingSpace | None) -> bool:
    """Whether the stored counts, or the serving space's floor and the sizes of
    its sources, describe an index a tenth bigger or smaller (or none at all)
    than the one there is."""
    stats = IndexStatistics.objects.first()
    counted = stats.chunks if stats is not None and stats.refreshed_at else None
    learned = space.floor_chunks if space and space.floor_learned_at else None
    if space is None:
        learned = chunks
    elif learned and not space.source_chunks:
        learned = None  # learned before sources were counted (an upgrade)
    return any(_moved(before, chunks) for before in (counted, learned))


def _moved(before: int | None, now: int) -> bool:
    if before is None:
        return now > 0
    return abs(now - before) > STALE_SHARE * max(before, 1)


def lexemes_refresh() -> tuple[int, int]:
    """Count, for each word stem, the live chunks holding it; returns (chunks,
    distinct stems). Readers see the old counts until the new ones are complete."""
    with transaction.atomic():
        # Two workers refreshing at once take turns rather than collide.
        locks.xact_lock_wait(lock=locks.WORD_COUNTS)
        chunks = live_chunk_count()
        lexemes = sql.lexemes_replace()
        stats = IndexStatistics.objects.select_for_update().first()
        stats = stats or IndexStatistics()
        stats.chunks = chunks
        stats.refreshed_at = timezone.now()
        stats.save()
    return chunks, lexemes


def probe_questions(count: int = PROBES, *, source_id: int | None = None) -> list[str]:
    """Questions unrelated to the index (``source_id``: to that source) but made
    of its own words: each takes its words from different random chunks, so no
    chunk is about all of them."""
    rng = random.Random(SEED)
    chunks = Chunk.objects.live()
    if source_id is not None:
        chunks = chunks.filter(page__source_id=source_id)
    ids = list(chunks.values_list("pk", flat=True).order_by("pk"))
    if len(ids) < PROBE_WORDS:
        return []
    draws = [rng.sample(ids, PROBE_WORDS) for _ in range(count)]
    texts = Chunk.objects.only("text").in_bulk({pk for draw in draws for pk in draw})
    words = {
        pk: [w for w in WORD.findall(chunk.text.lower())
             if w.isalpha() and len(w) > 3 and w not in STOPWORDS]
        for pk, chunk in texts.items()
    }  # fmt: skip
    probes = []
    for draw in draws:
        picked = [rng.choice(words[pk]) for pk in draw if words[pk]]
        if len(picked) >= 2:
            probes.append(" ".join(picked))
    return probes


def best_similarities(
    embedder: Embedder, texts: list[str], *, source_id: int | None = None
) -> list[float]:
    """Each text's best cosine similarity to the vectors of live chunks (of that
    source)."""
    if not texts:
        return []
    best = []
    live = searchable_chunks(
        SYSTEM, SearchFilters(source_ids=(source_id,)) if source_id else NO_FILTERS
    )
    for vector in embedder.embed_queries(texts):
        similarity = nearest_similarities(
            embedder, vector, limit=CANDIDATES, searchable=live
        )
        best.append(max(similarity.values(), default=0.0))
    return best


def space_floor_learn(space: EmbeddingSpace, embedder: Embedder) -> float | None:
    """Learn and store the space's floor: the FLOOR_QUANTILE of the best
    similarities of probe questions (see ``probe_questions``).

    A ``hashing`` space gets none: its vectors are hashed words, so how near they
    are says nothing the lexical evidence does not say better (by word rarity,
    without hash collisions); the probes are still recorded.

    The sizes of the sources are stored first: they need no model, and a search
    chooses its plan by them even while the model cannot be reached."""
    sizes = source_sizes()
    space.source_chunks = {str(pk): size for pk, size in sizes.items()}
    space.save(update_fields=["source_chunks"])
    probes = probe_questions()
    similarities = sorted(best_similarities(embedder, probes))
    if len(similarities) < 10 or space.backend == "hashing":
        floor = None
    else:
        floor = round(_quantile(similarities, FLOOR_QUANTILE), 4)
    space.floor = floor
    space.source_floors = _source_floors(embedder, sizes) if floor is not None else {}
    space.floor_learned_at = timezone.now()
    space.floor_chunks = sum(sizes.values())
    space.floor_sample = {
        "probes": len(similarities),
        "quantile": FLOOR_QUANTILE,
        "mean": round(statistics.fmean(similarities), 4) if similarities else None,
        "quantiles": {
            str(q): round(_quantile(similarities, q), 4)
            for q in (0.5, 0.75, 0.9, 0.95, 0.99)
        }
        if similarities
        else {},
    }
    space.save(
        update_fields=["floor", "source_floors", "floor_learned_at", "floor_chunks",
                       "floor_sample"]
    )  # fmt: skip
    return floor


def source_sizes() -> dict[int, int]:
    """Live chunks by source id (sources with none left out)."""
    return dict(
        Chunk.objects.live()
        .values("page__source_id")
        .annotate(n=Count("pk"))
        .values_list("page__source_id", "n")
    )


def _source_floors(embedder: Embedder, sizes: dict[int, int]) -> dict[str, float]:
    """The floor within each source of at least SOURCE_FLOOR_CHUNKS live chunks,
    learned as the index's is but from its own words against its own chunks; none
    when the index is one source (its floor is the index's).

    A search of one source (a filter, the widget, a reader who may read only it)
    holds its evidence to what unrelated questions reach *among the chunks it
    searches*: the fewer the chunks, the lower the best similarity a bag of words
    finds by chance. Held to the floor of a whole index ten times its size, a
    small source's answers abstain where its own floor would answer them."""
    if len(sizes) < 2:
        return {}
    floors: dict[str, float] = {}
    for source_id, size in sorted(sizes.items()):
        if size < SOURCE_FLOOR_CHUNKS:
            continue
        probes = probe_questions(source_id=source_id)
        found = sorted(best_similarities(embedder, probes, source_id=source_id))
        if len(found) >= 10:
            floors[str(source_id)] = round(_quantile(found, FLOOR_QUANTILE), 4)
    return floors


def _quantile(ordered: list[float], q: float) -> float:
    """The q-quantile of sorted values, interpolated."""
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
