"""Bar charts as inline SVG, drawn on the server: readable without JavaScript,
printable, and every bar carries its exact value in a tooltip (``<title>``).

Every piece of text goes through ``format_html``; nothing here marks a string safe.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

LEFT, RIGHT, TOP, BOTTOM = 64, 12, 12, 40
GRID_LINES = 5
TEXT = "#555"
GRID = "#d9d9d9"


@dataclass(frozen=True)
class Series:
    label: str
    color: str
    values: Sequence[float]


def short_number(value: float) -> str:
    """1,234 → 1.2k, 3,400,000 → 3.4M: for axis labels."""
    for size, suffix in [(1e9, "G"), (1e6, "M"), (1e3, "k")]:
        if abs(value) >= size:
            return f"{value / size:.1f}".rstrip("0").rstrip(".") + suffix
    return f"{value:g}"


def nice_step(value: float) -> float:
    """The next 1, 2 or 5 × 10ⁿ at or above ``value``, at least 1 (the charts count
    whole things: deliveries, pages, tokens)."""
    if value <= 1:
        return 1
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power:
            return step * power
    return 10 * power


def axis(largest: float) -> tuple[float, int]:
    """The top of a value axis and its number of grid steps (at most GRID_LINES),
    on round numbers."""
    step = nice_step(largest / GRID_LINES)
    return step * max(1, math.ceil(largest / step)), max(1, math.ceil(largest / step))


def _join(parts: Sequence[SafeString]) -> SafeString:
    return format_html_join("", "{}", ((part,) for part in parts))


def _frame(
    *, width: int, height: int, largest: float, labels: Sequence[str], title: str
) -> tuple[list[SafeString], float, float, float]:
    """Axes, grid and x labels; returns the parts, the slot width, the plot height
    and the value at the top of the plot."""
    top, lines = axis(largest)
    plot_w, plot_h = width - LEFT - RIGHT, height - TOP - BOTTOM
    slot = plot_w / max(len(labels), 1)
    parts = [format_html("<title>{}</title>", title)]
    for n in range(lines + 1):
        value = top * n / lines
        y = TOP + plot_h - plot_h * n / lines
        parts.append(
            format_html(
                '<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="{}"/>'
                '<text x="{}" y="{}" text-anchor="end" font-size="11" fill="{}">'
                "{}</text>",
                LEFT,
                width - RIGHT,
                f"{y:.1f}",
                f"{y:.1f}",
                GRID,
                LEFT - 6,
                f"{y + 4:.1f}",
                TEXT,
                short_number(value),
            )  # fmt: skip
        )
    every = max(1, math.ceil(len(labels) / 14))  # at most 14 labels fit
    for index, label in enumerate(labels):
        if index % every:
            continue
        x = LEFT + slot * (index + 0.5)
        parts.append(
            format_html(
                '<text x="{}" y="{}" text-anchor="middle" font-size="11" fill="{}">'
                "{}</text>",
                f"{x:.1f}",
                height - BOTTOM + 16,
                TEXT,
                label,
            )  # fmt: skip
        )
    return parts, slot, plot_h, top


def _svg(*, width: int, height: int, title: str, parts: list[SafeString]) -> str:
    return format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {} {}" width="{}" '
        'height="{}" role="img" aria-label="{}">{}</svg>',
        width, height, width, height, title, _join(parts),
    )  # fmt: skip


def _bar(
    x: float, y: float, w: float, h: float, color: str, tooltip: str
) -> SafeString:
    return format_html(
        '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}</title></rect>',
        f"{x:.1f}", f"{y:.1f}", f"{max(w, 0):.1f}", f"{max(h, 0):.1f}", color, tooltip,
    )  # fmt: skip


def stacked_bars(
    *,
    labels: Sequence[str],
    series: Sequence[Series],
    title: str,
    width: int = 640,
    height: int = 240,
) -> str:
    """One bar per label, its series stacked bottom up."""
    totals = [sum(s.values[i] for s in series) for i in range(len(labels))]
    parts, slot, plot_h, top = _frame(
        width=width,
        height=height,
        largest=max(totals, default=0),
        labels=labels,
        title=title,
    )
    bar_w = slot * 0.7
    for index, label in enumerate(labels):
        x = LEFT + slot * index + (slot - bar_w) / 2
        base = TOP + plot_h
        for s in series:
            value = s.values[index]
            if not value:
                continue
            h = plot_h * value / top
            base -= h
            tip = f"{label}: {value:,.0f} {s.label}"
            parts.append(_bar(x, base, bar_w, h, s.color, tip))
    return _svg(width=width, height=height, title=title, parts=parts)


def grouped_bars(
    *,
    labels: Sequence[str],
    series: Sequence[Series],
    title: str,
    width: int = 640,
    height: int = 240,
) -> str:
    """One group per label, a bar per series side by side."""
    largest = max((max(s.values, default=0) for s in series), default=0)
    parts, slot, plot_h, top = _frame(
        width=width, height=height, largest=largest, labels=labels, title=title
    )
    bar_w = slot * 0.8 / max(len(series), 1)
    for index, label in enumerate(labels):
        x = LEFT + slot * index + slot * 0.1
        for offset, s in enumerate(series):
            value = s.values[index]
            h = plot_h * value / top
            tip = f"{label}: {value:,.0f} {s.label}"
            parts.append(
                _bar(x + offset * bar_w, TOP + plot_h - h, bar_w, h, s.color, tip)
            )
    return _svg(width=width, height=height, title=title, parts=parts)


def horizontal_bars(
    *,
    rows: Sequence[tuple[str, float, str]],
    title: str,
    width: int = 560,
    row_height: int = 26,
    label_width: int = 150,
) -> str:
    """One labelled bar per row (label, value, colour), its value written after it."""
    height = row_height * len(rows) + 8
    top = max((value for _, value, _ in rows), default=0) or 1
    room = width - label_width - 70
    parts = [format_html("<title>{}</title>", title)]
    for index, (label, value, color) in enumerate(rows):
        y = 4 + index * row_height
        w = room * value / top
        parts.append(
            format_html(
                '<text x="{}" y="{}" text-anchor="end" font-size="12" fill="{}">'
                "{}</text>",
                label_width - 8,
                y + row_height / 2 + 4,
                TEXT,
                label,
            )  # fmt: skip
        )
        parts.append(
            _bar(label_width, y + 3, w, row_height - 8, color, f"{label}: {value:,.0f}")
        )
        parts.append(
            format_html(
                '<text x="{}" y="{}" font-size="12" fill="{}">{}</text>',
                f"{label_width + w + 6:.1f}",
                y + row_height / 2 + 4,
                TEXT,
                f"{value:,.0f}",
            )  # fmt: skip
        )
    return _svg(width=width, height=height, title=title, parts=parts)
