"""Several processes on one database: the shell, the web server and the worker."""

from __future__ import annotations

import gzip
import http.client
import signal
import subprocess
import time
import urllib.error
import urllib.request

import psutil
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from ingest.delivery.models import Delivery
from kbsite.models import ThrottleWindow
from sources.models import Source
from tests.conftest import PYTHON, ROOT, free_port, subprocess_env

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, "manage.py", *args],
        cwd=ROOT,
        env=subprocess_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_manage_py_shell_in_another_process_sees_the_same_data():
    Source.objects.create(name="Written by the test process")

    result = manage(
        "shell",
        "-c",
        "from sources.models import Source; "
        "print(Source.objects.get(name='Written by the test process').name); "
        "Source.objects.create(name='Written by the shell')",
    )

    assert result.returncode == 0, result.stderr
    assert "Written by the test process" in result.stdout
    assert Source.objects.filter(name="Written by the shell").exists()


def test_with_database_url_set_that_server_is_used_and_nothing_is_started():
    from django.db import connection

    from tests.conftest import _database_url

    Source.objects.create(name="Reached through DATABASE_URL")
    params = connection.get_connection_params()
    url = _database_url(
        {"USER": "postgres", "HOST": params["host"], "PORT": params["port"],
         "NAME": connection.settings_dict["NAME"]}
    )  # fmt: skip

    result = manage(
        "shell",
        "-c",
        "from django.db import connection; from sources.models import Source; "
        "print(connection.vendor, connection.settings_dict['ENGINE']); "
        "print(Source.objects.get(name='Reached through DATABASE_URL').name)",
        DATABASE_URL=url,
    )

    assert result.returncode == 0, result.stderr
    assert "postgresql django.db.backends.postgresql" in result.stdout
    assert "Reached through DATABASE_URL" in result.stdout
    assert "embedded PostgreSQL started" not in result.stderr


def test_the_api_throttle_counts_the_requests_of_every_process_together():
    token = Token.objects.create(user=User.objects.create_user("throttled"))
    rate = settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["query"]
    limit = int(rate.split("/")[0])
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    question = {"question": "How do I pause a queue?"}

    def ask_here() -> int:
        return api.post("/api/query/", question, format="json").status_code

    try:
        here = [ask_here() for _ in range(limit - 10)]
        # Another process, as a second web process is: the rest of the allowance.
        there = manage(
            "shell",
            "-c",
            "from django.test import Client; "
            f"client = Client(HTTP_AUTHORIZATION='Token {token.key}', "
            "SERVER_NAME='localhost'); "
            "print([client.post('/api/query/', "
            f"{{'question': 'How do I pause a queue?'}}, "
            "content_type='application/json').status_code for _ in range(11)])",
        )
        last_here = ask_here()
    finally:
        ThrottleWindow.objects.all().delete()

    assert here == [200] * (limit - 10)
    assert there.returncode == 0, there.stderr
    assert there.stdout.strip().splitlines()[-1] == str([200] * 10 + [429])
    assert last_here == 429


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def wait_for(url: str, seconds: float) -> tuple[int, str]:
    deadline = time.monotonic() + seconds
    while True:
        try:
            return get(url)
        # A first answer can take longer than get's timeout on a loaded machine.
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.25)


WEBHOOK_TOKEN = "processes-test-token-0123456789"


def _deliver_with_underscore_statuses(port: int) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request(
        "POST",
        f"/webhooks/crawlbase/?token={WEBHOOK_TOKEN}",
        body=gzip.compress(b"<p>x</p>"),
        headers={
            "Content-Type": "text/plain", "rid": "underscored",
            "url": "https://docs.example.com/u/",
            "Original-Status": "200", "original_status": "404",
            "PC-Status": "200", "pc_status": "503",
        },
    )  # fmt: skip
    try:
        return connection.getresponse().status
    finally:
        connection.close()


def test_serve_runs_web_and_worker_and_ctrl_c_stops_both():
    port = free_port()
    process = subprocess.Popen(
        [
            PYTHON,
            "manage.py",
            "serve",
            "--bind",
            f"127.0.0.1:{port}",
            "--web-workers",
            "2",
        ],
        cwd=ROOT,
        env=subprocess_env(
            WEBHOOK_TOKEN=WEBHOOK_TOKEN,
            DJANGO_SUPERUSER_USERNAME="editor",
            DJANGO_SUPERUSER_PASSWORD="a long test password",
            DJANGO_SUPERUSER_EMAIL="editor@example.com",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        status, body = wait_for(f"http://127.0.0.1:{port}/admin/login/", 60)
        assert status == 200
        assert "Knowledge base" in body
        status, schema = get(f"http://127.0.0.1:{port}/api/schema/")
        assert status == 200
        assert schema.startswith("openapi:")
        assert get(f"http://127.0.0.1:{port}/healthz/") == (200, '{"ok": true}')
        webhook = f"http://127.0.0.1:{port}/webhooks/crawlbase/?token=very-secret-x"
        assert get(webhook)[0] == 401
        assert _deliver_with_underscore_statuses(port) == 200
        # The webhook reads hyphenated names only because real servers drop these.
        delivery = Delivery.objects.get(rid="underscored")
        assert (delivery.original_status, delivery.crawler_status) == (200, 200)
        status, css = get(f"http://127.0.0.1:{port}/static/admin/css/base.css")
        assert status == 200 and "body" in css
        children = psutil.Process(process.pid).children(recursive=True)
        commands = " ".join(" ".join(child.cmdline()) for child in children)
        assert "kbsite.webserver" in commands and "qcluster" in commands
    finally:
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=60)

    assert process.returncode == 0, output
    assert "log in as editor" in output
    assert '"GET /webhooks/crawlbase/" 401' in output, "the access log has the path"
    assert "very-secret-x" not in output, "but never the token in the query string"
    assert not [child for child in children if child.is_running()]
