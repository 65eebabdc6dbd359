"""The vector side of a search takes its candidates among the chunks the caller may
search: a small source beside a crowd of nearer vectors the caller may not see, or
has filtered out, or that no chunk uses any more, is still found by its vectors.
And vectors no chunk uses are pruned, without ever taking one a swap needs."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import Group, User
from django.db import connection, transaction
from django.test import TestCase
from django.utils import timezone

from kbsite.text import sha256_hex
from retrieval import search
from retrieval.chunking import chunk_markdown, embed_texts
from retrieval.embeddings import get_embedder
from retrieval.indexing import embeddings_ensure, embeddings_prune, page_chunks_replace
from retrieval.keywords import NO_TERMS
from retrieval.models import Chunk, Embedding
from retrieval.searchable import NO_FILTERS, SearchFilters, searchable_chunks
from retrieval.spaces import embedder_register
from retrieval.tasks import index_statistics_refresh_task
from sources.models import Page, Source
from tests.world import IngestWorld

QUESTION = "nightly backup retention policy"
CROWD = 150  # more than the search's CANDIDATES, all nearer than the small page
OLD = timezone.now() - timedelta(days=400)


def _page(source: Source, path: str, *, verified=None) -> Page:
    now = timezone.now()
    return Page.objects.create(
        source=source,
        url=f"{source.seed_urls.strip()}{path}",
        title=path,
        status=Page.Status.LIVE,
        last_verified_at=verified or now,
        last_changed_at=verified or now,
    )


def _chunks(page: Page, texts: list[str], *, with_chunks: bool = True) -> list[str]:
    """Vectors for these texts, and chunks of the page using them."""
    embedder = get_embedder()
    hashes = [sha256_hex(text) for text in texts]
    Embedding.objects.bulk_create(
        Embedding(space=embedder.space, text_hash=h, vector=v)
        for h, v in zip(hashes, embedder.embed(texts), strict=True)
    )
    if with_chunks:
        Chunk.objects.bulk_create(
            Chunk(page=page, position=n, text=text, embed_hash=h)
            for n, (text, h) in enumerate(zip(texts, hashes, strict=True))
        )
    return hashes


class FilteredVectorSearchTests(TestCase):
    @classmethod
    def setUpTestData(cls):
        embedder_register(get_embedder())
        cls.staff = Group.objects.create(name="staff")
        cls.readers = Group.objects.create(name="readers")
        cls.crowd = Source.objects.create(
            name="Crowd", seed_urls="https://crowd.example.com/"
        )
        cls.crowd.allowed_groups.add(cls.staff)
        cls.small = Source.objects.create(
            name="Small", seed_urls="https://small.example.com/"
        )
        cls.small.allowed_groups.add(cls.readers)
        crowd_page = _page(cls.crowd, "backups/", verified=OLD)
        _chunks(crowd_page, [f"{QUESTION} copy {n}" for n in range(CROWD)])
        cls.small_page = _page(cls.small, "ops/")
        (cls.small_hash,) = _chunks(
            cls.small_page,
            [
                "Backups run every night; the retention policy keeps them for "
                "thirty days before the oldest are removed from the bucket."
            ],
        )
        cls.reader = User.objects.create_user("reader", password="a long password 1")
        cls.reader.groups.add(cls.readers)
        cls.admin = User.objects.create_superuser("admin", password="a long pass 1")
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")

    def vector_pages(self, user, filters=NO_FILTERS) -> list[int]:
        embedder = get_embedder()
        (vector,) = embedder.embed([QUESTION])
        hits, _ = search._vector_hits(
            vector, searchable_chunks(user, filters), embedder, NO_TERMS
        )
        return [hit.page_id for hit in hits]

    def test_each_way_of_narrowing_the_search_keeps_the_small_sources_vectors(self):
        narrowed = {
            "a reader who sees only the small source": (self.reader, NO_FILTERS),
            "a filter on the small source": (
                self.admin,
                SearchFilters(source_ids=(self.small.pk,)),
            ),
            "a filter on recently verified pages": (
                self.admin,
                SearchFilters(max_age_days=30),
            ),
        }
        for case, (user, filters) in narrowed.items():
            with self.subTest(case):
                assert self.vector_pages(user, filters) == [self.small_page.pk]

    def test_unfiltered_the_crowd_comes_first(self):
        pages = self.vector_pages(self.admin)

        assert len(pages) == search.CANDIDATES
        assert self.small_page.pk not in pages

    def test_the_hnsw_scan_goes_on_past_its_breadth_until_a_candidate_passes(self):
        # The index path, as at a size where it pays, with a breadth of 10 of the
        # 151 vectors: pgvector's iterative scan walks on to the small page's.
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("SET LOCAL enable_sort = off")
            cursor.execute("SET LOCAL hnsw.ef_search = 10")
            pages = self.vector_pages(self.reader)

        assert pages == [self.small_page.pk]

    def test_vectors_no_chunk_uses_take_no_candidates(self):
        # The crowd's page re-chunked into other texts: its old vectors stay
        # until pruned, and are nearest of all.
        Chunk.objects.filter(page__source=self.crowd).delete()
        orphans = _page(self.crowd, "orphans/")
        _chunks(
            orphans, [f"{QUESTION} left {n}" for n in range(CROWD)], with_chunks=False
        )

        assert self.vector_pages(self.admin) == [self.small_page.pk]


class PruneTests(IngestWorld):
    def setUp(self):
        self.embedder = get_embedder()
        embedder_register(self.embedder)
        self.ingest(f"{self.source.seed_urls.strip()}a/", "# A\n\nKept text.\n",
                    content_type="text/markdown")  # fmt: skip
        self.used = set(Chunk.objects.values_list("embed_hash", flat=True))
        page = Page.objects.get()
        self.unused = _chunks(page, ["Old text", "Older text"], with_chunks=False)
        self.young = _chunks(page, ["Text embedded a minute ago"], with_chunks=False)
        hour_ago = timezone.now() - timedelta(hours=2)
        Embedding.objects.exclude(text_hash__in=self.young).update(created_at=hour_ago)

    def hashes(self) -> set[str]:
        return set(Embedding.objects.values_list("text_hash", flat=True))

    def test_vectors_no_chunk_uses_are_pruned_once_an_hour_old(self):
        pruned = embeddings_prune()

        assert pruned == 2
        assert self.hashes() == self.used | set(self.young)

    def test_the_ten_minute_job_prunes(self):
        assert "2 unused vectors pruned" in index_statistics_refresh_task()
        assert not self.hashes() & set(self.unused)

    def test_a_vector_pruned_between_its_embedding_and_the_swap_is_embedded_again(self):
        page = Page.objects.get()
        drafts = chunk_markdown("# A\n\nKept text.\n\nNew text.\n", title="A")
        texts = embed_texts(drafts)
        embeddings_ensure(texts=texts, embedder=self.embedder)
        # A prune ran meanwhile: the text of the new chunk was used by none.
        Embedding.objects.filter(text_hash__in=texts).exclude(
            text_hash__in=self.used
        ).delete()

        with transaction.atomic():
            page_chunks_replace(page=page, drafts=drafts)

        assert set(texts) <= self.hashes()
