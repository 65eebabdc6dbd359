"""``manage.py reembed``: derive stale pages again, fill the configured embedding
space, and switch to it."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from ingest.delivery.rederive import page_rederive_counted, pages_stale_extraction
from kbsite.progress import ProgressBar
from retrieval.embeddings import get_embedder
from retrieval.reembed import Progress, index_rebuild
from retrieval.spaces import space_serving


class Command(BaseCommand):
    help = (
        "Derive again, from their stored bodies, the pages an older extractor made "
        "Markdown of; re-chunk every live page from its stored Markdown and embed, "
        "with the model the EMBEDDING_* settings name, every chunk text that has no "
        "vector in that space; then make it the serving space. Queries keep using "
        "the old space until then. Safe to interrupt and run again."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--keep-old",
            action="store_true",
            help="Keep the old space's vectors after the switch (default: delete).",
        )

    def handle(self, *args, keep_old: bool, **options) -> None:
        target = get_embedder()
        serving = space_serving()
        current = serving.name if serving else "none yet"
        self.stdout.write(f"serving: {current}; target: {target.space}")
        derived, derive_tokens = self._rederive()
        bar = ProgressBar(self.stderr, label="pages")
        progress = Progress(pages_total=0)
        for progress in index_rebuild(target=target, keep_old=keep_old):
            bar.update(progress.pages_done, progress.pages_total)
        bar.close()
        switched = (
            f"switched from {progress.switched_from}"
            if progress.switched_from
            else "no switch needed"
        )
        self.stdout.write(
            f"{derived} pages derived again ({derive_tokens:,} tokens); "
            f"{progress.pages_done} pages, {progress.texts_embedded} texts embedded "
            f"({progress.tokens:,} tokens), {progress.rechunked} pages re-chunked; "
            f"{target.space} serves ({switched})"
        )

    def _rederive(self) -> tuple[int, int]:
        """Pages whose Markdown an older extractor made: derived again, their new
        chunk texts embedded in the serving space (and the configured one)."""
        pages = pages_stale_extraction()
        total = pages.count()
        derived = tokens = 0
        bar = ProgressBar(self.stderr, label="pages derived again")
        for number, page in enumerate(pages.iterator(chunk_size=100), start=1):
            spent = page_rederive_counted(page=page)
            if spent is not None:
                derived += 1
                tokens += spent
            bar.update(number, total)
        bar.close()
        return derived, tokens
