"""A PostgreSQL server on TCP 127.0.0.1, standing in for a managed one: the embedded
server's binaries (pgvector included) run as a plain server on a data directory of
its own, reached through ``DATABASE_URL`` as every node of a deployment reaches its
database. No Unix socket, no holders, nothing of ``kbsite.pgembedded`` but its
programs.

The postmaster is a child of the test process and gets SIGQUIT if the test process
dies (Linux), so no server outlives a test run, however it ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from kbsite.pgembedded.programs import bin_dir, program_run
from kbsite.pgembedded.system_user import (
    server_user,
    system_user_ensure,
    traversable_ensure,
)
from kbsite.pgembedded.upgrade import INITDB_OPTIONS

PR_SET_PDEATHSIG = 1


def die_with_parent(signum: int) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets ``signum`` when the test process dies."""
    libc = ctypes.CDLL(None)
    parent = os.getpid()

    def setup() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signum)
        if os.getppid() != parent:  # the parent died before the prctl
            os._exit(1)

    return setup


class TcpPostgres:
    """``with TcpPostgres(root, port=p) as db: db.url``."""

    def __init__(self, root: Path, *, port: int, database: str = "kb") -> None:
        self.root = root
        self.data = root / "data"
        self.log = root / "server.log"
        self.port = port
        self.database = database
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{self.database}"

    def __enter__(self) -> TcpPostgres:
        user = self._directories()
        program_run(
            user, "initdb", "-D", str(self.data), *INITDB_OPTIONS,
            cwd=self.root, log=self.log,
        )  # fmt: skip
        identity: dict[str, Any] = {}
        if user:
            entry = pwd.getpwnam(user)
            identity = {"user": user, "group": entry.pw_gid, "extra_groups": []}
        with open(self.log, "a") as log:
            self.process = subprocess.Popen(
                [
                    str(bin_dir() / "postgres"), "-D", str(self.data),
                    "-c", "listen_addresses=127.0.0.1", "-p", str(self.port),
                    "-c", "unix_socket_directories=", "-c", "max_connections=200",
                ],
                cwd=self.root,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent(signal.SIGQUIT),
                **identity,
            )  # fmt: skip
        try:
            self._wait_until_up(60)
            with self.connect("postgres") as conn:
                conn.execute(
                    sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.database))
                )
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)  # a fast shutdown
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGQUIT)  # an immediate one
            self.process.wait(timeout=30)

    def connect(self, database: str | None = None) -> psycopg.Connection:
        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user="postgres",
            dbname=database or self.database,
            autocommit=True,
            connect_timeout=10,
        )

    def query(self, statement: str, params: list | None = None) -> list[tuple]:
        with self.connect() as conn:
            return conn.execute(statement, params).fetchall()

    def _directories(self) -> str | None:
        """The data directory's parent, owned by the server's user (PostgreSQL
        refuses to run as root: under root, the embedded server's user)."""
        self.root.mkdir(parents=True, exist_ok=True)
        user = server_user()
        if user is None:
            return None
        system_user_ensure(user)
        entry = pwd.getpwnam(user)
        os.chown(self.root, entry.pw_uid, entry.pw_gid)
        for path in (self.root, bin_dir()):
            traversable_ensure(path)
        return user

    def _wait_until_up(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres exited; see {self.log}")
            with contextlib.suppress(psycopg.OperationalError):
                with self.connect("postgres"):
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"postgres did not start in {seconds} s")
            time.sleep(0.2)
