"""Django set-up for the benchmarks: their own database, the fake embedding API."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_DB = "kb_bench"


def django_with_fake_openai(dimensions: int = 256):
    """Start the fake OpenAI endpoint, point the settings at it, set Django up on a
    fresh benchmark database. Returns the running fake (it counts requests)."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbsite.settings")
    from tests.fakes.openai_api import FakeOpenAI

    fake = FakeOpenAI().__enter__()
    os.environ.update(
        EMBEDDED_DB_NAME=BENCH_DB,
        EMBEDDING_BACKEND="openai",
        EMBEDDING_MODEL="text-embedding-3-small",
        EMBEDDING_DIMENSIONS=str(dimensions),
        OPENAI_API_KEY="sk-bench",
        OPENAI_BASE_URL=fake.base_url,
        LOG_LEVEL="WARNING",
    )
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    return fake
