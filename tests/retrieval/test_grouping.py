"""Questions grouped by similarity: the greedy rule on vectors made by hand, and
the threshold on the default model's vectors of questions readers ask."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from retrieval.embeddings import cached_embedder
from retrieval.grouping import (
    GROUP_SIMILARITY,
    Asked,
    question_key,
    similar_groups,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def asked(text: str, vector, *, count: int = 1, hours_ago: int = 0) -> Asked:
    return Asked(text, count, NOW - timedelta(hours=hours_ago), vector)


def at(degrees: float) -> list[float]:
    """A unit vector in the plane, ``degrees`` from the first axis."""
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees)), 0.0]


def texts(groups) -> list[list[str]]:
    return [[q.text for q in group.questions] for group in groups]


def test_the_most_asked_question_leads_and_alike_ones_join_it():
    # cos 30° = 0.87, cos 60° = 0.5: b is like a, c is not.
    groups = similar_groups(
        [asked("b", at(30)), asked("a", at(0), count=3), asked("c", at(60))]
    )

    assert texts(groups) == [["a", "b"], ["c"]]
    assert groups[0].count == 4 and groups[0].leader.text == "a"
    assert groups[0].questions[1].similarity == pytest.approx(0.866, abs=1e-3)


def test_a_question_is_compared_with_leaders_only_so_groups_do_not_chain():
    # b is 40° from a (0.77) and c 40° from b, but 80° from a (0.17): c is no
    # rewording of a, whatever b is.
    groups = similar_groups(
        [asked("a", at(0), count=3), asked("b", at(40), count=2), asked("c", at(80))]
    )

    assert texts(groups) == [["a", "b"], ["c"]]


def test_a_question_joins_the_leader_most_like_it():
    groups = similar_groups(
        [asked("a", at(0), count=3), asked("z", at(90), count=2), asked("m", at(60))]
    )

    assert texts(groups) == [["a"], ["z", "m"]]


def test_groups_come_most_asked_first_then_most_recent():
    groups = similar_groups(
        [
            asked("old", at(0), count=2, hours_ago=50),
            asked("new", at(90), count=2, hours_ago=1),
            asked("often", [0, 0, 1], count=5, hours_ago=99),
        ]
    )

    assert [g.leader.text for g in groups] == ["often", "new", "old"]
    assert groups[0].latest == NOW - timedelta(hours=99)


def test_the_centroid_weighs_questions_by_how_often_they_were_asked():
    group = similar_groups([asked("a", at(0), count=3), asked("b", at(40))])[0]

    centroid = group.centroid()

    assert math.degrees(math.atan2(centroid[1], centroid[0])) == pytest.approx(
        10.0, abs=0.5
    )
    assert math.hypot(*centroid) == pytest.approx(1.0)


def test_askings_differing_in_case_spacing_and_final_marks_are_one_question():
    assert question_key("  How do I pause   a Queue ?") == "how do i pause a queue"
    assert question_key("how do I pause a queue") == "how do i pause a queue"
    assert question_key("What is 3.5?") != question_key("What is 3")


# Questions a docs owner would want together, and ones they would want apart, as
# readers of a job scheduler's documentation ask them.
ALIKE = [
    [
        "How do I restore a backup taken with Barman?",
        "restore from a barman backup",
        "How to recover the database from a Barman backup",
    ],
    [
        "What is the maximum job size?",
        "Is there a limit on how big a job can be?",
    ],
    [
        "How do I export metrics to Prometheus?",
        "prometheus metrics endpoint",
    ],
    [
        "How do I run Harbor on Kubernetes?",
        "harbor kubernetes operator",
    ],
]
APART = [
    "How do I pause a queue?",
    "How do I delete a queue?",
    "Can I use Grafana dashboards?",
    "How do I upgrade the database schema?",
]


@pytest.mark.slow
def test_the_default_model_groups_rewordings_and_keeps_other_requests_apart():
    model = cached_embedder("local", "all-MiniLM-L6-v2", 384)
    questions = [text for group in ALIKE for text in group] + APART
    vectors = model.embed(questions)
    # The first of each group asked most, so that it leads.
    counts = {group[0]: 3 for group in ALIKE}

    groups = similar_groups(
        [
            asked(text, vector, count=counts.get(text, 1))
            for text, vector in zip(questions, vectors, strict=True)
        ]
    )

    found = sorted(sorted(group) for group in texts(groups))
    expected = sorted(sorted(group) for group in [*ALIKE, *([q] for q in APART)])
    assert found == expected
    assert all(q.similarity >= GROUP_SIMILARITY for g in groups for q in g.questions), (
        "every member is explained by its similarity to the leader"
    )
