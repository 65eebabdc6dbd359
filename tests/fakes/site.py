"""A small web site on loopback for crawler tests: a threaded HTTP server with
routes, redirects, robots.txt, sitemaps, ETags and scripted failures, which logs
every request it gets."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HTML = "text/html; charset=utf-8"


@dataclass
class Route:
    body: bytes = b""
    status: int = 200
    content_type: str = HTML
    headers: dict[str, str] = field(default_factory=dict)
    etag: str = ""
    last_modified: float | None = None  # a Unix time
    # Statuses answered first, one per request, before the route itself.
    first: list[int] = field(default_factory=list)
    # The request waits until the site's ``release`` is set, or its client hangs
    # up (a timeout, a killed crawler): then it ends unanswered.
    hold: bool = False
    # Seconds the site takes before it answers.
    slow: float = 0.0


@dataclass
class Hit:
    path: str
    headers: dict[str, str]
    at: float = field(default_factory=time.monotonic)
    # When the answer began to be written: from ``at`` to then the request is
    # surely in flight for its client, which sent it before and reads it after.
    answering: float | None = None
    ended: float | None = None  # when the answer was written


def page(title: str, body: str = "", links: Sequence[str] = (), head: str = "") -> str:
    anchors = "".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    return (
        f"<html><head><title>{title}</title>{head}</head><body>"
        f"<nav><ul>{anchors}</ul></nav><main><h1>{title}</h1><p>{body}</p>"
        "</main></body></html>"
    )


class FakeSite:
    """``with FakeSite() as site: site.add("/docs/", page("Docs"))``."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.routes: dict[str, Route] = {}
        self.hits: list[Hit] = []
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None
        self.held = threading.Event()  # a held request arrived
        self.release = threading.Event()

    # -- content -----------------------------------------------------------------

    def add(self, path: str, body: str | bytes, **route: object) -> Route:
        data = body.encode() if isinstance(body, str) else body
        self.routes[path] = Route(body=data, **route)  # type: ignore[arg-type]
        return self.routes[path]

    def redirect(self, path: str, to: str, status: int = 301) -> None:
        self.routes[path] = Route(status=status, headers={"Location": to})

    def robots(self, text: str) -> None:
        self.add("/robots.txt", text, content_type="text/plain")

    def url(self, path: str = "/") -> str:
        return f"http://{self.host}:{self.port}{path}"

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.server_address[1]

    def requested(self, path: str) -> int:
        """How many requests reached ``path`` (query included)."""
        with self.lock:
            return sum(1 for hit in self.hits if hit.path == path)

    def paths(self) -> list[str]:
        with self.lock:
            return [hit.path for hit in self.hits]

    def most_at_once(self) -> int:
        """The most requests ever in flight together, counted from each one's
        arrival to the start of its answer (a span inside the client's own, so
        two that overlap here overlapped for their clients)."""
        with self.lock:
            spans = [(hit.at, hit.answering or hit.at) for hit in self.hits]
        events = sorted(
            [(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans]
        )
        most = running = 0
        for _, step in events:
            running += step
            most = max(most, running)
        return most

    # -- serving -----------------------------------------------------------------

    def __enter__(self) -> FakeSite:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                hit = Hit(self.path, dict(self.headers.items()))
                with site.lock:
                    site.hits.append(hit)
                self.hit = hit
                site.answer(self)
                hit.ended = time.monotonic()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((self.host, 0), Handler)
        self.server.daemon_threads = True
        # A short poll: shutting down waits for the loop to look (0.5 s by default).
        serve = {"poll_interval": 0.05}
        threading.Thread(
            target=self.server.serve_forever, kwargs=serve, daemon=True
        ).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.shutdown()
        self.server.server_close()

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        route = self.routes.get(handler.path) or self.routes.get(
            handler.path.split("?", 1)[0]
        )
        if route is None:
            return self._send(
                handler, 404, {"Content-Type": HTML}, b"<h1>Not found</h1>"
            )
        if route.hold:
            self.held.set()
            if not self._held_until_released(handler):
                return None
        time.sleep(route.slow)
        if route.first:
            status = route.first.pop(0)
            return self._send(handler, status, {"Retry-After": "0"}, b"busy")
        headers = {"Content-Type": route.content_type, **route.headers}
        if route.etag:
            headers["ETag"] = route.etag
        if route.last_modified is not None:
            headers["Last-Modified"] = formatdate(route.last_modified, usegmt=True)
        if route.status == 200 and self._not_modified(handler, route):
            return self._send(handler, 304, headers, b"")
        self._send(handler, route.status, headers, route.body)

    def _held_until_released(self, handler: BaseHTTPRequestHandler) -> bool:
        """Wait for ``release`` (60 s at most); False if the client hung up
        first. The request's span then ends when it was last seen waiting, which
        is before its client gave up."""
        deadline = time.monotonic() + 60
        while True:
            seen = time.monotonic()
            if self.release.wait(0.02):
                return True
            if _hung_up(handler.connection) or seen > deadline:
                hit = getattr(handler, "hit", None)
                if hit is not None:
                    hit.answering = seen
                return False

    def _not_modified(self, handler: BaseHTTPRequestHandler, route: Route) -> bool:
        match = handler.headers.get("If-None-Match")
        if route.etag and match:
            return route.etag in [tag.strip() for tag in match.split(",")]
        since = handler.headers.get("If-Modified-Since")
        if route.last_modified is not None and since:
            return since == formatdate(route.last_modified, usegmt=True)
        return False

    def _send(
        self,
        handler: BaseHTTPRequestHandler,
        status: int,
        headers: dict[str, str],
        body: bytes,
    ) -> None:
        hit = getattr(handler, "hit", None)
        if hit is not None:
            hit.answering = time.monotonic()
        handler.send_response(status)
        for name, value in headers.items():
            try:
                handler.send_header(name, value)
            except UnicodeEncodeError:
                # Beyond Latin-1 (a Location naming ①②⑦.0.0.1): sent as UTF-8
                # bytes, as some servers do.
                line = f"{name}: {value}\r\n".encode()
                handler._headers_buffer.append(line)  # type: ignore[attr-defined]
        if status != 304:
            handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if status != 304:
            handler.wfile.write(body)


def _hung_up(connection: socket.socket) -> bool:
    """Whether the client closed its end: readable, with nothing to read."""
    try:
        readable, _, _ = select.select([connection], [], [], 0)
        return bool(readable) and connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def sitemap_xml(
    urls: list[str],
    *,
    index: bool = False,
    lastmod: str | Mapping[str, str] = "2026-11-01",
) -> str:
    """A url set (or an index) of these URLs, each dated ``lastmod``: one date for
    all, or each URL's own (a URL the mapping leaves out has no lastmod)."""
    tag, item = ("sitemapindex", "sitemap") if index else ("urlset", "url")
    dates = lastmod if isinstance(lastmod, Mapping) else dict.fromkeys(urls, lastmod)
    entries = "".join(
        f"<{item}><loc>{url}</loc>"
        + (f"<lastmod>{dates[url]}</lastmod>" if url in dates else "")
        + f"</{item}>"
        for url in urls
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<{tag} xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</{tag}>'
    )
