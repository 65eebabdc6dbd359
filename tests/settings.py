"""The product's settings for the test suite, with the deterministic embedder.

The product defaults to a semantic model (``local`` or ``openai``); tests name
``hashing`` so that they need no model files and their scores are reproducible.
Set before the settings are read, so child processes started by tests inherit it.
"""

from __future__ import annotations

import os

os.environ["EMBEDDING_BACKEND"] = "hashing"
os.environ.pop("RELEVANCE_FLOOR", None)

from kbsite.settings import *  # noqa: E402,F403
