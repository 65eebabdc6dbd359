"""Questions grouped by similarity, in one greedy pass an editor can follow.

The distinct questions, most asked first, are taken one by one: each joins the
group whose leading question (the first one it took) is the most similar to it,
when that cosine similarity is at least the bar (``group_similarity``: 0.70 with
the default model, higher with a model whose similarities crowd high); otherwise it
leads a
new group. A question is compared with leaders only, never with the other
members, so groups do not drift by chains of near neighbours ("pause a queue" ~
"pause a job" ~ "delete a job"), and every member is explained by one number:
its similarity to the question the group is shown under.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

# The cosine similarity from which two questions count as the same request. Chosen with
# the default model (all-MiniLM-L6-v2, tests/retrieval/test_grouping.py) on questions
# about one product: rewordings of one request score 0.70 to 0.94 ("What is the maximum
# job size?" / "Is there a limit on how big a job can be?" 0.80), while different
# requests on one subject stay under it ("How do I pause a queue?" / "How do I delete a
# queue?" 0.64, "Is there a Helm chart?" / "How do I run it on Kubernetes?" 0.52).
# Another model spreads similarities differently (feature hashing: shared words only);
# check a sample of its groups before trusting them.
GROUP_SIMILARITY = 0.70
# e5's similarities crowd between 0.8 and 0.9 (its learned floor 0.86), where 0.70
# would take nearly every question into one group. In a space with a floor the bar
# is as far from the floor toward 1 as GROUP_SIMILARITY is from the default model's
# floor (0.482 over four documentation sites): 42% of the way, never under
# GROUP_SIMILARITY (``group_similarity``).
DEFAULT_MODEL_FLOOR = 0.482
GROUP_SHARE = (GROUP_SIMILARITY - DEFAULT_MODEL_FLOOR) / (1 - DEFAULT_MODEL_FLOOR)
# Examples shown of a group, its most asked questions first.
EXAMPLES = 3

_SPACES = re.compile(r"\s+")


def question_key(text: str) -> str:
    """What makes two askings the same question: case, spacing and the closing
    punctuation aside ("How do I pause a queue?" is "how do i pause a queue")."""
    return _SPACES.sub(" ", text.casefold()).strip().rstrip("?!.… ").strip()


@dataclass
class Asked:
    """One distinct question: how it was last spelled, how often and when last
    it was asked, its vector, and what the caller keeps with it (``ref``)."""

    text: str
    count: int
    latest: datetime
    vector: Sequence[float]
    ref: Any = None
    similarity: float = 1.0  # to its group's leading question, once grouped


@dataclass
class Group:
    questions: list[Asked] = field(default_factory=list)  # the leader first

    @property
    def leader(self) -> Asked:
        return self.questions[0]

    @property
    def count(self) -> int:
        """How many times its questions were asked."""
        return sum(q.count for q in self.questions)

    @property
    def latest(self) -> datetime:
        return max(q.latest for q in self.questions)

    @property
    def examples(self) -> list[Asked]:
        return self.questions[:EXAMPLES]

    def centroid(self) -> list[float]:
        """The mean direction of its questions, each weighted by how often it was
        asked: what the group is about, to look for near pages with."""
        vectors = _unit_rows(np.array([q.vector for q in self.questions], float))
        weights = np.array([q.count for q in self.questions], float)
        mean = (weights[:, None] * vectors).sum(axis=0)
        norm = float(np.linalg.norm(mean))
        return (mean / norm if norm else vectors[0]).tolist()


def group_similarity(floor: float | None) -> float:
    """The bar from which two questions are one request in a space with this floor
    (None: none learned, as with hashed words): the grouping's, and a pin's, which
    answers what its group would take in (``retrieval.pins``)."""
    if floor is None:
        return GROUP_SIMILARITY
    return round(max(GROUP_SIMILARITY, floor + (1 - floor) * GROUP_SHARE), 4)


def similar_groups(
    questions: Sequence[Asked], *, threshold: float = GROUP_SIMILARITY
) -> list[Group]:
    """The questions in groups (see the module's docstring), the most asked group
    first (then the most recently asked); each group's questions in the order they
    joined it, most asked first."""
    ordered = sorted(questions, key=lambda q: (-q.count, -q.latest.timestamp(), q.text))
    if not ordered:
        return []
    vectors = _unit_rows(np.array([q.vector for q in ordered], np.float32))
    leaders = np.empty_like(vectors)  # row i: the vector of group i's leader
    groups: list[Group] = []
    for question, vector in zip(ordered, vectors, strict=True):
        if groups:
            similarities = leaders[: len(groups)] @ vector
            best = int(np.argmax(similarities))
            if similarities[best] >= threshold:
                question.similarity = float(similarities[best])
                groups[best].questions.append(question)
                continue
        question.similarity = 1.0
        leaders[len(groups)] = vector
        groups.append(Group([question]))
    groups.sort(key=lambda g: (-g.count, -g.latest.timestamp()))
    return groups


def _unit_rows(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1.0, norms)
