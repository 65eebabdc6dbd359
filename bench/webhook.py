"""Webhook acknowledgement latency and throughput with 32 concurrent senders.

Starts ``manage.py serve --no-worker`` (gunicorn, as ``make run`` does) on its own
benchmark database, then sends real gzip deliveries (pages of the PostgreSQL manual,
each with a new rid) from 32 threads over loopback, one connection per delivery as
Crawlbase does. Prints p50/p99 latency and deliveries per second.

    .venv/bin/python -m bench.webhook [--deliveries 3000] [--senders 32]
    .venv/bin/python -m bench.webhook --url http://127.0.0.1:8000 --token T
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from bench.corpus import pages

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-token"


def start_server(port: int, workers: int) -> subprocess.Popen:
    env = dict(os.environ, EMBEDDED_DB_NAME="kb_bench", WEBHOOK_TOKEN=TOKEN,
               LOG_LEVEL="WARNING")  # fmt: skip
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env,
                   check=True)  # fmt: skip
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--no-worker", "--web-workers",
         str(workers), "--bind", f"127.0.0.1:{port}"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz/", timeout=2)
            return server
        except OSError:
            time.sleep(0.3)
    server.kill()
    raise SystemExit("the server did not start")


def send(url: str, token: str, rid: str, page_url: str, body: bytes) -> float:
    parts = urlsplit(url)
    started = time.perf_counter()
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    connection.request(
        "POST",
        f"/webhooks/crawlbase/?token={token}",
        body=body,
        headers={"Content-Type": "text/plain", "Content-Encoding": "gzip", "rid": rid,
                 "url": page_url, "Original-Status": "200", "PC-Status": "200",
                 "User-Agent": "Crawlbase Delivery Bot 1.0"},
    )  # fmt: skip
    response = connection.getresponse()
    response.read()
    connection.close()
    if response.status != 200:
        raise RuntimeError(f"status {response.status}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=3000)
    parser.add_argument("--senders", type=int, default=32)
    parser.add_argument("--web-workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--url", help="a running server instead of starting one")
    parser.add_argument("--token", default=TOKEN, help="its WEBHOOK_TOKEN")
    args = parser.parse_args()

    corpus = [(url, gzip.compress(html.encode())) for url, html in pages()]
    server = None
    url = args.url
    if url is None:
        port = 8765
        server = start_server(port, args.web_workers)
        url = f"http://127.0.0.1:{port}"
    run_id = f"{time.time():.0f}"
    latencies: list[float] = []
    errors: list[str] = []
    counter = iter(range(args.deliveries))
    lock = threading.Lock()

    def sender() -> None:
        while True:
            with lock:
                number = next(counter, None)
            if number is None:
                return
            page_url, body = corpus[number % len(corpus)]
            try:
                latency = send(
                    url, args.token, f"bench-{run_id}-{number}", page_url, body
                )
            except Exception as exc:  # counted and reported, the run goes on
                errors.append(str(exc))
                continue
            with lock:
                latencies.append(latency)

    try:
        started = time.perf_counter()
        threads = [threading.Thread(target=sender) for _ in range(args.senders)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
    finally:
        if server is not None:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=60)

    latencies.sort()

    def p(quantile: float) -> float:
        return latencies[min(len(latencies) - 1, int(quantile * len(latencies)))] * 1000

    print(
        f"{len(latencies)} deliveries acknowledged ({len(errors)} errors) by "
        f"{args.web_workers} gunicorn workers from {args.senders} senders in "
        f"{elapsed:.1f} s: {len(latencies) / elapsed:.0f} deliveries/s; latency "
        f"p50 {p(0.50):.1f} ms, p99 {p(0.99):.1f} ms, "
        f"max {latencies[-1] * 1000:.1f} ms, "
        f"mean {statistics.mean(latencies) * 1000:.1f} ms; mean body "
        f"{statistics.mean(len(b) for _, b in corpus) / 1024:.1f} KiB gzip"
    )


if __name__ == "__main__":
    main()
