"""A local stand-in for Nstproxy's crawl API, speaking the wire format assumed in
``ingest/fetchers/nstproxy.py`` (taken from their Python SDK): scrape requests with a
bearer key, the ``{"code", "err", "msg", "data"}`` envelope, Markdown inline or
behind a storage reference, and rate limiting with 429."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


@dataclass
class Scraped:
    status: int = 200
    markdown: str = ""
    links: list[str] = field(default_factory=list)
    canonical: str = ""
    by_reference: bool = False


class FakeNstproxy:
    def __init__(self, key: str = "nst-test-key") -> None:
        self.key = key
        self.pages: dict[str, Scraped] = {}
        self.requests: list[dict] = []
        self.rate_limited = 0  # answer this many scrapes with 429 first
        self.storage: dict[str, bytes] = {}
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def add(self, url: str, markdown: str, **fields: object) -> None:
        self.pages[url] = Scraped(markdown=markdown, **fields)  # type: ignore[arg-type]

    def scraped_urls(self) -> list[str]:
        return [request["url"] for request in self.requests]

    def __enter__(self) -> FakeNstproxy:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                fake.scrape(self)

            def do_GET(self) -> None:  # noqa: N802
                fake.read_storage(self)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
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

    def authorized(self, handler: BaseHTTPRequestHandler) -> bool:
        return handler.headers.get("Authorization") == f"Bearer {self.key}"

    def scrape(self, handler: BaseHTTPRequestHandler) -> None:
        if handler.path != "/api/v1/crawl/scrape":
            return self.send(handler, 404, {"code": 404, "err": True, "msg": "no"})
        if not self.authorized(handler):
            return self.send(handler, 401, {"code": 401, "err": True, "msg": "key"})
        length = int(handler.headers.get("Content-Length") or 0)
        request = json.loads(handler.rfile.read(length))
        with self.lock:
            self.requests.append(request)
            if self.rate_limited:
                self.rate_limited -= 1
                return self.send(handler, 429, {"code": 429, "err": True}, retry=0)
        envelope = {"code": 200, "err": False, "msg": "success"}
        self.send(handler, 200, {**envelope, "data": self.task(request)})

    def task(self, request: dict) -> dict:
        url, formats = request["url"], request.get("formats") or []
        scraped = self.pages.get(url)
        if scraped is None and url.endswith("/robots.txt"):
            scraped = Scraped(status=404)
        if scraped is None:
            return {
                "success": False,
                "status": "failed",
                "errorCode": "FETCH_FAILED",
                "errorMessage": "could not reach the page",
                "data": None,
            }
        metadata = {
            "statusCode": scraped.status,
            "canonical": scraped.canonical or None,
        }
        data: dict = {"metadata": metadata}
        field_name = "rawData" if "rawData" in formats else "markdown"
        if scraped.by_reference:
            reference = f"ref-{len(self.storage)}"
            self.storage[reference] = scraped.markdown.encode()
            data[f"{field_name}Ref"] = reference
        else:
            data[field_name] = scraped.markdown
        if "links" in formats:
            data["links"] = scraped.links
        return {"success": True, "status": "completed", "code": 200, "data": data}

    def read_storage(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(handler.path)
        reference = parse_qs(parts.query).get("st", [""])[0]
        if parts.path != "/api/v1/crawl/storage/read" or not self.authorized(handler):
            return self.send(handler, 404, {"code": 404, "err": True})
        body = self.storage.get(reference, b"")
        handler.send_response(200)
        handler.send_header("Content-Type", "application/octet-stream")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def send(
        self,
        handler: BaseHTTPRequestHandler,
        status: int,
        body: dict,
        retry: int | None = None,
    ) -> None:
        data = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        if retry is not None:
            handler.send_header("Retry-After", str(retry))
        handler.end_headers()
        handler.wfile.write(data)
