"""The crawler in real worker processes: a crawl whose cluster is killed finishes
after a restart without fetching again what it had, and ``manage.py crawl`` waits,
summarises, and fails when nothing could be fetched."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections import Counter

import pytest

from ingest.crawl.models import Crawl
from ingest.crawl.services import crawl_start
from ingest.delivery.models import Delivery
from sources.models import Page, Source
from tests.conftest import PYTHON, ROOT, qcluster_running, subprocess_env
from tests.fakes.site import FakeSite, page
from tests.ingest.delivery.test_worker import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CRAWL_ENV = {
    "CRAWL_ALLOW_PRIVATE_ADDRESSES": "true",
    "CRAWL_DELAY": "0",
    "CRAWL_TIMEOUT": "5",
    "LOG_LEVEL": "WARNING",
}


@contextlib.contextmanager
def cluster(**settings: str):
    # A job whose worker died is offered again after Q_RETRY seconds, and the URL
    # it held is free again Q_TIMEOUT seconds after it was claimed.
    env = subprocess_env(
        **{"Q_WORKERS": "2", "Q_TIMEOUT": "5", "Q_RETRY": "6", **CRAWL_ENV, **settings}
    )
    with qcluster_running(env) as process:
        yield process


def docs_site(site: FakeSite, count: int) -> list[str]:
    site.robots("User-agent: *\nDisallow: /docs/private/\n")
    site.add("/sitemap.xml", "", status=404)
    paths = [f"/docs/p{n}.html" for n in range(count)]
    site.add("/docs/", page("Docs", "Start.", paths))
    for n, path in enumerate(paths):
        site.add(path, page(f"Page {n}", f"Page number {n} of the manual."))
    return ["/docs/", *paths]


def all_done(crawl: Crawl) -> bool:
    crawl.refresh_from_db()
    open_states = [Delivery.State.QUEUED, Delivery.State.PROCESSING]
    return (
        crawl.state == Crawl.State.DONE
        and not Delivery.objects.filter(state__in=open_states).exists()
    )


def test_a_crawl_killed_mid_way_finishes_after_a_restart_without_refetching():
    with FakeSite() as site:
        paths = docs_site(site, 10)
        site.routes["/docs/p5.html"].hold = True
        source = Source.objects.create(name="Docs", seed_urls=site.url("/docs/"))
        crawl, _ = crawl_start(source=source)

        with cluster() as first:
            assert site.held.wait(60), "the crawl never reached the held page"
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(timeout=30)
        fetched_before = Counter(site.paths())
        site.release.set()

        with cluster():
            wait_until(lambda: all_done(crawl), 120, "the crawl to finish")

        counts = Counter(site.paths())

    assert fetched_before["/docs/p4.html"] == 1, "some pages were done before"
    assert counts["/docs/p5.html"] == 2, "the page in flight was fetched again"
    assert {path: counts[path] for path in paths if path != "/docs/p5.html"} == {
        path: 1 for path in paths if path != "/docs/p5.html"
    }
    assert Page.objects.filter(status=Page.Status.LIVE).count() == len(paths)


def test_the_command_waits_summarises_and_fails_when_nothing_was_fetched():
    with FakeSite() as site, cluster():
        docs_site(site, 2)
        site.redirect("/docs/locked/", "/docs/private/")
        env = subprocess_env(**CRAWL_ENV)

        good = subprocess.run(
            [PYTHON, "manage.py", "crawl", site.url("/docs/")],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        bad = subprocess.run(
            [PYTHON, "manage.py", "crawl", site.url("/docs/locked/")],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    assert good.returncode == 0, good.stderr
    assert "fetched 3, queued 0" in good.stdout
    assert "indexed: 3 embedded" in good.stdout
    assert bad.returncode == 1
    assert "nothing could be fetched" in bad.stderr
    assert "robots.txt disallows" in bad.stderr
