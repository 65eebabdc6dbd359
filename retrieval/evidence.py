"""Whether a search found evidence, or should abstain.

Two kinds of evidence count, either is enough:

- **vector**: the best cosine similarity reaches the floor in force: the
  ``RELEVANCE_FLOOR`` override, else the floor the serving space learned from the
  index itself (``retrieval.statistics``). No floor learned yet: no vector evidence.
- **lexical**: one chunk holds most of the question's weight, each word weighing
  by its rarity in the index (inverse document frequency; a word the index does
  not hold weighs most). Common words weigh little, so they never make up for a
  rare word that no chunk holds: "Aurora replication with IAM auth" finds
  "replication" and "auth" everywhere, and "Aurora" and "IAM" nowhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from retrieval.keywords import QueryTerms

# Share of the question's weight one chunk must hold: measured on the PostgreSQL
# manual's golden set (see docs/quality.md), where 0.6 kept every answerable question
# but one and let no unanswerable one through.
LEXICAL_COVERAGE = 0.6
# Keyword hits looked at, best first.
LEXICAL_HITS = 10


@dataclass(frozen=True)
class Evidence:
    similarity: float  # best cosine similarity of a visible chunk
    floor: float | None  # in force; None: none learned yet
    held: float  # best share of the question's weight held by one chunk
    keywords: bool = True  # whether keyword evidence was looked for

    @property
    def vector(self) -> bool:
        return self.floor is not None and self.similarity >= self.floor

    @property
    def lexical(self) -> bool:
        return self.keywords and self.held >= LEXICAL_COVERAGE

    @property
    def enough(self) -> bool:
        return self.vector or self.lexical


def held_share(terms: QueryTerms, matched: int) -> float:
    """Share of the question's weight held by a chunk matching the terms whose
    bits are set in ``matched``."""
    whole = sum(t.weight for t in terms.terms)
    held = sum(t.weight for bit, t in enumerate(terms.terms) if matched & (1 << bit))
    return held / whole if whole else 0.0


def evidence_weigh(
    *,
    similarity: float,
    floor: float | None,
    terms: QueryTerms,
    matched: list[int],
    keywords: bool = True,
) -> Evidence:
    held = max((held_share(terms, m) for m in matched[:LEXICAL_HITS]), default=0.0)
    return Evidence(
        similarity=similarity, floor=floor, held=round(held, 4), keywords=keywords
    )
