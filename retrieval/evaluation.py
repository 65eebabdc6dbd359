"""Retrieval and answer quality against a golden set of questions."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from retrieval.evidence import Evidence
from retrieval.questions import citations_of, question_answer
from retrieval.search import SearchMode, chunks_search
from retrieval.searchable import NO_FILTERS, SearchFilters
from sources.models import Caller


@dataclass(frozen=True)
class Golden:
    question: str
    expected_urls: frozenset[str]
    kind: str
    # What a right answer must say (a command, an option, a value), if given.
    expected_phrase: str = ""
    # The same question put another way, written with the set (the loop's
    # measurement: does a pin made from one phrasing answer the other?).
    rephrased: str = ""


@dataclass(frozen=True)
class Outcome:
    golden: Golden
    rank: int | None  # of the first expected page among the results, from 1
    abstained: bool
    cited: int
    cited_right: int
    evidence: Evidence | None = None
    candidates: int = 0  # vector candidates among the searchable chunks
    phrase_found: bool | None = None  # in the answer; None: no phrase to look for
    results: int = 0  # pages the search listed


def golden_load(path: Path) -> list[Golden]:
    """One JSON object a line: question, expected_urls ([] = should abstain),
    kind, and optionally expected_phrase."""
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
                    expected_phrase=str(row.get("expected_phrase", "")),
                    rephrased=str(row.get("rephrased", "")),
                )
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{number}: {exc!r}") from None
    return items


def golden_run(
    golden: Golden,
    *,
    k: int,
    mode: SearchMode = SearchMode.HYBRID,
    user: Caller,
    filters: SearchFilters = NO_FILTERS,
) -> Outcome:
    """One question searched (and answered, in hybrid mode) as ``user`` sees the
    index, within ``filters``."""
    # As search_run: the best chunk of each of k pages.
    search = chunks_search(
        query=golden.question,
        user=user,
        k=k,
        mode=mode,
        per_page=1,
        filters=filters,
    )
    results = citations_of(search.hits)
    urls = [citation.page.url for citation in results]
    rank = next(
        (i for i, url in enumerate(urls, 1) if url in golden.expected_urls), None
    )
    cited = cited_right = 0
    phrase_found = None
    if mode == SearchMode.HYBRID:
        answer = question_answer(
            question=golden.question, user=user, k=k, filters=filters, log=False
        )
        cited = len(answer.citations)
        cited_right = sum(c.page.url in golden.expected_urls for c in answer.citations)
        if golden.expected_phrase:
            phrase_found = phrase_in(golden.expected_phrase, answer.answer)
    return Outcome(
        golden,
        rank,
        abstained=search.abstained,
        cited=cited,
        cited_right=cited_right,
        evidence=search.evidence,
        candidates=search.candidates,
        phrase_found=phrase_found,
        results=len(urls),
    )


def phrase_in(phrase: str, text: str) -> bool:
    """The phrase is in the text as words, whatever the case and the spacing (an
    answer may wrap a command over two lines, or start a sentence with it): "-W"
    is not in "re-written", nor "key" in "keys"."""
    words = " ".join(phrase.split())
    if not words:
        return False
    pattern = re.escape(words).replace(r"\ ", r"\s+")
    if words[0].isalnum() or words[0] == "_":
        pattern = r"(?<!\w)" + pattern
    if words[-1].isalnum() or words[-1] == "_":
        pattern += r"(?!\w)"
    return re.search(pattern, text, re.IGNORECASE) is not None


def metrics(outcomes: list[Outcome]) -> dict[str, float | int | None]:
    answerable = [o for o in outcomes if o.golden.expected_urls]
    should, did = (
        {id(o) for o in outcomes if not o.golden.expected_urls},
        {id(o) for o in outcomes if o.abstained},
    )
    cited = sum(o.cited for o in answerable)
    checked = [o for o in answerable if o.phrase_found is not None]
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
        "answer_phrase": _share(
            sum(o.phrase_found is True for o in checked), len(checked)
        ),
    }


def metrics_by_kind(outcomes: list[Outcome]) -> dict[str, dict]:
    kinds: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in outcomes:
        kinds[outcome.golden.kind or "-"].append(outcome)
    return {kind: metrics(items) for kind, items in sorted(kinds.items())}


def _share(part: float, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def floor_suggest(outcomes: list[Outcome]) -> tuple[float, float]:
    """The RELEVANCE_FLOOR that best separates the questions that should abstain
    from the others in these outcomes, and the share of questions it decides right.

    A question abstains when its best cosine similarity is under the floor and it
    has no lexical evidence, so only questions without lexical evidence move.
    """
    points = [
        (o.evidence.similarity, o.evidence.lexical, not o.golden.expected_urls)
        for o in outcomes
        if o.evidence is not None
    ]
    if not points:
        return 0.0, 0.0
    candidates = sorted({round(similarity, 4) for similarity, _, _ in points} | {0.0})
    best_floor, best_right = 0.0, -1
    for low, high in zip(candidates, [*candidates[1:], 1.0], strict=True):
        floor = round((low + high) / 2, 4) if high > low else low
        right = sum(
            (similarity < floor and not lexical) == should
            for similarity, lexical, should in points
        )
        if right > best_right:
            best_floor, best_right = floor, right
    return best_floor, best_right / len(points)
