"""``manage.py serve``: the web server and one worker cluster, stopped together."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

STOP_GRACE_SECONDS = 20


class Command(BaseCommand):
    help = (
        "Run gunicorn (the web server) and one django-q2 cluster (the worker) until "
        "Ctrl-C, then stop both."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--bind",
            default=f"127.0.0.1:{settings.PORT}",
            help="Address for gunicorn to listen on (default 127.0.0.1:$PORT).",
        )
        parser.add_argument(
            "--web-workers",
            type=int,
            default=settings.WEB_CONCURRENCY,
            help="Number of gunicorn worker processes (default $WEB_CONCURRENCY, "
            "else one per CPU core: requests are CPU-bound).",
        )
        parser.add_argument(
            "--no-worker",
            action="store_true",
            help="Do not start the django-q2 cluster (run it elsewhere).",
        )

    def handle(self, *args, bind: str, web_workers: int, no_worker: bool, **options):
        # Connecting first starts (or joins) the embedded database and keeps it up for
        # as long as this command runs.
        connection.ensure_connection()
        self._announce_login(bind)
        children = {"web": self._start_web(bind, web_workers)}
        if not no_worker:
            children["worker"] = subprocess.Popen(
                [sys.executable, "manage.py", "qcluster"], cwd=settings.BASE_DIR
            )
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        try:
            name = self._wait_for_first_exit(children)
            self.stderr.write(f"The {name} process stopped; stopping the rest.")
            code = 1
        except KeyboardInterrupt:
            code = 0
        self._stop(children)
        self.stdout.write("Stopped.")
        sys.exit(code)

    def _start_web(self, bind: str, workers: int) -> subprocess.Popen:
        command = [
            sys.executable, "-m", "gunicorn", "kbsite.wsgi",
            "--bind", bind,
            "--workers", str(workers),
            "--graceful-timeout", "10",
            "--access-logfile", "-",
            # %(U)s is the path without the query string, which may hold a token.
            "--access-logformat", '%(h)s "%(m)s %(U)s" %(s)s %(B)s %(M)sms',
            "--no-control-socket",
        ]  # fmt: skip
        return subprocess.Popen(command, cwd=settings.BASE_DIR)

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

    def _wait_for_first_exit(self, children: dict[str, subprocess.Popen]) -> str:
        while True:
            for name, process in children.items():
                if process.poll() is not None:
                    return name
            time.sleep(0.5)

    def _stop(self, children: dict[str, subprocess.Popen]) -> None:
        for process in children.values():
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for process in children.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _raise_keyboard_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
