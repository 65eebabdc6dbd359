"""Webhook acknowledgement latency and throughput with 32 concurrent senders.

Starts ``manage.py serve --no-worker`` (the web server ``make run`` starts) on its own
benchmark database, then sends real gzip deliveries (pages of the PostgreSQL manual,
each with a new rid) from 32 threads over loopback, one connection per delivery as
Crawlbase does. Prints p50/p99 latency and deliveries per second. The first
200 deliveries of each run only warm the server up and are not counted.

With ``--with-ingest`` it then measures again under ingest load: a first crawl of
the manual (1,169 pages, embedded through a local fake of the OpenAI API) is queued,
and ``manage.py serve`` runs with its worker cluster, as ``make run`` does, so the
web server and the worker share the cores the way they do in use.

With ``--rate R`` the load is open instead: deliveries arrive at random times,
R a second on average (Poisson arrivals), whatever the server's answers, as many
crawls' deliveries do; each latency counts from the delivery's arrival time, so a
server that falls behind shows it.

    .venv/bin/python -m bench.webhook [--deliveries 3000] [--senders 32] [--with-ingest]
    .venv/bin/python -m bench.webhook --rate 300 [--with-ingest]
    .venv/bin/python -m bench.webhook --url http://127.0.0.1:8000 --token T
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import psutil

from bench.corpus import BASE_URL, pages

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-token"
PORT = 8765
# Crawl deliveries done before the senders start: the worker is busy by then.
INGEST_WARM_UP = 20
# Deliveries sent before each measured run and not counted: they open every web
# thread's database connection, which a server in use has open already.
WARM_UP = 200


@dataclass
class Run:
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    sent: int = 0  # the warm-up's deliveries included
    web_cpu: float | None = None  # the web processes' CPU seconds while it ran

    def p(self, quantile: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))] * 1000


def start_server(port: int, workers: int, *, worker: bool = False) -> subprocess.Popen:
    env = dict(os.environ, EMBEDDED_DB_NAME="kb_bench", WEBHOOK_TOKEN=TOKEN,
               LOG_LEVEL="WARNING")  # fmt: skip
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env,
                   check=True)  # fmt: skip
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--web-workers", str(workers),
         "--bind", f"127.0.0.1:{port}", *([] if worker else ["--no-worker"])],
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


def stop_server(server: subprocess.Popen) -> None:
    server.send_signal(signal.SIGINT)
    server.wait(timeout=60)


def send(url: str, token: str, rid: str, page_url: str, body: bytes) -> float:
    parts = urlsplit(url)
    started = time.perf_counter()
    connection = http.client.HTTPConnection(parts.netloc, timeout=30)
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


def measure(
    url: str, token: str, corpus: list[tuple[str, bytes]], *, deliveries: int,
    senders: int, label: str,
) -> Run:  # fmt: skip
    run = Run()
    counter = iter(range(-WARM_UP, deliveries))
    lock = threading.Lock()
    run_id = f"{time.time():.0f}-{label}"

    def sender() -> None:
        while True:
            with lock:
                number = next(counter, None)
                if number == 0:  # the warm-up is over: the measured run starts
                    started.append(time.perf_counter())
            if number is None:
                return
            page_url, body = corpus[number % len(corpus)]
            rid = f"bench-{run_id}-{number}"
            with lock:
                run.sent += 1
            try:
                latency = send(url, token, rid, page_url, body)
            except Exception as exc:  # counted and reported, the run goes on
                run.errors.append(str(exc))
                continue
            if number >= 0:
                with lock:
                    run.latencies.append(latency)

    started: list[float] = []
    threads = [threading.Thread(target=sender) for _ in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    run.seconds = time.perf_counter() - started[0]
    return run


def measure_open(
    url: str, token: str, corpus: list[tuple[str, bytes]], *, deliveries: int,
    rate: float, label: str,
) -> Run:  # fmt: skip
    """Deliveries sent at Poisson arrival times, ``rate`` a second, each on a
    thread of its own (as many at once as the server keeps waiting); the
    warm-up's first, uncounted. A latency counts from the arrival time."""
    run = Run()
    run_id = f"{time.time():.0f}-{label}"
    randomness = random.Random(1)
    arrivals, at = [], 0.0
    for _ in range(WARM_UP + deliveries):
        at += randomness.expovariate(rate)
        arrivals.append(at)
    lock = threading.Lock()

    def deliver(number: int, due: float) -> None:
        page_url, body = corpus[number % len(corpus)]
        try:
            send(url, token, f"bench-{run_id}-{number}", page_url, body)
        except Exception as exc:  # counted and reported, the run goes on
            with lock:
                run.errors.append(str(exc))
            return
        if number >= 0:
            with lock:
                run.latencies.append(time.perf_counter() - due)

    start = time.perf_counter()
    threads = []
    for number, arrival in enumerate(arrivals, start=-WARM_UP):
        due = start + arrival
        time.sleep(max(0.0, due - time.perf_counter()))
        thread = threading.Thread(target=deliver, args=(number, due))
        thread.start()
        threads.append(thread)
        run.sent += 1
    for thread in threads:
        thread.join()
    run.seconds = time.perf_counter() - (start + arrivals[WARM_UP - 1])
    return run


def load(
    url: str, token: str, corpus: list[tuple[str, bytes]], args: argparse.Namespace,
    *, label: str,
) -> Run:  # fmt: skip
    """The chosen load: Poisson arrivals at ``--rate``, else ``--senders``
    closed-loop senders."""
    if args.rate:
        return measure_open(url, token, corpus, deliveries=args.deliveries,
                            rate=args.rate, label=label)  # fmt: skip
    return measure(url, token, corpus, deliveries=args.deliveries,
                   senders=args.senders, label=label)  # fmt: skip


def report(label: str, run: Run, args: argparse.Namespace, mean_body: float) -> None:
    count = len(run.latencies)
    # A server given with --url runs however many workers it runs.
    by = "" if args.url else f" by {args.web_workers} web processes"
    source = (
        f"arriving at {args.rate:g}/s (Poisson)"
        if args.rate
        else f"from {args.senders} senders"
    )
    print(
        f"{label}: {count} deliveries acknowledged ({len(run.errors)} errors)"
        f"{by} {source} in "
        f"{run.seconds:.1f} s: {count / run.seconds:.0f} deliveries/s; latency "
        f"p50 {run.p(0.50):.1f} ms, p99 {run.p(0.99):.1f} ms, "
        f"max {max(run.latencies) * 1000:.1f} ms, "
        f"mean {statistics.mean(run.latencies) * 1000:.1f} ms; mean body "
        f"{mean_body / 1024:.1f} KiB gzip"
    )
    if run.web_cpu is not None and run.sent:
        print(
            f"  the web processes' CPU: {run.web_cpu / run.sent * 1000:.2f} ms per "
            f"delivery ({run.sent} sent, the warm-up's included)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=3000)
    parser.add_argument("--senders", type=int, default=32)
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="an open load instead: deliveries arriving at this mean rate a second",
    )
    parser.add_argument("--web-workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--url", help="a running server instead of starting one")
    parser.add_argument(
        "--port", type=int, default=PORT, help=f"the started server's port ({PORT})"
    )
    parser.add_argument("--token", default=TOKEN, help="its WEBHOOK_TOKEN")
    parser.add_argument(
        "--with-ingest",
        action="store_true",
        help="then measure again while serve's worker embeds a first crawl",
    )
    args = parser.parse_args()

    manual = pages()
    corpus = [(url, gzip.compress(html.encode())) for url, html in manual]
    mean_body = statistics.mean(len(body) for _, body in corpus)
    if args.url:
        run = load(args.url, args.token, corpus, args, label="given")
        report("given server", run, args, mean_body)
        return
    server = start_server(args.port, args.web_workers)
    try:
        web_before = _web_cpu_seconds(server)
        run = load(f"http://127.0.0.1:{args.port}", TOKEN, corpus, args, label="idle")
        run.web_cpu = _web_cpu_seconds(server) - web_before
    finally:
        stop_server(server)
    report("idle", run, args, mean_body)
    if args.with_ingest:
        measure_under_ingest(args, manual, corpus, mean_body)


def measure_under_ingest(
    args: argparse.Namespace, manual: list[tuple[str, str]],
    corpus: list[tuple[str, bytes]], mean_body: float,
) -> None:  # fmt: skip
    from bench.common import (
        django_fresh,
        fake_openai_env,
        queue_deliveries,
        start_fake_openai_process,
        stop_fake_openai_process,
    )

    fake, base_url = start_fake_openai_process()
    try:
        os.environ.update(fake_openai_env(base_url))
        django_fresh()
        from ingest.delivery.models import Delivery
        from sources.models import Source

        Source.objects.create(name="PostgreSQL 15 manual", seed_urls=BASE_URL)
        crawl = queue_deliveries("crawl", [(url, html, 200) for url, html in manual])
        ids = list(crawl.values())

        def crawled() -> int:
            done = Delivery.objects.filter(pk__in=ids, state=Delivery.State.DONE)
            return done.count()

        server = start_server(args.port, args.web_workers, worker=True)
        try:
            # A site smaller than the warm-up: the worker has it all by then.
            while crawled() < min(INGEST_WARM_UP, len(ids)):
                time.sleep(0.2)
            cpu_before, done_before = _cluster_cpu_seconds(server), crawled()
            web_before = _web_cpu_seconds(server)
            run = load(f"http://127.0.0.1:{args.port}", TOKEN, corpus, args,
                       label="ingest")  # fmt: skip
            run.web_cpu = _web_cpu_seconds(server) - web_before
            cpu = _cluster_cpu_seconds(server) - cpu_before
            done = crawled() - done_before
        finally:
            stop_server(server)
    finally:
        stop_fake_openai_process(fake)
    report("under ingest", run, args, mean_body)
    print(
        f"  beside it the worker cluster finished {done} pages of the first crawl "
        f"and used {cpu / run.seconds:.0%} of one core"
    )


def _cluster_cpu_seconds(server: subprocess.Popen) -> float:
    """CPU time of the worker cluster so far, workers it has replaced included (a
    parent's children times hold the children it has waited for)."""
    return _cpu_seconds(server, cluster=True)


def _web_cpu_seconds(server: subprocess.Popen) -> float:
    """CPU time of the web server's processes so far (``serve`` and the web
    processes it started; not its worker cluster)."""
    return _cpu_seconds(server, cluster=False)


def _cpu_seconds(server: subprocess.Popen, *, cluster: bool) -> float:
    root = psutil.Process(server.pid)
    total = 0.0
    for process in [root, *root.children(recursive=True)]:
        try:
            in_cluster = "qcluster" in " ".join(process.cmdline())
            times = process.cpu_times()
        except psutil.Error:
            continue
        if process is root:
            if not cluster:
                total += times.user + times.system
            continue
        if in_cluster != cluster:
            continue
        total += times.user + times.system + times.children_user
        total += times.children_system
    return total


if __name__ == "__main__":
    main()
