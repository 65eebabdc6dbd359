"""Which changes a subscription wants: kinds, URL patterns, headings and a least
size, each optional, all of those given required.

- **Kinds**: the change's kind is one of them (none given: every kind).
- **URL patterns**, one per line: a glob matched against the whole page URL
  (``https://docs.example.com/config/*``; ``*`` also crosses ``/``), or a regular
  expression searched in it after ``re:`` (``re:/v[0-9]+/``), run by RE2
  (``kbsite.patterns``: linear time, no backreferences or lookarounds). The page
  passes if one of them matches.
- **Headings**, one per line: a section the change touched is under one of them.
  A heading matches a section path, in any case, where the path starts with it
  or one of the path's headings does (``Options`` matches ``Configuration ›
  Options › timeout``); write a path with ``›`` or ``>`` between headings. A
  change that names no section (a page gone, moved or a duplicate) does not pass.
- **Least size**: the change added or removed at least this many lines (the
  larger of the two, the number its summary gives). A change that is not
  measured (gone, moved, duplicate) passes.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kbsite.patterns import NOTHING, Pattern, glob_compile, pattern_compile

logger = logging.getLogger(__name__)

REGEX_PREFIX = "re:"
SEPARATOR = " › "
HEADING_SEPARATORS = re.compile(r"\s*[›>]\s*")


@dataclass(frozen=True)
class UrlPattern:
    text: str
    regex: Pattern
    glob: bool

    def matches(self, url: str) -> bool:
        if self.glob:
            return self.regex.match(url) is not None
        return self.regex.search(url) is not None


def url_pattern(line: str) -> UrlPattern:
    """One line of URL patterns, compiled; ValueError saying why it is not one."""
    line = line.strip()
    if line.startswith(REGEX_PREFIX):
        expression = line[len(REGEX_PREFIX) :].strip()
        if not expression:
            raise ValueError(f"{line!r} has no regular expression after re:")
        # PatternError is a ValueError saying why, naming the line.
        return UrlPattern(line, pattern_compile(expression, named=line), glob=False)
    # Matched from the start; the translation ends at the end: the whole URL.
    return UrlPattern(line, glob_compile(line), glob=True)


def lines_of(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def url_patterns(text: str) -> list[UrlPattern]:
    """Every line compiled; ValueError for the first that is not a pattern."""
    return [url_pattern(line) for line in lines_of(text)]


def heading_normal(text: str) -> str:
    """A heading path as the filter compares it: separators as ``›``, any case."""
    parts = [" ".join(part.split()) for part in HEADING_SEPARATORS.split(text)]
    return SEPARATOR.join(part for part in parts if part).casefold()


def section_under(path: str, heading: str) -> bool:
    """Whether the section at ``path`` is under ``heading`` (both normalized)."""
    return path.startswith(heading) or f"{SEPARATOR}{heading}" in path


@dataclass(frozen=True)
class ChangeFilter:
    kinds: frozenset[str] = frozenset()
    urls: tuple[UrlPattern, ...] = ()
    headings: tuple[str, ...] = ()
    min_lines: int = 0

    @classmethod
    def build(
        cls,
        *,
        kinds: Iterable[str] = (),
        url_patterns: str = "",
        headings: str = "",
        min_lines: int = 0,
    ) -> ChangeFilter:
        """From a subscription's fields. A line that does not compile (saved
        before it was checked, or by hand) matches nothing and is logged: a bad
        filter must not stop a page from being ingested."""
        urls = []
        for line in lines_of(url_patterns):
            try:
                urls.append(url_pattern(line))
            except ValueError as exc:
                logger.warning("subscription URL pattern matches nothing: %s", exc)
                urls.append(UrlPattern(line, NOTHING, glob=False))
        normal = (heading_normal(line) for line in lines_of(headings))
        return cls(
            kinds=frozenset(kinds),
            urls=tuple(urls),
            headings=tuple(h for h in normal if h),
            min_lines=min_lines,
        )

    def passes(
        self,
        *,
        kind: str,
        url: str,
        sections: Sequence[str],
        lines_added: int | None,
        lines_removed: int | None,
    ) -> bool:
        if self.kinds and kind not in self.kinds:
            return False
        if self.urls and not any(pattern.matches(url) for pattern in self.urls):
            return False
        if self.headings and not self._under_a_heading(sections):
            return False
        if self.min_lines and (lines_added is not None or lines_removed is not None):
            return max(lines_added or 0, lines_removed or 0) >= self.min_lines
        return True

    def _under_a_heading(self, sections: Sequence[str]) -> bool:
        paths = [heading_normal(section) for section in sections if section]
        return any(
            section_under(path, heading) for path in paths for heading in self.headings
        )
