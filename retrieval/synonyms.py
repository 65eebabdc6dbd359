"""Words readers use: per-source synonyms an editor adds ("undo" → "reset, revert"),
and what a search makes of them.

A question holds a synonym's reader's words when they are whole words of it, in
order: its words and identifiers as the keyword side reads them
(``retrieval.keywords.TOKEN``), compared casefolded, the last one also in a plural
(s, es, ies). "Undo?", "(undo)" and "UNDO" hold "undo", and so do "undos" and
"roll backs" ("roll back"); "undoing", "redo" and "roll-back" (one identifier) do
not. Where two synonyms overlap, the longer wins, then the earlier.

Such a question is searched as if it also said the documentation's words. The
synonyms applied are those of the sources the search covers
(``Searchable.source_ids``; all of them for a caller who may search every
source): a search filtered to other sources, or by a reader who may not search
the synonym's source, reads the question as written. A search that covers the
synonym's source and others reads it widened in all of them (one question, one
vector). On the keyword side the reader's words are one term whose alternatives
are the documentation's words (``retrieval.keywords``); on the vector side, the
text embedded is the question with the documentation's words added in brackets
(``question_widened``). Pins are still matched by the question as asked, so a
question holding a synonym is embedded twice, in one call. Looking them up costs
every search one
small statement (``retrieval.sql.synonyms_matching``): an exact match of the
question's runs of words against the unique index of (words, source).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from django.core.exceptions import ValidationError
from django.db import transaction

from retrieval import sql
from retrieval.keywords import TOKEN, Meant
from retrieval.models import Synonym, words_normalised
from sources.models import Caller, Source

# Words in a reader's phrase, at most: "how do I roll back a release" is a
# question, not a word.
PHRASE_WORDS = 4
# The question's words looked at: a longer question is a paste.
QUESTION_WORDS = 64
# A plural the last word may carry: "queries" holds "query", "boxes" "box",
# "undos" "undo".
PLURAL = re.compile(r"(?:(?<=\w\w)ies|(?<=\w)es|(?<=[^s])s)$")


def question_tokens(question: str) -> list[str]:
    """The question's words and identifiers, as the keyword side reads them."""
    return TOKEN.findall(question)[:QUESTION_WORDS]


def synonyms_in(question: str, *, source_ids: Sequence[int] | None) -> list[Meant]:
    """The synonyms of these sources (None: every source) whose reader's words
    the question holds, in the question's order; one statement."""
    tokens = question_tokens(question)
    spans = _spans(tokens)
    if not spans:
        return []
    found: dict[str, list[str]] = {}
    for row in sql.synonyms_matching(source_ids=source_ids, words=sorted(spans)):
        found.setdefault(row.words, []).extend(row.means)
    taken: list[Meant] = []
    used: set[int] = set()
    for start, length, words in sorted(
        ((s, n, w) for w, at in spans.items() if w in found for s, n in at),
        key=lambda m: (-m[1], m[0]),
    ):
        if used.isdisjoint(range(start, start + length)):
            used.update(range(start, start + length))
            said = " ".join(tokens[start : start + length]).lower()
            taken.append(Meant(start, length, said, tuple(dict.fromkeys(found[words]))))
    return sorted(taken, key=lambda m: m.start)


def _spans(tokens: list[str]) -> dict[str, list[tuple[int, int]]]:
    """Every run of up to PHRASE_WORDS tokens, normalised as a synonym's words
    are (the last also without a plural ending), with where it is."""
    spans: dict[str, list[tuple[int, int]]] = {}
    folded = [token.casefold() for token in tokens]
    for start in range(len(folded)):
        for length in range(1, min(PHRASE_WORDS, len(folded) - start) + 1):
            *before, last = folded[start : start + length]
            for form in {last, *singulars(last)}:
                words = " ".join([*before, form])
                spans.setdefault(words, []).append((start, length))
    return spans


def singulars(word: str) -> list[str]:
    """What ``word`` may be the plural of ("boxes": box, boxe)."""
    match = PLURAL.search(word)
    if match is None:
        return []
    stem = word[: match.start()]
    if match.group(0) == "ies":
        return [stem + "y", stem + "ie"]
    if match.group(0) == "es":
        return [stem, stem + "e"]
    return [stem]


def question_widened(question: str, meant: Sequence[Meant]) -> str:
    """What the vector side embeds: the question, with the documentation's words
    its reader's words mean added in brackets ("How do I undo a commit? (reset,
    revert)"); the question itself when it holds none."""
    said = {token.lower() for token in question_tokens(question)}
    added = [w for m in meant for w in m.means if w not in said]
    added = list(dict.fromkeys(added))
    return f"{question} ({', '.join(added)})" if added else question


# -- what editors write -------------------------------------------------------------


def words_check(words: str) -> str:
    """The words normalised as stored, or a ValidationError saying why a search
    could never find them in a question."""
    normal = words_normalised(words)
    read = " ".join(t.casefold() for t in TOKEN.findall(normal))
    if not read:
        raise ValidationError("Write a word or a short phrase.")
    if read != normal:
        raise ValidationError(
            f"A question is read as words and identifiers: “{normal}” would be "
            f"read as “{read}”. Write that, or another spelling."
        )
    if len(read.split()) > PHRASE_WORDS:
        raise ValidationError(f"At most {PHRASE_WORDS} words.")
    return normal


def means_check(means: Sequence[str]) -> list[str]:
    """The documentation's words, each normalised once, or a ValidationError."""
    kept = list(dict.fromkeys(w for w in map(words_normalised, means) if w))
    if not kept:
        raise ValidationError("Give at least one word the documentation uses.")
    if any(not TOKEN.search(w) for w in kept):
        raise ValidationError("Each of the documentation's words needs a letter.")
    return kept


def synonym_add(
    *, source: Source, words: str, means: Sequence[str], user: Caller
) -> tuple[Synonym, bool]:
    """The source's synonym for ``words``, with ``means`` added to what it meant
    already; True when it is new. Raises ValidationError for words a search could
    not find (``words_check``)."""
    words, means = words_check(words), means_check(means)
    with transaction.atomic():
        synonym, made = Synonym.objects.select_for_update().get_or_create(
            source=source,
            words=words,
            defaults={"means": means, "created_by_id": getattr(user, "pk", None)},
        )
        if not made:
            synonym.means = [*synonym.means, *means]
            synonym.save()
    return synonym, made
