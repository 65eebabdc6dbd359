"""A webhook receiver on loopback that misbehaves at the socket: it reads the
request, then plays a script of raw writes, pauses and drips, the way a slow or
broken receiver does (one byte a second, headers then nothing, a body without
end, a connection closed half-way). Each connection plays the same script."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

# One step of a script: given the connection and the receiver's stop flag.
Step = Callable[[socket.socket, threading.Event], None]

OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"


def send(data: bytes) -> Step:
    def step(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(data)

    return step


def drip(data: bytes, *, every: float) -> Step:
    """``data`` one byte at a time, ``every`` seconds apart."""

    def step(conn: socket.socket, stop: threading.Event) -> None:
        for byte in data:
            if stop.wait(every):
                return
            conn.sendall(bytes([byte]))

    return step


def flood(size: int) -> Step:
    """``size`` bytes as fast as the client takes them."""

    def step(conn: socket.socket, stop: threading.Event) -> None:
        piece = b"x" * 65536
        for _ in range(size // len(piece)):
            if stop.is_set():
                return
            conn.sendall(piece)

    return step


def hang(conn: socket.socket, stop: threading.Event) -> None:
    """Nothing more, the connection kept open, until the receiver stops."""
    stop.wait()


@dataclass
class Connection:
    request: bytes
    # Seconds from the request read to the client closing its end (or the
    # script ending), as the receiver saw it.
    held: float


class HostileReceiver:
    """``with HostileReceiver(send(...), drip(...)) as hook: hook.url()``."""

    def __init__(self, *script: Step) -> None:
        self.script = script
        self.connections: list[Connection] = []
        self.stop = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.threads: list[threading.Thread] = []

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}{path}"

    def __enter__(self) -> HostileReceiver:
        thread = threading.Thread(target=self._accept, daemon=True)
        thread.start()
        self.threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=5)
        self.listener.close()

    def _accept(self) -> None:
        self.listener.settimeout(0.05)  # to see the stop flag
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            thread = threading.Thread(target=self._play, args=(conn,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _play(self, conn: socket.socket) -> None:
        with conn:
            request = _request(conn)
            started = time.monotonic()
            try:
                for step in self.script:
                    step(conn, self.stop)
                if not self.stop.is_set():
                    conn.shutdown(socket.SHUT_WR)
                    conn.settimeout(30)
                    conn.recv(1)  # until the client closes
            except OSError:
                pass  # the client went away: what is being measured
            self.connections.append(Connection(request, time.monotonic() - started))


def _request(conn: socket.socket) -> bytes:
    """The request's head and its Content-Length of body."""
    data = b""
    while b"\r\n\r\n" not in data:
        piece = conn.recv(65536)
        if not piece:
            return data
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        piece = conn.recv(65536)
        if not piece:
            break
        body += piece
    return head + b"\r\n\r\n" + body
