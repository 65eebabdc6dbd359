"""The docs owner's loop, measured: a section pinned from one phrasing of a question,
asked in another.

    .venv/bin/python -m bench.loop [--sets borg] [--window N]

In the quality benchmark's index (``bench.query quality``, the four sites in one
index, served by the local model), for each golden set whose answerable questions
have a second phrasing written with the set (``rephrased``): every other one of
them gets the section that answers it pinned, from its first phrasing, as an
editor would from its group (the chunk of its expected page that holds its
expected phrase, else the chunk of that page the question ranks first). Then,
scoped (within the question's own source, as the widget asks) and mixed (the whole
index):

- **pinned, 2nd phrasing first**: the share of the pinned questions' second
  phrasings whose first result is the pinned section (and, in brackets, its page),
  before the pins (what the search alone does) and after;
- **others r@5**: recall@5 of every other answerable question of the set, before
  and after (the goal: moved by at most 0.01), and the questions that should
  abstain whose answer does (a pin must not answer them).

The pins are deleted at the end, and nothing is logged.

Then the words readers use, on the same half of each set, with no pin: each
pinned question's *first* phrasing is asked once by a reader (logged, as the Ask
page logs it); the suggestions the admin's *Words readers use* page makes of
those of them logged as unanswered or doubtful (``retrieval.suggestions``, as a
superuser sees them) are accepted as they are offered, the most asked first, at
most as many as the questions pinned. Scoped and mixed:

- **2nd phrasing, page first**: the share of those questions' second phrasings
  whose first result is their expected page, before the synonyms and after;
- **others r@5**: recall@5 of every other answerable question, before and after.

The synonyms, the logs and their vectors are deleted at the end.
"""

from __future__ import annotations

import argparse
from datetime import timedelta

from bench.common import django_fresh
from bench.query import (
    CORPORA,
    GOLDEN_FILES,
    QUALITY_DB,
    golden_arguments,
    golden_index,
    ingest_corpora,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    golden_arguments(parser)
    args = parser.parse_args()
    django_fresh(keep=True, database=QUALITY_DB, EMBEDDING_BACKEND="hashing")

    from retrieval.evaluation import golden_load
    from retrieval.models import Pin, QueryLog, Synonym

    ingest_corpora()
    print(
        f"{'set':>6} {'scope':>7} {'pinned':>6} {'2nd first: before':>18} "
        f"{'after':>12} {'others':>6} {'r@5 before':>10} {'after':>6} "
        f"{'abst. kept':>10}"
    )
    with golden_index(window=args.window):
        sets = {}
        for name in args.sets.split(","):
            golden = golden_load(args.goldens / GOLDEN_FILES[name])
            if not any(g.rephrased for g in golden if g.expected_urls):
                print(f"{name:>6}  no second phrasings in this set")
                continue
            sets[name] = golden
            _pins_measured(name, golden)
        print(f"pins left after the run: {Pin.objects.count()}")
        print(
            f"\n{'words':>5} {'set':>6} {'scope':>7} {'asked':>5} {'offered':>7} "
            f"{'accepted':>8} {'2nd page first: before':>22} {'after':>6} "
            f"{'others':>6} {'r@5 before':>10} {'after':>6}"
        )
        for name, golden in sets.items():
            _synonyms_measured(name, golden)
    logs = QueryLog.objects.filter(user__username=READER).count()
    print(f"synonyms left after the run: {Synonym.objects.count()}, its logs: {logs}")


def _halves(golden: list) -> tuple[list, list]:
    """Every other answerable question with a second phrasing, and every other
    answerable question."""
    answerable = [g for g in golden if g.expected_urls]
    pinned = [g for g in answerable if g.rephrased][::2]
    return pinned, [g for g in answerable if g not in pinned]


def _scopes(name: str) -> dict:
    from retrieval.searchable import SearchFilters
    from sources.models import Source

    source = Source.objects.get(name=CORPORA[name].name)
    return {"scoped": SearchFilters(source_ids=(source.pk,)), "mixed": SearchFilters()}


def _pins_measured(name: str, golden: list) -> None:
    from retrieval.models import Pin
    from retrieval.pins import pin_create
    from sources.models import SYSTEM

    pinned, others = _halves(golden)
    should_abstain = [g for g in golden if not g.expected_urls]
    scopes = _scopes(name)
    source_id = scopes["scoped"].source_ids[0]
    sections = {g.question: _section(g, source_id) for g in pinned}
    before = {
        scope: (
            [_first(g.rephrased, f) for g in pinned],
            _recall(others, f),
            _abstaining(should_abstain, f),
        )
        for scope, f in scopes.items()
    }
    made = [
        pin_create(chunk=sections[g.question], questions=[g.question], user=SYSTEM).pk
        for g in pinned
    ]
    try:
        for scope, f in scopes.items():
            after = [_first(g.rephrased, f) for g in pinned]
            firsts, recall_before, abstained_before = before[scope]
            print(
                f"{name:>6} {scope:>7} {len(pinned):>6} "
                f"{_share(firsts, pinned, sections):>18} "
                f"{_share(after, pinned, sections):>12} {len(others):>6} "
                f"{recall_before:>10.2f} {_recall(others, f):>6.2f} "
                f"{abstained_before:>4} → {_abstaining(should_abstain, f)}/"
                f"{len(should_abstain)}"
            )
    finally:
        Pin.objects.filter(pk__in=made).delete()


# The reader who asks the first phrasings, and the editor who accepts what the
# suggestions page offers (a superuser: every source's questions are theirs).
READER = "bench-loop-reader"
EDITOR = "bench-loop-editor"


def _synonyms_measured(name: str, golden: list) -> None:
    """The second part (see the module docstring), for one set."""
    from django.contrib.auth.models import User
    from django.utils import timezone

    from retrieval.models import QueryLog, Synonym
    from retrieval.questions import question_answer
    from retrieval.suggestions import synonym_suggestions
    from retrieval.synonyms import synonym_add

    pinned, others = _halves(golden)
    scopes = _scopes(name)
    reader = User.objects.get_or_create(username=READER)[0]
    editor = User.objects.get_or_create(
        username=EDITOR, defaults={"is_staff": True, "is_superuser": True}
    )[0]
    before = {
        scope: ([_page_first(g, f) for g in pinned], _recall(others, f))
        for scope, f in scopes.items()
    }
    # A moment before the first asking: the suggestions read this run's logs only.
    since = timezone.now() - timedelta(seconds=1)
    logs = [
        question_answer(question=g.question, user=reader, k=5, log=True).log_id or 0
        for g in pinned
    ]
    made: list[int] = []
    try:
        offered = synonym_suggestions(user=editor, since=since)
        asked = QueryLog.objects.filter(pk__in=logs).filter(_grouped()).count()
        for suggestion in [s for s in offered if s.means][: len(pinned)]:
            synonym, new = synonym_add(
                source=suggestion.source,
                words=suggestion.word,
                means=suggestion.means,
                user=editor,
            )
            print(f"      accepted: {synonym} ({suggestion.askings} askings)")
            if new:
                made.append(synonym.pk)
        for scope, f in scopes.items():
            firsts, recall_before = before[scope]
            after = [_page_first(g, f) for g in pinned]
            print(
                f"{'syn':>5} {name:>6} {scope:>7} {asked:>5} {len(offered):>7} "
                f"{len(made):>8} {sum(firsts) / len(pinned):>22.2f} "
                f"{sum(after) / len(pinned):>6.2f} {len(others):>6} "
                f"{recall_before:>10.2f} {_recall(others, f):>6.2f}"
            )
    finally:
        Synonym.objects.filter(pk__in=made).delete()
        QueryLog.objects.filter(user=reader).delete()


def _grouped():
    """The logs the suggestions are made from: unanswered or doubtful."""
    from retrieval.asked import Concern

    return Concern.UNANSWERED.condition | Concern.DOUBTFUL.condition


def _page_first(golden, filters) -> bool:
    """Whether the second phrasing's first result is of an expected page."""
    from retrieval.search import chunks_search
    from sources.models import SYSTEM

    hits = chunks_search(
        query=golden.rephrased, user=SYSTEM, k=5, per_page=1, filters=filters
    ).hits
    return bool(hits) and hits[0].chunk.page.url in golden.expected_urls


def _first(question: str, filters) -> tuple[int, int] | None:
    """The first result's chunk and page."""
    from retrieval.search import chunks_search
    from sources.models import SYSTEM

    hits = chunks_search(
        query=question, user=SYSTEM, k=5, per_page=1, filters=filters
    ).hits
    return (hits[0].pk, hits[0].page_id) if hits else None


def _recall(goldens: list, filters) -> float:
    """Recall@5 of the expected pages."""
    from retrieval.search import chunks_search
    from sources.models import SYSTEM

    found = 0
    for g in goldens:
        hits = chunks_search(
            query=g.question, user=SYSTEM, k=5, per_page=1, filters=filters
        ).hits
        found += any(h.chunk.page.url in g.expected_urls for h in hits)
    return found / len(goldens)


def _abstaining(goldens: list, filters) -> int:
    """How many of these questions' answers abstain."""
    from retrieval.questions import question_answer
    from sources.models import SYSTEM

    return sum(
        question_answer(
            question=g.question, user=SYSTEM, k=5, filters=filters, log=False
        ).abstained
        for g in goldens
    )


def _section(golden, source_id: int):
    """The chunk an editor would pin for ``golden``: of its expected page, the one
    holding its expected phrase, else the one the question ranks first."""
    from retrieval.evaluation import phrase_in
    from retrieval.models import Chunk
    from retrieval.search import chunks_search
    from retrieval.searchable import SearchFilters
    from sources.models import SYSTEM

    chunks = list(
        Chunk.objects.filter(page__url__in=golden.expected_urls)
        .select_related("page")
        .order_by("page__url", "position")
    )
    if not chunks:
        raise SystemExit(f"no chunk of {sorted(golden.expected_urls)} in the index")
    if golden.expected_phrase:
        for chunk in chunks:
            if phrase_in(golden.expected_phrase, chunk.text):
                return chunk
    ranked = chunks_search(
        query=golden.question,
        user=SYSTEM,
        k=50,
        per_page=50,
        filters=SearchFilters(source_ids=(source_id,)),
    ).hits
    ids = {chunk.pk for chunk in chunks}
    best = next((hit.pk for hit in ranked if hit.pk in ids), chunks[0].pk)
    return next(chunk for chunk in chunks if chunk.pk == best)


def _share(firsts, pinned, sections) -> str:
    """Share whose first result is the pinned section (its page, in brackets)."""
    n = len(pinned)
    chunk = sum(
        f is not None and f[0] == sections[g.question].pk
        for f, g in zip(firsts, pinned, strict=True)
    )
    page = sum(
        f is not None and f[1] == sections[g.question].page_id
        for f, g in zip(firsts, pinned, strict=True)
    )
    return f"{chunk / n:.2f} ({page / n:.2f})"


if __name__ == "__main__":
    main()
