"""A readable line diff of two Markdown texts, for editors (difflib underneath).

Changed lines come with a few lines of context and the heading of the section they
are in; long unchanged stretches are folded; a changed line paired with the line
it replaced marks the words that differ.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Literal

from kbsite.text import (
    HEADING,
    clean_inline,
    fenced,
    heading_id,
    without_heading_ids,
)

CONTEXT = 3
# Lines this similar (difflib's ratio) are shown as one line edited, word by word.
PAIR_RATIO = 0.5
WORDS = re.compile(r"\s+|\w+|[^\w\s]")
PLAIN_WORD = re.compile(r"\w+")
# Between the headings of a section's path, as citations show it.
SEPARATOR = " › "
# Emphasis and code marks at a word's edge ("*size*", "`x`"), not inside one.
MARKS = re.compile(r"(?<!\w)[*_`]{1,2}(?=\S)|(?<=\S)[*_`]{1,2}(?!\w)")

Kind = Literal["same", "added", "removed"]


@dataclass(frozen=True)
class Segment:
    text: str
    changed: bool


@dataclass(frozen=True)
class Line:
    kind: Kind
    old_number: int | None
    new_number: int | None
    segments: tuple[Segment, ...]

    @property
    def text(self) -> str:
        return "".join(segment.text for segment in self.segments)


@dataclass
class Block:
    """Lines shown together; ``folded`` blocks are unchanged lines hidden at first."""

    lines: list[Line] = field(default_factory=list)
    folded: bool = False
    heading: str = ""  # the section the first line is in, for changed blocks


@dataclass(frozen=True)
class Diff:
    blocks: list[Block]
    added: int
    removed: int

    @property
    def unchanged(self) -> bool:
        return not (self.added or self.removed)


def markdown_diff(old: str, new: str, *, context: int = CONTEXT) -> Diff:
    # An empty text has no lines (not one empty line): a first version is all new.
    a, b = old.split("\n") if old else [], new.split("\n") if new else []
    old_paths, new_paths = section_paths(a), section_paths(b)
    # Lines are matched as stored and shown as read (no heading ids).
    shown_a, shown_b = without_heading_ids(a), without_heading_ids(b)
    blocks: list[Block] = []
    added = removed = 0
    for tag, i1, i2, j1, j2 in _opcodes(a, b, old_paths, new_paths):
        if tag == "equal":
            blocks.extend(
                _equal(
                    shown_a, i1, i2, j1, context, first=not blocks, last=i2 == len(a)
                )
            )
            continue
        removed += i2 - i1
        added += j2 - j1
        lines = _changed(shown_a[i1:i2], shown_b[j1:j2], i1, j1)
        if not blocks or blocks[-1].folded:
            blocks.append(Block())
        blocks[-1].lines.extend(lines)
        # Named after the section of its first change, not of its context.
        if not blocks[-1].heading:
            touched = _touched(b, new_paths, j1, j2) or _touched(a, old_paths, i1, i2)
            blocks[-1].heading = touched[0] if touched else ""
    return Diff(blocks=_merge(blocks), added=added, removed=removed)


Opcode = tuple[str, int, int, int, int]


def _opcodes(
    a: list[str], b: list[str], old_paths: list[str], new_paths: list[str]
) -> list[Opcode]:
    """difflib's steps from ``a`` to ``b``, each block of lines only added or only
    removed slid, among the places it could equally be, to the one that spans the
    fewest sections (then the lowest). difflib takes the first match it finds:
    a section added after one that ends as it ends ("```", a blank line) would
    otherwise take that section's last line, and name it."""
    opcodes = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    tags = [tag for tag, *_ in opcodes]
    spans = [list(bounds) for _, *bounds in opcodes]  # i1, i2, j1, j2
    for n, tag in enumerate(tags):
        if tag not in ("insert", "delete"):
            continue
        before = spans[n - 1] if n and tags[n - 1] == "equal" else None
        after = spans[n + 1] if n + 1 < len(tags) and tags[n + 1] == "equal" else None
        lines, paths, lo, hi = (
            (b, new_paths, spans[n][2], spans[n][3])
            if tag == "insert"
            else (a, old_paths, spans[n][0], spans[n][1])
        )
        room = (
            before[1] - before[0] if before else 0,
            after[1] - after[0] if after else 0,
        )
        shift = _slide(lines, paths, lo, hi, room)
        for bounds, ends in (
            (before, (1, 3)),
            (spans[n], (0, 1, 2, 3)),
            (after, (0, 2)),
        ):
            for k in ends if bounds else ():
                bounds[k] += shift  # type: ignore[index]  # bounds: not None
    return [
        (tag, i1, i2, j1, j2)
        for tag, (i1, i2, j1, j2) in zip(tags, spans, strict=True)
        if tag != "equal" or i2 > i1
    ]


def _slide(
    lines: list[str], paths: list[str], lo: int, hi: int, room: tuple[int, int]
) -> int:
    """How far to move ``lines[lo:hi]``, all added or all removed, up (negative)
    or down within ``room`` (the unchanged lines above and below): the same text
    results wherever it is as long as the line it leaves equals the one it takes."""
    shifts = [0]
    for s in range(1, room[0] + 1):
        if lines[lo - s] != lines[hi - s]:
            break
        shifts.append(-s)
    for s in range(1, room[1] + 1):
        if lines[lo + s - 1] != lines[hi + s - 1]:
            break
        shifts.append(s)
    return min(
        shifts, key=lambda s: (len(set(_touched(lines, paths, lo + s, hi + s))), -s)
    )


def _touched(lines: list[str], paths: list[str], lo: int, hi: int) -> list[str]:
    """The sections of ``lines[lo:hi]``, by their lines that say something: a
    blank line between two sections belongs to neither."""
    written = [paths[k] for k in range(lo, hi) if lines[k].strip()]
    return written or paths[lo:hi]


def _same(text: str, old: int, new: int) -> Line:
    return Line("same", old + 1, new + 1, (Segment(text, False),))


def _equal(
    a: list[str], i1: int, i2: int, j1: int, context: int, *, first: bool, last: bool
) -> list[Block]:
    """Unchanged lines: context next to the changes around them, the rest folded."""
    lines = [_same(a[i], i, j1 + i - i1) for i in range(i1, i2)]
    head = [] if first else lines[:context]
    tail = [] if last else lines[len(head) :][-context:] if context else []
    middle = lines[len(head) : len(lines) - len(tail)]
    blocks = []
    if head:
        blocks.append(Block(lines=head))
    if middle:
        blocks.append(Block(lines=middle, folded=True))
    if tail:
        blocks.append(Block(lines=tail))
    return blocks


def _merge(blocks: list[Block]) -> list[Block]:
    """Join neighbouring blocks that are both shown (context and changes)."""
    merged: list[Block] = []
    for block in blocks:
        if merged and not block.folded and not merged[-1].folded:
            merged[-1].lines.extend(block.lines)
            merged[-1].heading = merged[-1].heading or block.heading
        else:
            merged.append(block)
    return merged


def _changed(old: list[str], new: list[str], i1: int, j1: int) -> list[Line]:
    """Removed then added lines; a line replaced by a similar one shows its words."""
    if len(old) == len(new):
        pairs = list(zip(old, new, strict=True))
        if all(_similar(x, y) for x, y in pairs):
            lines = []
            for offset, (x, y) in enumerate(pairs):
                before, after = _word_segments(x, y)
                lines.append(Line("removed", i1 + offset + 1, None, before))
                lines.append(Line("added", None, j1 + offset + 1, after))
            return lines
    # Whole lines in or out: the line's colour says it, no word is marked.
    removed = [
        Line("removed", i1 + n + 1, None, (Segment(text, False),))
        for n, text in enumerate(old)
    ]
    added = [
        Line("added", None, j1 + n + 1, (Segment(text, False),))
        for n, text in enumerate(new)
    ]
    return removed + added


def _similar(x: str, y: str) -> bool:
    return difflib.SequenceMatcher(None, x, y, autojunk=False).ratio() >= PAIR_RATIO


def _word_segments(x: str, y: str) -> tuple[tuple[Segment, ...], tuple[Segment, ...]]:
    a, b = WORDS.findall(x), WORDS.findall(y)
    before: list[Segment] = []
    after: list[Segment] = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        same = tag == "equal"
        if i2 > i1:
            before.append(Segment("".join(a[i1:i2]), not same))
        if j2 > j1:
            after.append(Segment("".join(b[j1:j2]), not same))
    return tuple(before), tuple(after)


def section_paths(lines: list[str]) -> list[str]:
    """For each line, the path of the section it is in, in plain words
    ("Configuration › intersphinx_mapping"): each heading's text without its
    marks, link targets or ``{#id}``, under the headings of lower levels above it.
    A "#" line in fenced code is no heading."""
    stack: list[tuple[int, str]] = []
    paths = []
    for line, code in fenced(lines):
        match = None if code else HEADING.match(line)
        if match:
            level = len(match.group(1))
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, plain_heading(match.group(2))))
        paths.append(SEPARATOR.join(text for _, text in stack if text))
    return paths


def plain_heading(text: str) -> str:
    text, _ = heading_id(text)
    return " ".join(MARKS.sub("", clean_inline(text)).split())


@dataclass(frozen=True)
class Change:
    """What one step from a text to the next changed, in numbers and places."""

    lines_added: int
    lines_removed: int
    words_added: int
    words_removed: int
    sections: list[str]  # paths of the sections touched, in the order of the text

    @property
    def empty(self) -> bool:
        return not (self.lines_added or self.lines_removed)

    def summary(self, limit: int = 3) -> str:
        """ "3 lines changed in Configuration › intersphinx_mapping"."""
        lines = max(self.lines_added, self.lines_removed)
        text = f"{lines} line{'s' if lines != 1 else ''} changed"
        named = [s for s in self.sections if s]
        if named:
            more = len(named) - limit
            text += " in " + ", ".join(named[:limit])
            if more > 0:
                text += f" and {more} more section{'s' if more != 1 else ''}"
        return text


def _lines(text: str) -> list[str]:
    """The text's lines; the newline that ends the last one starts none."""
    return text.removesuffix("\n").split("\n") if text else []


def change_measure(old: str, new: str) -> Change:
    """The lines and words added and removed from ``old`` to ``new``, and the
    sections they are in (a removed line's section in the old text)."""
    a, b = _lines(old), _lines(new)
    old_paths, new_paths = section_paths(a), section_paths(b)
    shown_a, shown_b = without_heading_ids(a), without_heading_ids(b)
    sections: dict[str, None] = {}
    lines_added = lines_removed = words_added = words_removed = 0
    for tag, i1, i2, j1, j2 in _opcodes(a, b, old_paths, new_paths):
        if tag == "equal":
            continue
        lines_removed += i2 - i1
        lines_added += j2 - j1
        for path in _touched(a, old_paths, i1, i2) + _touched(b, new_paths, j1, j2):
            sections.setdefault(path)
        for line in _changed(shown_a[i1:i2], shown_b[j1:j2], i1, j1):
            if len(line.segments) == 1 and not line.segments[0].changed:
                words = len(PLAIN_WORD.findall(clean_inline(line.text)))  # whole
            else:
                words = sum(
                    len(PLAIN_WORD.findall(segment.text))
                    for segment in line.segments
                    if segment.changed
                )
            if line.kind == "added":
                words_added += words
            else:
                words_removed += words
    return Change(
        lines_added=lines_added,
        lines_removed=lines_removed,
        words_added=words_added,
        words_removed=words_removed,
        sections=list(sections),
    )
