"""Recovery after the database is killed under a burst of deliveries.

Starts ``manage.py serve`` (web server and worker cluster, as ``make run`` does) on
an embedded PostgreSQL of its own (``KB_VAR_DIR`` in a temporary directory, so the
worktree's own server is not touched), with the ``hashing`` embedder and the
product's default queue settings (``Q_RETRY``, ``DELIVERY_RETRY_SECONDS``). Senders
post gzip deliveries of the PostgreSQL manual's pages, each with a new rid, paced
at ``--rate`` a second; once ``--kill-after`` of them have been answered, the
postmaster is killed with SIGKILL. The next process that needs a connection (the
web server, answering 503 meanwhile) starts it again. Deliveries answered ``200``
are acknowledged; the others are the crawler's to send again, and are not counted.

Prints seconds from the kill until the last acknowledged delivery was done, how
many were acknowledged, done, lost (acknowledged, no outcome by ``--wait``), and
done twice (a page with two versions of the same text).
With ``--no-kill`` the same burst runs undisturbed, and the time printed is from
the moment the kill would have come: the worker's own pace, for comparison.

    .venv/bin/python -u -m bench.recovery [--deliveries 1700] [--rate 25]
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import psycopg

from bench.corpus import BASE_URL, pages

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-token"
DATABASE = "kb_bench_recovery"
SETUP = (
    "from django.core.management import call_command; "
    "from sources.models import Source; "
    "call_command('migrate', verbosity=0); "
    f"Source.objects.create(name='PostgreSQL 15 manual', seed_urls='{BASE_URL}')"
)


def site_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(
        DJANGO_SETTINGS_MODULE="kbsite.settings",
        PYTHONUNBUFFERED="1",
        KB_VAR_DIR=str(root),
        EMBEDDED_DB_NAME=DATABASE,
        WEBHOOK_TOKEN=TOKEN,
        EMBEDDING_BACKEND="hashing",
        LOG_LEVEL="WARNING",
    )
    return env


def query(root: Path, sql: str) -> list[tuple]:
    """Rows of ``sql`` on the bench's server, without holding it up."""
    data = root / "postgres" / "data"
    lines = (data / "postmaster.pid").read_text().splitlines()
    port, socket_dir = int(lines[3]), lines[4]
    with psycopg.connect(
        host=socket_dir, port=port, user="postgres", dbname=DATABASE,
        autocommit=True, connect_timeout=5,
    ) as conn:  # fmt: skip
        return conn.execute(sql).fetchall()


def send(port: int, rid: str, page_url: str, body: bytes) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request(
            "POST", f"/webhooks/crawlbase/?token={TOKEN}", body=body,
            headers={"Content-Type": "text/plain", "Content-Encoding": "gzip",
                     "rid": rid, "url": page_url, "Original-Status": "200",
                     "PC-Status": "200"},
        )  # fmt: skip
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


class Burst:
    """Paced senders sharing one sequence of deliveries."""

    def __init__(self, port: int, corpus: list[tuple[str, bytes]], args) -> None:
        self.port, self.corpus, self.args = port, corpus, args
        self.acknowledged: list[str] = []
        self.refused = 0
        self.lock = threading.Lock()
        self.next = 0
        self.started = time.monotonic()

    def run(self, senders: int) -> None:
        threads = [threading.Thread(target=self._sender) for _ in range(senders)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _sender(self) -> None:
        while True:
            with self.lock:
                number = self.next
                self.next += 1
            if number >= self.args.deliveries:
                return
            # Paced from the start: the n-th delivery leaves at n / rate.
            delay = self.started + number / self.args.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            page_url, body = self.corpus[number % len(self.corpus)]
            rid = f"recovery-{number}"
            try:
                status = send(self.port, rid, page_url, body)
            except OSError:
                status = 0
            with self.lock:
                if status == 200:
                    self.acknowledged.append(rid)
                else:
                    self.refused += 1


def kill_postmaster(root: Path) -> float:
    pid = int((root / "postgres" / "data" / "postmaster.pid").read_text().split()[0])
    psutil.Process(pid).kill()
    return time.time()


def healthy(port: int) -> bool:
    try:
        url = f"http://127.0.0.1:{port}/healthz/"
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def outcomes(root: Path, rids: list[str]) -> dict[str, tuple[str, float | None]]:
    rows = query(
        root,
        "SELECT rid, state, extract(epoch FROM processed_at) FROM ingest_delivery "
        "WHERE rid LIKE 'recovery-%'",
    )
    wanted = set(rids)
    return {
        rid: (state, None if at is None else float(at))
        for rid, state, at in rows
        if rid in wanted
    }


def done_twice(root: Path) -> int:
    """Pages with two versions of one text: each page's text is delivered once
    (later deliveries of it are unchanged), so a second is a delivery run twice.
    Each such page is printed with its versions."""
    rows = query(
        root,
        "SELECT p.url, string_agg(v.kind || ' ' || v.recorded_at::text, ', ') "
        "FROM sources_pageversion v JOIN sources_page p ON p.id = v.page_id "
        "WHERE v.content_hash <> '' GROUP BY p.url, v.content_hash "
        "HAVING count(*) > 1",
    )
    for url, versions in rows:
        print(f"  twice: {url}: {versions}")
    return len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=1700)
    parser.add_argument("--rate", type=float, default=25.0, help="deliveries a second")
    parser.add_argument("--senders", type=int, default=8)
    parser.add_argument(
        "--kill-after", type=int, default=600, help="acknowledged before the kill"
    )
    parser.add_argument("--wait", type=int, default=600, help="seconds, at most")
    parser.add_argument("--no-kill", action="store_true", help="the burst alone")
    parser.add_argument(
        "--pages", type=int, default=50,
        help="the manual's first N pages, delivered in turn (the rest unchanged)",
    )  # fmt: skip
    parser.add_argument("--port", type=int, default=8767)
    parser.add_argument("--log", type=Path, help="keep the server's log there")
    args = parser.parse_args()

    corpus = [(url, gzip.compress(html.encode())) for url, html in pages()][
        : args.pages
    ]
    with tempfile.TemporaryDirectory(prefix="kb-recovery-") as tmp:
        root = Path(tmp) / "var"
        env = site_env(root)
        subprocess.run([sys.executable, "manage.py", "shell", "-c", SETUP],
                       cwd=ROOT, env=env, check=True)  # fmt: skip
        server = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--bind",
             f"127.0.0.1:{args.port}"],
            cwd=ROOT, env=env, start_new_session=True,
            stdout=open(Path(tmp) / "serve.log", "w"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            measure(root, args, corpus)
        finally:
            os.killpg(server.pid, signal.SIGINT)
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
            stop_embedded(root)
            if args.log:
                args.log.write_bytes((Path(tmp) / "serve.log").read_bytes())


def measure(root: Path, args, corpus: list[tuple[str, bytes]]) -> None:
    deadline = time.monotonic() + 120
    while not healthy(args.port):
        if time.monotonic() > deadline:
            raise SystemExit("the server did not start")
        time.sleep(0.3)
    burst = Burst(args.port, corpus, args)
    sending = threading.Thread(target=burst.run, args=(args.senders,))
    sending.start()
    while len(burst.acknowledged) < args.kill_after:
        time.sleep(0.01)
    killed = time.time() if args.no_kill else kill_postmaster(root)
    print(f"{'marked' if args.no_kill else 'killed'} at {len(burst.acknowledged)} "
          f"acknowledged; load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    while not healthy(args.port):
        time.sleep(0.1)
    print(f"the web server answers again {time.time() - killed:.1f} s after it")
    sending.join()
    print(
        f"sent {args.deliveries}: {len(burst.acknowledged)} acknowledged, "
        f"{burst.refused} refused, {time.time() - killed:.1f} s after the kill"
    )
    rids = list(burst.acknowledged)
    deadline = time.monotonic() + args.wait
    found: dict[str, tuple[str, float | None]] = {}
    while time.monotonic() < deadline:
        try:
            found = outcomes(root, rids)
        except (psycopg.Error, OSError, IndexError):
            time.sleep(1)
            continue
        if all(found.get(rid, ("",))[0] in ("done", "failed") for rid in rids):
            break
        time.sleep(1)
    done = [at for state, at in found.values() if state == "done"]
    finished = [at for at in done if at is not None]
    failed = sum(state == "failed" for state, _ in found.values())
    lost = len(rids) - len(done) - failed
    last = max(finished) - killed if finished else float("nan")
    print_last(root, killed)
    try:
        twice: int | str = done_twice(root)
    except (psycopg.Error, OSError, IndexError):
        twice = "unknown (the database did not answer)"
    print(
        f"last acknowledged delivery done {last:.1f} s after the "
        f"{'mark' if args.no_kill else 'kill'}; acknowledged {len(rids)}, done "
        f"{len(done)}, failed {failed}, lost {lost}, done twice {twice}; "
        f"load average {os.getloadavg()[0]:.1f}"
    )


def print_last(root: Path, killed: float) -> None:
    """The deliveries done last: when each arrived, was last queued and was
    done, in seconds after the kill, and its attempts."""
    try:
        rows = query(
            root,
            "SELECT rid, attempts, extract(epoch FROM received_at), "
            "extract(epoch FROM queued_at), extract(epoch FROM processed_at) "
            "FROM ingest_delivery WHERE state = 'done' ORDER BY processed_at DESC "
            "LIMIT 5",
        )
    except (psycopg.Error, OSError, IndexError) as exc:
        print(f"  the database did not answer after --wait: {exc!r}")
        return
    for rid, attempts, received, queued, done in rows:
        times = [float(at) - killed for at in (received, queued, done)]
        print(
            f"  {rid}: arrived {times[0]:+.1f} s, queued {times[1]:+.1f} s, "
            f"done {times[2]:+.1f} s, attempts {attempts}"
        )


def stop_embedded(root: Path) -> None:
    pid_file = root / "postgres" / "data" / "postmaster.pid"
    if pid_file.exists():
        with_pid = int(pid_file.read_text().split()[0])
        try:
            os.kill(with_pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        time.sleep(2)


if __name__ == "__main__":
    main()
