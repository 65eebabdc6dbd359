"""A small named world for ingest tests: one documentation site and its pages."""

from __future__ import annotations

import gzip
import itertools
from collections.abc import Iterable
from pathlib import Path

from django.test import TestCase, override_settings
from django.utils import timezone

from ingest.delivery.job import delivery_process
from ingest.delivery.models import Delivery
from ingest.delivery.queue import delivery_receive
from ingest.pushing.models import Push
from ingest.reading import wire
from retrieval.embeddings import get_embedder
from retrieval.spaces import space_register, space_switch
from retrieval.statistics import index_statistics_refresh
from sources.models import Page, Source
from tests.fakes.openai_api import FakeOpenAI

TOKEN = "test-webhook-token"
SITE = "https://docs.example.com"
HARBOR = "https://docs.harbor.example"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
_rids = itertools.count(1)


def page_html(title: str, *sections: tuple[str, str]) -> str:
    body = "".join(f"<h2>{heading}</h2><p>{text}</p>" for heading, text in sections)
    return (
        f"<html><head><title>{title}</title></head><body>"
        f"<nav>Home · Guide · API</nav><main><h1>{title}</h1>{body}</main>"
        "<footer>© Example</footer></body></html>"
    )


INSTALL = page_html(
    "Install",
    ("Requirements", "You need Python 3.11 and PostgreSQL 16."),
    ("With pip", "Run pip install example to get the latest release."),
)
INSTALL_EDITED = page_html(
    "Install",
    ("Requirements", "You need Python 3.12 and PostgreSQL 17."),
    ("With pip", "Run pip install example to get the latest release."),
)


def run_queued(func: str) -> list:
    """Run the queued jobs for ``func`` as a worker would, and take them off the queue:
    each taken first (its lock moved on, as the cluster's pusher does), unless a
    job run before took it off the queue meanwhile (a delivery's job carries the
    waiting ones). Jobs for other functions, and jobs queued by the runs, stay
    queued."""
    from datetime import timedelta

    from django.conf import settings
    from django.utils import timezone
    from django.utils.module_loading import import_string
    from django_q.models import OrmQ

    results = []
    for row in list(OrmQ.objects.order_by("id")):
        task = row.task
        if task["func"] != func:
            continue
        until = timezone.now() + timedelta(seconds=settings.Q_RETRY)
        if not OrmQ.objects.filter(pk=row.pk, lock=row.lock).update(lock=until):
            continue  # taken by a run before: carried, and off the queue
        results.append(import_string(func)(*task["args"], **task["kwargs"]))
        OrmQ.objects.filter(pk=row.pk).delete()
    return results


def next_rid() -> str:
    return f"rid{next(_rids):06d}"


def receive_delivery(
    url: str = f"{SITE}/install/",
    body: str = INSTALL,
    *,
    rid: str | None = None,
    original_status: int | None = 200,
    crawler_status: int | None = 200,
    content_type: str = "text/plain",
) -> Delivery:
    """Store a gzip delivery and queue its job, as the webhook does."""
    parsed = wire.ParsedDelivery(
        rid=rid or next_rid(),
        url=url,
        original_status=original_status,
        crawler_status=crawler_status,
        body_format=wire.body_format(content_type),
    )
    delivery_id, _ = delivery_receive(
        parsed=parsed, raw=gzip.compress(body.encode()), content_type=content_type
    )
    return Delivery.objects.get(pk=delivery_id)


def webhook_deliver(client, url: str, body: str) -> Delivery:
    """POST the page to the webhook as Crawlbase does (gzip, its headers; the
    token must be ``TOKEN``), then run its job as the worker would."""
    rid = next_rid()
    response = client.generic(
        "POST",
        f"/webhooks/crawlbase/?token={TOKEN}",
        gzip.compress(body.encode()),
        content_type="text/plain",
        HTTP_RID=rid,
        HTTP_URL=url,
        HTTP_ORIGINAL_STATUS="200",
        HTTP_PC_STATUS="200",
        HTTP_CONTENT_ENCODING="gzip",
    )
    assert response.status_code == 200, response.content
    run_queued("ingest.tasks.delivery_process_task")
    return Delivery.objects.get(rid=rid)


def ingest_delivery(*args, **kwargs) -> Delivery:
    """Receive a delivery (as ``receive_delivery``) and run its job, as the worker
    would."""
    delivery = receive_delivery(*args, **kwargs)
    delivery_process(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    return delivery


def embedder_space_serve() -> None:
    """The configured embedder's space serves, as if the site had always run on it."""
    embedder = get_embedder()
    space = space_register(name=embedder.space, dimensions=embedder.dimensions)
    space_switch(to=space, keep_old=True)


def fake_openai_settings(api: FakeOpenAI) -> dict[str, object]:
    """The settings of an embedder of text-embedding-3's served by ``api``."""
    return {
        "EMBEDDING_BACKEND": "openai",
        "EMBEDDING_MODEL": "text-embedding-3-small",
        "EMBEDDING_DIMENSIONS": 64,
        "OPENAI_API_KEY": "sk-test",
        "OPENAI_BASE_URL": api.base_url,
    }


@override_settings(WEBHOOK_TOKEN=TOKEN, DELIVERY_RETRY_SECONDS=0)
class IngestWorld(TestCase):
    """Example docs at docs.example.com, and helpers to deliver pages to it."""

    @classmethod
    def setUpTestData(cls):
        cls.source = Source.objects.create(name="Example docs", seed_urls=f"{SITE}/\n")

    def receive(self, *args, **kwargs) -> Delivery:
        return receive_delivery(*args, **kwargs)

    def ingest(self, *args, **kwargs) -> Delivery:
        """Receive a delivery and run its job, as the worker would."""
        return ingest_delivery(*args, **kwargs)

    def push(self, url: str, rid: str | None = None) -> Push:
        """A push sent to Crawlbase now; an earlier one of the page in flight is
        taken as expired, as the planner does before it pushes a page again."""
        page, _ = Page.objects.get_or_create(url=url, defaults={"source": self.source})
        page.pushes.in_flight().update(state=Push.State.EXPIRED)
        return Push.objects.create(
            rid=rid or next_rid(),
            page=page,
            url=url,
            state=Push.State.SENT,
            pushed_at=timezone.now(),
        )

    def page(self, url: str = f"{SITE}/install/") -> Page:
        return Page.objects.get(url=url)

    def serve_from_fake_openai(
        self, api: FakeOpenAI | None = None, **settings: object
    ) -> FakeOpenAI:
        """Embed through a fake OpenAI API (``api``, or one of text-embedding-3's)
        whose space serves, as if the site had always run on it; ``settings``
        replace the defaults. The fake stops with the test."""
        api = self.enterContext(api or FakeOpenAI())
        values = {**fake_openai_settings(api), **settings}
        self.enterContext(override_settings(**values))
        embedder_space_serve()
        return api


class HarborWorld(IngestWorld):
    """The Harbor job scheduler's documentation (tests/fixtures/corpus), ingested as
    Markdown deliveries."""

    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.harbor = harbor_load()


def harbor_load(*, refresh: bool = True) -> Source:
    """The Harbor docs delivered; ``refresh``: then what the index knows (word
    counts and a floor), as the periodic job would (off when the caller delivers
    more pages first and refreshes then)."""
    source = Source.objects.create(name="Harbor docs", seed_urls=f"{HARBOR}/")
    for path in sorted((FIXTURES / "corpus").glob("*.md")):
        delivery = receive_delivery(
            harbor_url(path.stem), path.read_text(), content_type="text/markdown"
        )
        delivery_process(delivery_id=delivery.pk)
    if refresh:
        index_statistics_refresh(force=True)
    return source


def ingest_markdown(url: str, markdown: str) -> None:
    """Deliver a Markdown page and run its job; refresh what the index knows."""
    ingest_markdowns([(url, markdown)])


def ingest_markdowns(pages: Iterable[tuple[str, str]]) -> None:
    """Deliver Markdown pages (address, text) and run their jobs; then refresh
    what the index knows, once (learning a floor asks hundreds of questions)."""
    for url, markdown in pages:
        delivery = receive_delivery(url, markdown, content_type="text/markdown")
        delivery_process(delivery_id=delivery.pk)
    index_statistics_refresh(force=True)


def harbor_url(name: str) -> str:
    return f"{HARBOR}/{name}/"
