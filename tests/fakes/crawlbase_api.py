"""A local stand-in for Crawlbase's Crawling API, the side pushes go to.

It answers ``GET /?token=…&url=…&crawler=…&callback=true`` as Crawlbase does, with a
JSON ``{"rid": …}``, refuses with 429 when asked to (or past a per-second rate), and
then delivers the pushed pages, as scripted by the test, to the running webhook over
HTTP through ``FakeCrawler`` (redirects, 404, CAPTCHA and unchanged pages included).
It also serves the crawler statistics endpoint.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from tests.fakes.crawlbase import FakeCrawler

TOKEN = "cb-test-token"
CRAWLER = "kb-test-crawler"


@dataclass
class SitePage:
    """What the crawler finds at a URL."""

    body: str = ""
    status: int = 200
    pc_status: int = 200
    final_url: str = ""  # set when the site redirects


@dataclass
class Pushed:
    rid: str
    url: str
    params: dict[str, str]
    at: float


@dataclass
class FakeCrawlbaseAPI:
    callback_url: str = ""
    max_per_second: float | None = None
    site: dict[str, SitePage] = field(default_factory=dict)
    pushes: list[Pushed] = field(default_factory=list)
    refused: list[float] = field(default_factory=list)
    stats: dict = field(default_factory=lambda: {"waiting": 0, "processed": 0})
    stats_status: int = 200
    json_content_type: str = "application/json; charset=utf-8"
    _refuse_next: int = 0
    _delivered: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/"

    def __enter__(self) -> FakeCrawlbaseAPI:
        # A short poll: shutting down waits for the loop to look (0.5 s by default).
        serve = {"poll_interval": 0.05}
        threading.Thread(
            target=self._server.serve_forever, kwargs=serve, daemon=True
        ).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def refuse_next(self, count: int) -> None:
        """The next ``count`` pushes get 429, as past the token's rate."""
        with self._lock:
            self._refuse_next += count

    def urls(self) -> list[str]:
        return [push.url for push in self.pushes]

    def deliver_pending(self) -> list[int]:
        """Deliver every push not delivered yet, in order; returns the webhook's
        answers' statuses."""
        with self._lock:
            todo, self._delivered = self.pushes[self._delivered :], len(self.pushes)
        crawler = FakeCrawler(callback_url=self.callback_url)
        statuses = []
        for push in todo:
            page = self.site.get(push.url, SitePage(status=404, body="Not found"))
            answer = crawler.deliver(
                rid=push.rid,
                url=page.final_url or push.url,
                body=page.body,
                format=push.params.get("format", "html"),
                original_status=page.status,
                pc_status=page.pc_status,
            )
            statuses.append(answer.status)
        return statuses

    # -- what the server does ----------------------------------------------------

    def push(self, params: dict[str, str]) -> tuple[int, dict]:
        if params.get("token") != TOKEN:
            return 401, {"error": "invalid token"}
        if params.get("callback") != "true" or params.get("crawler") != CRAWLER:
            return 400, {"error": "crawler and callback=true are required"}
        now = time.monotonic()
        with self._lock:
            if self._refuse_next or self._over_rate(now):
                self._refuse_next = max(0, self._refuse_next - 1)
                self.refused.append(now)
                return 429, {"error": "rate limit"}
            rid = secrets.token_hex(12)
            self.pushes.append(Pushed(rid, params["url"], params, now))
        return 200, {"rid": rid}

    def _over_rate(self, now: float) -> bool:
        if self.max_per_second is None:
            return False
        recent = [p for p in self.pushes if now - p.at < 1.0]
        return len(recent) >= self.max_per_second


def _handler(fake: FakeCrawlbaseAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            params = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            if parts.path.startswith("/crawler/") and parts.path.endswith("/stats"):
                token = parts.path.split("/")[2]
                if token != TOKEN:
                    self._send(401, {"error": "invalid token"})
                else:
                    self._send(fake.stats_status, fake.stats)
                return
            status, body = fake.push(params)
            self._send(status, body)

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", fake.json_content_type)
            if status == 429:
                self.send_header("Retry-After", "1")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    return Handler
