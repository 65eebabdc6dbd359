"""Regular expressions editors write (a source's allow, deny and boilerplate
patterns, a subscription's URL patterns), compiled by RE2.

Python's ``re`` backtracks: ``(a+)+$`` searched in a URL ending in thirty a's and a
slash takes minutes, and nothing stops it. RE2 matches in time linear in the text
whatever the pattern, and has no backreferences, lookarounds, atomic groups or
possessive repeats, the features backtracking exists for; it refuses them. Its
syntax is otherwise Python's for what editors write, with these differences:
``\\d``, ``\\w``, ``\\s`` and ``\\b`` are ASCII only, ``\\Z`` is read as RE2's ``\\z``
(the same thing: the end of the text), flags are written inline (``(?i)``).

Linear is not enough alone: a huge pattern (``(a?){900}a{900}``) runs hundreds of
steps per character of the text, so a pattern whose compiled program is larger than
``MAX_PROGRAM_SIZE`` is refused too.

Imports no app, so that every app can use it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Hashable
from typing import Protocol

import re2

logger = logging.getLogger(__name__)

# RE2 program steps: ``[a-z]{900}`` is about 900, a URL written out one step a
# character, ``\pL`` (every letter, as UTF-8 byte ranges) 1,200. At this size the
# slowest pattern found, ``(a?){200}a{200}``, takes 1 ms on a URL of 2,000
# characters; ``(a|aa){1000}b`` (5,000 steps) 135 ms.
MAX_PROGRAM_SIZE = 1_000
# RE2's messages for what Python's re has and RE2 refuses (a backreference is an
# "invalid escape sequence: \1").
UNSUPPORTED = ("invalid perl operator", "bad repetition operator")
BACKREFERENCE = "invalid escape sequence: \\"


class Pattern(Hashable, Protocol):
    """A compiled pattern: what callers use of RE2's (and ``re``'s) objects."""

    @property
    def pattern(self) -> str: ...

    def search(self, text: str, /) -> object | None: ...

    def match(self, text: str, /) -> object | None: ...


class PatternError(ValueError):
    """A pattern RE2 cannot run; the message names it and says why, for the
    editor who wrote it."""


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # the error is raised, not printed on stderr
    return options


OPTIONS = _options()
# What a stored pattern RE2 refuses becomes: no URL or line, or every one.
NOTHING: Pattern = re2.compile(r"[^\x00-\x{10FFFF}]", OPTIONS)
EVERYTHING: Pattern = re2.compile("", OPTIONS)


def pattern_compile(text: str, *, named: str = "") -> Pattern:
    """``text`` compiled by RE2; ``PatternError`` naming it (or ``named``, the line
    the editor wrote around it) and saying why it cannot be."""
    shown = f"'{named or text}'"  # not repr: it would double each backslash
    try:
        compiled = re2.compile(_python_spellings(text), OPTIONS)
    except re2.error as exc:
        raise PatternError(_refusal(shown, exc)) from None
    size = compiled.programsize
    if size > MAX_PROGRAM_SIZE:
        raise PatternError(
            f"{shown} is too large to run quickly: it compiles to {size:,} steps, "
            f"more than {MAX_PROGRAM_SIZE:,} (long repeats such as {{500}}, or "
            "classes of every alphabet such as \\pL, make it so)"
        )
    return compiled


def pattern_problem(text: str) -> str:
    """Why RE2 cannot run ``text`` (the message of ``pattern_compile``), or ''."""
    try:
        pattern_compile(text)
    except PatternError as exc:
        return str(exc)
    return ""


def glob_compile(glob: str) -> Pattern:
    """A shell glob, as ``fnmatch`` reads it, for matching a whole text from its
    start (``.match``): ``*`` any run of characters (``/`` too), ``?`` one,
    ``[seq]`` one of them, ``[!seq]`` one not of them."""
    parts: list[str] = []
    i = 0
    while i < len(glob):
        char, i = glob[i], i + 1
        end = _class_end(glob, i) if char == "[" else None
        if char == "*":
            if parts[-1:] != [".*"]:
                parts.append(".*")
        elif char == "?":
            parts.append(".")
        elif end is not None:
            parts.append(_char_class(glob[i:end]))
            i = end + 1
        else:
            parts.append(re2.escape(char))
    expression = "(?s:" + "".join(parts) + r")\z"
    try:
        return re2.compile(expression, OPTIONS)
    except re2.error as exc:
        raise PatternError(f"'{glob}' is not a glob: {_detail(exc)}") from None


@functools.lru_cache(maxsize=1024)
def stored_pattern(text: str, *, refused: Pattern) -> Pattern:
    """A pattern saved before RE2 was checked (or written around the form):
    compiled, or ``refused`` (``NOTHING``, ``EVERYTHING``) if RE2 cannot run it,
    logged once per process. Never Python's ``re``: that is what let a pattern
    stall the worker."""
    try:
        return pattern_compile(text)
    except PatternError as exc:
        what = "nothing" if refused is NOTHING else "everything"
        logger.warning("a stored pattern matches %s: %s", what, exc)
        return refused


def _python_spellings(text: str) -> str:
    r"""``\Z`` (Python's end of the text) as RE2's ``\z``; an escaped backslash
    before a Z (``\\Z``) left alone."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            pair = text[i : i + 2]
            out.append(r"\z" if pair == r"\Z" else pair)
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _detail(exc: re2.error) -> str:
    message = exc.args[0] if exc.args else ""
    return message.decode(errors="replace") if isinstance(message, bytes) else message


def _refusal(shown: str, exc: re2.error) -> str:
    detail = _detail(exc)
    backreference = detail.startswith(BACKREFERENCE) and detail[-1:].isdigit()
    if backreference or detail.startswith(UNSUPPORTED):
        return (
            f"{shown} cannot be used: backreferences and lookarounds are not "
            "supported, nor atomic groups or possessive repeats; patterns run with "
            f"RE2, in time linear in the text (RE2 says: {detail})"
        )
    return f"{shown} is not a regular expression: {detail}"


def _class_end(glob: str, start: int) -> int | None:
    """Where the set opened before ``start`` closes, as fnmatch finds it (a ``]``
    first, or after ``!``, is one of the set); None if it does not."""
    j = start
    if j < len(glob) and glob[j] == "!":
        j += 1
    if j < len(glob) and glob[j] == "]":
        j += 1
    end = glob.find("]", j)
    return None if end < 0 else end


def _char_class(body: str) -> str:
    """A glob's set in RE2's syntax: every character literal but ``-`` between two
    (a range)."""
    negated = body.startswith("!")
    chars = body[1:] if negated else body
    out = []
    for k, char in enumerate(chars):
        inner = 0 < k < len(chars) - 1
        out.append("-" if char == "-" and inner else _class_char(char))
    return "[" + ("^" if negated else "") + "".join(out) + "]"


def _class_char(char: str) -> str:
    return "\\" + char if char in "\\]^[-" else char
