"""JSON parsing with a bound on nesting depth.

The standard parser recurses once per level and raises ``RecursionError`` somewhere
near a thousand levels, depending on how deep the caller's stack already is; code
that walks the result recursively afterwards (``repr``, serializers) can fail at
shallower depths still. No input this product reads nests more than a few levels,
so anything deeper than ``MAX_DEPTH`` is refused as a ``ValueError``.

Imports no app, so that every app can use it.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 32


class TooDeep(ValueError):
    def __init__(self, max_depth: int) -> None:
        super().__init__(f"nested more than {max_depth} levels deep")


def loads(text: str | bytes, *, max_depth: int = MAX_DEPTH, **kwargs: Any) -> Any:
    """``json.loads`` that raises ``TooDeep`` instead of recursing without bound."""
    try:
        value = json.loads(text, **kwargs)
    except RecursionError:
        raise TooDeep(max_depth) from None
    check_depth(value, max_depth=max_depth)
    return value


def check_depth(value: object, *, max_depth: int = MAX_DEPTH) -> None:
    """Raise ``TooDeep`` when lists and objects nest more than ``max_depth`` levels.

    Level by level rather than recursively, for the same reason as above.
    """
    level = _containers([value])
    depth = 0
    while level:
        depth += 1
        if depth > max_depth:
            raise TooDeep(max_depth)
        level = _containers(
            child
            for container in level
            for child in (
                container.values() if isinstance(container, dict) else container
            )
        )


def _containers(values: Any) -> list[Any]:
    return [value for value in values if isinstance(value, dict | list)]
