"""gunicorn's settings for this site, used by ``manage.py serve`` and meant for
production too: ``gunicorn --config python:kbsite.gunicorn_conf kbsite.wsgi``.

gunicorn takes the module-level names it knows (``threads``, ``pre_request``, ...)
as its settings.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbsite.settings")

from django.conf import settings  # noqa: E402  (needs the variable above)

# Threads rather than the sync worker: a client that sends its body slowly holds one
# thread while the worker's other threads go on answering. gevent would need
# monkey-patching psycopg and an async worker would change how Django runs the
# (synchronous) views; threads keep both as they are.
worker_class = "gthread"
threads = settings.WEB_THREADS
graceful_timeout = 10


class _BodyDeadline:
    """A request's socket as its body reader sees it: reads fail once
    ``WEB_BODY_TIMEOUT`` has passed since the headers arrived, so a client that
    sends a byte now and then cannot hold a thread for long either."""

    def __init__(self, sock: socket.socket, seconds: float) -> None:
        self.sock = sock
        self.deadline = time.monotonic() + seconds

    def recv(self, size: int) -> bytes:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the request body did not arrive in time")
        before = self.sock.gettimeout()
        self.sock.settimeout(remaining)
        try:
            return self.sock.recv(size)
        finally:
            self.sock.settimeout(before)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


def pre_request(worker: Any, req: Any) -> None:
    unreader: Any = getattr(req, "unreader", None)
    if isinstance(getattr(unreader, "sock", None), socket.socket):
        unreader.sock = _BodyDeadline(unreader.sock, settings.WEB_BODY_TIMEOUT)


def post_request(worker: Any, req: Any, environ: dict, resp: Any) -> None:
    # The connection may be kept alive: its next request starts a new deadline.
    unreader: Any = getattr(req, "unreader", None)
    if isinstance(getattr(unreader, "sock", None), _BodyDeadline):
        unreader.sock = unreader.sock.sock
