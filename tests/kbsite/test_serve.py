"""``manage.py serve`` run as a terminal runs it: how it stops, slow clients, and
the worker's CPU priority. Real processes, real sockets."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from django_q.models import OrmQ
from django_q.tasks import async_task

from ingest.publish.models import PublishCheck
from ingest.publish.services import PUBLISH_TASK, publish_check_request
from kbsite.management.commands.serve import STOP_GRACE_SECONDS
from sources.models import SYSTEM, Source
from tests.conftest import PYTHON, ROOT, free_port, subprocess_env
from tests.fakes.site import FakeSite, sitemap_xml
from tests.ingest.delivery.test_worker import wait_until
from tests.kbsite.test_processes import get, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TOKEN = "serve-test-token-0123456789"
# What a web server process's command line names.
WEB = "kbsite.webserver"
Q_WORKERS = 2
# The cluster's main process, its sentinel, monitor, pusher and workers.
CLUSTER_PROCESSES = 4 + Q_WORKERS
# The worker may read a site on loopback, at once.
CHECK_ENV = {"CRAWL_ALLOW_PRIVATE_ADDRESSES": "true", "CRAWL_DELAY": "0"}


class Served:
    """A running ``manage.py serve`` and every process it had started."""

    def __init__(self, *args: str, **env: str) -> None:
        self.port = free_port()
        # A file, not a pipe: a child left running would keep a pipe open.
        self.log = tempfile.TemporaryFile("w+")
        self.process = subprocess.Popen(
            [PYTHON, "manage.py", "serve", "--bind", f"127.0.0.1:{self.port}", *args],
            cwd=ROOT,
            env=subprocess_env(
                **{"WEBHOOK_TOKEN": TOKEN, "Q_WORKERS": str(Q_WORKERS), **env}
            ),
            stdout=self.log,
            stderr=subprocess.STDOUT,
            # A process group of its own, as a shell gives a job: the test can then
            # send what a terminal's Ctrl-C sends, to the whole group.
            start_new_session=True,
        )
        self.tree: list[psutil.Process] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_until_up(self, *, cluster: bool) -> None:
        wait_for(f"{self.url}/healthz/", 60)
        deadline = time.monotonic() + 60
        while True:
            self.tree = psutil.Process(self.process.pid).children(recursive=True)
            if not cluster or (
                len(self.named("qcluster")) >= CLUSTER_PROCESSES
                and "] running." in self.output()
            ):
                return
            assert time.monotonic() < deadline, (
                f"the worker cluster did not start:\n{self.output()}"
            )
            time.sleep(0.25)

    def named(self, word: str) -> list[psutil.Process]:
        found = []
        for process in self.tree:
            try:
                if word in " ".join(process.cmdline()):
                    found.append(process)
            except psutil.Error:
                continue
        return found

    def left_running(self) -> list[psutil.Process]:
        return [process for process in self.tree if _running(process)]

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def wait(self) -> str:
        """Wait for serve to exit; its output."""
        self.process.wait(timeout=90)
        return self.output()

    def stop(self, signum: int = signal.SIGINT) -> str:
        self.process.send_signal(signum)
        return self.wait()

    def clean_up(self) -> None:
        """Whatever the test found, leave nothing holding the test database."""
        if self.process.poll() is None:
            self.tree += psutil.Process(self.process.pid).children(recursive=True)
            self.process.kill()
            self.process.wait()
        for process in self.left_running():
            process.kill()
        self.log.close()


def _running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def serve() -> Iterator[Callable[..., Served]]:
    started: list[Served] = []

    def start(*args: str, **env: str) -> Served:
        served = Served(*args, **env)
        started.append(served)
        return served

    yield start
    for served in started:
        served.clean_up()


@pytest.mark.parametrize("how", ["ctrl_c_to_the_group", "sigterm_to_serve"])
def test_a_stop_leaves_no_process_of_the_tree_running(serve, how):
    served = serve("--web-workers", "2")
    served.wait_until_up(cluster=True)
    assert len(served.named(WEB)) == 2
    # A terminal's Ctrl-C goes to serve's process group; serve alone must get it,
    # or the cluster gets two stop signals and can deadlock in its handler.
    in_group = [p.pid for p in served.tree if os.getpgid(p.pid) == served.process.pid]
    assert not in_group
    time.sleep(1)  # the cluster settles into waiting for its sentinel, as in use

    if how == "ctrl_c_to_the_group":
        os.killpg(served.process.pid, signal.SIGINT)
    else:
        served.process.send_signal(signal.SIGTERM)
    output = served.wait()

    assert served.process.returncode == 0, output
    assert "Stopped." in output
    left = [(p.pid, " ".join(p.cmdline())) for p in served.left_running()]
    assert not left, f"still running after serve stopped: {left}\n{output}"


def test_start_up_advice_is_printed_once_and_no_webhook_warning_without_crawlbase(
    serve,
):
    """The worker cluster does not run the checks serve has run already."""
    served = serve("--web-workers", "1", WEBHOOK_TOKEN="", CRAWL_CONTACT_URL="")
    served.wait_until_up(cluster=True)
    output = served.stop()

    assert output.count("ingest.W003") == 1, output
    assert "ingest.W001" not in output


def test_the_worker_cluster_runs_at_a_lower_cpu_priority_than_the_web_server(serve):
    served = serve("--web-workers", "1", WORKER_NICE="7")
    served.wait_until_up(cluster=True)
    base = psutil.Process(served.process.pid).nice()

    web = {process.nice() for process in served.named(WEB)}
    worker = {process.nice() for process in served.named("qcluster")}

    assert web == {base}
    assert worker == {min(base + 7, 19)}
    if AUTOGROUPS.exists() and AUTOGROUPS.read_text().strip() == "1":
        # Between sessions' autogroups, Linux shares CPU evenly whatever each
        # process's nice: the lower priority counts only within one.
        groups = {_autogroup(process.pid) for process in served.tree}
        assert len(groups) == 1, groups
    served.stop()


AUTOGROUPS = Path("/proc/sys/kernel/sched_autogroup_enabled")


def _autogroup(pid: int) -> str:
    return Path(f"/proc/{pid}/autogroup").read_text().split()[0]


def _slow_sender(port: int) -> socket.socket:
    """A delivery that sends its headers and 10 of its 1,000 body bytes, then stalls."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(
        f"POST /webhooks/crawlbase/?token={TOKEN} HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{port}\r\nContent-Type: text/plain\r\n"
        "rid: slow-1\r\nurl: https://docs.example.com/slow\r\n"
        "Original-Status: 200\r\nPC-Status: 200\r\n"
        "Content-Length: 1000\r\n\r\n".encode()
        + b"0123456789"
    )
    return sock


def test_slow_request_bodies_neither_block_the_server_nor_hold_it_for_long(serve):
    served = serve("--no-worker", "--web-workers", "2", WEB_BODY_TIMEOUT="3")
    served.wait_until_up(cluster=False)
    senders = [_slow_sender(served.port) for _ in range(4)]
    time.sleep(0.5)  # the senders' requests are with the server now

    try:
        started = time.monotonic()
        assert get(f"{served.url}/healthz/") == (200, '{"ok": true}')
        # A liveness bound, not a benchmark: a blocked server takes 30 s here.
        assert time.monotonic() - started < 5
        # The body's time is bounded: each sender is answered, not kept waiting.
        for sock in senders:
            answer = http.client.HTTPResponse(sock)
            answer.begin()
            assert answer.status == 408
            assert json.loads(answer.read())["error"] == "body_unreadable"
    finally:
        for sock in senders:
            sock.close()
    output = served.stop()
    assert served.process.returncode == 0, output


SLOW_HEADER_CLIENTS = 50


def _trickle(clients: list[socket.socket], stop: threading.Event) -> None:
    """One more byte of each client's header block every half second."""
    while not stop.wait(0.5):
        for sock in clients:
            try:
                sock.send(b"a")
            except OSError:  # answered and closed already
                continue


def test_slow_header_blocks_neither_delay_the_server_nor_hold_it_for_long(serve):
    served = serve("--no-worker", "--web-workers", "2", WEB_HEADER_TIMEOUT="4")
    served.wait_until_up(cluster=False)
    for _ in range(4):  # the first answers of a process are slower
        get(f"{served.url}/healthz/")
    clients = [
        socket.create_connection(("127.0.0.1", served.port), timeout=10)
        for _ in range(SLOW_HEADER_CLIENTS)
    ]
    stop = threading.Event()
    trickler = threading.Thread(target=_trickle, args=(clients, stop), daemon=True)
    try:
        for sock in clients:
            sock.sendall(b"GET /healthz/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        trickler.start()
        time.sleep(1.2)  # every client has sent more than its first packet

        started = time.monotonic()
        assert get(f"{served.url}/healthz/") == (200, '{"ok": true}')
        # The bound: 50 slow header blocks delay /healthz/ by under 1 s.
        assert time.monotonic() - started < 1
        stop.set()
        trickler.join()
        # However slowly the bytes come, WEB_HEADER_TIMEOUT after the first one
        # the client is answered and its connection closed.
        answers = []
        for sock in clients:
            answer = http.client.HTTPResponse(sock)
            answer.begin()
            answers.append((answer.status, json.loads(answer.read())["error"]))
        assert answers == [(408, "headers_unreadable")] * SLOW_HEADER_CLIENTS
    finally:
        stop.set()
        for sock in clients:
            sock.close()
    output = served.stop()
    assert served.process.returncode == 0, output


BAD_HEADER_BLOCKS = {
    "a header line without a colon": (
        b"GET /healthz/ HTTP/1.1\r\nHost: h\r\nNo colon here\r\n\r\n",
        400, "bad_request",
    ),
    "a bare line feed": (
        b"GET /healthz/ HTTP/1.1\r\nHost: h\nX-A: b\r\n\r\n", 400, "bad_request"
    ),
    "a Content-Length that is not a number": (
        b"POST /healthz/ HTTP/1.1\r\nHost: h\r\nContent-Length: ten\r\n\r\n",
        400, "bad_request",
    ),
    "a malformed request line": (b"GET\r\nHost: h\r\n\r\n", 400, "bad_request"),
    "a body longer than WEBHOOK_MAX_BODY_BYTES": (
        b"POST /webhooks/crawlbase/ HTTP/1.1\r\nHost: h\r\n"
        b"Content-Length: 2001\r\n\r\n",
        413, "body_too_large",
    ),
    "a transfer coding it cannot read": (
        b"POST /healthz/ HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n",
        501, "not_implemented",
    ),
}  # fmt: skip


def test_the_servers_own_answers_to_bad_header_blocks_are_json(serve):
    served = serve("--no-worker", "--web-workers", "1", WEBHOOK_MAX_BODY_BYTES="2000")
    served.wait_until_up(cluster=False)

    answers = {}
    for case, (request, _, _) in BAD_HEADER_BLOCKS.items():
        with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
            sock.sendall(request)
            answer = http.client.HTTPResponse(sock)
            answer.begin()
            body = answer.read()
            is_json = answer.getheader("Content-Type") == "application/json"
            error = json.loads(body)["error"] if is_json else body[:80]
            answers[case] = (answer.status, error)

    assert answers == {
        case: (status, error) for case, (_, status, error) in BAD_HEADER_BLOCKS.items()
    }
    served.stop()


def test_a_second_ctrl_c_kills_what_a_long_job_keeps_running(serve):
    served = serve("--web-workers", "1", Q_TIMEOUT="120")
    served.wait_until_up(cluster=True)
    async_task("time.sleep", 60)
    deadline = time.monotonic() + 30
    while not OrmQ.objects.filter(lock__isnull=False).exists():
        assert time.monotonic() < deadline, "no worker took the job"
        time.sleep(0.2)
    time.sleep(1)  # the worker is inside the job now

    os.killpg(served.process.pid, signal.SIGINT)
    time.sleep(2)
    assert served.process.poll() is None, "the cluster waits for its job"
    os.killpg(served.process.pid, signal.SIGINT)
    output = served.wait()

    assert "processes still running" in output
    left = [(p.pid, " ".join(p.cmdline())) for p in served.left_running()]
    assert not left, f"still running after serve stopped: {left}\n{output}"


def test_a_stop_ends_a_check_between_two_of_its_jobs_and_a_restart_finishes_it(
    serve,
):
    """A check reading 41 sitemaps, a second each, in one job would hold the stop
    for the whole grace period and be killed; in jobs of a few seconds it is
    waited for one of them, and goes on where it stood after a restart."""
    maps = [f"/map{n}.xml" for n in range(40)]
    with FakeSite() as site:
        site.robots(f"User-agent: *\nSitemap: {site.url('/index.xml')}\n")
        site.add("/index.xml", sitemap_xml([site.url(m) for m in maps], index=True))
        for path in maps:
            # Pages out of the source's scope: nothing is handed over to a crawl.
            listed = sitemap_xml([site.url(f"/blog{path}.html")])
            site.add(path, listed, slow=1.0)
        source = Source.objects.create(name="Docs", seed_urls=site.url("/docs/"))
        served = serve("--web-workers", "1", **CHECK_ENV)
        served.wait_until_up(cluster=True)
        check, _ = publish_check_request(source=source, user=SYSTEM)
        wait_until(
            lambda: len(site.paths()) >= 5, 60, "the check to read its first sitemaps"
        )

        started = time.monotonic()
        os.killpg(served.process.pid, signal.SIGINT)
        output = served.wait()
        stopping = time.monotonic() - started

        assert "processes still running" not in output, output
        assert stopping < STOP_GRACE_SECONDS / 2, f"the stop took {stopping:.1f} s"
        check.refresh_from_db()
        assert check.state == PublishCheck.State.RUNNING
        assert 3 <= check.sitemaps_read < len(maps)
        # Its next job waits on the queue, taken by no worker.
        jobs = [row for row in OrmQ.objects.all() if row.task["func"] == PUBLISH_TASK]
        waiting = [(row.task["args"], row.lock <= timezone.now()) for row in jobs]
        assert waiting == [((check.pk,), True)]

        for path in maps:
            site.routes[path].slow = 0
        again = serve("--web-workers", "1", **CHECK_ENV)
        again.wait_until_up(cluster=True)
        wait_until(
            lambda: PublishCheck.objects.get(pk=check.pk).state != "running",
            60,
            "the check to finish",
        )
        again.stop()
        read = Counter(site.paths())

    check.refresh_from_db()
    assert check.state == PublishCheck.State.DONE, check.note
    assert check.sitemaps_read == 1 + len(maps)
    assert read == Counter(["/robots.txt", "/index.xml", *maps]), "each read once"


# -- roles: a web node, a worker node ---------------------------------------------


@pytest.mark.parametrize("role", ["--web", "--worker"])
def test_a_node_role_on_the_embedded_database_is_refused_saying_why(role, settings):
    settings.DATABASE_URL = ""

    with pytest.raises(CommandError) as refused:
        call_command("serve", role)

    message = str(refused.value)
    assert f"serve {role} runs one node of several" in message
    assert "no other node can reach" in message
    assert "Set DATABASE_URL" in message


def test_a_node_role_without_a_shared_secret_key_is_refused(settings, monkeypatch):
    settings.DATABASE_URL = "postgres://kb@db.internal:5432/kb"
    monkeypatch.delenv("SECRET_KEY", raising=False)
    monkeypatch.delenv("SECRET_KEY_FILE", raising=False)

    with pytest.raises(CommandError, match="Set SECRET_KEY .* on every node"):
        call_command("serve", "--worker")


def _shared_database_env() -> dict[str, str]:
    """What a node on a shared database is given: its URL (here the suite's own
    server, through its socket) and one key for every node."""
    from django.db import connection

    from tests.conftest import _database_url

    params = connection.get_connection_params()
    url = _database_url(
        {"USER": "postgres", "HOST": params["host"], "PORT": params["port"],
         "NAME": connection.settings_dict["NAME"]}
    )  # fmt: skip
    return {"DATABASE_URL": url, "SECRET_KEY": "a-key-every-node-shares-0123456789"}


def test_a_worker_node_runs_the_cluster_alone_at_full_priority(serve):
    served = serve("--worker", WORKER_NICE="7", **_shared_database_env())
    deadline = time.monotonic() + 60
    while "] running." not in served.output():
        assert time.monotonic() < deadline, f"no cluster:\n{served.output()}"
        time.sleep(0.25)
    served.tree = psutil.Process(served.process.pid).children(recursive=True)
    base = psutil.Process(served.process.pid).nice()

    assert len(served.named("qcluster")) >= CLUSTER_PROCESSES
    assert not served.named(WEB)
    assert {process.nice() for process in served.named("qcluster")} == {base}
    output = served.stop(signal.SIGTERM)
    assert served.process.returncode == 0, output
    assert "Worker node" in output and "Admin:" not in output
    assert not served.left_running()


def test_a_web_node_serves_without_a_cluster(serve):
    served = serve("--web", "--web-workers", "1", **_shared_database_env())
    served.wait_until_up(cluster=False)
    time.sleep(2)  # a cluster, were one started, would be up by now
    served.tree = psutil.Process(served.process.pid).children(recursive=True)

    assert get(f"{served.url}/healthz/") == (200, '{"ok": true}')
    assert len(served.named(WEB)) == 1
    assert not served.named("qcluster")
    output = served.stop(signal.SIGTERM)
    assert served.process.returncode == 0, output
    assert not served.left_running()
