from __future__ import annotations

import contextlib
import itertools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def server_tmp_path() -> Iterator[Path]:
    """A temporary directory an embedded server's own user can reach (it runs as
    another user under root). Not pytest's tmp_path: every pytest session takes
    the access bits of others off its per-user base directory, and other sessions
    may start while this one runs."""
    with tempfile.TemporaryDirectory(prefix="kb-test-") as name:
        Path(name).chmod(0o755)
        yield Path(name)


T = TypeVar("T")


def at_once(work: Callable[[], T], times: int) -> list[T]:
    """``work`` run by ``times`` threads released together, each on a database
    connection of its own (closed after); their results, as they finished."""
    from django.db import connection

    start = threading.Barrier(times)
    results: list[T] = []

    def run() -> None:
        start.wait()
        try:
            results.append(work())
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(times)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def each_at_once(calls: list[Callable[[], object]]) -> None:
    """Each call in a thread of its own, all released together once every one has
    its database connection (as processes that are already up would be)."""
    from django.db import connection

    turns = itertools.count()
    lock = threading.Lock()
    connected = threading.Barrier(len(calls))

    def one() -> None:
        with lock:
            call = calls[next(turns)]
        connection.ensure_connection()
        connected.wait()
        call()

    at_once(one, len(calls))


def local_model_require() -> None:
    """Skip a test of the local embedding model when sentence-transformers is not
    installed; fail it instead under KB_REQUIRE_LOCAL_MODEL=1 (set by `.ci/run`,
    whose `make test` installs it), so a broken install is not a quiet skip."""
    try:
        import sentence_transformers  # noqa: F401
    except ImportError:
        if os.environ.get("KB_REQUIRE_LOCAL_MODEL"):
            pytest.fail(
                "KB_REQUIRE_LOCAL_MODEL is set but sentence-transformers is not "
                "installed (requirements-local.txt)"
            )
        pytest.skip("sentence-transformers is not installed")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def qcluster_running(env: dict[str, str]) -> Iterator[subprocess.Popen]:
    """``manage.py qcluster`` with ``env``, in a process group of its own; killed
    with all its workers at the end, as a crash would, whatever the test did."""
    process = subprocess.Popen(
        [PYTHON, "manage.py", "qcluster"],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def subprocess_env(**overrides: str) -> dict[str, str]:
    """The environment for a child ``manage.py``: the test database, same settings."""
    from django.db import connection

    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="kbsite.settings",
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
    )
    if "EMBEDDED_ROOT" in connection.settings_dict:
        env["EMBEDDED_DB_NAME"] = connection.settings_dict["NAME"]
    else:
        env["DATABASE_URL"] = _database_url(connection.settings_dict)
    env.update(overrides)
    return env


def _database_url(db: dict) -> str:
    from urllib.parse import quote

    auth = quote(db["USER"] or "")
    if db.get("PASSWORD"):
        auth += ":" + quote(db["PASSWORD"])
    host = quote(db.get("HOST") or "", safe="")
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgres://{auth}@{host}{port}/{db['NAME']}"


PYTHON = sys.executable


@pytest.fixture(scope="session", autouse=True)
def flush_by_delete() -> Iterator[None]:
    """A transactional test's tables are emptied by DELETE, not TRUNCATE: this
    server truncates its 45 tables in 0.4 s (new files for each table and index,
    synced at commit), and deletes the few rows a test leaves in 10 ms. Django's
    foreign keys are deferrable, so the order of the tables does not matter.
    Resetting sequences (or cascading) keeps Django's TRUNCATE."""
    from django.core.management.color import Style
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(
        ops: DatabaseOperations,
        style: Style,
        tables: list[str],
        *,
        reset_sequences: bool = False,
        allow_cascade: bool = False,
    ) -> list[str]:
        if reset_sequences or allow_cascade or not tables:
            return truncate(
                ops,
                style,
                tables,
                reset_sequences=reset_sequences,
                allow_cascade=allow_cascade,
            )
        deletes = [f"DELETE FROM {ops.quote_name(table)}" for table in tables]
        return ["SET CONSTRAINTS ALL DEFERRED", *deletes]

    with mock.patch.object(DatabaseOperations, "sql_flush", sql_flush):
        yield


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup) -> Iterator[None]:
    """The test database, as pytest-django makes it. Searches outside a transaction
    open connections on pool threads: they are closed before it is dropped."""
    yield
    from kbsite.parallel import connections_close

    connections_close()
