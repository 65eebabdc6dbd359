"""Two web nodes and two worker nodes on one PostgreSQL server reached over TCP, as
a deployment past one machine runs them (``serve --web``, ``serve --worker``, one
``DATABASE_URL``), with one worker node killed mid-way and started again.

The server is the embedded binaries run as a plain server on 127.0.0.1
(``tests/tcp_postgres.py``), standing in for a managed one. Deliveries are posted
over real sockets to both web nodes, a few of them to both at once; a site on
loopback is crawled by both worker nodes with one request per host at a time; the
due planner hands a second site's pages to the fetcher; the periodic jobs tick on
both worker nodes' schedulers. The worker node holding a request to the site is
frozen, then every process of it SIGKILLed (the kernel closes their connections),
in the middle of a delivery's run; then started again.

What must hold, and what is printed: every delivery reaches one outcome, once
(one row per rid, done, one version per page); no text is embedded twice (the
usage recorded counts exactly the vectors stored); no host ever has two requests
in flight; each tick of a periodic job queues one job, run to its end once.

Run it alone: ``.venv/bin/pytest tests/kbsite/test_nodes.py -s`` (``-s`` shows the
counts).
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import psutil
import pytest

from kbsite.locks import DELIVERY_RUNS
from tests.conftest import PYTHON, ROOT, free_port
from tests.fakes.crawlbase import FakeCrawler
from tests.fakes.site import FakeSite, page
from tests.tcp_postgres import TcpPostgres, die_with_parent
from tests.world import SITE, page_html

pytestmark = pytest.mark.slow

TOKEN = "nodes-test-token-0123456789"
DELIVERIES = 90
# Every REPEAT-th delivery is posted to both web nodes at once.
REPEAT = 6
SENDERS = 3
SITE_PAGES = 14
RECHECK_PAGES = 5
# The periodic jobs counted, by schedule (each ticks every minute here).
COUNTED = (
    "ingest: recrawl due pages",
    "sources: plan the day's checks",
    "ingest: re-queue stalled deliveries",
    "ingest: send queued pushes",
)
# Ticks of these the test waits for (both fire a minute apart here).
TICKS_WANTED = ("ingest: recrawl due pages", "sources: plan the day's checks")
VOCABULARY = (
    "queue worker pool broker cluster schedule lease claim lock session index "
    "vector chunk page crawl host robots sitemap delivery webhook answer search "
    "token budget plan tick retry backoff timeout outcome version source scope"
).split()
# Seconds, from the worker nodes' start, for everything to be done.
DEADLINE = 240
SETUP = """
from django.core.management import call_command
from django_q.models import Schedule
from sources.models import Page, Source
call_command("migrate", verbosity=0)
Source.objects.create(name="Example docs", seed_urls="{site}/", fetcher="crawlbase")
recheck = Source.objects.create(name="Recheck", seed_urls="{recheck}")
for n in range({pages}):
    Page.objects.create(source=recheck, url=f"{recheck}r{{n}}.html")
Schedule.objects.filter(name="sources: plan the day's checks").update(minutes=1)
"""
# django-q2's own log lines: a scheduler's tick, a worker's start and end of a job.
CREATED = re.compile(r" INFO django-q \S+ created task (\S+) from schedule \[(.+)\]$")
PROCESSING = re.compile(r" INFO django-q \S+ processing (\S+) '")
PROCESSED = re.compile(r" INFO django-q Processed '[^']+' \((\S+)\)$")


def node_env(db: TcpPostgres, root: Path) -> dict[str, str]:
    given = ("DATABASE_URL", "SECRET_KEY", "WEBHOOK_TOKEN")
    env = {k: v for k, v in os.environ.items() if not k.startswith(given)}
    env.update(
        DJANGO_SETTINGS_MODULE="tests.node_settings",
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
        DATABASE_URL=db.url,
        SECRET_KEY="nodes-test-secret-key-shared-by-every-node",
        KB_VAR_DIR=str(root / "var"),
        WEBHOOK_TOKEN=TOKEN,
        WEB_THREADS="4",
        # One worker fetching, one waiting for the host's turn, one for deliveries.
        Q_WORKERS="3",
        # A killed node's URL claim is free again after Q_TIMEOUT, the jobs it
        # had taken are offered again after Q_RETRY. A claim may wait 10 s for
        # its host's turn, then fetch for CRAWL_TIMEOUT: within Q_TIMEOUT.
        Q_TIMEOUT="30",
        Q_RETRY="40",
        DELIVERY_RETRY_SECONDS="0",
        RECRAWL_SCHEDULE_MINUTES="1",
        CRAWL_ALLOW_PRIVATE_ADDRESSES="true",
        CRAWL_HOST_CONCURRENCY="1",
        # No spacing between requests: only the concurrency limit keeps them apart.
        CRAWL_DELAY="0",
        CRAWL_WORKERS="2",
        CRAWL_TIMEOUT="15",
        CRAWL_RETRY_SECONDS="2",
        CRAWL_CONTACT_URL="http://127.0.0.1/bot",
    )
    return env


def manage(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [PYTHON, "manage.py", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@dataclass
class Node:
    """One ``manage.py serve`` in a session of its own, logging to ``log``."""

    name: str
    args: list[str]
    env: dict[str, str]
    log: Path
    process: subprocess.Popen | None = None

    def start(self) -> Node:
        with open(self.log, "a") as output:
            self.process = subprocess.Popen(
                [PYTHON, "manage.py", "serve", *self.args],
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # serve stops what it started when it gets SIGTERM.
                preexec_fn=die_with_parent(signal.SIGTERM),
            )
        return self

    def processes(self) -> list[psutil.Process]:
        """Every live process of the node's session, orphans included."""
        assert self.process is not None
        found = []
        for process in psutil.process_iter():
            with contextlib.suppress(psutil.Error, ProcessLookupError):
                if (
                    os.getsid(process.pid) == self.process.pid
                    and process.status() != psutil.STATUS_ZOMBIE
                ):
                    found.append(process)
        return found

    def ports_to(self, port: int) -> set[int]:
        """The local ports of the node's TCP connections to ``port``."""
        ports = set()
        for process in self.processes():
            with contextlib.suppress(psutil.Error):
                for conn in process.net_connections(kind="tcp"):
                    if conn.raddr and conn.raddr.port == port:
                        ports.add(conn.laddr.port)
        return ports

    def freeze(self) -> list[psutil.Process]:
        """SIGSTOP every process of the node: it holds what it held, no more."""
        frozen = self.processes()
        for process in frozen:
            with contextlib.suppress(psutil.Error):
                process.suspend()
        return frozen

    def thaw(self, frozen: list[psutil.Process]) -> None:
        for process in frozen:
            with contextlib.suppress(psutil.Error):
                process.resume()

    def kill(self, frozen: list[psutil.Process]) -> None:
        for process in frozen + self.processes():
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(frozen, timeout=10)
        assert self.process is not None
        self.process.wait(timeout=10)

    def stop(self) -> int:
        """SIGTERM to serve, as a service manager stops it; what is left after
        40 s is killed. serve's exit status."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                pass
        self.kill([])
        return self.process.returncode

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def cluster_up(self) -> bool:
        return "] running." in self.output()


@dataclass
class Posts:
    """What the web nodes answered, by node."""

    answers: list[tuple[str, str, int, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, node: str, rid: str, status: int, body: dict) -> None:
        with self.lock:
            self.answers.append((node, rid, status, str(body.get("status"))))

    def rids(self, status: str) -> set[str]:
        with self.lock:
            return {rid for _, rid, s, answer in self.answers if answer == status}


def words(seed: str, count: int = 12) -> str:
    """Text of its own for each page: lines that differ only in their digits
    are one line shape, learned as boilerplate and stripped."""
    return " ".join(random.Random(seed).choices(VOCABULARY, k=count)).capitalize()


def delivery_body(number: int) -> str:
    return page_html(
        f"Node guide {number}",
        ("Queues", f"{words(f'queues {number}')}."),
        ("Limits", f"{words(f'limits {number}')}."),
    )


def send(crawlers: list[FakeCrawler], numbers: Iterator[int], posts: Posts) -> None:
    """Post deliveries, alternating web nodes; every REPEAT-th to both at once."""
    for number in numbers:
        targets = crawlers if number % REPEAT == 0 else [crawlers[number % 2]]
        post_at_once(targets, number, posts)
        time.sleep(0.4)  # deliveries keep arriving while a node dies


def post_at_once(crawlers: list[FakeCrawler], number: int, posts: Posts) -> None:
    rid, url, body = f"node-{number}", f"{SITE}/nodes/{number}/", delivery_body(number)
    start = threading.Barrier(len(crawlers))

    def post(crawler: FakeCrawler) -> None:
        start.wait()
        answer = crawler.deliver(rid=rid, url=url, body=body)
        posts.note(crawler.callback_url, rid, answer.status, answer.body)

    threads = [threading.Thread(target=post, args=(c,), daemon=True) for c in crawlers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def shared(numbers: Iterator[int]) -> Callable[[], Iterator[int]]:
    lock = threading.Lock()

    def taker() -> Iterator[int]:
        while True:
            with lock:
                number = next(numbers, None)
            if number is None:
                return
            yield number

    return taker


def wait_until(
    condition: Callable[[], bool],
    seconds: float,
    what: str,
    state: Callable[[], object] = lambda: "",
) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {state()}")
        time.sleep(0.5)


def healthy(port: int) -> bool:
    with contextlib.suppress(OSError):
        url = f"http://127.0.0.1:{port}/healthz/"
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status == 200
    return False


@dataclass
class Ticks:
    """What the worker nodes' logs say of the periodic jobs: the jobs each
    schedule's ticks queued (by task name), and how often each task was taken
    up and run to its end."""

    queued: dict[str, list[str]]
    started: Counter
    finished: Counter

    @classmethod
    def read(cls, logs: list[str]) -> Ticks:
        queued: dict[str, list[str]] = {}
        started: Counter = Counter()
        finished: Counter = Counter()
        for line in "\n".join(logs).splitlines():
            if created := CREATED.search(line):
                queued.setdefault(created[2], []).append(created[1])
            elif processing := PROCESSING.search(line):
                started[processing[1]] += 1
            elif processed := PROCESSED.search(line):
                finished[processed[1]] += 1
        return cls(queued, started, finished)

    def tasks(self, schedule: str) -> list[str]:
        return self.queued.get(schedule, [])

    def count(self, schedule: str) -> int:
        return len(self.tasks(schedule))


def held_deliveries(db: TcpPostgres, ports: set[int]) -> list[int]:
    """Deliveries whose run holds its advisory lock in a session of these client
    ports (``ingest.delivery.claim``: the lock's key is the delivery's id)."""
    rows = db.query(
        "SELECT l.objid::bigint, a.client_port FROM pg_locks l "
        "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
        "AND l.classid = %s::oid AND l.objsubid = 2 AND l.granted",
        [DELIVERY_RUNS.number],
    )
    return sorted(key for key, port in rows if port in ports)


def freeze_mid_delivery(
    workers: list[Node], db: TcpPostgres, site: FakeSite
) -> tuple[Node, list[int]]:
    """The worker node with a request to the site in flight, frozen (SIGSTOP)
    while it also runs deliveries; and the ids of those."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        victim = next((w for w in workers if w.ports_to(site.port)), None)
        if victim is not None and held_deliveries(db, victim.ports_to(db.port)):
            frozen = victim.freeze()
            cut = held_deliveries(db, victim.ports_to(db.port))
            if cut and victim.ports_to(site.port):
                return victim, cut
            victim.thaw(frozen)
        time.sleep(0.05)
    raise AssertionError("no worker node ran a delivery while holding the site")


def docs_site(site: FakeSite) -> list[str]:
    site.robots("User-agent: *\n")
    site.add("/sitemap.xml", "", status=404)
    paths = [f"/docs/p{n}.html" for n in range(SITE_PAGES)]
    # Each request takes a while: two at once would overlap visibly.
    site.add("/docs/", page("Site docs", "Start here.", paths), slow=0.15)
    for n, path in enumerate(paths):
        site.add(path, page(f"Site page {n}", f"{words(f'site {n}')}."), slow=0.15)
    return ["/docs/", *paths]


def next_runs(db: TcpPostgres) -> dict[str, datetime]:
    rows = db.query(
        "SELECT name, next_run FROM django_q_schedule WHERE name = ANY(%s)",
        [list(COUNTED)],
    )
    return dict(rows)


def progress(db: TcpPostgres, workers: list[Node]) -> dict[str, object]:
    """What is left to do, by what; all empty once everything is done."""
    open_rows = db.query(
        "SELECT state, count(*) FROM ingest_delivery WHERE state IN "
        "('queued', 'processing') GROUP BY state"
    )
    crawls = db.query("SELECT id FROM ingest_crawl WHERE state = 'running'")
    recheck_pending = db.query(
        "SELECT count(*) FROM sources_page p JOIN sources_source s "
        "ON s.id = p.source_id WHERE s.name = 'Recheck' AND p.status <> 'live'"
    )[0][0]
    ticks = Ticks.read([w.output() for w in workers])
    return {
        "open deliveries": dict(open_rows),
        "running crawls": crawls,
        "recheck pages not live": recheck_pending,
        "planners short of two ticks": [s for s in TICKS_WANTED if ticks.count(s) < 2],
        "ticks not run": [
            t for n in COUNTED for t in ticks.tasks(n) if not ticks.finished[t]
        ],
    }


@dataclass
class Found:
    """What the database holds once everything is done."""

    deliveries: list[tuple[str, str, str, int]]  # rid, state, outcome, attempts
    versions: dict[str, int]  # by page URL
    vectors: int
    texts: int  # distinct text hashes among the vectors
    usage_inputs: int
    usage_requests: int
    pages_without_chunks: int
    chunks_without_vector: int
    next_runs: dict[str, datetime]
    plans: list[tuple[str, dict | None]]

    @classmethod
    def read(cls, db: TcpPostgres) -> Found:
        def one(statement: str) -> tuple:
            return db.query(statement)[0]

        vectors, texts = one(
            "SELECT count(*), count(DISTINCT text_hash) FROM retrieval_embedding"
        )
        inputs, requests = one(
            "SELECT coalesce(sum(inputs), 0), coalesce(sum(requests), 0) "
            "FROM retrieval_embeddingusage"
        )
        (bare_pages,) = one(
            "SELECT count(*) FROM sources_page p WHERE NOT EXISTS "
            "(SELECT 1 FROM retrieval_chunk c WHERE c.page_id = p.id)"
        )
        (bare_chunks,) = one(
            "SELECT count(*) FROM retrieval_chunk c WHERE NOT EXISTS (SELECT 1 "
            "FROM retrieval_embedding e WHERE e.text_hash = c.embed_hash)"
        )
        versions = db.query(
            "SELECT p.url, count(v.id) FROM sources_page p LEFT JOIN "
            "sources_pageversion v ON v.page_id = p.id GROUP BY p.url"
        )
        return cls(
            deliveries=db.query(
                "SELECT rid, state, outcome, attempts FROM ingest_delivery"
            ),
            versions=dict(versions),
            vectors=vectors,
            texts=texts,
            usage_inputs=inputs,
            usage_requests=requests,
            pages_without_chunks=bare_pages,
            chunks_without_vector=bare_chunks,
            next_runs=next_runs(db),
            plans=db.query("SELECT name, schedule_plan FROM sources_source"),
        )


@dataclass
class Deployment:
    """The server, the two sites, the nodes' settings, and the nodes started,
    each stopped when ``stack`` closes."""

    stack: contextlib.ExitStack
    root: Path
    nodes: list[Node] = field(default_factory=list)

    def __post_init__(self) -> None:
        port = free_port()
        self.db = self.stack.enter_context(TcpPostgres(self.root / "pg", port=port))
        self.site = self.stack.enter_context(FakeSite())
        self.recheck = self.stack.enter_context(FakeSite())
        self.paths = docs_site(self.site)
        for n in range(RECHECK_PAGES):
            text = f"{words(f'recheck {n}')}."
            self.recheck.add(f"/r/r{n}.html", page(f"Recheck {n}", text))
        self.env = node_env(self.db, self.root)
        setup = SETUP.format(
            site=SITE, recheck=self.recheck.url("/r/"), pages=RECHECK_PAGES
        )
        manage(self.env, "shell", "-c", setup)

    def start(self, name: str, *args: str) -> Node:
        node = Node(name, list(args), self.env, self.root / f"{name}.log")
        self.stack.callback(node.stop)
        self.nodes.append(node)
        return node.start()

    def workers(self) -> list[Node]:
        """The worker nodes running (one started again replaces the killed one)."""
        by_name = {n.name: n for n in self.nodes if n.name.startswith("worker")}
        return list(by_name.values())

    def worker_logs(self) -> list[str]:
        return [node.output() for node in self.workers()]


def test_two_web_and_two_worker_nodes_on_one_database_reach_each_outcome_once(
    server_tmp_path: Path,
):
    began = time.monotonic()
    posts = Posts()
    with contextlib.ExitStack() as stack:
        world = Deployment(stack, server_tmp_path)
        db, site, recheck = world.db, world.site, world.recheck
        held_path = world.paths[1]
        site.routes[held_path].hold = True
        first_runs = next_runs(db)
        set_up = time.monotonic()

        web_ports = [free_port(), free_port()]
        for n, port in enumerate(web_ports):
            bind = f"127.0.0.1:{port}"
            world.start(f"web-{n + 1}", "--web", "--bind", bind, "--web-workers", "1")
        world.start("worker-1", "--worker")
        world.start("worker-2", "--worker")
        nodes_started = time.monotonic()
        for port in web_ports:
            wait_until(lambda port=port: healthy(port), 90, f"the web node on {port}")
        for worker in world.workers():
            wait_until(lambda w=worker: w.cluster_up(), 90, f"{worker.name} up")

        manage(world.env, "crawl", site.url("/docs/"), "--no-wait")
        assert site.held.wait(90), "the crawl never reached the held page"
        crawlers = [
            FakeCrawler(f"http://127.0.0.1:{port}/webhooks/crawlbase/?token={TOKEN}")
            for port in web_ports
        ]
        taker = shared(iter(range(DELIVERIES)))
        senders = [
            threading.Thread(target=send, args=(crawlers, taker(), posts), daemon=True)
            for _ in range(SENDERS)
        ]
        for sender in senders:
            sender.start()

        # The worker node waiting on the held page dies in the middle of a
        # delivery's run, frozen first so that what it holds is known; then it
        # is started again.
        victim, cut = freeze_mid_delivery(world.workers(), db, site)
        victim.kill(victim.processes())
        killed_at = time.monotonic()
        site.release.set()  # the site saw its client hang up, and answers no more
        time.sleep(2)
        world.start(victim.name, "--worker")
        for sender in senders:
            sender.join(timeout=120)

        wait_until(
            lambda: not any(progress(db, world.workers()).values()),
            DEADLINE - (time.monotonic() - nodes_started),
            "every delivery, the crawls and two ticks of the planners",
            lambda: progress(db, world.workers()),
        )
        all_done = time.monotonic()
        # The ticks so far, all run: later ones may be cut short by the stop.
        ticked = Ticks.read(world.worker_logs())
        found = Found.read(db)
        exits = {node.name: node.stop() for node in world.nodes if node is not victim}
        ticks = Ticks.read(world.worker_logs())

    answers = [status for crawler in crawlers for status, _ in crawler.posts]
    by_node = Counter(node for node, *_ in posts.answers)
    webhook_rows = [row for row in found.deliveries if row[0].startswith("node-")]
    site_hits, recheck_hits = Counter(site.paths()), Counter(recheck.paths())
    site_most, recheck_most = site.most_at_once(), recheck.most_at_once()
    moved = {
        name: (found.next_runs[name] - first_runs[name]).total_seconds()
        for name in COUNTED
    }
    print(
        f"\nnodes: 2 web, 2 worker; worker node {victim.name} killed "
        f"{killed_at - nodes_started:.0f} s in, holding a request to the site and "
        f"deliveries {cut} mid-run; started again"
        f"\nposts: {len(answers)} answers ({dict(Counter(answers))}), by web node "
        f"{sorted(by_node.values())}; {len(posts.rids('queued'))} queued, "
        f"{len(posts.rids('duplicate'))} duplicate"
        f"\ndeliveries: {len(found.deliveries)} rows ({len(webhook_rows)} from the "
        f"webhook), {dict(Counter((s, o) for _, s, o, _ in found.deliveries))}; "
        f"attempts {dict(sorted(Counter(a for *_, a in found.deliveries).items()))}"
        f"\nvectors: {found.vectors} rows of {found.texts} texts; usage: "
        f"{found.usage_inputs} inputs in {found.usage_requests} requests; chunks "
        f"without a vector: {found.chunks_without_vector}, pages without chunks: "
        f"{found.pages_without_chunks}"
        f"\nsite: {sum(site_hits.values())} requests, at most {site_most} in flight; "
        f"{held_path} requested {site_hits[held_path]} times; paths requested more "
        f"than once: {sorted(p for p, n in site_hits.items() if n > 1)}"
        f"\nrecheck site: {sum(recheck_hits.values())} requests, at most "
        f"{recheck_most} in flight"
        + "".join(
            f"\n{name}: {ticked.count(name)} ticks, runs started "
            f"{[ticks.started[t] for t in ticked.tasks(name)]}, finished "
            f"{[ticks.finished[t] for t in ticked.tasks(name)]}; next run moved "
            f"{moved[name]:.0f} s"
            for name in COUNTED
        )
        + f"\nday plans: {[(n, (p or {}).get('planned_at')) for n, p in found.plans]}"
        + f"\ntimes: set-up {set_up - began:.0f} s, nodes to done "
        f"{all_done - nodes_started:.0f} s, total {time.monotonic() - began:.0f} s; "
        f"exits {exits}"
    )

    # Every delivery answered 200, by both web nodes; a rid posted to both at
    # once is stored once.
    sent = {f"node-{n}" for n in range(DELIVERIES)}
    assert set(answers) == {200}, Counter(answers)
    assert min(by_node.values()) >= DELIVERIES // 3, by_node
    assert posts.rids("duplicate") == {
        f"node-{n}" for n in range(0, DELIVERIES, REPEAT)
    }
    assert posts.rids("queued") == sent
    # One row per rid, each done with one outcome; each page one version.
    assert sorted(rid for rid, *_ in webhook_rows) == sorted(sent)
    assert {(s, o) for _, s, o, _ in webhook_rows} == {("done", "embedded")}
    assert {state for _, state, _, _ in found.deliveries} == {"done"}
    assert cut, "the kill cut no delivery's run short"
    pages = [f"{SITE}/nodes/{n}/" for n in range(DELIVERIES)]
    pages += [site.url(path) for path in world.paths]
    assert {found.versions[url] for url in pages} == {1}
    assert site_hits[held_path] >= 2, "the request the kill cut is made again"
    # No text embedded twice: each input paid for is one vector stored.
    assert found.usage_inputs == found.vectors == found.texts
    assert found.chunks_without_vector == found.pages_without_chunks == 0
    # One request per host at a time, across both worker nodes.
    assert (site_most, recheck_most) == (1, 1)
    assert all(recheck_hits[f"/r/r{n}.html"] >= 1 for n in range(RECHECK_PAGES))
    # Each tick queued one job, and each job ran to its end once; a schedule
    # ticks at most once per minute its next run moved.
    for name in COUNTED:
        queued = ticked.tasks(name)
        assert queued, name
        assert all(ticks.finished[task] == 1 for task in queued), (name, ticks)
        assert len(queued) <= moved[name] / 60, (name, len(queued), moved[name])
    assert set(exits.values()) == {0}, exits
