"""A local stand-in for the delivery side of Crawlbase's Enterprise Crawler.

It POSTs real deliveries over a real socket: gzip bodies, the header names Crawlbase
uses (``rid``, ``url``, ``Original-Status``, ``PC-Status``), the three body formats,
redelivery on any answer but 2xx (or none: a connection reset), and the monitoring
probe.
"""

from __future__ import annotations

import gzip
import http.client
import json
from dataclasses import dataclass, field
from urllib.parse import urlsplit

DELIVERY_AGENT = "Crawlbase Delivery Bot 1.0"
MONITOR_AGENT = "Crawlbase Monitoring Bot 1.0"
CONTENT_TYPES = {"html": "text/plain", "md": "text/markdown; charset=utf-8"}


@dataclass
class Answer:
    status: int
    body: dict
    attempts: int = 1


@dataclass
class FakeCrawler:
    callback_url: str  # e.g. http://127.0.0.1:8000/webhooks/crawlbase/?token=secret
    max_attempts: int = 3
    log: list[Answer] = field(default_factory=list)
    # Every answer to every POST, redeliveries included: (status, body).
    posts: list[tuple[int, dict]] = field(default_factory=list)

    def deliver(
        self,
        *,
        rid: str,
        url: str,
        body: str | bytes,
        format: str = "html",
        original_status: int | str = 200,
        pc_status: int | str = 200,
        status_header: str = "PC-Status",
        extra_headers: dict[str, str] | None = None,
    ) -> Answer:
        """Deliver one crawled page, again and again while the answer is not 2xx."""
        raw = body.encode() if isinstance(body, str) else body
        headers = {
            "User-Agent": DELIVERY_AGENT,
            "Content-Encoding": "gzip",
            "rid": rid,
            "url": url,
            "Original-Status": str(original_status),
            status_header: str(pc_status),
        }
        if format == "json":
            envelope = {
                "pc_status": pc_status,
                "original_status": original_status,
                "rid": rid,
                "url": url,
                "body": raw.decode(),
            }
            raw = json.dumps(envelope).encode()
            headers["Content-Type"] = "gzip/json"
        else:
            headers["Content-Type"] = CONTENT_TYPES[format]
        headers.update(extra_headers or {})
        answer = Answer(0, {}, 0)
        while answer.attempts < self.max_attempts:
            try:
                status, reply = self.post(gzip.compress(raw), headers)
            except ConnectionError:
                # The connection was refused or reset before an answer (a listen
                # queue full under a burst): a failed delivery, sent again.
                status, reply = 0, {}
            answer = Answer(status, reply, answer.attempts + 1)
            if 200 <= status < 300:
                break
        self.log.append(answer)
        return answer

    def probe(self) -> Answer:
        headers = {
            "User-Agent": MONITOR_AGENT,
            "rid": "dummyrequest",
            "Content-Type": "gzip/json",
            "Content-Encoding": "gzip",
        }
        body = gzip.compress(json.dumps({"rid": "dummyrequest", "body": ""}).encode())
        return Answer(*self.post(body, headers))

    def post(self, body: bytes, headers: dict[str, str]) -> tuple[int, dict]:
        parts = urlsplit(self.callback_url)
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        try:
            path = parts.path + (f"?{parts.query}" if parts.query else "")
            connection.request("POST", path, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
        finally:
            connection.close()
        try:
            answer = response.status, json.loads(data or b"{}")
        except json.JSONDecodeError:
            answer = response.status, {"raw": data.decode(errors="replace")}
        self.posts.append(answer)
        return answer
