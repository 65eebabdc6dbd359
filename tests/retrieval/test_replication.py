"""Searches on a streaming replica of a real primary: what a tombstone looks like
while the replica is behind, once it has replayed it, and with a lag limit.

Two PostgreSQL servers on 127.0.0.1 from the embedded binaries
(``tests/tcp_postgres.py``): a primary, and a hot standby made from it by
``pg_basebackup`` streaming its WAL. A web node of the product
(``tests/replica_node.py``) runs with ``DATABASE_URL`` on the primary and
``DATABASE_REPLICA_URLS`` on the standby. Replay on the standby is paused (as a
replica falls behind, made deterministic) while the primary tombstones a page.

Run it alone: ``.venv/bin/pytest tests/retrieval/test_replication.py -s`` (``-s`` prints
each step).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from kbsite.replicas import REPLICA_LAG
from tests.conftest import PYTHON, ROOT, free_port
from tests.tcp_postgres import TcpPostgres, TcpStandby, die_with_parent

pytestmark = pytest.mark.slow

HARBOR = "https://docs.harbor.example"
LAMP = f"{HARBOR}/lamps/"
ROPE = f"{HARBOR}/ropes/"
QUESTION = "the lighthouse lamp"
PAGES = {
    LAMP: "# Lighthouse lamps\n\n## Draining\n\nDrain the lighthouse lamp before "
    "winter: close the valve and empty the reservoir.\n",
    ROPE: "# Mooring ropes\n\n## Coiling\n\nCoil a mooring rope clockwise beside "
    "the lighthouse, never across the lamp room door.\n",
}
MAX_LAG = 1.0


class Node:
    """``tests/replica_node.py`` in a process of its own, one command at a time."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log = log
        self.output = open(log, "w")  # its standard error, closed with it
        self.process = subprocess.Popen(
            [PYTHON, "-m", "tests.replica_node"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.output,
            text=True,
            preexec_fn=die_with_parent(signal.SIGTERM),
        )

    def __call__(self, do: str, **args: object) -> dict:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps({"do": do, **args}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, f"the node exited; see {self.log}: {self.log.read_text()[-2000:]}"
        reply = json.loads(line)
        assert reply.pop("ok"), reply["error"]
        return reply

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)
        self.output.close()


def node_env(primary: TcpPostgres, standby: TcpStandby, root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATABASE_")}
    env.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        PYTHONPATH=str(ROOT),
        DATABASE_URL=primary.url,
        DATABASE_REPLICA_URLS=standby.url,
        KB_VAR_DIR=str(root / "var"),
        SECRET_KEY="replication-test-secret-key",
    )
    return env


def lag(standby: TcpStandby) -> float | None:
    """The standby's lag as the product measures it."""
    return standby.query(REPLICA_LAG)[0][0]


class Steps:
    """Prints each step with the seconds since the test began."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def __call__(self, name: str, found: dict | None = None) -> None:
        line = f"{time.monotonic() - self.started:5.1f} s {name}"
        if found is not None:
            line += (f": status {found['status']}, found {found['urls']}, statements "
                     f"reading chunks {found['chunk_reads']}, {found['logged']} "
                     "questions logged on the primary")  # fmt: skip
        print(line)


def test_a_replica_serves_a_tombstoned_page_only_while_it_is_behind(server_tmp_path):
    step = Steps()
    with (
        TcpPostgres(server_tmp_path / "primary", port=free_port()) as primary,
        TcpStandby(
            server_tmp_path / "standby", port=free_port(), primary=primary
        ) as standby,
    ):
        step("primary and standby up")
        node = Node(
            node_env(primary, standby, server_tmp_path), server_tmp_path / "node.log"
        )
        try:
            node("migrate")
            step("migrated")
            for url, markdown in PAGES.items():
                node("ingest", url=url, markdown=markdown)
            standby.caught_up()
            before = node("search", q=QUESTION, max_lag=None)
            step("replica caught up", before)

            standby.replay_pause()
            node("gone", url=LAMP)
            on_primary = primary.query(
                "SELECT status FROM sources_page WHERE url = %s", [LAMP]
            )
            behind = node("search", q=QUESTION, max_lag=None)
            step("replay paused, page gone on the primary", behind)
            deadline = time.monotonic() + 10
            while (lag(standby) or 0.0) <= MAX_LAG and time.monotonic() < deadline:
                time.sleep(0.1)
            lagging = lag(standby)
            limited = node("search", q=QUESTION, max_lag=MAX_LAG)
            step(f"replica {lagging:.2f} s behind, limit {MAX_LAG} s", limited)

            standby.replay_resume()
            standby.caught_up()
            replayed = node("search", q=QUESTION, max_lag=None)
            step("replay resumed", replayed)
            within = node("search", q=QUESTION, max_lag=MAX_LAG)
            step(f"replica {lag(standby):.2f} s behind, limit {MAX_LAG} s", within)

            standby.__exit__()
            down = node("search", q=QUESTION, max_lag=None)
            step("replica stopped", down)
        finally:
            node.close()

    # Read from the replica: the page it still has, after the primary's tombstone.
    assert LAMP in before["urls"] and ROPE in before["urls"]
    assert before["chunk_reads"] == {"default": 0, "replica_1": 2}
    assert on_primary == [("gone",)]
    assert behind["urls"] == before["urls"]
    assert behind["chunk_reads"] == {"default": 0, "replica_1": 2}
    # Further behind than the limit: the primary answers, without the page.
    assert lagging is not None and lagging > MAX_LAG
    assert limited["urls"] == [ROPE]
    assert limited["chunk_reads"] == {"default": 2, "replica_1": 0}
    # Replayed: the replica drops the page too, within the limit or without one.
    for found in (replayed, within):
        assert found["urls"] == [ROPE]
        assert found["chunk_reads"] == {"default": 0, "replica_1": 2}
    # A replica that is down: the primary answers.
    assert down["status"] == 200 and down["urls"] == [ROPE]
    assert down["chunk_reads"] == {"default": 2, "replica_1": 0}
    # Every question logged, on the primary (the standby refuses writes).
    assert [f["logged"] for f in (before, behind, limited, replayed, within, down)] == [
        1, 2, 3, 4, 5, 6,
    ]  # fmt: skip
