"""``manage.py serve``: the web server and one worker cluster, stopped together; or
one of them alone, as a node of several sharing one database (``--web``,
``--worker``)."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from types import FrameType

import psutil
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from kbsite import webserver
from kbsite.env import env_secret

# Up to Q_TIMEOUT a job may run; a stop does not wait that long for it: the job is
# offered again after Q_RETRY, and the web server's own grace (10 s) fits in this
# one.
STOP_GRACE_SECONDS = 20
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PR_SET_PDEATHSIG = 1


class Command(BaseCommand):
    help = (
        "Run the web server (waitress processes) and one django-q2 cluster (the "
        "worker) until Ctrl-C, then stop both; or, with --web or --worker, one of "
        "them as a node of several on one DATABASE_URL."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--bind",
            default=f"127.0.0.1:{settings.PORT}",
            help="host:port for the web server to listen on (default "
            "127.0.0.1:$PORT; [::1]:8000 for IPv6).",
        )
        parser.add_argument(
            "--web-workers",
            type=int,
            default=settings.WEB_CONCURRENCY,
            help="Number of web server processes (default $WEB_CONCURRENCY, "
            "else one per CPU core: requests are CPU-bound).",
        )
        roles = parser.add_mutually_exclusive_group()
        roles.add_argument(
            "--web",
            action="store_true",
            help="A web node: the web server alone, beside worker nodes (serve "
            "--worker) on other machines. Needs DATABASE_URL and SECRET_KEY, the "
            "same on every node.",
        )
        roles.add_argument(
            "--worker",
            action="store_true",
            help="A worker node: the django-q2 cluster alone (its scheduler "
            "included), beside web nodes (serve --web) and other worker nodes. "
            "Needs DATABASE_URL and SECRET_KEY, the same on every node.",
        )
        roles.add_argument(
            "--no-worker",
            action="store_true",
            help="Do not start the django-q2 cluster (run it beside this one with "
            "manage.py qcluster, e.g. on the embedded database).",
        )

    def handle(
        self,
        *args,
        bind: str,
        web_workers: int,
        web: bool,
        worker: bool,
        no_worker: bool,
        **options,
    ):
        if web or worker:
            _node_refusal_raise("--web" if web else "--worker")
        # Connecting first starts (or joins) the embedded database and keeps it up for
        # as long as this command runs; on DATABASE_URL it checks the server.
        connection.ensure_connection()
        self._signals: list[int] = []
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._note_signal)
        children = self._start(
            bind, web_workers, web=not worker, cluster=not (web or no_worker)
        )
        name = self._wait_for_signal_or_exit(children)
        if name:
            self.stderr.write(f"The {name} process stopped; stopping the rest.")
        self._stop(children)
        self.stdout.write("Stopped.")
        sys.exit(1 if name else 0)

    def _note_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals.append(signum)

    def _start(
        self, bind: str, web_workers: int, *, web: bool, cluster: bool
    ) -> dict[str, subprocess.Popen]:
        children: dict[str, subprocess.Popen] = {}
        if web:
            self._announce_login(bind)
            children = self._start_web(bind, web_workers)
        if cluster:
            children["worker"] = self._start_cluster(beside_web=web)
        return children

    def _start_cluster(self, *, beside_web: bool) -> subprocess.Popen:
        if not beside_web:
            workers = settings.Q_CLUSTER["workers"]
            self.stdout.write(
                f"Worker node: a django-q2 cluster of {workers} workers and its "
                "scheduler. Stop with Ctrl-C."
            )
        # Beside the web server, the worker yields the CPU to it: embedding a crawl
        # must not delay the webhook's answers past Crawlbase's patience.
        nice = settings.WORKER_NICE if beside_web else 0
        # Its checks are the ones this command ran already: printed once.
        command = [sys.executable, "manage.py", "qcluster", "--skip-checks"]
        return _spawn(command, nice=nice)

    def _start_web(self, bind: str, workers: int) -> dict[str, subprocess.Popen]:
        """``workers`` web server processes accepting on one socket opened here:
        whichever is free takes the next connection."""
        try:
            listening = webserver.bind(bind)
        except (OSError, ValueError) as exc:
            raise CommandError(f"Cannot listen on {bind}: {exc}") from exc
        with listening:
            fd = listening.fileno()
            command = [sys.executable, "-m", "kbsite.webserver", "--fd", str(fd)]
            return {
                f"web {n + 1}": _spawn(command, pass_fds=(fd,)) for n in range(workers)
            }

    def _announce_login(self, bind: str) -> None:
        users = get_user_model().objects
        username = settings.DJANGO_SUPERUSER_USERNAME
        if username and not users.filter(username=username).exists():
            try:
                call_command("createsuperuser", interactive=False, verbosity=0)
            except CommandError as exc:
                raise CommandError(
                    f"Cannot create the admin user from DJANGO_SUPERUSER_*: {exc}"
                ) from exc
            self.stdout.write(f"Created the admin user {username!r}.")
        url = f"http://{bind}/admin/"
        names = list(users.filter(is_superuser=True).values_list("username", flat=True))
        if names:
            self.stdout.write(f"Admin: {url}  (log in as {', '.join(names[:3])})")
        else:
            self.stdout.write(
                f"Admin: {url}\nNo admin user yet. Create one with:\n"
                "  .venv/bin/python manage.py createsuperuser\n"
                "or start with DJANGO_SUPERUSER_USERNAME, DJANGO_SUPERUSER_PASSWORD "
                "and DJANGO_SUPERUSER_EMAIL set."
            )
        self.stdout.write(
            f"Ask: http://{bind}/   API docs: http://{bind}/api/docs/   "
            "Stop with Ctrl-C."
        )

    def _wait_for_signal_or_exit(self, children: dict[str, subprocess.Popen]) -> str:
        """The name of the child that exited first, or "" once a stop signal came."""
        while not self._signals:
            for name, process in children.items():
                if process.poll() is not None:
                    return name
            time.sleep(0.2)
        return ""

    def _stop(self, children: dict[str, subprocess.Popen]) -> None:
        """One SIGTERM to each child (a web process then answers the requests it
        has read, the cluster finishes its jobs), then wait for every process of
        their groups; what is left after the grace period, or after a second
        Ctrl-C, is killed."""
        signals_seen = len(self._signals)
        for process in children.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        # Each child leads a process group its own children inherit, so processes
        # orphaned by their parent's exit are still found through it.
        groups = {process.pid for process in children.values()}
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        while time.monotonic() < deadline and len(self._signals) <= signals_seen:
            running = [p for p in children.values() if p.poll() is None]
            if not running and not _group_members(groups):
                return
            time.sleep(0.1)
        leftovers = _group_members(groups)
        if leftovers:
            self.stderr.write(f"Killing {len(leftovers)} processes still running.")
        # Only groups that still have members: an empty group's id may be reused.
        for group in {group for group in groups if _group_members({group})}:
            try:
                # The whole group at once: a cluster would replace workers killed
                # one by one.
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                continue
        for process in children.values():
            process.wait()
        psutil.wait_procs(leftovers, timeout=5)


def _node_refusal_raise(role: str) -> None:
    """A node of several needs what every node reaches alike: a database server
    (not the embedded one, a socket of this machine) and one signing key (job
    queue rows are signed with it; a worker drops a job it cannot verify)."""
    if not settings.DATABASE_URL:
        raise CommandError(
            f"serve {role} runs one node of several, and every node must reach one "
            "database: DATABASE_URL is unset, so this process would use the "
            "embedded PostgreSQL, which listens on a socket of this machine alone "
            "and no other node can reach. Set DATABASE_URL to a PostgreSQL server "
            "with pgvector that every node reaches (see docs/operations.md), or "
            "run everything on this machine with manage.py serve (or serve "
            "--no-worker beside manage.py qcluster)."
        )
    if not env_secret("SECRET_KEY"):
        raise CommandError(
            f"serve {role} runs one node of several, and every node must sign with "
            "one key: SECRET_KEY is unset, so this machine would use the key "
            "generated into its var/ directory. Jobs queued by one node are signed "
            "with it, and a worker node with another key drops them (and sessions "
            "signed on one web node are refused by the others). Set SECRET_KEY (or "
            "SECRET_KEY_FILE) to the same value on every node."
        )


def _spawn(
    command: list[str], *, nice: int = 0, pass_fds: tuple[int, ...] = ()
) -> subprocess.Popen:
    """Start ``command`` in a process group of its own: a terminal's Ctrl-C then
    reaches this command alone, which forwards one stop signal (a second SIGINT can
    deadlock django-q2's cluster in its signal handler). Not a session of its own:
    where Linux groups CPU time by session (autogroups), the nice value of a process
    weighs only against its own session's, so the worker must share the web
    server's session for its lower priority to count."""
    return subprocess.Popen(
        command,
        cwd=settings.BASE_DIR,
        # Outside the terminal's foreground group, reading it would stop the child.
        stdin=subprocess.DEVNULL,
        process_group=0,
        pass_fds=pass_fds,
        preexec_fn=_child_setup(nice),
    )


def _child_setup(nice: int) -> Callable[[], None]:
    parent = os.getpid()
    libc = ctypes.CDLL(None) if sys.platform == "linux" else None

    def setup() -> None:
        if libc is not None:
            # Out of the terminal's process group, the child would outlive this
            # command if it were killed outright; the kernel stops it instead.
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != parent:
                os._exit(1)
        if nice:
            os.nice(nice)

    return setup


def _group_members(groups: set[int]) -> list[psutil.Process]:
    """Live (not zombie) processes in any of ``groups``."""
    members = []
    for process in psutil.process_iter():
        try:
            if (
                os.getpgid(process.pid) in groups
                and process.status() != psutil.STATUS_ZOMBIE
            ):
                members.append(process)
        except (psutil.Error, ProcessLookupError):
            continue
    return members
