"""A PostgreSQL server on TCP 127.0.0.1, standing in for a managed one: the embedded
server's binaries (pgvector included) run as a plain server on a data directory of
its own, reached through ``DATABASE_URL`` as every node of a deployment reaches its
database. No Unix socket, no holders, nothing of ``kbsite.pgembedded`` but its
programs.

``TcpStandby`` is a streaming replica of one of these: a base backup taken over the
replication protocol (``pg_basebackup -R``: ``standby.signal`` and the primary's
``primary_conninfo``), started as a hot standby on a port of its own.

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
        self._data_make(user)
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
            self._database_make()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _data_make(self, user: str | None) -> None:
        program_run(
            user, "initdb", "-D", str(self.data), *INITDB_OPTIONS,
            cwd=self.root, log=self.log,
        )  # fmt: skip

    def _database_make(self) -> None:
        with self.connect("postgres") as conn:
            conn.execute(
                sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.database))
            )

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


class TcpStandby(TcpPostgres):
    """``with TcpStandby(root, port=p, primary=db) as replica: replica.url``: a hot
    standby streaming from ``primary`` over 127.0.0.1, read-only, as a managed
    read replica is."""

    def __init__(self, root: Path, *, port: int, primary: TcpPostgres) -> None:
        super().__init__(root, port=port, database=primary.database)
        self.primary = primary

    def _data_make(self, user: str | None) -> None:
        # The primary's defaults allow it: wal_level replica, wal senders, and
        # initdb's "host replication all 127.0.0.1/32 trust".
        program_run(
            user, "pg_basebackup", "-D", str(self.data), "-h", "127.0.0.1",
            "-p", str(self.primary.port), "-U", "postgres",
            "--write-recovery-conf", "--wal-method=stream", "--checkpoint=fast",
            cwd=self.root, log=self.log,
        )  # fmt: skip

    def _database_make(self) -> None:
        """Nothing: the standby has the primary's databases."""

    def replay_pause(self) -> None:
        self.query("SELECT pg_wal_replay_pause()")

    def replay_resume(self) -> None:
        self.query("SELECT pg_wal_replay_resume()")

    def caught_up(self, seconds: float = 30) -> None:
        """Wait until the standby has replayed what the primary has written now."""
        (written,) = self.primary.query("SELECT pg_current_wal_lsn()")[0]
        deadline = time.monotonic() + seconds
        while not self.query(
            "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [written]
        )[0][0]:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the standby did not replay {written} in {seconds} s"
                )
            time.sleep(0.05)
