"""The database killed under load: every acknowledged delivery still reaches an
outcome, soon after the database is back, and the webhook never answers with an
HTML page or a 500.

The scene of the report: deliveries arriving three at a time, and the embedded
PostgreSQL's postmaster killed with SIGKILL mid-way, while a job is between two
queries; the job goes on while the server is down, and cannot record its retry.
The next process that needs a connection starts the server again
(``EmbeddedPostgres.hold`` finds the postmaster's pid gone and runs ``pg_ctl
start``; PostgreSQL recovers from its WAL).

The test runs its own embedded server in a directory of its own (``KB_VAR_DIR``),
not the one the suite shares: killing that one would cut the test process's own
connection, and the transaction each database test runs in, from under it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import psycopg
import pytest

from kbsite.pgembedded.server import EmbeddedPostgres
from tests.conftest import PYTHON, ROOT, free_port
from tests.fakes.crawlbase import FakeCrawler
from tests.fakes.openai_api import FakeOpenAI
from tests.world import SITE, page_html

pytestmark = pytest.mark.slow

TOKEN = "restart-test-token"
DELIVERIES = 150
SENDERS = 3
DATABASE = "kb"
MAX_ATTEMPTS = 5
# Background processes of the old server, one of which is paused across the kill:
# ones that serve no client and take no lock a client could wait on.
PAUSABLE = ("logical replication launcher", "autovacuum launcher")
SETUP = (
    "from django.core.management import call_command; "
    "from sources.models import Source; "
    "call_command('migrate', verbosity=0); "
    f"Source.objects.create(name='Example docs', seed_urls='{SITE}/')"
)
# Seconds from the database's return until every acknowledged delivery has an
# outcome: the cluster queues again what the outage stranded as soon as it reads
# its queue again (kbsite.queue_broker), so what is left is the queue ahead, run by
# one worker on a machine that may be busy (14-20 s measured at load average 8-13).
OUTCOMES_WITHIN = 90


def site_env(root: Path, fake: FakeOpenAI) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(
        DJANGO_SETTINGS_MODULE="kbsite.settings",
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
        KB_VAR_DIR=str(root),
        EMBEDDED_DB_NAME=DATABASE,
        WEBHOOK_TOKEN=TOKEN,
        EMBEDDING_BACKEND="openai",
        EMBEDDING_MODEL="text-embedding-3-small",
        EMBEDDING_DIMENSIONS="64",
        OPENAI_API_KEY="sk-test",
        OPENAI_BASE_URL=fake.base_url,
        OPENAI_MAX_RETRIES="0",
        # A failed attempt is queued again at once, not after a backoff.
        DELIVERY_RETRY_SECONDS="0",
        DELIVERY_MAX_ATTEMPTS=str(MAX_ATTEMPTS),
        # One worker: the job held at the embedding call is the only one running.
        Q_WORKERS="1",
        # The queue offers a job again long after OUTCOMES_WITHIN: what finishes
        # the job lost in the outage is the sweep.
        Q_TIMEOUT="300",
        Q_RETRY="900",
    )
    return env


@contextlib.contextmanager
def started(command: list[str], env: dict[str, str], log: Path) -> Iterator[None]:
    """A ``manage.py`` process in its own group, stopped with SIGINT (then
    SIGKILL) at the end."""
    with open(log, "w") as output:
        process = subprocess.Popen(
            [PYTHON, "manage.py", *command],
            cwd=ROOT,
            env=env,
            start_new_session=True,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def manage(env: dict[str, str], code: str) -> str:
    """The last line ``code`` printed, run by ``manage.py shell``."""
    result = subprocess.run(
        [PYTHON, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    return (result.stdout.strip().splitlines() or [""])[-1]


def query(server: EmbeddedPostgres, sql: str) -> list[tuple]:
    """Rows of ``sql``, read without holding the server: the site's processes
    keep it up, and start it again."""
    info = server.running()
    if info is None:
        raise psycopg.OperationalError("the server is not running")
    with psycopg.connect(
        host=str(info.socket_dir),
        port=info.port,
        user="postgres",
        dbname=DATABASE,
        autocommit=True,
        connect_timeout=10,
    ) as conn:
        return conn.execute(sql).fetchall()


def wait_until(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while True:
        with contextlib.suppress(psycopg.Error, OSError):  # down, or not up yet
            if condition():
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.25)


def send(
    crawler: FakeCrawler, numbers: Iterator[int], acknowledged: set[str], failures: list
) -> None:
    """Deliver pages while ``numbers`` lasts; note the rids answered 200."""
    for number in numbers:
        rid = f"blip-{number}"
        try:
            answer = crawler.deliver(
                rid=rid,
                url=f"{SITE}/page-{number}/",
                body=page_html(
                    f"Page {number}",
                    ("Workers", f"Worker pool {number} reads queue {number}."),
                    ("Limits", f"At most {number} jobs run at once."),
                ),
            )
        except OSError as exc:  # no answer at all is a failure too
            failures.append(exc)
            continue
        if answer.status == 200:
            acknowledged.add(rid)
        # Paced, so that deliveries still arrive well after the database dies,
        # however fast the web server answers.
        time.sleep(0.03)


def shared(numbers: Iterator[int]) -> Callable[[], Iterator[int]]:
    """Iterators that take their numbers from one sequence, one thread each."""
    lock = threading.Lock()

    def taker() -> Iterator[int]:
        while True:
            with lock:
                number = next(numbers, None)
            if number is None:
                return
            yield number

    return taker


def states(server: EmbeddedPostgres) -> dict[str, str]:
    """Each delivery's state; ``failed`` counts only once its attempts are spent."""
    rows = query(server, "SELECT rid, state, attempts FROM ingest_delivery")
    return {
        rid: "failed early" if state == "failed" and attempts < MAX_ATTEMPTS else state
        for rid, state, attempts in rows
    }


def unfinished(found: dict[str, str], rids: set[str]) -> dict[str, str]:
    """Those of ``rids`` with no outcome: neither done nor given up."""
    return {
        rid: found.get(rid, "missing")
        for rid in rids
        if found.get(rid) not in ("done", "failed")
    }


def kill_postmaster_keeping_its_memory(root: Path) -> psutil.Process:
    """SIGKILL the postmaster, with one of its background processes paused first:
    PostgreSQL starts no new server while an old process holds its shared memory,
    so the outage lasts until the returned process is killed, however fast this
    machine would otherwise bring the server back."""
    pid = int((root / "postgres" / "data" / "postmaster.pid").read_text().split()[0])
    postmaster = psutil.Process(pid)
    paused = next(
        child
        for name in PAUSABLE
        for child in postmaster.children()
        if name in " ".join(child.cmdline())
    )
    paused.suspend()
    postmaster.kill()
    return paused


def healthy(port: int) -> bool:
    url = f"http://127.0.0.1:{port}/healthz/"
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status == 200


def test_acknowledged_deliveries_reach_an_outcome_across_a_postmaster_sigkill(
    server_tmp_path: Path,
):
    root = server_tmp_path / "var"
    server = EmbeddedPostgres.at(root)
    port = free_port()
    crawler = FakeCrawler(f"http://127.0.0.1:{port}/webhooks/crawlbase/?token={TOKEN}")
    acknowledged: set[str] = set()
    failures: list[OSError] = []
    web = ["serve", "--no-worker", "--bind", f"127.0.0.1:{port}", "--web-workers", "2"]
    worker_log = server_tmp_path / "worker.log"
    try:
        with FakeOpenAI() as fake:
            env = site_env(root, fake)
            manage(env, SETUP)
            with (
                started(web, env, server_tmp_path / "web.log"),
                started(["qcluster"], env, worker_log),
            ):
                wait_until(lambda: healthy(port), 90, "the web server")
                # The first job stops at its embedding request, between queries:
                # the database will die under it.
                fake.hold()
                send(crawler, iter([0]), acknowledged, failures)
                assert fake.waiting.wait(90), "no job reached the embedding call"
                in_flight = {r for r, s in states(server).items() if s == "processing"}
                assert in_flight == {"blip-0"}

                taker = shared(iter(range(1, DELIVERIES)))
                senders = [
                    threading.Thread(
                        target=send, args=(crawler, taker(), acknowledged, failures)
                    )
                    for _ in range(SENDERS)
                ]
                for sender in senders:
                    sender.start()
                wait_until(lambda: len(crawler.log) >= DELIVERIES // 10, 60, "a tenth")
                paused = kill_postmaster_keeping_its_memory(root)
                wait_until(
                    lambda: sum(s != 200 for s, _ in crawler.posts) >= 3,
                    60,
                    "the webhook to refuse deliveries while the database is down",
                )
                # The held job goes on while the server is down: its retry cannot
                # be recorded, nor its failure acknowledged.
                fake.release()
                wait_until(
                    lambda: "Could not save task result" in worker_log.read_text(),
                    60,
                    "the cut-off job to end in the outage",
                )
                paused.kill()
                wait_until(lambda: healthy(port), 60, "the database to come back")
                back = time.monotonic()
                for sender in senders:
                    sender.join(timeout=120)

                wait_until(
                    lambda: not unfinished(states(server), acknowledged),
                    OUTCOMES_WITHIN - (time.monotonic() - back),
                    "every acknowledged delivery to reach an outcome",
                )
                # The run cut off recorded nothing; the delivery was tried once
                # more (queued again as soon as the cluster saw the database back,
                # or by the sweep), not lost.
                sql = "SELECT state, attempts FROM ingest_delivery WHERE rid = 'blip-0'"
                ((state, attempts),) = query(server, sql)
                assert (state, attempts >= 2) == ("done", True), "lost, not retried"
    finally:
        server.stop()

    assert not failures, failures
    answers = crawler.posts
    assert {status for status, _ in answers} <= {200, 503}, answers
    assert not [body for _, body in answers if "raw" in body], "JSON answers only"
    assert len(acknowledged) > DELIVERIES // 2
