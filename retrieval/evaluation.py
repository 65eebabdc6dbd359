"""Retrieval and answer quality against a golden set of questions."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from retrieval.search import SearchMode, chunks_search
from retrieval.services import question_answer, search_run


@dataclass(frozen=True)
class Golden:
    question: str
    expected_urls: frozenset[str]
    kind: str


@dataclass(frozen=True)
class Outcome:
    golden: Golden
    rank: int | None  # of the first expected page among the results, from 1
    abstained: bool
    cited: int
    cited_right: int


def golden_load(path: Path) -> list[Golden]:
    """One JSON object a line: question, expected_urls ([] = should abstain), kind."""
    items = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            items.append(
                Golden(
                    question=str(row["question"]),
                    expected_urls=frozenset(row["expected_urls"]),
                    kind=str(row.get("kind", "")),
                )
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{number}: {exc!r}") from None
    return items


def golden_run(
    golden: Golden, *, k: int, mode: SearchMode = SearchMode.HYBRID
) -> Outcome:
    results = search_run(query=golden.question, user=None, k=k, mode=mode, log=False)
    urls = [citation.page.url for citation in results]
    rank = next(
        (i for i, url in enumerate(urls, 1) if url in golden.expected_urls), None
    )
    cited = cited_right = 0
    if mode == SearchMode.HYBRID:
        answer = question_answer(question=golden.question, user=None, k=k, log=False)
        cited = len(answer.citations)
        cited_right = sum(c.page.url in golden.expected_urls for c in answer.citations)
    return Outcome(
        golden, rank, abstained=not results, cited=cited, cited_right=cited_right
    )


def metrics(outcomes: list[Outcome]) -> dict[str, float | int | None]:
    answerable = [o for o in outcomes if o.golden.expected_urls]
    should, did = (
        {id(o) for o in outcomes if not o.golden.expected_urls},
        {id(o) for o in outcomes if o.abstained},
    )
    cited = sum(o.cited for o in answerable)
    return {
        "questions": len(outcomes),
        "recall@1": _share(sum(o.rank == 1 for o in answerable), len(answerable)),
        "recall@5": _share(
            sum(o.rank is not None and o.rank <= 5 for o in answerable), len(answerable)
        ),  # fmt: skip
        "mrr": _share(sum(1 / o.rank for o in answerable if o.rank), len(answerable)),
        "abstention_precision": _share(len(should & did), len(did)),
        "abstention_recall": _share(len(should & did), len(should)),
        "citation_precision": _share(sum(o.cited_right for o in answerable), cited),
    }


def metrics_by_kind(outcomes: list[Outcome]) -> dict[str, dict]:
    kinds: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in outcomes:
        kinds[outcome.golden.kind or "-"].append(outcome)
    return {kind: metrics(items) for kind, items in sorted(kinds.items())}


def _share(part: float, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def floor_suggest(golden: list[Golden], *, k: int) -> tuple[float, float]:
    """The RELEVANCE_FLOOR that best separates the questions that should abstain from
    the others on this golden set, and the share of questions it decides right.

    A question abstains when its best cosine similarity is under the floor and no
    chunk matches all its words, so only questions without a full-text match move.
    """
    points = []
    for item in golden:
        result = chunks_search(query=item.question, user=None, k=k)
        points.append((result.best_similarity, result.keyword_matches > 0,
                       not item.expected_urls))  # fmt: skip
    candidates = sorted({round(similarity, 4) for similarity, _, _ in points} | {0.0})
    best_floor, best_right = 0.0, -1
    for low, high in zip(candidates, [*candidates[1:], 1.0], strict=True):
        floor = round((low + high) / 2, 4) if high > low else low
        right = sum(
            (similarity < floor and not matched) == should
            for similarity, matched, should in points
        )
        if right > best_right:
            best_floor, best_right = floor, right
    return best_floor, best_right / len(points)
