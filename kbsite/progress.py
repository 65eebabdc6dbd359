"""A progress bar for long management commands, without a dependency."""

from __future__ import annotations

import time


class ProgressBar:
    WIDTH = 30

    def __init__(self, stream, *, label: str, every: float = 0.2) -> None:
        self.stream = stream
        self.label = label
        self.every = every
        self.started = time.monotonic()
        self.shown = 0.0

    def update(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.shown < self.every and done < total:
            return
        self.shown = now
        share = done / total if total else 1.0
        filled = round(self.WIDTH * share)
        rate = done / max(now - self.started, 1e-9)
        self.stream.write(
            f"\r[{'#' * filled}{'.' * (self.WIDTH - filled)}] {done}/{total} "
            f"{self.label} ({rate:.0f}/s)",
            ending="",
        )
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("")
