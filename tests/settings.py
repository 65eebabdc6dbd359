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
from kbsite.settings import DATABASES  # noqa: E402

# A replica for the tests of reads routed to one (tests/retrieval/test_replicas.py):
# Django's test mirror, a second connection to the test database. It is not among
# DATABASE_REPLICAS unless a test puts it there; a process given
# DATABASE_REPLICA_URLS keeps its own.
DATABASES.setdefault(
    "replica_1", {**DATABASES["default"], "TEST": {"MIRROR": "default"}}
)

# Passwords hashed for speed, not strength: PBKDF2's million rounds take a third of
# a second for each user made with a password and each login, hundreds of times in
# the suite. Child processes keep the product's hashers (they make their own users).
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
