"""The dashboard tells the truth on day one: first crawls apart from recrawls, a
recrawl's saving counted against what the same recrawl would have cost, and
duplicates shown as duplicates."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone

from ingest.delivery.models import Delivery
from ingest.stats.counts import deliveries_per_day
from ingest.stats.dashboard import share_words
from retrieval.models import Chunk
from sources.models import Page, Source

# Tokens of each page's current chunks: A and B are live, C a duplicate of A.
PAGE_TOKENS = {"A": 42, "B": 60, "C": 0}
NOW = timezone.now()
TODAY = NOW
YESTERDAY = TODAY - timedelta(days=1)


def world() -> dict[str, Page]:
    source = Source.objects.create(name="Docs", seed_urls="https://docs.example.com/")
    pages = {}
    for name, tokens in PAGE_TOKENS.items():
        page = Page.objects.create(
            source=source, url=f"https://docs.example.com/{name}/", title=name
        )
        if tokens:
            Chunk.objects.create(
                page=page, position=0, heading=name, text=name,
                embed_hash=name * 64, token_count=tokens,
            )  # fmt: skip
        pages[name] = page
    return pages


def deliver(pages: dict[str, Page], deliveries) -> None:
    for n, (name, outcome, tokens, at) in enumerate(deliveries):
        Delivery.objects.create(
            rid=f"rid-{n}", url=pages[name].url, page=pages[name],
            state=Delivery.State.DONE, outcome=outcome, embedding_tokens=tokens,
            received_at=at + timedelta(seconds=n), processed_at=at,
        )  # fmt: skip


def totals(days) -> dict:
    outcomes: dict[str, int] = {}
    for day in days:
        for group, n in day.outcomes.items():
            outcomes[group] = outcomes.get(group, 0) + n
    fields = ["first_pages", "first_spent", "recrawls", "spent", "page_gated", "full"]
    return {"outcomes": outcomes} | {
        f: sum(getattr(d, f) for d in days) for f in fields
    }


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("deliveries", "expected"),
    [
        # Day one: only first crawls. They cost what they cost (here more than
        # the pages' current chunks: boilerplate learned later shrank them), and
        # nothing is set against them.
        ([("A", "embedded", 50, TODAY), ("B", "embedded", 70, TODAY)],
         {"outcomes": {"new": 2}, "first_pages": 2, "first_spent": 120,
          "recrawls": 0, "spent": 0, "page_gated": 0, "full": 0}),
        # A recrawl: A changed (10 tokens of new text), B unchanged. A full
        # re-embed would have paid both pages whole, gating A whole.
        ([("A", "embedded", 42, YESTERDAY), ("B", "embedded", 60, YESTERDAY),
          ("A", "embedded", 10, TODAY), ("B", "unchanged", 0, TODAY)],
         {"outcomes": {"new": 2, "changed": 1, "unchanged": 1}, "first_pages": 2,
          "first_spent": 102, "recrawls": 2, "spent": 10, "page_gated": 42,
          "full": 102}),
        # A first crawl and a recrawl of the same page on the same day.
        ([("A", "embedded", 42, TODAY), ("A", "unchanged", 0, TODAY)],
         {"outcomes": {"new": 1, "unchanged": 1}, "first_pages": 1,
          "first_spent": 42, "recrawls": 1, "spent": 0, "page_gated": 0,
          "full": 42}),
        # Duplicates are duplicates, not rejected; the second is a recrawl.
        ([("C", "duplicate", 0, YESTERDAY), ("C", "duplicate", 0, TODAY),
          ("A", "rejected", 0, TODAY)],
         {"outcomes": {"duplicates": 2, "rejected": 1}, "first_pages": 0,
          "first_spent": 0, "recrawls": 1, "spent": 0, "page_gated": 0,
          "full": 0}),
        # A first fetch that failed makes the next one the first crawl.
        ([("A", "skipped", 0, YESTERDAY), ("A", "embedded", 42, TODAY)],
         {"outcomes": {"skipped": 1, "new": 1}, "first_pages": 1,
          "first_spent": 42, "recrawls": 0, "spent": 0, "page_gated": 0,
          "full": 0}),
    ],
    ids=["day-one", "recrawl", "same-day", "duplicates", "failed-first"],
)  # fmt: skip
def test_first_crawls_recrawls_and_duplicates_are_counted_apart(deliveries, expected):
    deliver(world(), deliveries)
    root = get_user_model().objects.create_superuser("root", "r@example.com", "pw")

    days = deliveries_per_day(since=YESTERDAY - timedelta(hours=12), now=NOW, user=root)

    assert totals(days) == expected


@pytest.mark.parametrize(
    ("spent", "baseline", "words"),
    [
        (10, 102, "this product spent 9.8% of it"),
        (0, 42, "this product spent 0.0% of it"),
        (42, 42, "this product spent 100.0% of it"),
        # More than the baseline (two embedding models during a change, a page
        # shrunk since): said in tokens, never as 113.8%.
        (50, 42, "this product spent 8 tokens more"),
        (0, 0, ""),
    ],
)
def test_a_share_is_a_percentage_of_at_most_all_of_it(spent, baseline, words):
    assert share_words(spent, baseline) == words


@pytest.fixture
def dashboard(client, db):
    root = get_user_model().objects.create_superuser("root", "r@example.com", "pw")
    client.force_login(root)

    def get() -> tuple[dict, str]:
        response = client.get(reverse("admin-dashboard"), {"days": 7})
        content = response.content.decode()
        tokens = content.split('id="tokens"')[1].split("</section>")[0]
        return response.context, tokens

    return get


def test_on_day_one_the_dashboard_shows_first_crawls_and_no_percentage(dashboard):
    deliver(world(), [("A", "embedded", 50, TODAY), ("B", "embedded", 70, TODAY)])

    context, tokens = dashboard()

    assert context["first"]["tokens"] == "120" and context["first"]["pages"] == "2"
    assert [s["share"] for s in context["strategies"]] == ["", ""]
    assert "%" not in tokens.split("<details>")[0]
    assert 'id="no-recrawls"' in tokens
    assert "tokens for 2 new pages" in tokens


def test_a_recrawls_saving_is_set_against_the_same_recrawl(dashboard):
    deliver(
        world(),
        [("A", "embedded", 42, YESTERDAY), ("B", "embedded", 60, YESTERDAY),
         ("A", "embedded", 10, TODAY), ("B", "unchanged", 0, TODAY)],
    )  # fmt: skip

    context, tokens = dashboard()

    shares = {s["name"]: (s["tokens"], s["share"]) for s in context["strategies"]}
    assert shares == {
        "full re-embed": ("102", "this product spent 9.8% of it"),
        "page-level hash gating": ("42", "this product spent 23.8% of it"),
    }
    assert context["spent"]["tokens"] == "10" and context["recrawls"] == "2"
    assert "tokens spent on 2 recrawls" in tokens
    assert 'id="no-recrawls"' not in tokens
