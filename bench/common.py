"""Django set-up and a delivery loop shared by the benchmarks."""

from __future__ import annotations

import contextlib
import gzip
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_DB = "kb_bench"


def django_with_fake_openai(dimensions: int = 256) -> subprocess.Popen[str]:
    """Start the fake OpenAI endpoint in a process of its own, point the settings at
    it, set Django up on a fresh benchmark database. Returns the fake's process;
    what was embedded is read from the product's own counts (``embedding_usage``)."""
    process, base_url = start_fake_openai_process()
    os.environ.update(fake_openai_env(base_url, dimensions))
    django_fresh()
    return process


def embedding_usage() -> tuple[int, int]:
    """Embedding requests and tokens so far, as the product counts them (every
    request, inside deliveries or not)."""
    from django.db.models import Sum

    from retrieval.models import EmbeddingUsage

    totals = EmbeddingUsage.objects.aggregate(
        requests=Sum("requests"), tokens=Sum("tokens")
    )
    return totals["requests"] or 0, totals["tokens"] or 0


def fake_openai_env(base_url: str, dimensions: int = 256) -> dict[str, str]:
    """Settings that send embeddings to the fake OpenAI endpoint at ``base_url``."""
    return {
        "EMBEDDING_BACKEND": "openai",
        "EMBEDDING_MODEL": "text-embedding-3-small",
        "EMBEDDING_DIMENSIONS": str(dimensions),
        "OPENAI_API_KEY": "sk-bench",
        "OPENAI_BASE_URL": base_url,
    }


def start_fake_openai_process() -> tuple[subprocess.Popen[str], str]:
    """The fake OpenAI endpoint in a process of its own, so its work does not share
    the interpreter lock with the caller's threads. Stops when its stdin closes.
    Returns the process and its base URL."""
    code = (
        "import sys, django; django.setup(); "
        "from tests.fakes.openai_api import FakeOpenAI; "
        "fake = FakeOpenAI().__enter__(); print(fake.base_url, flush=True); "
        "sys.stdin.read()"
    )
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="kbsite.settings")
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None  # stdout=PIPE
    return process, process.stdout.readline().strip()


def stop_fake_openai_process(process: subprocess.Popen[str]) -> None:
    """Close the fake's stdin, which stops it, and wait for it."""
    if process.stdin is not None:
        process.stdin.close()
    process.wait(timeout=30)


def django_fresh(*, keep: bool = False, database: str = BENCH_DB, **env: str) -> None:
    """Django on an emptied (or with ``keep``, the same) benchmark database."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbsite.settings")
    os.environ.update(EMBEDDED_DB_NAME=database, LOG_LEVEL="WARNING", **env)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    if keep:
        return
    call_command("flush", interactive=False, verbosity=0)
    from django_q.models import Schedule

    Schedule.objects.all().delete()  # no periodic jobs in the middle of a measurement


@dataclass
class Round:
    name: str
    pages: int = 0
    seconds: float = 0.0
    requests: int = 0
    tokens: int = 0
    outcomes: Counter = field(default_factory=Counter)
    delivery_ids: dict[str, int] = field(default_factory=dict)
    groups: tuple = ()

    def __str__(self) -> str:
        return (
            f"{self.name:>12}: {self.pages} pages in {self.seconds:.1f} s = "
            f"{self.pages / self.seconds:.0f} pages/s; outcomes {dict(self.outcomes)}; "
            f"embedding requests {self.requests}, tokens embedded {self.tokens:,}"
        )


def start_server(database: str, port: int, **env: str) -> subprocess.Popen:
    """``manage.py serve`` (web only) on loopback over ``database``; returns once it
    answers."""
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--no-worker", "--bind",
         f"127.0.0.1:{port}"],
        cwd=ROOT, env={**os.environ, "EMBEDDED_DB_NAME": database, **env},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz/", timeout=2)
            return server
        except OSError:
            time.sleep(0.3)
    server.kill()
    raise SystemExit("the server did not start")


def start_cluster(workers: int = 2, **extra: str) -> subprocess.Popen:
    """A real ``qcluster`` with this process's settings (database, embedding API),
    and ``extra`` environment variables of its own."""
    env = dict(os.environ, Q_WORKERS=str(workers), **extra)
    return subprocess.Popen(
        [sys.executable, "manage.py", "qcluster"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def cluster_ready(pid: int, workers: int = 2) -> None:
    """Wait until the cluster's workers have started and gone idle, so that their
    start is not timed: each builds its embedder before its first job (the local
    model's libraries take seconds to import), as ``make run``'s workers have done
    long before an editor saves a source."""
    import psutil

    process = psutil.Process(pid)
    deadline = time.monotonic() + 120

    def cpu() -> float:
        return cpu_by_role(pid)["workers"]

    # The sentinel, its pusher and monitor, and the workers.
    while len(process.children(recursive=True)) < workers + 3:
        if time.monotonic() > deadline:
            raise RuntimeError("the cluster's workers did not start within 120 s")
        time.sleep(0.2)
    used = cpu()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = cpu()
        if now - used < 0.05:  # a tenth of a core: polling the queue, no more
            return
        used = now
    raise RuntimeError("the cluster's workers were still busy after 120 s")


def cpu_by_role(cluster_pid: int) -> dict[str, float]:
    """CPU seconds used so far on this machine, by role: the worker cluster (its
    processes, and the ones it has waited for), the database server (processes
    named ``postgres``: the embedded server, or a local one; with the sessions and
    autovacuum workers that have ended, which their server has waited for), this
    process (which stores and queues deliveries as the webhook does), and every
    other process."""
    import psutil

    roles = dict.fromkeys(("workers", "database", "delivering", "other"), 0.0)
    cluster = psutil.Process(cluster_pid)
    in_cluster = {cluster.pid, *(c.pid for c in cluster.children(recursive=True))}
    for process in psutil.process_iter(["name"]):
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        used = times.user + times.system
        if process.pid in in_cluster:
            roles["workers"] += used + times.children_user + times.children_system
        elif process.info["name"] == "postgres":
            roles["database"] += used
            with contextlib.suppress(psutil.Error):
                parent = process.parent()
                if parent is None or parent.name() != "postgres":  # the server
                    roles["database"] += times.children_user + times.children_system
        elif process.pid == os.getpid():
            roles["delivering"] += used
        else:
            roles["other"] += used
    return roles


def cpu_per_page(
    before: dict[str, float], after: dict[str, float], measured: Round
) -> str:
    """A line of what a round's pages cost the machine's cores, by role, and the
    rate those cores would reach if they did nothing else."""
    used = {role: after[role] - before[role] for role in before}
    each = {role: 1000 * seconds / measured.pages for role, seconds in used.items()}
    total = sum(each.values())
    cores = os.cpu_count() or 1
    busy = sum(used.values()) / (cores * measured.seconds)
    return (
        f"{'':>12}  CPU per page: "
        + ", ".join(f"{role} {ms:.1f} ms" for role, ms in each.items())
        + f"; {total:.1f} ms in all, so {cores} cores reach at most "
        f"{cores * 1000 / total:.0f} pages/s (busy {busy:.0%} of the round)"
    )


def stop_cluster(cluster: subprocess.Popen) -> None:
    cluster.send_signal(signal.SIGINT)
    try:
        cluster.wait(timeout=60)
    except subprocess.TimeoutExpired:
        cluster.kill()


def deliver_all(name: str, pages: list[tuple[str, str, int]]) -> Round:
    """Deliver (url, html, status) pages through the webhook's service; the running
    cluster processes them. Returns when every job, follow-ups included, is done."""
    from django_q.models import OrmQ

    from ingest.delivery.models import Delivery

    result = Round(name, pages=len(pages))
    requests, tokens = embedding_usage()
    started = time.perf_counter()
    result.delivery_ids = queue_deliveries(name, pages)
    ids = list(result.delivery_ids.values())
    open_states = [Delivery.State.QUEUED, Delivery.State.PROCESSING]
    while Delivery.objects.filter(pk__in=ids, state__in=open_states).exists() or (
        OrmQ.objects.exists()
    ):
        time.sleep(0.2)
    result.seconds = time.perf_counter() - started
    now_requests, now_tokens = embedding_usage()
    result.requests, result.tokens = now_requests - requests, now_tokens - tokens
    outcomes = Delivery.objects.filter(pk__in=ids).values_list("outcome", flat=True)
    result.outcomes.update(outcomes)
    return result


def queue_deliveries(name: str, pages: list[tuple[str, str, int]]) -> dict[str, int]:
    """Store and queue (url, html, status) pages as the webhook does; url → id."""
    from ingest.delivery.queue import delivery_receive
    from ingest.reading import wire

    ids = {}
    for number, (url, html, status) in enumerate(pages):
        parsed = wire.ParsedDelivery(
            rid=f"{name}-{number}", url=url, original_status=status,
            crawler_status=200, body_format="html",
        )  # fmt: skip
        raw = gzip.compress(html.encode())
        ids[url], _ = delivery_receive(
            parsed=parsed, raw=raw, content_type="text/plain"
        )
    return ids
