"""Embedded PostgreSQL 16 + pgvector, run from the binaries in the ``pgserver`` wheel.

Every local process (web workers, the django-q2 cluster, ``manage.py`` commands, the
tests) calls :meth:`EmbeddedPostgres.hold` before it first connects. The first holder
starts the server; the last one to exit stops it. Holders are files named by pid, so a
process killed with SIGKILL is noticed (and forgotten) by the next one that looks.
All transitions happen under one ``flock`` so that two processes never start or stop
the server at the same time.

The server listens on a Unix socket only: no TCP port to collide with other checkouts.
PostgreSQL refuses to run as root, so under root it runs as a dedicated system user.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import importlib.util
import logging
import os
import pwd
import re
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

PORT = 5432
SYSTEM_USER = "kbpostgres"
# sun_path is 108 bytes on Linux, including the trailing NUL.
MAX_SOCKET_PATH = 100
# What a failed pg_ctl or initdb may put in an exception message, at most.
ERROR_LINES = 5
ERROR_CHARS = 500
LOG_READ_BYTES = 64 * 1024
# The server's own verdict on why it stopped, after the default log_line_prefix
# ("%m [%p] "); its DETAIL and STATEMENT lines, which quote data, are other lines.
FATAL_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d [\d:.]+ \S+ \[\d+\] (?:FATAL|PANIC):\s+(.*)$"
)


def _bin_dir() -> Path:
    # Locate the wheel without importing it: its __init__ does work we do not need.
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the pgserver package is not installed (pip install pgserver)"
        )
    return Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"


class ServerError(RuntimeError):
    """The server could not be started (or stopped): ``pg_ctl`` or ``initdb``
    failed, or the server did not come up."""


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
                (self.holders_dir / str(pid)).write_text(str(_start_time(pid)))
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
        if not _alive(pid) or len(lines) < 8 or lines[7].strip() != "ready":
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
            if _alive(pid) and _start_time(pid) == started:
                live.append(pid)
            else:
                entry.unlink(missing_ok=True)
        return sorted(live)

    def stop(self) -> bool:
        """Stop the server now, whoever holds it. True if it was running."""
        with self._locked():
            return self._stop()

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
        if info is not None:
            return info
        user = self._prepare_directories()
        if not (self.data_dir / "PG_VERSION").exists():
            self._run(
                user,
                "initdb",
                "-D",
                str(self.data_dir),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
            )
        options = f"-k '{self.socket_dir}' -c listen_addresses='' -p {PORT}"
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

    def _stop(self) -> bool:
        if self.running() is None:
            return False
        self._run(
            self._server_user(),
            "pg_ctl",
            "-D",
            str(self.data_dir),
            "-m",
            "fast",
            "-w",
            "-t",
            "60",
            "stop",
        )
        return True

    def _server_user(self) -> str | None:
        return SYSTEM_USER if os.geteuid() == 0 else None

    def _prepare_directories(self) -> str | None:
        user = self._server_user()
        for path in (self.home, self.socket_dir):
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o700)
        if user is None:
            return None
        _ensure_system_user(user)
        entry = pwd.getpwnam(user)
        for path in {self.home, self.socket_dir}:
            os.chown(path, entry.pw_uid, entry.pw_gid)
        for path in (self.home, self.socket_dir, _bin_dir()):
            _ensure_traversable(path)
        return user

    def _run(self, user: str | None, program: str, *args: str) -> None:
        command = [str(_bin_dir() / program), *args]
        # The server started by pg_ctl inherits open pipes and would keep them open:
        # capture errors through a file instead.
        # Drop root's group too: group bits of root-owned directories would apply.
        identity: dict[str, Any] = {}
        if user:
            identity = {
                "user": user,
                "group": pwd.getpwnam(user).pw_gid,
                "extra_groups": [],
            }
        logged = _size(self.log_file)
        with tempfile.TemporaryFile("w+") as err:
            result = subprocess.run(
                command,
                **identity,
                cwd=self.home,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                timeout=120,
            )
            err.seek(0)
            message = err.read().strip()
        if result.returncode != 0:
            raise ServerError(
                _failure(program, result.returncode, message, self.log_file, logged)
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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _start_time(pid) != 0.0 and not _is_zombie(pid)


def _start_time(pid: int) -> float:
    """The process start time in clock ticks since boot (guards against pid reuse)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return 0.0
    return float(fields[19])


def _is_zombie(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return True
    return state == "Z"


def _ensure_system_user(user: str) -> None:
    try:
        pwd.getpwnam(user)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                user,
            ],
            check=True,
            capture_output=True,
        )


def _ensure_traversable(path: Path) -> None:
    """Let the server's user reach ``path``: add o+x to ancestors that lack it."""
    for parent in path.parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            logger.warning("adding o+x to %s so the database user can reach it", parent)
            parent.chmod(mode | stat.S_IXOTH)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _failure(program: str, code: int, errors: str, log: Path, since: int) -> str:
    """Why a program failed, for an exception message (which ends up in logs and
    in the queue's failure records): the program's own error output, the log's
    path, and the last FATAL or PANIC line the server wrote during this run. Never
    the rest of the log: the statements that failed, and the page text they
    carry, are written there."""
    lines = errors.strip().splitlines()[-ERROR_LINES:]
    reason = "; ".join(line.strip() for line in lines if line.strip())[:ERROR_CHARS]
    fatal = _last_fatal(log, since)
    return (
        f"{program} exited with status {code}"
        + (f": {reason}" if reason else "")
        + (f"; the server said: {fatal}" if fatal else "")
        + f"; see {log}"
    )


def _last_fatal(log: Path, since: int) -> str:
    """The message of the last FATAL or PANIC line written after ``since``."""
    try:
        with open(log, "rb") as handle:
            handle.seek(max(since, _size(log) - LOG_READ_BYTES))
            written = handle.read(LOG_READ_BYTES).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    messages = [m.group(1) for m in map(FATAL_LINE.match, written.splitlines()) if m]
    return messages[-1].strip()[:ERROR_CHARS] if messages else ""
