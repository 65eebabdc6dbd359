"""The web server ``manage.py serve`` runs: waitress, one process per
``--web-workers``, all accepting on one listening socket that ``serve`` opened.

waitress reads each request whole, its headers and its body, on an event loop
before one of the process's ``WEB_THREADS`` threads runs it: a client that sends
slowly holds a connection, never a thread. What it does not bound, this module
does: a request still arriving ``WEB_HEADER_TIMEOUT`` seconds after its first byte
(headers) or ``WEB_BODY_TIMEOUT`` seconds after its headers (body) is answered 408
and its connection closed, and the answers waitress writes itself (a malformed header
block, a body over ``WEBHOOK_MAX_BODY_BYTES``) are ``{"error": code, "detail":
text}`` JSON like the application's own.

Run alone: ``python -m kbsite.webserver --bind 0.0.0.0:8000`` (one process).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

from django.conf import settings
from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import TcpWSGIServer
from waitress.task import ErrorTask
from waitress.utilities import (
    BadRequest,
    Error,
    InternalServerError,
    RequestEntityTooLarge,
    RequestHeaderFieldsTooLarge,
    ServerNotImplemented,
)

# Seconds a stop waits for requests in flight to be answered (serve's own grace,
# STOP_GRACE_SECONDS, is longer).
STOP_GRACE_SECONDS = 10
# How often the event loop wakes to expire slow requests and idle connections.
CHECK_EVERY_SECONDS = 1.0
# Open files a web process needs besides its connections: modules, the database's
# sockets (two a thread), buffer files of large bodies, the loop's pipe.
FILES_BESIDE_CONNECTIONS = 256

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
App = Callable[[Environ, StartResponse], Iterable[bytes]]


class RequestTimeout(BadRequest):
    code = 408
    reason = "Request Timeout"


class HeadersTimeout(RequestTimeout):
    error_code = "headers_unreadable"


class BodyTimeout(RequestTimeout):
    error_code = "body_unreadable"


# Most specific first: the size errors are kinds of BadRequest.
ERROR_CODES: list[tuple[type[Error], str]] = [
    (RequestHeaderFieldsTooLarge, "headers_too_large"),
    (RequestEntityTooLarge, "body_too_large"),
    (BadRequest, "bad_request"),
    (ServerNotImplemented, "not_implemented"),
    (InternalServerError, "internal_error"),
]


def error_code(error: Error) -> str:
    code = getattr(error, "error_code", None)
    if code:
        return code
    return next((c for kind, c in ERROR_CODES if isinstance(error, kind)), "error")


class JsonErrorTask(ErrorTask):
    """waitress's own answers (a header block it cannot parse, a body too large, a
    request too slow) in the application's JSON shape."""

    def execute(self) -> None:
        error = self.request.error
        body = json.dumps({"error": error_code(error), "detail": str(error.body)})
        self.status = f"{error.code} {error.reason}"
        self.response_headers.append(("Content-Type", "application/json"))
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body.encode())


class TimedParser(HTTPRequestParser):
    """A request as it arrives, with when its first byte and its last header came."""

    started: float | None = None
    headers_done: float | None = None

    def received(self, data: bytes) -> int:
        now = time.monotonic()
        if self.started is None:
            self.started = now
        consumed = super().received(data)
        if self.headers_finished and self.headers_done is None:
            self.headers_done = now
        return consumed


class Channel(HTTPChannel):
    parser_class = TimedParser
    error_task_class = JsonErrorTask
    server: Server
    request: TimedParser | None

    def expire(self, now: float) -> None:
        """In the event loop: a request still arriving past its deadline is
        dropped and answered 408 (then the connection closes)."""
        with self.requests_lock:
            request = self.request
            if (
                request is None
                or request.started is None
                or self.requests  # a thread is answering the one before
                or self.will_close
                or self.close_when_flushed
            ):
                return
            late: RequestTimeout
            if request.headers_done is None:
                if now - request.started < self.server.header_timeout:
                    return
                late = HeadersTimeout("The request headers did not arrive in time.")
            else:
                if now - request.headers_done < self.server.body_timeout:
                    return
                late = BodyTimeout("The request body did not arrive in time.")
            answer = self.parser_class(self.adj)
            answer.error = late
            answer.version = request.version
            answer.completed = True
            request.close()
            self.request = None
            self.requests.append(answer)
            self.server.add_task(self)


class Server(TcpWSGIServer):
    channel_class = Channel

    def __init__(
        self,
        application: App,
        *,
        sock: socket.socket,
        adj: Adjustments,
        header_timeout: float,
        body_timeout: float,
    ) -> None:
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        sockinfo = (sock.family, sock.type, sock.proto, sock.getsockname())
        super().__init__(
            application, map={}, _sock=sock, adj=adj, bind_socket=False,
            sockinfo=sockinfo,
        )  # fmt: skip

    def maintenance(self, now: float) -> None:
        # Slow requests first: they get their 408 rather than the silent close
        # of an idle connection (channel_timeout), which skips a channel with a
        # request to answer.
        clock = time.monotonic()
        for channel in list(self.active_channels.values()):
            channel.expire(clock)
        super().maintenance(now)


def connection_limit(wanted: int) -> int:
    """``wanted``, with the process's limit on open files raised to fit it (and
    the database connections, files and pipes beside): a connection accepted
    past that limit fails, and the listening socket stays ready, again and
    again. What the hard limit cannot fit is taken off ``wanted``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = wanted + FILES_BESIDE_CONNECTIONS
    if soft != resource.RLIM_INFINITY and soft < needed:
        soft = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(min(wanted, soft - FILES_BESIDE_CONNECTIONS), 1)


def server_make(application: App, sock: socket.socket) -> Server:
    adj = Adjustments(
        threads=settings.WEB_THREADS,
        connection_limit=connection_limit(settings.WEB_CONNECTION_LIMIT),
        # A connection idle this long (kept alive, or never used) is closed; a
        # request that stalls gets its 408 from the deadlines first.
        channel_timeout=max(settings.WEB_HEADER_TIMEOUT, settings.WEB_BODY_TIMEOUT),
        cleanup_interval=CHECK_EVERY_SECONDS,
        asyncore_loop_timeout=CHECK_EVERY_SECONDS,
        # poll(), not select(): select() cannot watch a descriptor above 1023.
        asyncore_use_poll=True,
        # The largest body any view reads is a delivery's; a larger one is
        # refused before it is buffered.
        max_request_body_size=settings.WEBHOOK_MAX_BODY_BYTES,
        backlog=2048,
        ident="kb",
        # As gunicorn did: a proxy on this machine may say the request came in
        # over HTTPS.
        trusted_proxy="127.0.0.1",
        trusted_proxy_headers={"x-forwarded-proto"},
        clear_untrusted_proxy_headers=True,
    )
    return Server(
        application,
        sock=sock,
        adj=adj,
        header_timeout=settings.WEB_HEADER_TIMEOUT,
        body_timeout=settings.WEB_BODY_TIMEOUT,
    )


def access_logged(application: App, out: Any = None) -> App:
    """One line per request on stdout: client, method, path without the query
    string (it may hold a token), status, response length, milliseconds until
    the application answered."""
    stream = out or sys.stdout

    def logged(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        started = time.perf_counter()

        def start(status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
            length = next((v for k, v in headers if k.lower() == "content-length"), "-")
            millis = round((time.perf_counter() - started) * 1000)
            stream.write(
                f'{environ.get("REMOTE_ADDR", "-")} "{environ["REQUEST_METHOD"]} '
                f'{environ.get("PATH_INFO", "")}" {status.split(" ", 1)[0]} '
                f"{length} {millis}ms\n"
            )
            stream.flush()
            return start_response(status, headers, *exc)

        return application(environ, start)

    return logged


def run(server: Server) -> None:
    """Serve until SIGTERM or SIGINT, then stop accepting, answer the requests
    already read (for up to STOP_GRACE_SECONDS) and exit."""
    stop: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        stop.append(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, note)
    channels = server._map
    while not stop:
        wasyncore.loop(CHECK_EVERY_SECONDS, True, channels, count=1)
    # The listening socket alone (the server's close() would take the trigger
    # that wakes the loop too): the other processes go on accepting.
    wasyncore.dispatcher.close(server)
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    while time.monotonic() < deadline and _answering(server):
        wasyncore.loop(0.05, True, channels, count=1)
    server.task_dispatcher.shutdown(cancel_pending=True, timeout=1)
    wasyncore.close_all(channels)


def _answering(server: Server) -> bool:
    return any(
        channel.requests or channel.total_outbufs_len
        for channel in list(server.active_channels.values())
    )


def bind(address: str) -> socket.socket:
    """A listening socket for ``host:port`` (``[::1]:8000`` for IPv6)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, int(port)), family=family, backlog=2048)


# How long a stopping web process waits for the embedder still loading: longer than
# the local model's load (about 3.5 s), and with STOP_GRACE_SECONDS within serve's
# own grace.
LOAD_JOIN_SECONDS = 5


def embedder_load_start() -> threading.Thread:
    """Load the serving embedder on a thread of its own while the server starts
    answering: with the local model, the first question otherwise waited seconds
    for its libraries' import."""
    from retrieval.spaces import serving_embedder_load

    thread = threading.Thread(
        target=serving_embedder_load, name="embedder-load", daemon=True
    )
    thread.start()
    return thread


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--bind", help="host:port to listen on")
    where.add_argument(
        "--fd", type=int, help="an inherited listening socket (what serve passes)"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbsite.settings")
    # Django first: its logging settings then govern waitress's loggers too.
    from kbsite.wsgi import application

    loading = embedder_load_start()

    # A request waiting for a thread is normal under load, not a warning a line.
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)
    sock = bind(args.bind) if args.bind else socket.socket(fileno=args.fd)
    run(server_make(access_logged(application), sock))
    # Not out of the interpreter in the middle of loading the model: torch's
    # threads abort the process then (exit status 134).
    loading.join(timeout=LOAD_JOIN_SECONDS)


if __name__ == "__main__":
    main()
