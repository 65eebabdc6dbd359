"""A webhook receiver on loopback: a threaded HTTP server that keeps every POST
it gets (path, headers, raw body) and answers with scripted statuses, then 200."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b"ok"


class FakeReceiver:
    """``with FakeReceiver() as hook: hook.answer(500); … hook.received``."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.script: list[Answer] = []
        self.always: Answer | None = None
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    def answer(self, status: int, body: bytes = b"", **headers: str) -> None:
        """The next request gets this answer (then the next scripted, then 200)."""
        named = {name.replace("_", "-"): value for name, value in headers.items()}
        self.script.append(Answer(status, named, body))

    def url(self, path: str = "/hook") -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}{path}"

    def __enter__(self) -> FakeReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                with receiver.lock:
                    receiver.received.append(
                        Received(self.path, dict(self.headers.items()), body)
                    )
                    answer = (
                        receiver.script.pop(0)
                        if receiver.script
                        else receiver.always or Answer()
                    )
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(
            target=self.server.serve_forever,
            kwargs={"poll_interval": 0.05},
            daemon=True,
        ).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.shutdown()
        self.server.server_close()
