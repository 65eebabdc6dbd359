"""A floor per source: a search of one source holds its evidence to what unrelated
questions reach among that source's chunks, not among a whole index many times
its size."""

from __future__ import annotations

from unittest.mock import patch

import pytest
from django.contrib.auth.models import Group, User
from django.test import override_settings

from retrieval import statistics
from retrieval.embeddings import get_embedder
from retrieval.models import EmbeddingSpace
from retrieval.reembed import index_rebuild
from retrieval.search import chunks_search
from retrieval.searchable import SearchFilters
from retrieval.spaces import floor_in_force, space_serving
from sources.models import SYSTEM, Source
from tests.conftest import local_model_require
from tests.world import HarborWorld, ingest_markdowns

OTHER = "https://garden.example.org"
# A second site, about something else: the index is two sources.
GARDEN = [
    (f"{OTHER}/{name}/", f"# {title}\n\n" + "\n\n".join(
        f"## {title} {n}\n\n{text} Step {n} of the season: {text.lower()}"
        for n in range(1, 5)
    ))
    for name, title, text in [
        ("roses", "Roses", "Prune roses in early spring above an outward bud."),
        ("tomatoes", "Tomatoes", "Stake tomatoes and pinch out the side shoots."),
        ("compost", "Compost", "Turn the heap monthly; keep it as damp as a sponge."),
        ("lawns", "Lawns", "Mow high in summer and feed the lawn in autumn."),
        ("bulbs", "Bulbs", "Plant tulip bulbs three times their depth in autumn."),
        ("hedges", "Hedges", "Trim hedges after birds have finished nesting."),
    ]
]  # fmt: skip


@pytest.mark.parametrize(
    ("relevance", "source_ids", "expected"),
    [
        (None, None, 0.48),  # every source: the index's
        (None, (7,), 0.41),  # one source that learned its own
        (None, (8,), 0.48),  # one too small to learn one
        (None, (7, 9), 0.48),  # several: the index's
        (None, (), 0.48),
        (0.3, (7,), 0.3),  # RELEVANCE_FLOOR decides, whatever the scope
    ],
)
def test_the_floor_in_force_for_a_search_of_these_sources(
    settings, relevance, source_ids, expected
):
    settings.RELEVANCE_FLOOR = relevance
    space = EmbeddingSpace(floor=0.48, source_floors={"7": 0.41, "9": 0.52})
    assert floor_in_force(space, source_ids) == expected
    assert floor_in_force(None, source_ids) == (relevance if relevance else None)


@pytest.mark.slow
class SourceFloorTests(HarborWorld):
    def setUp(self):
        local_model_require()
        self.garden = Source.objects.create(name="Garden", seed_urls=f"{OTHER}/")
        ingest_markdowns(GARDEN)
        # Small test sites: a floor of their own from 20 chunks up.
        self.enterContext(patch.object(statistics, "SOURCE_FLOOR_CHUNKS", 20))
        self.enterContext(
            override_settings(
                RELEVANCE_FLOOR=None,
                EMBEDDING_BACKEND="local",
                EMBEDDING_MODEL="all-MiniLM-L6-v2",
                EMBEDDING_DIMENSIONS=384,
            )
        )
        *_, done = index_rebuild(target=get_embedder())
        assert done.switched_from
        self.space = space_serving()

    def test_each_source_learns_its_floor_and_a_search_of_it_uses_it(self):
        floors = self.space.source_floors
        assert set(floors) == {str(self.harbor.pk), str(self.garden.pk)}
        assert all(f != self.space.floor for f in floors.values())
        question = "How do I pause a queue?"
        cases = [
            (SYSTEM, SearchFilters(), self.space.floor),
            (SYSTEM, SearchFilters(source_ids=(self.harbor.pk,)),
             floors[str(self.harbor.pk)]),
            (SYSTEM, SearchFilters(source_ids=(self.harbor.pk, self.garden.pk)),
             self.space.floor),
        ]  # fmt: skip
        # A reader who may read Harbor only searches Harbor alone.
        reader = User.objects.create_user("reader")
        members = Group.objects.create(name="harbor-readers")
        others = Group.objects.create(name="others")
        for source in Source.objects.exclude(pk=self.harbor.pk):
            source.allowed_groups.add(others)
        self.harbor.allowed_groups.add(members)
        reader.groups.add(members)
        cases.append((reader, SearchFilters(), floors[str(self.harbor.pk)]))
        for user, filters, floor in cases:
            with self.subTest(user=str(user), filters=filters):
                evidence = chunks_search(
                    query=question, user=user, k=5, filters=filters
                ).evidence
                assert evidence.floor == floor

    def test_an_index_of_one_source_keeps_the_one_floor(self):
        self.garden.delete()
        statistics.index_statistics_refresh(force=True)
        space = space_serving()
        assert space.floor is not None and space.source_floors == {}
