"""The embedded PostgreSQL is shared by every process and outlives none of them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import psycopg
import pytest
from django.db import OperationalError, connection

from kbsite.pgembedded.base import DatabaseWrapper
from kbsite.pgembedded.programs import ServerError
from kbsite.pgembedded.server import (
    MAX_CONNECTIONS,
    SHARED_BUFFERS_MB,
    EmbeddedPostgres,
)
from tests.conftest import ROOT

pytestmark = pytest.mark.slow

HOLD = textwrap.dedent(
    """
    import sys, psycopg
    from kbsite.pgembedded.server import EmbeddedPostgres
    info = EmbeddedPostgres.at(sys.argv[1]).hold("kb")
    with psycopg.connect(host=str(info.socket_dir), port=info.port, user="postgres",
                         dbname="kb", autocommit=True) as conn:
        conn.execute(sys.argv[2])
        print(conn.execute("SELECT count(*) FROM notes").fetchone()[0], flush=True)
    if len(sys.argv) > 3:
        sys.stdin.read()  # keep holding until the test closes our stdin
    """
)


def run_holder(root, statement: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", HOLD, str(root), statement],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def start_long_holder(root, statement: str) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(root), statement, "hold"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline().strip() != ""
    return process


def test_processes_share_one_server_and_the_last_one_out_stops_it(server_tmp_path):
    root = server_tmp_path / "var"
    server = EmbeddedPostgres.at(root)
    holder = start_long_holder(root, "CREATE TABLE notes (body text)")
    try:
        assert server.running() is not None
        assert server.live_holders() == [holder.pid]

        # A short-lived process joins the running server and leaves it running.
        assert (
            run_holder(root, "INSERT INTO notes VALUES ('from a second process')")
            == "1"
        )
        assert server.running() is not None
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)

    assert server.running() is None
    assert server.live_holders() == []


def test_a_holder_killed_with_sigkill_does_not_keep_the_server_forever(server_tmp_path):
    root = server_tmp_path / "var"
    server = EmbeddedPostgres.at(root)
    holder = start_long_holder(root, "CREATE TABLE notes (body text)")
    holder.kill()
    holder.wait(timeout=10)
    assert server.running() is not None, "the killed holder could not stop it"

    # The next process notices the dead holder and, leaving last, stops the server.
    assert run_holder(root, "INSERT INTO notes VALUES ('after the crash')") == "1"

    assert server.running() is None
    assert server.live_holders() == []


def test_data_survives_a_restart(server_tmp_path):
    root = server_tmp_path / "var"
    run_holder(root, "CREATE TABLE notes (body text)")
    run_holder(root, "INSERT INTO notes VALUES ('first run')")

    assert run_holder(root, "SELECT 1") == "1"
    assert EmbeddedPostgres.at(root).running() is None


@pytest.fixture
def unstartable(server_tmp_path) -> EmbeddedPostgres:
    """A server whose log quotes page text, and whose next start fails."""
    root = server_tmp_path / "var"
    # The server logs an error quoting a value (page text, in this product).
    run_holder(
        root,
        "DO $$ BEGIN PERFORM 'secret page text'::int; "
        "EXCEPTION WHEN others THEN RAISE LOG '%', SQLERRM; END $$; "
        "CREATE TABLE notes (body text)",
    )
    server = EmbeddedPostgres.at(root)
    with open(server.data_dir / "postgresql.conf", "a") as conf:
        conf.write("\nshared_buffers = 'nonsense'\n")
    return server


def test_a_failed_start_names_the_log_and_the_reason_but_quotes_no_page_text(
    unstartable: EmbeddedPostgres,
):
    with pytest.raises(ServerError) as failure:
        unstartable.hold(None)

    message = str(failure.value)
    assert "secret page text" in unstartable.log_file.read_text()
    assert "secret page text" not in message
    assert message.startswith("pg_ctl exited with status 1")
    assert "contains errors" in message, "the server's FATAL line says why"
    assert message.endswith(f"; see {unstartable.log_file}")


def test_to_django_a_server_that_cannot_start_is_a_database_out_of_reach(
    unstartable: EmbeddedPostgres, django_db_blocker
):
    embedded = DatabaseWrapper(
        {**connection.settings_dict, "EMBEDDED_ROOT": unstartable.root, "NAME": "kb"}
    )

    with (
        django_db_blocker.unblock(),
        pytest.raises(OperationalError, match="pg_ctl exited with status 1"),
    ):
        embedded.ensure_connection()


SESSION_NICENESS = textwrap.dedent(
    """
    import os, sys, django
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    django.setup()
    from django.db import connection
    connection.settings_dict["NAME"] = sys.argv[1]
    connection.ensure_connection()
    print(os.getpriority(os.PRIO_PROCESS, connection.connection.info.backend_pid))
    """
)


@pytest.mark.parametrize("niceness", [0, 7])
def test_a_niced_process_gets_its_database_session_niced_alike(niceness):
    result = subprocess.run(
        ["nice", "-n", str(niceness), sys.executable, "-c", SESSION_NICENESS,
         connection.settings_dict["NAME"]],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(niceness)


def test_a_session_gets_its_clients_priority_when_a_niced_process_started_the_server(
    server_tmp_path,
):
    # The worker cluster (niced) may be the first to connect, and start the
    # server: a web server's sessions must not inherit its niceness.
    root = server_tmp_path / "var"
    holder = subprocess.Popen(
        ["nice", "-n", "10", sys.executable, "-c", HOLD, str(root),
         "CREATE TABLE notes (t text)", "hold"],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "0"
        result = subprocess.run(
            [sys.executable, "-c", SESSION_NICENESS, "kb"],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
            env={**os.environ, "KB_VAR_DIR": str(root)},
        )  # fmt: skip
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)
        EmbeddedPostgres.at(root).stop()

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0"


def test_the_server_is_sized_to_the_machine(server_tmp_path):
    """PostgreSQL's 128 MB would not hold the HNSW index of 100,000 chunks, and its
    100 connections not the web workers' of a machine with many cores."""
    root = server_tmp_path / "var"
    holder = start_long_holder(root, "CREATE TABLE notes (body text)")
    try:
        info = EmbeddedPostgres.at(root).running()
        assert info is not None
        with psycopg.connect(
            host=str(info.socket_dir), port=info.port, user="postgres", dbname="kb"
        ) as conn:
            buffers, connections = conn.execute(
                "SELECT setting::bigint * 8 / 1024, "
                "(SELECT setting::int FROM pg_settings WHERE name = 'max_connections')"
                " FROM pg_settings WHERE name = 'shared_buffers'"
            ).fetchone()
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert buffers == SHARED_BUFFERS_MB
    assert 128 <= SHARED_BUFFERS_MB <= 1024
    assert connections == MAX_CONNECTIONS
    assert MAX_CONNECTIONS >= 8 * (os.cpu_count() or 2)


@pytest.mark.parametrize(
    ("postmaster", "working", "cleared"),
    [
        ("zombie", False, True),  # died unreaped, nothing of it left: cleared
        ("zombie", True, False),  # one of its processes still works there
        ("alive", False, False),  # a live postmaster keeps its lock
        ("gone", False, False),  # PostgreSQL tells a dead pid apart itself
    ],
)
def test_the_lock_files_of_a_postmaster_that_died_unreaped_are_cleared(
    tmp_path, postmaster, working, cleared
):
    from kbsite.pgembedded.server import EmbeddedPostgres

    server = EmbeddedPostgres.at(tmp_path / "var")
    server.data_dir.mkdir(parents=True)
    child = os.fork()
    if child == 0:  # exits at once; left unreaped below, it is a zombie
        os._exit(0)
    pid = {"zombie": child, "alive": os.getpid(), "gone": 2**22 + 7}[postmaster]
    lock = server.data_dir / "postmaster.pid"
    socket_lock = server.socket_dir / ".s.PGSQL.5432.lock"
    lock.write_text(f"{pid}\n{server.data_dir}\n")
    socket_lock.write_text(f"{pid}\n{server.data_dir}\n")
    worker = subprocess.Popen(["sleep", "30"], cwd=server.data_dir) if working else None
    try:
        if postmaster == "zombie":
            time.sleep(0.2)  # the child has exited
        assert server._stale_lock_clear() is cleared
        assert lock.exists() is not cleared
        assert socket_lock.exists() is not cleared
    finally:
        os.waitpid(child, 0)
        if worker is not None:
            worker.kill()
            worker.wait()
