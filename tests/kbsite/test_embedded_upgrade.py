"""A var/ made by the PostgreSQL 16 of earlier versions is upgraded, not lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

from kbsite.pgembedded.programs import major_version, old_bin_dir, program_run
from kbsite.pgembedded.server import PORT, EmbeddedPostgres
from kbsite.pgembedded.upgrade import INITDB_OPTIONS, ClusterUpgrade
from tests.conftest import ROOT
from tests.kbsite.test_embedded_db import HOLD, run_holder

pytestmark = pytest.mark.slow

# The product as it was on PostgreSQL 16 (which had no version check): migrated,
# and the Harbor docs delivered and indexed by its own code.
INDEX_ON_16 = textwrap.dedent(
    """
    import json, django
    django.setup()
    from django.core.management import call_command
    from django.db.backends.signals import connection_created
    from kbsite.database_versions import database_versions_check
    connection_created.disconnect(database_versions_check)
    # Its indexes at single precision (pgvector 0.6.2 has no halfvec), and its
    # migrations: all but the one that rebuilds them at half precision.
    from django.core.management.sql import emit_post_migrate_signal
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor
    from retrieval import sql
    sql.INDEX_PRECISION = "vector"
    executor = MigrationExecutor(connection)
    leaves = executor.loader.graph.leaf_nodes()
    executor.migrate([node for node in leaves if node[0] != "retrieval"]
                     + [("retrieval", "0007_querylog_feedback")])
    emit_post_migrate_signal(0, False, "default")
    # The product of then kept no answers to check again, nor pins (retrieval 0010
    # and 0015 are not applied here): its ingest did not look for them.
    from retrieval import indexing
    indexing.answers_mark_stale = lambda **kwargs: 0
    indexing.pins_review = lambda **kwargs: 0
    # Nor floors per source (0017), nor codes (0018): today's model reads and
    # writes those columns, so they stand in while the pages come in, and go
    # before the upgrade.
    STAND_INS = {
        "retrieval_embeddingspace": ["source_floors jsonb NOT NULL DEFAULT '{}'",
                                     "source_chunks jsonb NOT NULL DEFAULT '{}'"],
        "retrieval_embedding": ["code bit(1024)"],
        "retrieval_chunk": ["code bit(1024)", "code_space integer"],
    }
    with connection.cursor() as cursor:
        for table, columns in STAND_INS.items():
            for column in columns:
                cursor.execute(f"ALTER TABLE {table} ADD COLUMN {column}")
    from tests.world import harbor_load
    harbor_load()
    from tests.kbsite.test_embedded_upgrade import counts
    print(json.dumps(counts()))
    with connection.cursor() as cursor:
        for table, columns in STAND_INS.items():
            for column in columns:
                cursor.execute(f"ALTER TABLE {table} DROP COLUMN {column.split()[0]}")
    """
)

# The product now, on the same var/: the embedded backend starts and upgrades it,
# then `make run`'s migrate; everything counted, searched, and a page added.
SEARCH_ON_18 = textwrap.dedent(
    """
    import json, django
    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.db import connection
    from django.test import override_settings
    from retrieval.models import Chunk
    from retrieval.search import SearchMode, chunks_search
    from tests.kbsite.test_embedded_upgrade import counts, indexes, vector_version
    from ingest.delivery.job import delivery_process
    from tests.world import harbor_url, receive_delivery

    RETRIES = "A job that fails is retried with exponential backoff"
    UPGRADES = "# Upgrades\\n\\nThe zeppelin fleet moves to PostgreSQL 18 overnight."

    def found(query, mode):
        # A floor, so that vectors alone may answer (the hashing space learns none).
        with override_settings(RELEVANCE_FLOOR=0.3):
            result = chunks_search(query=query, user=reader, k=5, mode=mode)
        return [hit.chunk.page.url for hit in result.hits]

    before = vector_version()
    call_command("migrate", verbosity=0)
    reader = User.objects.create_user("reader-after-the-upgrade")
    delivery = receive_delivery(harbor_url("upgrades"), UPGRADES, rid="upgrades",
                                content_type="text/markdown")  # fmt: skip
    delivery_process(delivery_id=delivery.pk)
    print(json.dumps({
        "server": connection.pg_version,
        "vector_before_migrate": before,
        "vector": vector_version(),
        "counts": counts(),
        "by_vector": found(RETRIES, SearchMode.VECTOR),
        "by_keyword": found("HB-4042", SearchMode.KEYWORD),
        "new_page_by_vector": found(UPGRADES, SearchMode.VECTOR),
        "indexes": indexes(),
        # migrate codes them, from the vectors the old release stored
        "chunks_without_code": Chunk.objects.filter(code=None).count(),
    }))
    """
)


def indexes() -> list[str]:
    """The vector indexes' definitions, as a subprocess reports them."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexdef LIKE '%USING hnsw%'"
        )
        return [row[0] for row in cursor.fetchall()]


def counts() -> dict[str, int]:
    """Rows of what the product stores, as a subprocess reports them."""
    from ingest.delivery.models import Delivery
    from retrieval.models import Chunk, Embedding
    from sources.models import Page, Source

    return {
        model.__name__: model.objects.count()
        for model in (Source, Page, Delivery, Chunk, Embedding)
    }


def vector_version() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        return cursor.fetchone()[0]


def python(script: str, **env: str) -> str:
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "EMBEDDED_DB_NAME", "KB_VAR_DIR"}
    }
    environment.update(
        DJANGO_SETTINGS_MODULE="tests.settings", PYTHONPATH=str(ROOT), **env
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


class OldCluster:
    """PostgreSQL 16 run from the binaries ``make`` unpacks, on a var/ laid out as
    the embedded server lays it out."""

    def __init__(self, root: Path) -> None:
        self.server = EmbeddedPostgres.at(root)
        self.user = self.server._prepare_directories()

    def create(self) -> None:
        self._run("initdb", "-D", str(self.server.data_dir), *INITDB_OPTIONS)

    def start(self) -> None:
        options = f"-k '{self.server.socket_dir}' -c listen_addresses='' -p {PORT}"
        self._run("pg_ctl", "-D", str(self.server.data_dir), "-l",
                  str(self.server.log_file), "-w", "-o", options, "start")  # fmt: skip

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.server.data_dir), "-m", "fast", "-w",
                  "stop")  # fmt: skip

    def sql(self, statement: str, dbname: str = "postgres") -> None:
        socket = str(self.server.socket_dir)
        with psycopg.connect(
            host=socket, port=PORT, user="postgres", dbname=dbname, autocommit=True
        ) as conn:
            conn.execute(statement)

    @property
    def url(self) -> str:
        socket = quote(str(self.server.socket_dir), safe="")
        return f"postgres://postgres@{socket}:{PORT}/kb"

    def _run(self, program: str, *args: str) -> None:
        program_run(self.user, program, *args, cwd=self.server.home,
                    log=self.server.log_file, binaries=old_bin_dir("16"))  # fmt: skip


def notes_on_16(root: Path) -> OldCluster:
    """A small PostgreSQL 16 var/: one table and a vector index, stopped."""
    old = OldCluster(root)
    old.create()
    old.start()
    old.sql("CREATE DATABASE kb")
    old.sql("CREATE EXTENSION vector; CREATE TABLE notes (body text, v vector(2)); "
            "INSERT INTO notes VALUES ('before', '[1,0]'); "
            "CREATE INDEX ON notes USING hnsw (v vector_cosine_ops)", "kb")  # fmt: skip
    old.stop()
    return old


def kept_dirs(server: EmbeddedPostgres) -> list[str]:
    return sorted(p.name for p in server.home.iterdir() if p.name.startswith("data-"))


def test_a_var_made_by_postgresql_16_is_upgraded_and_all_of_it_stays_searchable(
    server_tmp_path,
):
    root = server_tmp_path / "var"
    old = OldCluster(root)
    old.create()
    old.start()
    try:
        old.sql("CREATE DATABASE kb")
        on_16 = json.loads(python(INDEX_ON_16, DATABASE_URL=old.url))
    finally:
        old.stop()
    assert on_16["Chunk"] > 0 and on_16["Embedding"] > 0 and on_16["Delivery"] == 10

    printed = python(SEARCH_ON_18, KB_VAR_DIR=str(root), EMBEDDED_DB_NAME="kb")
    *migrated, last = printed.strip().splitlines()
    after = json.loads(last)

    server = EmbeddedPostgres.at(root)
    assert after["server"] // 10000 == int(major_version()) == 18
    assert after["vector_before_migrate"] == "0.6.2", "pg_upgrade keeps it"
    assert after["vector"].startswith("0.8."), "migrate updates it"
    grown = {name: after["counts"][name] - on_16[name] for name in on_16}
    assert grown["Source"] == 0, "every row is there, and one page more"
    assert grown["Page"] == grown["Delivery"] == 1
    assert grown["Chunk"] >= 1 and grown["Embedding"] >= 1
    assert after["chunks_without_code"] == 0
    assert "https://docs.harbor.example/retries/" in after["by_vector"]
    assert after["by_keyword"][0] == "https://docs.harbor.example/errors/"
    assert after["new_page_by_vector"][0] == "https://docs.harbor.example/upgrades/"
    (index,) = after["indexes"]
    assert "halfvec_cosine_ops" in index, "migrate rebuilds it at half precision"
    assert any("vectors, index at halfvec" in line for line in migrated), migrated
    (kept,) = kept_dirs(server)
    assert kept.startswith("data-16-")
    assert (server.home / kept / "PG_VERSION").read_text().strip() == "16"
    assert (server.data_dir / "PG_VERSION").read_text().strip() == "18"
    assert server.running() is None


def test_a_half_made_new_cluster_is_thrown_away_and_the_upgrade_starts_again(
    server_tmp_path,
):
    root = server_tmp_path / "var"
    old = notes_on_16(root)
    upgrade = old.server._upgrade(old.user)
    # What a crash in the middle of pg_upgrade leaves.
    old._run("initdb", "-D", str(upgrade.building), *INITDB_OPTIONS)
    (upgrade.building / "global" / "pg_control").write_bytes(b"torn")
    upgrade.work_dir.mkdir()

    assert run_holder(root, "INSERT INTO notes VALUES ('after', '[0,1]')") == "2"

    assert not upgrade.building.exists() and not upgrade.work_dir.exists()
    assert [k[:8] for k in kept_dirs(old.server)] == ["data-16-"]


def test_an_upgrade_cut_short_between_its_renames_is_finished_by_the_next_start(
    server_tmp_path,
):
    root = server_tmp_path / "var"
    old = notes_on_16(root)
    upgrade: ClusterUpgrade = old.server._upgrade(old.user)
    upgrade._build("16")
    upgrade.data_dir.rename(upgrade.home / "data-16-20260101-000000")  # then a crash

    assert run_holder(root, "INSERT INTO notes VALUES ('after', '[0,1]')") == "2"

    assert kept_dirs(old.server) == ["data-16-20260101-000000"]
    assert (upgrade.data_dir / "PG_VERSION").read_text().strip() == "18"


def test_processes_starting_at_once_on_a_16_var_upgrade_it_once(server_tmp_path):
    root = server_tmp_path / "var"
    notes_on_16(root)
    holders = [
        subprocess.Popen(
            [sys.executable, "-c", HOLD, str(root), "SELECT 1"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for _ in range(3)
    ]
    outputs = [holder.communicate(timeout=120)[0].strip() for holder in holders]

    assert outputs == ["1", "1", "1"]
    assert len(kept_dirs(EmbeddedPostgres.at(root))) == 1


def test_the_upgrade_command_upgrades_once_and_says_where_the_old_data_is(
    server_tmp_path,
):
    root = server_tmp_path / "var"
    notes_on_16(root)
    command = (
        "import sys; from kbsite.pgembedded.__main__ import main; main(['upgrade'])"
    )

    first = python(command, KB_VAR_DIR=str(root))
    again = python(command, KB_VAR_DIR=str(root))

    (kept,) = kept_dirs(EmbeddedPostgres.at(root))
    assert f"the old data is kept in {root / 'postgres' / kept}" in first
    assert "manage.py migrate" in first
    assert again.startswith("nothing to upgrade")
    assert run_holder(root, "SELECT 1") == "1"
