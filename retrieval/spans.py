"""The part of a passage that answers a question: its best sentence, with what that
sentence brings along.

A sentence that introduces a code block, a table or a list ("use a command such as
this:") comes with it; a definition list entry (a term line, then its description)
comes whole; a sentence of a description comes with its term. Pure functions over
Markdown: the extractive answer quotes spans, and citations show them as excerpts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from kbsite.text import (
    FENCE,
    HEADING,
    clean_inline,
    content_words,
    fenced,
    sentences,
)
from retrieval.packing import LIST_ITEM, TABLE_ROW
from retrieval.sections import split_blocks

# Text kept after a span, for the excerpt that shows it in context.
AFTER_CHARS = 600
# An attached list or table is cut after this many lines.
ATTACHED_LINES = 20
# A description quoted with its term is cut after this many characters.
DESCRIPTION_CHARS = 600
# A line that names something rather than saying something: short, no sentence end.
TERM = re.compile(r"^[^\n]{1,120}$")
SENTENCE_STOP = (".", "!", "?", ":", ";", ",")
# Emphasis marks at a word's edge ("*size*", "**Note**"), not inside one
# ("max_connections").
EMPHASIS = re.compile(r"(?<!\w)[*_]{1,2}(?=\S)|(?<=\S)[*_]{1,2}(?!\w)")
# Text judged by meaning for one answer by default (see _within_budget).
MEANING_CHARS = 1200
# Of a lead-in with the sentence before it and what it introduces, what is judged.
LEAD_IN_JUDGED = 240
# A stem counted double by words: part of an identifier, or a number.
IDENTIFIER = re.compile(r"[_.\d]")
# An identifier as a question writes it: a command-line option ("-W",
# "--keep-going"), words joined by . or : ("str.split", "auto_explain.log_min_duration",
# "py:func"), or by _ ("max_connections"). Each alternative is anchored where a
# token starts, so a long word costs one pass.
NAMED_IDENTIFIER = re.compile(
    r"(?<![\w-])--?[A-Za-z][\w-]*|(?<![\w.])\w+(?:[.:]\w+)+|(?<!\w)\w*_\w+"
)
# Parts of what only looks like one: "e.g.", "i.e.", "3.11", "10:30".
NOT_NAMED = re.compile(r"(?:[^\W\d_]|\d+)(?:[.:](?:[^\W\d_]|\d+))*", re.IGNORECASE)
# Each text's cosine similarity to the question, in order.
Similarity = Callable[[Sequence[str]], Sequence[float]]
HOW = re.compile(r"^\s*how\b|\bhow (?:do|can|to|should)\b", re.IGNORECASE)
# A sentence that introduces what its section holds rather than saying it: "This
# section describes an easy way to translate with sphinx-intl." Quoted alone it
# answers nothing; the body that follows is the answer.
TOPIC = re.compile(
    r"\bthis (?:section|chapter|page|document|guide|tutorial|article)\b"
    r"|^(?:here|below|the following)\b",
    re.IGNORECASE,
)
# A sentence that stops where a sentence cannot end: on a word, a comma or a dash
# (the Markdown of "... state with" and a code block below it).
UNFINISHED = re.compile(r"[\w,\-–—`]\s*$")
# The sentences of a paragraph quoted up to the lead-in that ends it (its example
# then comes too) when they are this short; longer, the quote skips to the lead-in.
LEAD_IN_CHARS = 400


@dataclass(frozen=True)
class Block:
    kind: str  # prose, term, code, table, list or heading
    text: str


@dataclass(frozen=True)
class Span:
    lead: str  # the quoted sentence, Markdown without link targets
    attached: str  # a code block, table, list or description it brings, or ""
    score: float  # how much of the question's words it holds
    after: str = ""  # plain text that follows it in the passage, for excerpts
    similarity: float | None = None  # to the question, when judged by meaning

    @property
    def markdown(self) -> str:
        return f"{self.lead}\n\n{self.attached}" if self.attached else self.lead

    @property
    def plain(self) -> str:
        """One line of plain text: for excerpts."""
        text = clean_inline(self.markdown)
        text = "\n".join(
            line for line, code in fenced(text.split("\n")) if not FENCE.match(line)
        )
        return unmark(text)


def stems(text: str) -> set[str]:
    """Content words, crudely stemmed: "indexes", "indexing" and "index" meet."""
    return {_stem(w) for w in content_words(text)}


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    for suffix in ("ing", "es", "ed", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def blocks(markdown: str) -> list[Block]:
    """Blank-line separated blocks, each with its kind; a fenced block is one."""
    return _mark_terms([_block(text) for text in split_blocks(markdown.split("\n"))])


def _block(text: str) -> Block:
    first = text.lstrip().split("\n", 1)[0]
    if FENCE.match(first):
        kind = "code"
    elif TABLE_ROW.match(first):
        kind = "table"
    elif LIST_ITEM.match(first):
        kind = "list"
    elif HEADING.match(first) and "\n" not in text.strip():
        kind = "heading"
    else:
        kind = "prose"
    return Block(kind, text)


def _mark_terms(found: list[Block]) -> list[Block]:
    """The term of a definition list entry (``max_connections (integer)``), followed
    by its description: an H4–H6 line (definition terms become H6 headings when
    pages are read), or a one-line prose block with no sentence end."""
    marked = list(found)
    for i, block in enumerate(found[:-1]):
        text = block.text.strip()
        heading = HEADING.match(text) if block.kind == "heading" else None
        if heading and len(heading.group(1)) >= 4:
            text = heading.group(2)
        elif not (
            block.kind == "prose"
            and TERM.match(text)
            and not text.endswith(SENTENCE_STOP)
        ):
            continue
        if found[i + 1].kind in {"prose", "list"}:
            marked[i] = Block("term", text)
    return marked


def best_span(
    question: str,
    markdown: str,
    *,
    similar: Similarity | None = None,
    budget: int = MEANING_CHARS,
) -> Span | None:
    """The span of ``markdown`` that answers the question best (the earliest of
    equals), or None if it has no prose at all; see ``best_spans``."""
    return best_spans(question, [markdown], similar=similar, budget=budget)[0]


def best_spans(
    question: str,
    markdowns: Sequence[str],
    *,
    similar: Similarity | None = None,
    budget: int = MEANING_CHARS,
) -> list[Span | None]:
    """The best span of each Markdown text, None for a text with no prose.

    With ``similar`` (the cosine similarity of each text to the question, from a
    model that embeds sentences in milliseconds), a sentence is judged by its own
    meaning: the one closest to the question wins, whatever its place, after any
    that holds more of the identifiers the question names (``autodoc_typehints``
    names exactly what was asked; a small model barely reads it). One call judges
    the sentences of every text, ``budget`` characters of them at most. Without,
    by the question's words it holds.
    """
    wanted = stems(question)
    named = identifiers_in(question)
    how = HOW.search(question) is not None
    parsed = [blocks(markdown) for markdown in markdowns]
    judged = [_judged(found, wanted, how) for found in parsed]
    weighed = _within_budget(judged, budget) if similar else []
    meanings = list(similar([c.text for c in weighed])) if similar and weighed else []
    closeness = dict(zip(map(id, weighed), meanings, strict=True))
    spans: list[Span | None] = []
    for found, candidates in zip(parsed, judged, strict=True):
        near = [c for c in candidates if id(c) in closeness]
        if near:
            best = max(
                near,
                key=lambda c: (
                    _naming(named, c.text),
                    closeness[id(c)],
                    -c.order,
                ),
            )
        elif candidates:
            best = max(candidates, key=lambda c: (c.words, -c.order))
        else:
            spans.append(None)
            continue
        span = _span(found, best.index, best.sentence, best.words, how=how)
        if id(best) in closeness:
            span = replace(span, similarity=round(closeness[id(best)], 4))
        spans.append(span)
    return spans


def _within_budget(judged: list[list[_Candidate]], budget: int) -> list[_Candidate]:
    """The candidates judged by meaning, ``budget`` characters of text at most: the
    best of each text by the question's words first, then the others holding most
    of its words, the first text's before the next's, each in its order.
    Embedding costs by the token, 5-10 ms a sentence on two cores: every sentence
    of three passages would take a second or more."""
    ranked = [
        sorted(candidates, key=lambda c: (-c.words, c.order)) for candidates in judged
    ]
    # Each text's best by words first: a text left unjudged could not be weighed
    # against the others.
    firsts = [candidates[0] for candidates in ranked if candidates]
    rest = sorted(
        (c for candidates in ranked for c in candidates[1:]),
        key=lambda c: -c.words,  # stable: by text, then order, among equals
    )
    kept: list[_Candidate] = []
    size = 0
    for candidate in [*firsts, *rest]:
        if size + len(candidate.text) > budget:
            continue
        kept.append(candidate)
        size += len(candidate.text)
    return kept


def identifiers_in(question: str) -> list[re.Pattern[str]]:
    """Patterns of the identifiers the question names (``str.split``,
    ``max_connections``, ``-W``, ``--keep-going``), each matching the identifier
    whole in a text: not ``str.rsplit`` for ``str.split``, and whatever its case
    but for an option (``-w`` is not ``-W``). The
    words a question's identifiers are made of are no identifiers themselves
    ("split" is in every sentence about splitting)."""
    found = dict.fromkeys(
        m.group(0)
        for m in NAMED_IDENTIFIER.finditer(question)
        if not NOT_NAMED.fullmatch(m.group(0))
    )
    return [
        re.compile(
            rf"(?<![\w.-]){re.escape(name)}(?![\w-]|\.\w)",
            0 if name.startswith("-") else re.IGNORECASE,
        )
        for name in found
    ]


def _naming(named: list[re.Pattern[str]], text: str) -> int:
    return sum(1 for pattern in named if pattern.search(text))


@dataclass(frozen=True)
class _Candidate:
    index: int  # of its block
    sentence: str
    text: str  # what is judged: a term with its description's first sentence
    words: float  # the question's words it holds (see _score)
    order: int


def opening_span(question: str, markdown: str) -> Span | None:
    """The span ``markdown`` opens with: its first sentence, with what it brings
    along; None if it has no prose. What a pinned section answers with: an editor
    chose the section for the question, not one of its sentences, and a section
    says first what it is about."""
    found = blocks(markdown)
    how = HOW.search(question) is not None
    judged = _judged(found, stems(question), how)
    if not judged:
        return None
    first = judged[0]
    return _span(found, first.index, first.sentence, first.words, how=how)


def _judged(found: list[Block], wanted: set[str], how: bool) -> list[_Candidate]:
    judged: list[_Candidate] = []
    for index, block in enumerate(found):
        for sentence in _candidates(block):
            text = sentence
            if block.kind == "term" and index + 1 < len(found):
                # A term is judged with its description's first sentence.
                text = " ".join([sentence, *_sentences(found[index + 1].text)[:1]])
            words = _score(wanted, text)
            if _introduces(found, index, sentence):
                # A lead-in says little by itself: it is judged with the
                # sentence before it and the start of what it introduces.
                text = " ".join([*_sentences(block.text)[-2:], found[index + 1].text])
                text = text[:LEAD_IN_JUDGED]
                if how and words:
                    words += 0.5  # "how do I" wants the command, not the background
            judged.append(_Candidate(index, sentence, text, words, len(judged)))
    return judged


def _introduces(found: list[Block], index: int, sentence: str) -> bool:
    """Whether the sentence ends its block before code, a table or a list, and
    leads into it: with a colon, or unfinished ("Go back to the last committed
    state with" and the command below), which quoted alone would stop mid-way."""
    block = found[index]
    return (
        block.kind == "prose"
        and (sentence.rstrip().endswith(":") or UNFINISHED.search(sentence) is not None)
        and _sentences(block.text)[-1:] == (sentence,)
        and index + 1 < len(found)
        and found[index + 1].kind in {"code", "table", "list"}
    )


def _candidates(block: Block) -> list[str]:
    if block.kind == "prose":
        return list(_sentences(block.text))
    if block.kind == "term":
        return [" ".join(block.text.split())]
    if block.kind == "list":
        return [_item(item) for item in _items(block.text) if _item(item)]
    return []


@lru_cache(maxsize=4096)
def _sentences(text: str) -> tuple[str, ...]:
    # Link targets go first: a sentence end inside a link's title would cut it.
    # Cached: a span looks at a block's sentences several times.
    flat = " ".join(clean_inline(text).split())
    return tuple(s.strip() for s in sentences(flat) if s.strip())


def _items(text: str) -> list[str]:
    items: list[str] = []
    for line in text.split("\n"):
        if LIST_ITEM.match(line) or not items:
            items.append(line)
        else:
            items[-1] += "\n" + line
    return items


def _item(item: str) -> str:
    return " ".join(clean_inline(LIST_ITEM.sub("", item, count=1)).split())


def _score(wanted: set[str], text: str) -> float:
    """Words of the question held, an identifier (max_connections, os.path.join)
    counting double: it names exactly what was asked for."""
    held = wanted & stems(text)
    return sum(2.0 if IDENTIFIER.search(w) else 1.0 for w in held)


def _span(
    found: list[Block], index: int, sentence: str, score: float, *, how: bool = False
) -> Span:
    block = found[index]
    following = found[index + 1] if index + 1 < len(found) else None
    lead = clean_inline(sentence)
    if block.kind == "term" and following is not None:
        return Span(f"**{lead}**", _described(found, index + 1), score,
                    after=_plain(found[index + 2 :]))  # fmt: skip
    if block.kind == "prose" and index > 0 and found[index - 1].kind == "term":
        term = clean_inline(" ".join(found[index - 1].text.split()))
        return Span(f"**{term}**", _described(found, index), score,
                    after=_plain(found[index + 1 :]))  # fmt: skip
    ending = _sentences(block.text)[-1:] if block.kind == "prose" else ()
    if (
        following is not None
        and ending
        and ending[0] != sentence
        and _introduces(found, index, ending[0])
    ):
        # The paragraph goes on to a lead-in ("Example with options:"): the quote
        # goes on to it, and brings what it introduces.
        return Span(_up_to_lead_in(block, sentence, ending[0]), _attached(following),
                    score, after=_plain(found[index + 2 :]))  # fmt: skip
    if _names_its_topic(found, index, sentence):
        body = _body(found[index + 1 :])
        if body:
            return Span(lead, body, score, after=_plain(found[index + 2 :]))
    if following is not None and _introduces(found, index, sentence):
        return Span(lead, _attached(following), score,
                    after=_plain(found[index + 2 :]))  # fmt: skip
    last = sentence
    if how and block.kind == "prose" and "`" not in sentence:
        # "How do I" wants the way: a sentence that says a thing can be done
        # ("PostgreSQL supports building indexes without locking out writes.")
        # goes on to the next one of its paragraph when that names the code.
        parts = _sentences(block.text)
        after = parts[parts.index(sentence) + 1 :][:1] if sentence in parts else ()
        if after and "`" in after[0]:
            last = after[0]
            lead = clean_inline(f"{sentence} {last}")
    rest = _rest_of(block, last)
    if block.kind == "list":
        lead = f"- {lead}"
    return Span(lead, "", score, after=" ".join([rest, _plain(found[index + 1 :])]))


def _described(found: list[Block], index: int) -> str:
    """The description at ``index``, with what its closing lead-in introduces
    ("… takes the following values:" and the list)."""
    text = _description(found[index])
    last = _sentences(found[index].text)[-1:]
    if last and index + 1 < len(found) and _introduces(found, index, last[0]):
        return f"{text}\n\n{_attached(found[index + 1])}"
    return text


def _up_to_lead_in(block: Block, sentence: str, lead_in: str) -> str:
    """The sentences of the block from ``sentence`` to the lead-in that ends it,
    or the two alone, joined by an ellipsis, when those are too long."""
    parts = _sentences(block.text)
    between = parts[parts.index(sentence) : parts.index(lead_in) + 1]
    text = " ".join(between)
    if len(text) > LEAD_IN_CHARS:
        text = f"{sentence} … {lead_in}"
    return clean_inline(text)


def _names_its_topic(found: list[Block], index: int, sentence: str) -> bool:
    """Whether the sentence only introduces its section ("This section
    describes …"): the last of the section's first paragraph, saying so, with
    more of the section after it. (One followed by more sentences of its own is
    quoted with them, as any other.)"""
    first = index == 0 or found[index - 1].kind == "heading"
    block = found[index]
    parts = _sentences(block.text) if block.kind == "prose" else ()
    if not (first and parts[-1:] == (sentence,) and TOPIC.search(sentence)):
        return False
    return index + 1 < len(found) and found[index + 1].kind != "heading"


def _body(rest: list[Block]) -> str:
    """What a section says after its introduction: the next block, a list or
    table within ATTACHED_LINES, code whole, prose within DESCRIPTION_CHARS, a
    definition with its term."""
    if not rest or rest[0].kind == "heading":
        return ""
    if rest[0].kind == "list":
        return _attached(Block("list", "\n\n".join(_list_blocks(rest))))
    if rest[0].kind in {"code", "table"}:
        return _attached(rest[0])
    if rest[0].kind == "term" and len(rest) > 1:
        term = clean_inline(" ".join(rest[0].text.split()))
        return f"**{term}** {_description(rest[1])}"
    return _description(rest[0])


def _list_blocks(rest: list[Block]) -> list[str]:
    """The texts of a list that blank lines split into blocks: its items, and
    the indented code and paragraphs inside them (numbered steps with their
    commands)."""
    texts = [rest[0].text]
    for block in rest[1:]:
        inside = block.kind == "list" or block.text[:1].isspace()
        if block.kind == "heading" or not inside:
            break
        texts.append(block.text)
    return texts


def _rest_of(block: Block, sentence: str) -> str:
    """Plain text of the block after this sentence (or list item)."""
    parts = _candidates(block)
    if sentence not in parts:
        return ""
    return _plain([Block("prose", " ".join(parts[parts.index(sentence) + 1 :]))])


def _plain(found: list[Block], *, enough: int = AFTER_CHARS) -> str:
    """Plain text of these blocks, stopping once ``enough`` characters are had."""
    parts: list[str] = []
    size = 0
    for block in found:
        if block.kind == "heading":
            continue
        parts.append(clean_inline(block.text))
        size += len(parts[-1])
        if size >= enough:
            break
    return unmark(" ".join(parts))


def unmark(text: str) -> str:
    """Markdown emphasis and code marks off, whitespace folded: plain text."""
    text = text.replace("`", "")
    if "*" in text or "_" in text:
        text = EMPHASIS.sub("", text)
    return " ".join(text.split())


def _attached(block: Block) -> str:
    if block.kind == "code":
        return block.text
    lines = block.text.split("\n")
    if len(lines) <= ATTACHED_LINES:
        return clean_inline(block.text)
    return clean_inline("\n".join(lines[:ATTACHED_LINES])) + "\n…"


def _description(block: Block) -> str:
    text = clean_inline(" ".join(block.text.split()))
    if len(text) <= DESCRIPTION_CHARS:
        return text
    kept = ""
    for sentence in sentences(text):
        if kept and len(kept) + len(sentence) > DESCRIPTION_CHARS:
            break
        kept = f"{kept} {sentence}".strip()
    return kept + " …"


def excerpt(question: str, markdown: str, *, limit: int) -> str:
    """Plain text of the part of ``markdown`` that matches the question best, and
    what follows it, cut at a word near ``limit`` characters."""
    span = best_span(question, markdown)
    if span is None or span.score == 0:
        text = _plain(blocks(markdown), enough=limit + 100)
    else:
        text = f"{span.plain} {span.after}"
    return cut(text, limit)


def cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0] + " …"
