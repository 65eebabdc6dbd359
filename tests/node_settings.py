"""The test suite's settings for the processes of ``tests/kbsite/test_nodes.py``, with
the job queue's log (django-q2's logger is ``django-q``) at INFO whatever the product's
default: each scheduler's ticks ("created task … from schedule […]") and each worker's
runs ("processing …", "Processed …") are what that test counts, across nodes."""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import LOGGING

LOGGING["loggers"]["django-q"] = {"level": "INFO"}
