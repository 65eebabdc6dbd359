"""A web node of the product on a primary and its streaming replica, driven one
command at a time by ``tests/retrieval/test_replication.py``: a line of JSON in
on standard input, a line of JSON out.

    python -m tests.replica_node   (DATABASE_URL, DATABASE_REPLICA_URLS set)

Commands: ``{"do": "migrate"}``; ``{"do": "ingest", "url": …, "markdown": …}`` and
``{"do": "gone", "url": …}`` (a delivery run by its job, as a worker runs it, on the
primary); ``{"do": "search", "q": …, "max_lag": seconds or null}``: ``GET
/api/search/`` through the product's view, answered with the URLs found and, by
database alias, how many of the statements this thread ran read the chunks.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import (  # noqa: E402
    DEFAULT_DB_ALIAS,
    close_old_connections,
    connections,
)
from django.test.utils import override_settings, setup_test_environment  # noqa: E402
from rest_framework.authtoken.models import Token  # noqa: E402
from rest_framework.test import APIClient  # noqa: E402

from ingest.delivery.job import delivery_process  # noqa: E402
from kbsite.parallel import settle  # noqa: E402
from retrieval.models import Chunk, QueryLog  # noqa: E402
from sources.models import Source  # noqa: E402
from tests.world import ingest_markdown, receive_delivery  # noqa: E402

REPLICA = "replica_1"


def migrate(state: dict) -> dict:
    call_command("migrate", verbosity=0)
    Source.objects.create(name="Harbor docs", seed_urls="https://docs.harbor.example/")
    user = User.objects.create_superuser("reader", password="a long password 1")
    state["api"] = APIClient()
    state["api"].credentials(
        HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}"
    )
    return {}


def ingest(state: dict, *, url: str, markdown: str) -> dict:
    ingest_markdown(url, markdown)
    return {}


def gone(state: dict, *, url: str) -> dict:
    delivery = receive_delivery(url, "gone", original_status=404)
    delivery_process(delivery_id=delivery.pk)
    return {}


def search(state: dict, *, q: str, max_lag: float | None) -> dict:
    aliases = (DEFAULT_DB_ALIAS, REPLICA)
    # What a web server does when a request comes in (the test client does not):
    # kept connections are checked again before their next use.
    close_old_connections()
    for alias in aliases:  # without connecting: the replica may be down
        connections[alias].force_debug_cursor = True
        connections[alias].queries_log.clear()
    with override_settings(DATABASE_REPLICA_MAX_LAG=max_lag):
        response = state["api"].get("/api/search/", {"q": q})
    settle()  # the search's log row, written after the answer
    chunks = f'"{Chunk._meta.db_table}"'
    return {
        "status": response.status_code,
        "urls": [r["url"] for r in response.json().get("results", [])],
        "chunk_reads": {
            alias: sum(chunks in q["sql"] for q in connections[alias].queries_log)
            for alias in aliases
        },
        "logged": QueryLog.objects.count(),
    }


COMMANDS = {"migrate": migrate, "ingest": ingest, "gone": gone, "search": search}


def main() -> None:
    setup_test_environment()  # the test client's host name is allowed
    state: dict = {}
    for line in sys.stdin:
        command = json.loads(line)
        try:
            reply = {"ok": True, **COMMANDS[command.pop("do")](state, **command)}
        except Exception:
            reply = {"ok": False, "error": traceback.format_exc()}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
