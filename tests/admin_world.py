"""A small world for admin tests: one source whose every stored text carries a
script tag, a page with two versions, its chunks, deliveries and questions, and
the people who look at it: an editor (staff with the editors' permissions) and
a superuser."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.test import TestCase
from django.utils import timezone

from ingest.crawl.models import Crawl, CrawlUrl
from ingest.delivery.models import Delivery
from ingest.publish.models import PublishCheck
from ingest.publish.services import publish_token_create
from ingest.pushing.models import Push
from ingest.reading.boilerplate import line_shape, shape_hash
from retrieval.models import Chunk, Embedding, EmbeddingUsage, QueryLog
from sources.models import SYSTEM, LineShape, Page, PageVersion, Source

XSS = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
PASSWORD = "a long test password"
EDITOR_APPS = ["sources", "ingest", "retrieval", "django_q", "authtoken"]

OLD = f"""# Guide {XSS}

Intro line one.
Intro line two.

## Install

Run pip install example to get it.
Line a.
Line b.
Line c.
Line d.
Line e.
Line f.
Line g.

## Use {XSS}

Call example.run() to start."""
NEW = OLD.replace("Run pip install example", "Run uv pip install example").replace(
    "Call example.run() to start.", f"Call example.start() to start. {XSS}"
)


def editor_create(username: str = "editor"):
    """Staff with every permission of the editors' apps (and of the job queue,
    which they must still not see)."""
    user = get_user_model().objects.create_user(
        username, f"{username}@example.com", PASSWORD, is_staff=True
    )
    permissions = Permission.objects.filter(content_type__app_label__in=EDITOR_APPS)
    user.user_permissions.set(permissions)
    return user


# Group B's site, beside the open sources of a test's world.
BETA = "https://beta.example.net"


def two_groups_add(cls) -> None:
    """Group B's source *Beta ops* (``BETA``) beside the world's open sources, and
    their people: carol edits for group B (she sees the open sources and Beta),
    alice for group A (the open sources only), bob reads for group B."""
    group_b = Group.objects.create(name="readers-b")
    cls.beta = Source.objects.create(name="Beta ops", seed_urls=f"{BETA}/")
    cls.beta.allowed_groups.add(group_b)
    cls.carol = editor_create("carol")
    cls.carol.groups.add(group_b)
    cls.alice = editor_create("alice")
    cls.alice.groups.add(Group.objects.create(name="editors-a"))
    cls.bob = get_user_model().objects.create_user("bob")
    cls.bob.groups.add(group_b)


class AdminWorld(TestCase):
    @classmethod
    def setUpTestData(cls):
        now = timezone.now()
        cls.root = get_user_model().objects.create_superuser(
            "root", "root@example.com", PASSWORD
        )
        cls.editor = editor_create()
        cls.menu = f"Home · Guide · {XSS} · API"
        cls.source = Source.objects.create(
            name=f"Example docs {XSS}",
            seed_urls="https://docs.example.com/",
            fetcher=Source.Fetcher.CRAWLBASE,
            common_shapes=[shape_hash(line_shape(cls.menu))],
        )
        cls.page = Page.objects.create(
            source=cls.source,
            url="https://docs.example.com/guide/",
            title=f"Guide {XSS}",
            status=Page.Status.LIVE,
            content_hash="ab" * 32,
            markdown=NEW,
            last_verified_at=now - timedelta(days=10),
            last_changed_at=now - timedelta(days=10),
            last_error=f"site status 503 {XSS}",
            failure_count=2,
            last_failure_at=now - timedelta(hours=1),
            embedding_tokens=1234,
        )
        cls.gone = Page.objects.create(
            source=cls.source,
            url="https://docs.example.com/old/",
            title="Old page",
            status=Page.Status.GONE,
        )
        cls.v1 = PageVersion.objects.create(
            page=cls.page,
            kind=PageVersion.Kind.CHANGED,
            content_hash="aa" * 32,
            markdown=OLD,
            recorded_at=now - timedelta(days=20),
        )
        cls.v2 = PageVersion.objects.create(
            page=cls.page,
            kind=PageVersion.Kind.CHANGED,
            content_hash="ab" * 32,
            markdown=NEW,
            recorded_at=now - timedelta(days=10),
        )
        cls.chunk = Chunk.objects.create(
            page=cls.page,
            position=0,
            heading=f"Guide › Use {XSS}",
            text=f"Call it {XSS}",
            embed_hash="cd" * 32,
            token_count=42,
        )
        Embedding.objects.create(
            space="test/x/3", text_hash="cd" * 32, vector=[1, 0, 0], token_count=42
        )
        EmbeddingUsage.objects.create(
            day=now.date(), space="test/x/3", requests=2, inputs=3, tokens=1234567
        )
        cls.delivery = Delivery.objects.create(
            rid="r1",
            url=cls.page.url,
            page=cls.page,
            version=cls.v2,
            state=Delivery.State.DONE,
            outcome=Delivery.Outcome.EMBEDDED,
            original_status=200,
            crawler_status=200,
            embedding_tokens=321,
            embedding_requests=1,
            error=f"2 new chunk texts {XSS}",
            received_at=now - timedelta(days=10),
        )
        cls.push = Push.objects.create(
            rid="push-1", page=cls.page, url=cls.page.url, error=f"refused {XSS}"
        )
        LineShape.objects.create(
            source=cls.source,
            shape=shape_hash(line_shape(cls.menu)),
            pages=57,
            example=cls.menu,
        )
        LineShape.objects.create(
            source=cls.source, shape=1, pages=3, example=f"Rare line {XSS}"
        )
        cls.answered = QueryLog.objects.create(
            kind=QueryLog.Kind.QUERY,
            text=f"How do I start? {XSS}",
            answer=f"Call example.start() [1] {XSS}",
            chunk_ids=[cls.chunk.pk],
            scores=[0.5],
            latency_ms=12,
            user=cls.editor,
        )
        cls.token, _ = publish_token_create(
            source=cls.source, name=f"Deploy {XSS}", user=cls.editor
        )
        cls.check = PublishCheck.objects.create(
            source=cls.source, requested_by=cls.editor, note=f"{XSS}: HTTP 404",
            state=PublishCheck.State.DONE,
        )  # fmt: skip
        cls.abstained = QueryLog.objects.create(
            kind=QueryLog.Kind.QUERY,
            text="What is the airspeed of a swallow?",
            answer="The index holds no evidence for this question.",
            abstained=True,
            latency_ms=9,
        )


# -- two groups' sources, for who sees what --------------------------------------

ALPHA = "https://alpha.example.com"
BETA = "https://beta.example.net"
# What of group B's rows shows in a page about them: host, source name, hashes.
BETA_MARKS = ["beta.example.net", "Beta secrets", "b1b1b1b1b1b1"]


def rows_of_source(*, name: str, site: str, group: Group, asker, mark: str):
    """A Crawlbase source of ``group`` with one row of every kind hanging off it: a
    live, failing and due page with two versions, a chunk and its vector, a done
    and a failed delivery, a delivered push, a line shape, a running crawl with one
    URL, and ``asker``'s question answered from the chunk. ``mark`` (two letters)
    makes its hashes its own."""
    now = timezone.now()
    source = Source.objects.create(
        name=name, seed_urls=f"{site}/", fetcher=Source.Fetcher.CRAWLBASE
    )
    source.allowed_groups.add(group)
    page = Page.objects.create(
        source=source,
        url=f"{site}/guide/",
        title=f"{name} guide",
        status=Page.Status.LIVE,
        content_hash=mark * 32,
        markdown=NEW,
        last_verified_at=now - timedelta(days=9),
        next_crawl_at=now - timedelta(hours=1),
        failure_count=1,
        last_failure_at=now - timedelta(hours=2),
        last_error=f"{site} answered 503",
        embedding_tokens=777,
    )
    versions = [
        PageVersion.objects.create(
            page=page,
            kind=PageVersion.Kind.CHANGED,
            content_hash=mark * 32,
            markdown=text,
            recorded_at=now - timedelta(days=days),
        )
        for text, days in [(OLD, 20), (NEW, 9)]
    ]
    chunk = Chunk.objects.create(
        page=page, position=0, heading=f"{name} › Use", text="Use it.",
        embed_hash=mark * 32, token_count=40,
    )  # fmt: skip
    embedding = Embedding.objects.create(
        space="test/x/3", text_hash=mark * 32, vector=[0, 1, 0]
    )
    delivery = Delivery.objects.create(
        rid=f"rid-{mark}", url=page.url, page=page, version=versions[1],
        state=Delivery.State.DONE, outcome=Delivery.Outcome.EMBEDDED,
        embedding_tokens=55, received_at=now - timedelta(hours=3),
    )  # fmt: skip
    failed = Delivery.objects.create(
        rid=f"failed-{mark}", url=page.url, page=page, body=b"x",
        state=Delivery.State.FAILED, outcome=Delivery.Outcome.FAILED,
        received_at=now - timedelta(hours=4),
    )  # fmt: skip
    push = Push.objects.create(
        rid=f"push-{mark}", page=page, url=page.url, state=Push.State.DELIVERED
    )
    shape = LineShape.objects.create(
        source=source, shape=int(mark, 16), pages=5, example=f"{name} menu"
    )
    crawl = Crawl.objects.create(source=source, max_pages=10, max_depth=1)
    crawl_url = CrawlUrl.objects.create(
        crawl=crawl, url=f"{site}/crawled/", origin=site
    )
    log = QueryLog.objects.create(
        kind=QueryLog.Kind.QUERY, text=f"What does {site} keep?", answer="Use it.",
        chunk_ids=[chunk.pk], scores=[0.5], latency_ms=10, user=asker,
    )  # fmt: skip
    token, _ = publish_token_create(source=source, name=f"{name} deploy", user=SYSTEM)
    check = PublishCheck.objects.create(
        source=source, token=token, state=PublishCheck.State.DONE
    )
    return SimpleNamespace(
        source=source, page=page, versions=versions, chunk=chunk,
        embedding=embedding, delivery=delivery, failed=failed, push=push,
        shape=shape, crawl=crawl, crawl_url=crawl_url, log=log, token=token,
        check=check,
    )  # fmt: skip


class TwoGroupsWorld(AdminWorld):
    """The admin world (its source open to everyone) and two groups' sources:
    Alice edits for group A; Bob, of group B, only asks questions."""

    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.group_a = Group.objects.create(name="readers-a")
        cls.group_b = Group.objects.create(name="readers-b")
        cls.alice = editor_create("alice")
        cls.alice.groups.add(cls.group_a)
        cls.bob = get_user_model().objects.create_user("bob")
        cls.bob.groups.add(cls.group_b)
        cls.a = rows_of_source(
            name="Alpha handbook", site=ALPHA, group=cls.group_a, asker=cls.alice,
            mark="a1",
        )  # fmt: skip
        cls.b = rows_of_source(
            name="Beta secrets", site=BETA, group=cls.group_b, asker=cls.bob,
            mark="b1",
        )  # fmt: skip
        # Delivered for a URL no source covers: which group's it is, nobody knows.
        cls.stray = Delivery.objects.create(
            rid="stray", url=f"{BETA}/unlisted/", body=b"x",
            state=Delivery.State.DONE, outcome=Delivery.Outcome.OUT_OF_SCOPE,
        )  # fmt: skip
