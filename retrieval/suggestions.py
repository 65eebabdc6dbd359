"""Synonyms to suggest to the docs owner, from what readers asked and the index
answered badly.

Readers ask in their own words, and a word the documentation never uses finds
nothing on the keyword side and little on the vector side of a small model. So
the words of the period's *unanswered* and *doubtful* questions an editor may
see (``retrieval.asked``) that the index does not hold, or that at most
SUGGESTED_CHUNKS passages hold (``Lexeme``: their English stem counted in the
live chunks of every source), are ranked by how many askings used them. Each comes
with the page its group (the group that asked it most) was answered from, else the
page nearest that group, among the pages of sources the editor sees; and with
candidate documentation words: the heading words of that page's section nearest
the group in meaning (its heading path without the page's own title, the
innermost heading's words first and within one heading those the fewest passages
of the index hold first), the question's own words left out. A
section, not the page: the rarest heading words of a page of forty questions
(a FAQ) are those of other questions than the group's. The editor reads, edits
and adds them (``synonym_add``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from kbsite.text import STOPWORDS
from retrieval import sql
from retrieval.asked import (
    Concern,
    answered_from,
    chunks_near,
    pages_near,
    question_groups,
)
from retrieval.chunking import SEPARATOR
from retrieval.evidence import OWN_CHUNKS
from retrieval.grouping import Group
from retrieval.keywords import TOKEN
from retrieval.models import Chunk, Synonym
from retrieval.searchable import SearchFilters, searchable_chunks
from retrieval.synonyms import singulars
from sources.models import Caller, Page, Source

# A question's word at most this many passages hold is one the documentation does
# not use for it: the chunks that count as holding a word of the question's own
# (``retrieval.evidence.OWN_CHUNKS``), a name or a code defined once.
SUGGESTED_CHUNKS = OWN_CHUNKS
# Suggestions listed, the most asked first.
SUGGESTIONS = 20
# Documentation words offered with each.
CANDIDATES = 3
# A word worth a synonym: letters only, at least three of them (not a code, a
# number or an identifier: those are the docs' own names or nothing).
WORD = re.compile(r"[^\W\d_]{3,}")
# Distinct words counted at most, the most asked first (one statement).
WORDS_COUNTED = 2000


@dataclass(frozen=True)
class Suggestion:
    word: str  # the reader's
    askings: int  # askings of the period that used it
    chunks: int  # passages of the index holding it (0: none)
    question: str  # the most asked question of its group that used it
    page_id: int
    title: str
    url: str
    source: Source
    answered: bool  # the page is the one the group was answered from (else nearest)
    means: tuple[str, ...]  # candidate documentation words

    @property
    def widened(self) -> str:
        """The question as a search would read it with the synonym."""
        return f"{self.question} ({', '.join(self.means)})" if self.means else ""


@dataclass
class _Use:
    askings: int = 0
    # Per group (by its index): the word's askings in it, and the most asked
    # question of it that used the word, with its askings.
    groups: dict[int, tuple[int, int, str]] = field(default_factory=dict)

    def add(self, other: _Use) -> None:
        self.askings += other.askings
        for at, (askings, count, text) in other.groups.items():
            total, best_count, best = self.groups.get(at, (0, 0, ""))
            if count > best_count:
                best_count, best = count, text
            self.groups[at] = (total + askings, best_count, best)


def synonym_suggestions(
    *, user: Caller, since: datetime, limit: int = SUGGESTIONS
) -> list[Suggestion]:
    """Up to ``limit`` suggestions from ``user``'s unanswered and doubtful groups
    since then, the most asked word first (see the module docstring)."""
    groups: list[Group] = []
    for concern in (Concern.UNANSWERED, Concern.DOUBTFUL):
        groups += question_groups(user=user, concern=concern, since=since).groups
    uses = _word_uses(groups)
    ranked = sorted(uses, key=lambda w: (-uses[w].askings, w))[:WORDS_COUNTED]
    chunks = _chunks_holding(ranked)
    visible = set(Source.objects.visible_to(user).values_list("pk", flat=True))
    pages: dict[int, tuple[Page, bool] | None] = {}
    found: list[Suggestion] = []
    for word in ranked:
        if word not in chunks or chunks[word] > SUGGESTED_CHUNKS:
            continue  # a stopword to the index, or a word the docs use
        use = uses[word]
        at, (_, _, question) = max(use.groups.items(), key=lambda g: (g[1][0], -g[0]))
        if at not in pages:
            pages[at] = _page_for(groups[at], user, visible)
        chosen = pages[at]
        if chosen is None:
            continue
        page, answered = chosen
        if Synonym.objects.filter(source_id=page.source_id, words=word).exists():
            continue
        found.append(
            Suggestion(
                word=word,
                askings=use.askings,
                chunks=chunks[word],
                question=question,
                page_id=page.pk,
                title=page.title,
                url=page.url,
                source=page.source,
                answered=answered,
                means=tuple(
                    _heading_words(
                        _section_near(groups[at], page, user), exclude=_words(question)
                    )
                ),
            )
        )
        if len(found) == limit:
            break
    return found


def _words(text: str) -> set[str]:
    return {
        word
        for word in (token.casefold() for token in TOKEN.findall(text))
        if WORD.fullmatch(word) and word not in STOPWORDS
    }


def _word_uses(groups: list[Group]) -> dict[str, _Use]:
    """Each word's askings, overall and per group; a plural counted with its
    singular when both were asked (a synonym of one holds the other)."""
    uses: dict[str, _Use] = {}
    for at, group in enumerate(groups):
        for question in group.questions:
            count = question.count
            for word in _words(question.text):
                one = _Use(askings=count, groups={at: (count, count, question.text)})
                uses.setdefault(word, _Use()).add(one)
    for word in sorted(uses, key=len, reverse=True):
        singular = next((s for s in singulars(word) if s in uses), None)
        if singular is not None:
            uses[singular].add(uses.pop(word))
    return uses


def _chunks_holding(words: Iterable[str]) -> dict[str, int]:
    """Passages holding each word, as counted; a word the English configuration
    drops (a stopword to the index) is missing."""
    words = list(words)
    if not words:
        return {}
    return {row.term: row.chunks for row in sql.term_counts(words)}


def _page_for(
    group: Group, user: Caller, visible: set[int]
) -> tuple[Page, bool] | None:
    """The page the group was answered from, else the nearest one, among the
    pages of sources the editor sees (True: answered from it)."""
    answered = [page.page_id for page in answered_from(group=group, user=user)]
    near = [page.page_id for page in pages_near(group=group, user=user)]
    pages = Page.objects.select_related("source").in_bulk(answered + near)
    for page_id in answered + near:
        page = pages.get(page_id)
        if page is not None and page.source_id in visible:
            return page, page_id in answered
    return None


def _section_near(group: Group, page: Page, user: Caller) -> list[str]:
    """The heading path of the page's chunk nearest the group's centroid, the
    innermost heading first (the page's title when none of its chunks is among
    the nearest)."""
    rows = chunks_near(
        group=group,
        searchable=searchable_chunks(user, SearchFilters(source_ids=(page.source_id,))),
    )
    on_page = [row for row in rows if row.page_id == page.pk]
    if not on_page:
        return [page.title]
    nearest = max(on_page, key=lambda row: row.similarity)
    heading = Chunk.objects.filter(pk=nearest.pk).values_list("heading", flat=True)
    parts = [part for part in (heading.first() or "").split(SEPARATOR) if part]
    # The outermost heading of a path is the page's own title ("Frequently asked
    # questions"): its words are the page's, not the section's.
    inner = parts[1:] if len(parts) > 1 else parts
    return list(reversed(inner)) or [page.title]


def _heading_words(headings: list[str], *, exclude: set[str]) -> list[str]:
    """The words of these headings, the innermost heading's first and within one
    heading those the fewest passages hold first, without ``exclude``."""
    words: list[tuple[int, str]] = []
    for depth, text in enumerate(headings):
        for token in TOKEN.findall(text):
            word = token.casefold()
            if any(word == seen for _, seen in words):
                continue
            if word not in exclude and word not in STOPWORDS and WORD.fullmatch(word):
                words.append((depth, word))
    held = _chunks_holding(word for _, word in words)
    ranked = sorted(
        ((depth, word) for depth, word in words if held.get(word)),
        key=lambda item: (item[0], held[item[1]]),
    )
    return [word for _, word in ranked][:CANDIDATES]
