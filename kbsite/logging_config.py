"""The LOGGING setting: plain lines on the console, at one level for everything but
the job queue and the crawler's HTTP client."""

from __future__ import annotations

from typing import Any


def logging_config(level: str) -> dict[str, Any]:
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        },
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": "plain"}
        },
        "root": {"handlers": ["console"], "level": level},
        # One line per crawled URL is too many: the crawl's own rows record each one.
        "loggers": {"django_q": {"level": "WARNING"}, "httpx2": {"level": "WARNING"}},
    }
