from __future__ import annotations

import ast
import re
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from kbsite.env import (
    env_bool,
    env_choice,
    env_int,
    env_list,
    env_memory,
    env_rate,
    env_secret,
)
from kbsite.setting_rules import threads_per_worker
from retrieval.embeddings import build_embedder
from sources.models import Source
from tests.conftest import ROOT, subprocess_env


def run_check(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=subprocess_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
def test_a_bad_embedding_backend_stops_start_up_with_a_message_naming_it():
    result = run_check(EMBEDDING_BACKEND="bogus")

    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "EMBEDDING_BACKEND='bogus' is not one of: hashing, local, openai" in (
        result.stderr
    )


@pytest.mark.parametrize("value", ["64MB", "1024kB", "2GB", "1 GB", " 1TB "])
def test_a_memory_size_in_postgresqls_units_is_taken(monkeypatch, value):
    monkeypatch.setenv("INDEX_BUILD_MEMORY", value)

    assert env_memory("INDEX_BUILD_MEMORY") == value.strip()


def test_no_memory_size_leaves_the_servers_own(monkeypatch):
    monkeypatch.delenv("INDEX_BUILD_MEMORY", raising=False)

    assert env_memory("INDEX_BUILD_MEMORY") == ""


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("2gb", "is not a memory size such as 512MB"),  # units are case-sensitive
        ("1.5GB", "is not a memory size such as 512MB"),
        ("lots", "is not a memory size such as 512MB"),
        ("-1GB", "is not a memory size such as 512MB"),
        ("1024", "is not a memory size such as 512MB"),  # no unit: say one
        ("512kB", "must be from 1MB to 2TB"),
        ("3TB", "must be from 1MB to 2TB"),
    ],
)
def test_a_memory_size_without_a_unit_or_out_of_range_is_refused_naming_it(
    monkeypatch, value, message
):
    monkeypatch.setenv("INDEX_BUILD_MEMORY", value)

    with pytest.raises(ImproperlyConfigured, match=f"INDEX_BUILD_MEMORY=.*{message}"):
        env_memory("INDEX_BUILD_MEMORY")


@pytest.mark.slow
def test_vectors_up_to_what_a_half_precision_index_takes_are_accepted():
    assert run_check(EMBEDDING_BACKEND="hashing", EMBEDDING_DIMENSIONS="4000")\
        .returncode == 0  # fmt: skip
    refused = run_check(EMBEDDING_BACKEND="hashing", EMBEDDING_DIMENSIONS="4001")

    assert "EMBEDDING_DIMENSIONS=4001 must be at least 1 and at most 4000" in (
        refused.stderr
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("SEARCH_HNSW_EF", "5", "SEARCH_HNSW_EF=5 must be at least 10 and at most"),
        ("SEARCH_HNSW_EF", "wide", "SEARCH_HNSW_EF='wide' is not a whole number"),
        ("INDEX_BUILD_MEMORY", "2gb", "INDEX_BUILD_MEMORY='2gb' is not a memory size"),
        (
            "BOILERPLATE_KEEP_SHARE",
            "60",
            "BOILERPLATE_KEEP_SHARE=60 must be at least 0 and at most 50",
        ),
    ],
)
def test_a_bad_search_or_index_setting_stops_start_up_naming_it(name, value, message):
    result = run_check(**{name: value})

    assert result.returncode != 0
    assert message in result.stderr


@pytest.mark.slow
def test_a_retry_delay_not_longer_than_the_job_timeout_is_refused_at_start_up():
    result = run_check(Q_TIMEOUT="300", Q_RETRY="300")

    assert result.returncode != 0
    assert "Q_RETRY=300 must be greater than Q_TIMEOUT=300" in result.stderr


@pytest.mark.slow
def test_the_openai_backend_without_an_api_key_is_refused():
    result = run_check(EMBEDDING_BACKEND="openai", OPENAI_API_KEY="")

    assert result.returncode != 0
    assert "EMBEDDING_BACKEND='openai' needs OPENAI_API_KEY" in result.stderr


@pytest.mark.slow
def test_a_database_url_that_is_not_postgresql_is_refused():
    result = run_check(DATABASE_URL="sqlite:///db.sqlite3")

    assert result.returncode != 0
    assert "DATABASE_URL must point to PostgreSQL" in result.stderr


@pytest.mark.slow
def test_the_default_settings_pass_the_system_checks_with_no_webhook_warning():
    """No source is crawled by Crawlbase: nothing delivers to the webhook."""
    result = run_check(WEBHOOK_TOKEN="")

    assert result.returncode == 0, result.stderr
    assert "ingest.W001" not in result.stderr


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("fetcher", "token", "warning"),
    [
        (Source.Fetcher.CRAWLBASE, "", "ingest.W001"),
        (Source.Fetcher.CRAWLBASE, "short", "ingest.W002"),
        (Source.Fetcher.CRAWLBASE, "x" * 32, None),
        (Source.Fetcher.DIRECT, "", None),
        (Source.Fetcher.DIRECT, "short", None),
        (Source.Fetcher.NSTPROXY, "", None),
    ],
)
def test_the_webhook_token_is_warned_about_once_a_source_uses_crawlbase(
    fetcher, token, warning
):
    Source.objects.create(name="Docs", seed_urls="https://a.example/", fetcher=fetcher)

    result = run_check(WEBHOOK_TOKEN=token, CRAWL_CONTACT_URL="https://a.example/")

    assert result.returncode == 0, result.stderr
    found = {w for w in ["ingest.W001", "ingest.W002"] if w in result.stderr}
    assert found == ({warning} if warning else set()), result.stderr


@pytest.mark.slow
def test_a_long_webhook_token_and_a_crawl_contact_silence_the_warnings():
    result = run_check(WEBHOOK_TOKEN="x" * 32, CRAWL_CONTACT_URL="https://a.example/")

    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


@pytest.mark.slow
def test_a_crawler_without_a_contact_url_is_warned_about():
    result = run_check(WEBHOOK_TOKEN="x" * 32, CRAWL_CONTACT_URL="")

    assert result.returncode == 0, result.stderr
    assert "ingest.W003" in result.stderr


@pytest.mark.slow
def test_a_crawl_body_limit_over_the_delivery_limit_is_refused():
    result = run_check(WEBHOOK_MAX_BODY_BYTES="2048", CRAWL_MAX_BODY_BYTES="4096")

    assert result.returncode != 0
    assert "CRAWL_MAX_BODY_BYTES=4096 must not exceed" in result.stderr


def test_build_embedder_names_an_unknown_backend():
    with pytest.raises(ImproperlyConfigured, match="EMBEDDING_BACKEND='word2vec'"):
        build_embedder("word2vec", "x", 8)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("true", True), ("1", True), ("On", True), ("false", False), ("0", False)],
)
def test_booleans_accept_the_usual_spellings(monkeypatch, raw, expected):
    monkeypatch.setenv("DEBUG", raw)

    assert env_bool("DEBUG", not expected) is expected


def test_a_boolean_that_is_neither_is_refused(monkeypatch):
    monkeypatch.setenv("DEBUG", "maybe")

    with pytest.raises(ImproperlyConfigured, match="DEBUG='maybe' is not a boolean"):
        env_bool("DEBUG", False)


def test_whole_numbers_are_checked_for_form_and_range(monkeypatch):
    monkeypatch.setenv("PORT", "eighty")
    with pytest.raises(ImproperlyConfigured, match="PORT='eighty' is not a whole"):
        env_int("PORT", 8000)

    monkeypatch.setenv("PORT", "70000")
    with pytest.raises(ImproperlyConfigured, match="PORT=70000 must be at least 1"):
        env_int("PORT", 8000, minimum=1, maximum=65535)

    monkeypatch.setenv("PORT", "8080")
    assert env_int("PORT", 8000, minimum=1, maximum=65535) == 8080


@pytest.mark.parametrize(
    ("cores", "workers", "threads"),
    [(2, 2, 1), (2, 1, 2), (8, 2, 4), (2, 4, 1), (1, 1, 1), (3, 2, 1)],
)
def test_the_local_model_shares_the_cores_among_the_workers(cores, workers, threads):
    assert threads_per_worker(cores=cores, workers=workers) == threads


def test_unset_variables_take_their_defaults(monkeypatch):
    monkeypatch.delenv("KB_UNSET", raising=False)

    assert env_int("KB_UNSET", 7) == 7
    assert env_list("KB_UNSET", ["a"]) == ["a"]
    assert env_choice("KB_UNSET", "x", ["x", "y"]) == "x"


def test_lists_are_comma_separated_and_trimmed(monkeypatch):
    monkeypatch.setenv("ALLOWED_HOSTS", " kb.example.com , ,localhost")

    assert env_list("ALLOWED_HOSTS") == ["kb.example.com", "localhost"]


def test_a_secret_can_come_from_a_file(monkeypatch, tmp_path):
    secret = tmp_path / "token"
    secret.write_text("s3cret\n")
    monkeypatch.setenv("WEBHOOK_TOKEN", "from-env")
    monkeypatch.setenv("WEBHOOK_TOKEN_FILE", str(secret))

    assert env_secret("WEBHOOK_TOKEN") == "s3cret"


def test_an_unreadable_secret_file_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("WEBHOOK_TOKEN_FILE", str(tmp_path / "missing"))

    with pytest.raises(ImproperlyConfigured, match="WEBHOOK_TOKEN_FILE="):
        env_secret("WEBHOOK_TOKEN")


def configured_backend(**env: str) -> str:
    """EMBEDDING_BACKEND as a fresh process sees it with this environment."""
    environment = subprocess_env(**env)
    for name in ["EMBEDDING_BACKEND", "OPENAI_API_KEY", "OPENAI_API_KEY_FILE"]:
        if name not in env:
            environment.pop(name, None)
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c",
         "from django.conf import settings; print(settings.EMBEDDING_BACKEND)"],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


@pytest.mark.slow
def test_answers_are_semantic_by_default_local_without_a_key_openai_with_one():
    assert configured_backend() == "local"
    assert configured_backend(OPENAI_API_KEY="sk-test") == "openai"
    assert configured_backend(
        OPENAI_API_KEY="sk-test", EMBEDDING_BACKEND="hashing"
    ) == ("hashing")


def test_the_test_suite_itself_runs_on_the_hashing_backend():
    from django.conf import settings

    assert settings.EMBEDDING_BACKEND == "hashing"
    assert settings.RELEVANCE_FLOOR is None, "the floor is learned unless overridden"


@pytest.mark.parametrize("value", ["30/min", "1/s", "1000/hour", "5/day", "120/m"])
def test_a_throttle_rate_is_taken(monkeypatch, value):
    monkeypatch.setenv("ANONYMOUS_QUERY_RATE", value)

    assert env_rate("ANONYMOUS_QUERY_RATE", "30/min") == value


@pytest.mark.parametrize("value", ["30", "30/minutes", "thirty/min", "30/week", "/m"])
def test_a_bad_throttle_rate_stops_start_up_naming_it(monkeypatch, value):
    monkeypatch.setenv("ANONYMOUS_QUERY_RATE", value)

    with pytest.raises(ImproperlyConfigured, match="ANONYMOUS_QUERY_RATE=.* a rate"):
        env_rate("ANONYMOUS_QUERY_RATE", "30/min")


# Variables in the settings table that kbsite/settings.py does not read, and who does.
READ_ELSEWHERE = {
    "DJANGO_SUPERUSER_PASSWORD": "Django's createsuperuser --noinput",
    "DJANGO_SUPERUSER_EMAIL": "Django's createsuperuser --noinput",
    "HF_HUB_OFFLINE": "huggingface_hub (set by retrieval.backends.LocalEmbedder)",
}
SECRET_READERS = {"env_secret", "env_secret_list"}


def settings_read() -> dict[str, str]:
    """Each variable kbsite/settings.py reads, with the env helper reading it."""
    tree = ast.parse((ROOT / "kbsite" / "settings.py").read_text())
    read = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id.startswith("env_")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            read[node.args[0].value] = node.func.id
    return read


def settings_documented() -> dict[str, bool]:
    """Each variable of docs/operations.md's settings table, and whether it is
    marked (file): its secret may come from ``NAME_FILE`` too."""
    table = (ROOT / "docs" / "operations.md").read_text().split("\n## Settings\n")[1]
    documented = {}
    for line in table.splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            for name, file in re.findall(r"`([A-Z0-9_]+)`( \(file\))?", first_cell):
                documented[name] = bool(file)
    return documented


def test_every_variable_settings_py_reads_is_in_the_settings_table():
    read, documented = settings_read(), settings_documented()

    assert len(read) > 80, "the settings module is read as it is written"
    assert sorted(set(read) - set(documented)) == []


def test_every_variable_in_the_settings_table_is_read_by_settings_py_or_said_by_whom():
    read, documented = settings_read(), settings_documented()

    assert sorted(set(documented) - set(read)) == sorted(READ_ELSEWHERE)


def test_the_settings_table_marks_file_exactly_the_secrets_read_from_a_file_too():
    read, documented = settings_read(), settings_documented()

    marked = {name for name, file in documented.items() if file}
    secrets = {name for name, reader in read.items() if reader in SECRET_READERS}
    assert sorted(marked) == sorted(secrets)
