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

A reader's word an editor gave synonyms for is one term with the documentation's
words as its alternatives (``retrieval.keywords.query_terms``): a chunk holding
any of them holds it, and it weighs as they do, so a chunk holding only "reset"
holds as much of "How do I undo a commit?" as of "How do I reset a commit?".

Neither counts when at least half of what the question calls by name (its
products, tools and files: ``retrieval.keywords.names_in``) is named by no chunk
the caller may search. The vectors of a small model place "TimescaleDB's
compression policy" beside PostgreSQL's own compression, and "pgbouncer.ini's
pool_mode" beside its connection settings: they say what kind of thing a question
is about, never which one. A question about a product the documentation never
names is about another product's documentation. One unknown name among known ones
is more likely the asker's own word for something the documentation names
otherwise ("Mac" beside "Homebrew"), so it takes half.

The keyword hits also say which chunks hold a **word of the question's own**: one
that at most OWN_CHUNKS chunks hold (an error code, a product's name, a word new
since the counts). A model's vector of a word it has never seen stands for
nothing, so the question's other words alone place it, and pages sharing them
come out nearest; the search ranks a chunk holding such a word, and most of the
question's weight, before them (``retrieval.search``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from retrieval.keywords import QueryTerms

# Share of the question's weight one chunk must hold: measured on the PostgreSQL
# manual's golden set (see docs/quality.md), where 0.6 kept every answerable question
# but one and let no unanswerable one through.
LEXICAL_COVERAGE = 0.6
# Keyword hits looked at, best first.
LEXICAL_HITS = 10
# Chunks that may hold a word of the question's own (see the module docstring):
# an identifier or error code defined once and mentioned twice. On the manual, 46
# pages given one paragraph alike but for a word of its own each: searching each
# paragraph found 8 of them in the top 5 with the vector list above its floor, 45
# with this rule (the 46th paragraph went into a table of contents, which is not
# read); the golden sets' recall@5 and MRR did not move (docs/benchmarks.md).
OWN_CHUNKS = 3


@dataclass(frozen=True)
class Evidence:
    similarity: float  # best cosine similarity of a visible chunk
    floor: float | None  # in force; None: none learned yet
    held: float  # best share of the question's weight held by one chunk
    keywords: bool = True  # whether keyword evidence was looked for
    names: int = 0  # what the question calls by name
    unknown: tuple[str, ...] = ()  # of those, what no searchable chunk names

    @property
    def vector(self) -> bool:
        return self.floor is not None and self.similarity >= self.floor

    @property
    def lexical(self) -> bool:
        return self.keywords and self.held >= LEXICAL_COVERAGE

    @property
    def off_subject(self) -> bool:
        """The question is about things the documentation does not name."""
        return bool(self.unknown) and 2 * len(self.unknown) >= self.names

    @property
    def enough(self) -> bool:
        return (self.vector or self.lexical) and not self.off_subject


def held_share(terms: QueryTerms, matched: int) -> float:
    """Share of the question's weight held by a chunk matching the terms whose
    bits are set in ``matched``."""
    whole = sum(t.weight for t in terms.terms)
    held = sum(t.weight for bit, t in enumerate(terms.terms) if matched & (1 << bit))
    return held / whole if whole else 0.0


def own_terms(terms: QueryTerms, matched: list[int]) -> int:
    """Bits of the question's own words: the terms that the counts give at most
    OWN_CHUNKS chunks (none: a word new since the counts) and that one to
    OWN_CHUNKS of the keyword hits hold (``matched``: their bits). A word new
    since the counts that many new pages hold is held by many hits: not its own.
    The hits are the best by score, so a rarer word's holders are among them."""
    own = 0
    for bit, term in enumerate(terms.terms):
        if term.chunks > OWN_CHUNKS:
            continue
        holders = sum(1 for bits in matched if bits & (1 << bit))
        if 1 <= holders <= OWN_CHUNKS:
            own |= 1 << bit
    return own


def holds_own_word(terms: QueryTerms, matched: int, own: int) -> bool:
    """Whether a chunk with these bits holds a word of the question's own
    (``own_terms``) and enough of its weight to be evidence by itself."""
    return bool(matched & own) and held_share(terms, matched) >= LEXICAL_COVERAGE


def evidence_weigh(
    *,
    similarity: float,
    floor: float | None,
    terms: QueryTerms,
    matched: list[int],
    keywords: bool = True,
    unknown: tuple[str, ...] = (),
) -> Evidence:
    """``unknown``: the names of the question no searchable chunk holds (see
    ``names_unknown``)."""
    held = max((held_share(terms, m) for m in matched[:LEXICAL_HITS]), default=0.0)
    return Evidence(
        similarity=similarity,
        floor=floor,
        held=round(held, 4),
        keywords=keywords,
        names=sum(1 for t in terms.terms if t.name) if keywords else 0,
        unknown=unknown if keywords else (),
    )


def names_unknown(
    terms: QueryTerms, matched: list[int], held: Callable[[list[str]], set[str]]
) -> tuple[str, ...]:
    """The question's names that no searchable chunk holds, as the question wrote
    them. A name a keyword hit holds is known; ``held`` looks for the others in
    every searchable chunk (one query, and only when a name is left). A name an
    editor gave the documentation's words for is known where a chunk holds one of
    them: "Mac" is no other product's where the docs say "macOS"."""
    found = 0
    for bits in matched:
        found |= bits
    left = [t for bit, t in enumerate(terms.terms) if t.name and not found & (1 << bit)]
    if not left:
        return ()
    known = held(list(dict.fromkeys(text for t in left for text in t.searched)))
    return tuple(t.name for t in left if known.isdisjoint(t.searched))
