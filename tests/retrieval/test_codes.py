"""Sign codes: a search of part of the index ranks its chunk rows by their codes,
then reads the best few vectors exactly (``retrieval.codes``). A code decides how
fast a search is, never what it finds: chunks whose code is missing or of another
space are read exactly, and the codes follow the serving space through an upgrade
and a switch of spaces."""

from __future__ import annotations

import hashlib
import math
import random
from unittest.mock import patch

import numpy as np
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, transaction
from django.test import SimpleTestCase, TestCase, override_settings
from django.utils import timezone

from retrieval import search
from retrieval import sql as retrieval_sql
from retrieval.backends import HashingEmbedder
from retrieval.chunking import chunk_markdown, embed_texts
from retrieval.codes import CODE_BITS, text_code, vector_code
from retrieval.embeddings import get_embedder
from retrieval.indexing import codes_fill, embeddings_ensure, page_chunks_replace
from retrieval.models import Chunk, Embedding, EmbeddingSpace
from retrieval.reembed import index_rebuild
from retrieval.search import chunks_search, coded_pass
from retrieval.searchable import SearchFilters, searchable_chunks
from retrieval.spaces import space_serving
from retrieval.statistics import index_statistics_refresh
from sources.models import SYSTEM, Page, Source
from tests.world import embedder_space_serve

WORDS = [f"w{n:03d}" for n in range(400)]


def _differ(a: str, b: str) -> int:
    return sum(x != y for x, y in zip(a, b, strict=True))


def _unit(vector: np.ndarray) -> np.ndarray:
    return vector / np.linalg.norm(vector)


class CodeTests(SimpleTestCase):
    def test_signs_that_differ_estimate_the_angle_for_dense_and_sparse_vectors(self):
        # What the first pass relies on: the share of signs two codes differ in
        # is their vectors' angle over pi, for a model's dense vectors and for
        # hashed words' mostly-zero ones alike.
        rng = np.random.default_rng(3)
        dense = _unit(rng.standard_normal(384))
        sparse = np.zeros(384)
        sparse[rng.choice(384, 12, replace=False)] = rng.choice([-1.0, 1.0], 12)
        sparse = _unit(sparse)
        for kind, base in (("dense", dense), ("sparse", sparse)):
            for angle in (0.2, 0.6, 1.0, 1.4, 2.2):
                with self.subTest(kind=kind, angle=angle):
                    other = rng.standard_normal(384)
                    other = _unit(other - other.dot(base) * base)
                    turned = math.cos(angle) * base + math.sin(angle) * other
                    share = _differ(vector_code(base), vector_code(turned)) / CODE_BITS
                    assert abs(share - angle / math.pi) < 0.05

    def test_a_code_is_the_same_for_any_length_of_the_vector_and_for_good(self):
        vector = [float(n % 7) - 3.0 for n in range(384)]
        code = vector_code(vector)

        assert len(code) == CODE_BITS and set(code) <= {"0", "1"}
        assert vector_code([5 * x for x in vector]) == code
        # The directions are fixed: a code stored today is compared with a
        # question's years later. This pins them.
        assert hashlib.sha256(code.encode()).hexdigest()[:16] == "940169848821aa55"

    def test_a_text_in_several_windows_is_coded_by_their_mean_direction(self):
        rng = np.random.default_rng(5)
        first, second = rng.standard_normal(64), 10 * rng.standard_normal(64)

        assert text_code([first, second]) == vector_code(_unit(first) + _unit(second))
        assert text_code([first]) == vector_code(first)


def _texts(rng: random.Random, count: int) -> list[str]:
    return [" ".join(rng.sample(WORDS, 12)) for _ in range(count)]


def _page(source: Source, number: int, texts: list[str]) -> Page:
    """A page of these sections, embedded and chunked as a delivery would be."""
    now = timezone.now()
    markdown = "\n\n".join(f"## Part {n}\n\n{text}" for n, text in enumerate(texts))
    page = Page.objects.create(
        source=source,
        url=f"{source.seed_urls}{number}/",
        title=f"Page {number}",
        markdown=markdown,
        status=Page.Status.LIVE,
        last_verified_at=now,
        last_changed_at=now,
    )
    drafts = chunk_markdown(markdown, title=page.title)
    embeddings_ensure(texts=embed_texts(drafts), embedder=get_embedder())
    with transaction.atomic():
        page_chunks_replace(page=page, drafts=drafts)
    return page


class CodedSearchTests(TestCase):
    """A "Tenth" source of 120 chunks beside a crowd of 480, in one space."""

    @classmethod
    def setUpTestData(cls):
        embedder_space_serve()
        rng = random.Random(11)
        cls.crowd = Source.objects.create(
            name="Crowd", seed_urls="https://crowd.example.com/"
        )
        cls.tenth = Source.objects.create(
            name="Tenth", seed_urls="https://tenth.example.com/"
        )
        for number in range(60):
            _page(cls.crowd, number, _texts(rng, 8))
        cls.tenth_texts = []
        for number in range(15):
            texts = _texts(rng, 8)
            cls.tenth_texts += texts
            _page(cls.tenth, number, texts)
        index_statistics_refresh(force=True)
        cls.questions = [
            " ".join(text.split()[:5]) for text in rng.sample(cls.tenth_texts, 12)
        ]

    def setUp(self):
        self.embedder = get_embedder()
        self.space = space_serving()
        self.searchable = searchable_chunks(
            SYSTEM, SearchFilters(source_ids=(self.tenth.pk,))
        )

    def nearest(self, question: str, *, coded: bool, limit: int = 10) -> list[str]:
        (vector,) = self.embedder.embed_queries([question])
        first = None
        if coded:
            first = coded_pass(
                self.space, self.embedder, vector, self.searchable, limit=limit
            )
            assert first is not None
        rows = retrieval_sql.nearest(
            self.embedder.space,
            self.embedder.dimensions,
            vector,
            limit=limit,
            searchable=self.searchable,
            coded=first,
        )
        self.distances = [round(row.distance, 6) for row in rows]
        return [row.text_hash for row in rows]

    def test_each_chunk_carries_its_texts_code_in_the_serving_space(self):
        firsts = dict(
            Embedding.objects.filter(space=self.embedder.space, window=0).values_list(
                "text_hash", "code"
            )
        )
        chunks = Chunk.objects.all()

        assert chunks.count() == 600
        for chunk in chunks:
            assert chunk.code_space == self.space.pk
            assert chunk.code == firsts[chunk.embed_hash]
        text = Embedding.objects.get(text_hash=chunks[0].embed_hash)
        assert text.code == vector_code(text.vector)

    def test_which_searches_rank_by_codes_first(self):
        spaces = {
            "the serving space": self.space,
            "counted before the crowd grew ninefold": EmbeddingSpace(
                pk=self.space.pk,
                name=self.space.name,
                floor_chunks=6000,
                source_chunks={**self.space.source_chunks, str(self.crowd.pk): 5880},
            ),
        }
        spaces["a million chunks"] = EmbeddingSpace(
            pk=self.space.pk,
            name=self.space.name,
            floor_chunks=1_000_000,
            source_chunks={str(self.tenth.pk): 15_000},
        )
        spaces["not counted yet"] = EmbeddingSpace(
            pk=self.space.pk, name=self.space.name, floor_chunks=600
        )
        tenth, crowd = (self.tenth.pk,), (self.crowd.pk,)
        unknown = (self.tenth.pk, 99999)
        # (space, sources searched, limit, coded): 120 of 600 chunks are a fifth;
        # at 6,000 a fiftieth.
        cases = {
            "every source": ("the serving space", None, 10, False),
            "a source the count does not name counts as none": (
                "the serving space", unknown, 10, True),
            "no count yet": ("not counted yet", tenth, 10, False),
            "a tenth of the chunks searched, more than 10 × wanted": (
                "a million chunks", tenth, 100, True),
            "a fifth, read by code": ("the serving space", tenth, 10, True),
            "no more than it reads exactly": ("the serving space", tenth, 12, False),
            "four fifths: the walk's": ("the serving space", crowd, 10, False),
            "a fiftieth of a larger index": (
                "counted before the crowd grew ninefold", tenth, 10, True),
            "the crowd there: the walk's": (
                "counted before the crowd grew ninefold", crowd, 10, False),
        }  # fmt: skip
        (vector,) = self.embedder.embed_queries([self.questions[0]])
        for case, (space, sources, limit, coded) in cases.items():
            with self.subTest(case):
                searchable = searchable_chunks(
                    SYSTEM, SearchFilters(source_ids=sources or ())
                )
                found = coded_pass(
                    spaces[space], self.embedder, vector, searchable, limit=limit
                )
                assert (found is not None) is coded
                if coded:
                    assert found.code == vector_code(vector)
                    searched = sum(
                        spaces[space].source_chunks.get(str(pk), 0)
                        for pk in searchable.source_ids
                    )
                    assert found.first == max(
                        search.CODED_FIRST * limit, searched // 10
                    )

    def test_another_spaces_embedder_is_never_ranked_by_these_codes(self):
        other = HashingEmbedder("hashing-v2", 64)
        (vector,) = other.embed_queries([self.questions[0]])

        assert coded_pass(self.space, other, vector, self.searchable, limit=10) is None

    @patch.object(search, "CODED_FIRST", 3)
    def test_ranked_by_codes_first_it_finds_what_the_exact_read_finds(self):
        # 30 of the 120 chunks read exactly. Texts of random words: most share
        # one or two of the question's words or word pairs, a cosine of 0.05 to
        # 0.2, and 1,024 signs estimate a cosine to about ±0.05, so no first
        # pass keeps their order. Those sharing more (a distance under 0.75)
        # stand three of those apart, and are all found.
        for question in self.questions:
            with self.subTest(question):
                read = self.nearest(question, coded=False)
                near = [d for d in self.distances if d < 0.75]
                by_code = self.nearest(question, coded=True)
                assert near and self.distances[: len(near)] == near
                # Texts as near as each other may come in either order.
                assert set(by_code[: len(near)]) == set(read[: len(near)])

    def test_a_chunk_whose_code_is_missing_or_of_another_space_is_read_exactly(self):
        question = self.questions[0]
        (nearest, *_) = self.nearest(question, coded=False)
        (vector,) = self.embedder.embed_queries([question])
        opposite = "".join("1" if s == "0" else "0" for s in vector_code(vector))
        chunks = Chunk.objects.filter(embed_hash=nearest)
        cases = {
            # The code is what ranks: the farthest code there is puts it last.
            "the farthest code, of this space": (opposite, self.space.pk, False),
            "the farthest code, of another space": (opposite, self.space.pk + 1, True),
            "no code": (None, None, True),
        }
        for case, (code, space_id, found) in cases.items():
            with self.subTest(case):
                chunks.update(code=code, code_space=space_id)
                assert (nearest in self.nearest(question, coded=True)) is found

    def test_a_search_of_the_tenth_answers_the_same_with_codes_as_without(self):
        def pages(question: str) -> list[int]:
            result = chunks_search(
                query=question,
                user=SYSTEM,
                k=5,
                filters=SearchFilters(source_ids=(self.tenth.pk,)),
            )
            return [hit.chunk.pk for hit in result.hits]

        def passes(question: str, **constant: int) -> tuple[list[int], list]:
            spy = patch.object(
                retrieval_sql,
                "vector_candidates",
                wraps=retrieval_sql.vector_candidates,
            )
            with patch.multiple(search, **constant), spy as candidates:
                found = pages(question)
            return found, [call.kwargs["coded"] for call in candidates.call_args_list]

        for question in self.questions[:6]:
            with self.subTest(question):
                # The search's 100 candidates: the best 100 of the 120 by code.
                by_code, coded = passes(question, CODED_FIRST=1)
                read, not_coded = passes(question, WALK_COST=0)
                assert by_code and by_code == read
                assert coded[0] is not None and coded[0].first == 100
                assert not_coded[0] is None

    def test_an_upgrade_codes_the_chunks_of_texts_embedded_before_codes(self):
        before = dict(Chunk.objects.values_list("pk", "code"))
        # As an install of the last release left them: no code anywhere.
        Embedding.objects.update(code=None)
        Chunk.objects.update(code=None, code_space=None)

        assert codes_fill(batch=100) == 600
        assert dict(Chunk.objects.values_list("pk", "code")) == before
        assert set(Chunk.objects.values_list("code_space", flat=True)) == {
            self.space.pk
        }
        # The vectors' rows stay as they were (each update would be written
        # into the HNSW index again).
        assert not Embedding.objects.exclude(code=None).exists()
        assert codes_fill(batch=100) == 0

    def test_after_a_switch_of_spaces_the_chunks_carry_the_new_spaces_codes(self):
        old = self.space
        with override_settings(EMBEDDING_DIMENSIONS=64):
            *_, done = index_rebuild(target=get_embedder())
            new = space_serving()

        assert done.switched_from == old.name
        assert done.rechunked == 0
        assert Chunk.objects.count() == 600
        firsts = dict(
            Embedding.objects.filter(space=new.name, window=0).values_list(
                "text_hash", "code"
            )
        )
        for chunk in Chunk.objects.all():
            assert chunk.code_space == new.pk
            assert chunk.code == firsts[chunk.embed_hash]

    def test_chunks_with_no_code_outside_the_search_stay_outside_it(self):
        Chunk.objects.filter(page__source=self.crowd).update(code=None, code_space=None)
        tenth = set(
            Chunk.objects.filter(page__source=self.tenth).values_list(
                "embed_hash", flat=True
            )
        )
        for question in self.questions[:4]:
            with self.subTest(question):
                found = self.nearest(question, coded=True)
                assert len(found) == 10 and set(found) <= tenth

    def test_codes_fill_codes_what_it_can_a_batch_at_a_time(self):
        Chunk.objects.filter(page__source=self.tenth).update(code=None, code_space=None)
        page = Page.objects.filter(source=self.tenth).first()
        Chunk.objects.create(page=page, position=99, text="x", embed_hash="no vector")

        assert codes_fill(batch=7) == 120
        assert list(
            Chunk.objects.filter(code=None).values_list("embed_hash", flat=True)
        ) == ["no vector"]
        assert codes_fill(batch=7) == 0

    def test_with_no_space_serving_nothing_is_coded(self):
        Chunk.objects.update(code=None, code_space=None)
        EmbeddingSpace.objects.update(state=EmbeddingSpace.State.RETIRED)

        assert codes_fill() == 0

    def test_a_page_swapped_again_keeps_the_codes_of_texts_coded_before(self):
        # Texts embedded before codes were have none stored: their chunks were
        # coded from the vectors, and a swap keeping those texts keeps them.
        page = Page.objects.filter(source=self.tenth).first()
        before = dict(page.chunks.values_list("embed_hash", "code"))
        Embedding.objects.filter(text_hash__in=before).update(code=None)
        drafts = chunk_markdown(page.markdown, title=page.title)
        edited = drafts[:-1]

        with transaction.atomic():
            page_chunks_replace(page=page, drafts=edited)

        after = dict(page.chunks.values_list("embed_hash", "code"))
        assert after == {d.embed_hash: before[d.embed_hash] for d in edited}
        assert set(page.chunks.values_list("code_space", flat=True)) == {self.space.pk}

    def test_a_swap_takes_no_old_code_of_another_space(self):
        page = Page.objects.filter(source=self.tenth).first()
        hashes = list(page.chunks.values_list("embed_hash", flat=True))
        Embedding.objects.filter(text_hash__in=hashes).update(code=None)
        page.chunks.update(code_space=self.space.pk + 1)

        with transaction.atomic():
            page_chunks_replace(
                page=page, drafts=chunk_markdown(page.markdown, title=page.title)
            )

        assert set(page.chunks.values_list("code", "code_space")) == {(None, None)}

    def test_a_code_is_stored_with_its_space_or_not_at_all(self):
        chunk = Chunk.objects.first()
        for case, (code, space_id) in {
            "a code of no space": (chunk.code, None),
            "a space with no code": (None, self.space.pk),
        }.items():
            with self.subTest(case), self.assertRaises(IntegrityError):
                with transaction.atomic():
                    Chunk.objects.filter(pk=chunk.pk).update(
                        code=code, code_space=space_id
                    )

    def test_sources_are_counted_while_the_model_cannot_be_reached(self):
        EmbeddingSpace.objects.filter(pk=self.space.pk).update(source_chunks={})
        unreachable = patch(
            "retrieval.statistics.best_similarities",
            side_effect=ImproperlyConfigured("no key in this process"),
        )
        with unreachable:
            index_statistics_refresh()
            assert index_statistics_refresh() is None  # fresh since

        assert space_serving().source_chunks == {
            str(self.crowd.pk): 480,
            str(self.tenth.pk): 120,
        }

    def test_statistics_learned_before_sources_were_counted_are_stale(self):
        EmbeddingSpace.objects.filter(pk=self.space.pk).update(source_chunks={})

        refresh = index_statistics_refresh()

        assert refresh is not None
        assert space_serving().source_chunks == {
            str(self.crowd.pk): 480,
            str(self.tenth.pk): 120,
        }


class WindowCodeTests(TestCase):
    def test_a_text_read_in_windows_is_coded_once_from_all_of_them(self):
        embedder = HashingEmbedder("hashing-v2", 64, max_input_tokens=20)
        text = " ".join(WORDS[:60])

        embeddings_ensure(texts={"h": text}, embedder=embedder)

        rows = list(Embedding.objects.filter(text_hash="h").order_by("window"))
        assert len(rows) > 1
        assert rows[0].code == text_code([row.vector for row in rows])
        assert all(row.code is None for row in rows[1:])
