"""What an editor's hostile regular expression costs another group's deliveries.

Two groups' sources on a fresh benchmark database: group B's source of
``https://docs.victim.org/`` with a webhook subscription, and group A's source of
another site. For each hostile pattern (the two issue 32 quotes, and four more
that backtrack in Python's ``re``), deliveries of B's pages are timed twice, with
the same URLs and bodies: once with no pattern saved, once with the pattern saved
everywhere an editor can save it at once (A's allow pattern, which every URL is
checked against; B's deny and boilerplate patterns; B's subscription, ``re:``). Each
delivery's URL is built to make that pattern backtrack (800 characters: centuries
in Python's ``re`` for most), and its page carries a paragraph built the same way,
in prose that none of the patterns matches, so both runs do the same work.

A delivery is the job a worker runs (``delivery_process``: scope, reading and
boilerplate, chunks embedded with the deterministic ``hashing`` embedder, the
change routed to the subscription), called in this process, its time measured
around the call. Then the calls a delivery makes that run the patterns, alone:
``ScopeMap().source_for``, ``source_content`` (reading and boilerplate) and the
subscription's filter. Last, for contrast, how long Python's ``re`` takes on the
same shape of text, grown a character at a time until one search passes 0.2 s.

    .venv/bin/python -m bench.patterns [--deliveries 20] [--length 800]
"""

from __future__ import annotations

import argparse
import gzip
import random
import re
import statistics
import time

from bench.common import django_fresh

DATABASE = "kb_bench_patterns"
VICTIM = "https://docs.victim.org"  # no a, x or y: the patterns' letters
LENGTH = 800
# Prose none of the patterns matches (no a, x or y), as pages have.
WORDS = [
    "the", "server", "stores", "its", "index", "on", "disk", "it", "keeps", "logs",
    "for", "recent", "queries", "clients", "connect", "through", "one", "port",
    "when", "worker", "restarts", "jobs", "resume", "from", "their", "point",
    "settings", "live", "in", "file", "tests", "run", "offline", "models", "need",
    "no", "network", "rules", "crawler", "follows", "limits", "request", "per",
    "host", "pages", "sections", "chunks", "embedded", "once", "notes",
]  # fmt: skip
WORDS = [w for w in WORDS if not set(w) & set("axy")]
# Each pattern, and the text that makes it backtrack: a run of a letter, then an
# end (what follows the run decides that the pattern fails, at last).
HOSTILE = {
    r"^\S*\S*\S*\S*\S*\S*\S*\S*x": ("a", ""),
    r"(a+)+$": ("a", "/"),
    r"(x+x+)+y": ("x", ""),
    r"(a|aa)+$": ("a", "/"),
    r"(.*a){12}": ("b", "a" * 11),
    r"(.*a){12}$": ("a", "/"),
}


def crafted_text(pattern: str, length: int = LENGTH) -> str:
    run, end = HOSTILE[pattern]
    return run * (length - len(end)) + end


def prose(seed: str, paragraphs: int = 30) -> str:
    """Words drawn with ``seed``: each page its own text (not a near-duplicate)."""
    rng = random.Random(seed)
    return "\n".join(
        "<p>" + " ".join(rng.choices(WORDS, k=40)).capitalize() + ".</p>"
        for _ in range(paragraphs)
    )


def page(name: str, crafted: str) -> str:
    return (
        f"<html><head><title>Guide {name}</title></head><body><main>"
        f"<h1>Guide {name}</h1>{prose(name)}<p>{crafted}</p></main></body></html>"
    )


def world() -> tuple:
    from django.contrib.auth.models import Group

    from ingest.notify.models import Subscription
    from sources.models import Source

    victim = Source.objects.create(name="Victim docs", seed_urls=f"{VICTIM}/")
    victim.allowed_groups.add(Group.objects.create(name="B"))
    attacker = Source.objects.create(
        name="Attacker docs", seed_urls="https://docs.attacker.org/"
    )
    attacker.allowed_groups.add(Group.objects.create(name="A"))
    subscription = Subscription.objects.create(
        source=victim, name="B's hook", url="http://127.0.0.1:9/hook"
    )
    return victim, attacker, subscription


def patterns_save(victim, attacker, subscription, pattern: str) -> None:
    """``pattern`` everywhere an editor can save it ('' : nowhere). Saved around
    the forms (which now refuse nothing of these: RE2 runs them all)."""
    attacker.allow_patterns = pattern
    victim.deny_patterns = victim.boilerplate_patterns = pattern
    subscription.url_patterns = f"re:{pattern}" if pattern else ""
    for row in (attacker, victim, subscription):
        row.save()


def deliveries(name: str, crafted: str, count: int) -> list[float]:
    """Seconds each of ``count`` new pages of B's took to be delivered: received
    as the webhook does, then processed as the worker does."""
    from django_q.models import OrmQ

    from ingest.delivery.job import delivery_process
    from ingest.delivery.models import Delivery
    from ingest.delivery.queue import delivery_receive
    from ingest.reading import wire

    seconds = []
    for number in range(count):
        url = f"{VICTIM}/{name}/p{number}/{crafted}"
        parsed = wire.ParsedDelivery(
            rid=f"{name}-{number}", url=url, original_status=200,
            crawler_status=200, body_format="html",
        )  # fmt: skip
        raw = gzip.compress(page(f"{name} {number}", crafted).encode())
        delivery_id, _ = delivery_receive(
            parsed=parsed, raw=raw, content_type="text/html"
        )
        started = time.perf_counter()
        outcome = delivery_process(delivery_id=delivery_id)
        seconds.append(time.perf_counter() - started)
        assert str(outcome) == "embedded", (url[:80], outcome)
    OrmQ.objects.all().delete()  # the jobs queued for them: run here already
    assert Delivery.objects.filter(rid__startswith=f"{name}-").count() == count
    return seconds


def calls(victim, subscription, crafted: str, repeat: int = 50) -> dict[str, float]:
    """Milliseconds of each call a delivery makes that runs the patterns."""
    from ingest.reading.rules import source_content
    from sources.scope import ScopeMap

    url = f"{VICTIM}/calls/{crafted}"
    scope = ScopeMap()
    victim.refresh_from_db()
    subscription.refresh_from_db()
    raw = page("calls", crafted).encode()
    work = {
        "scope": lambda: scope.source_for(url),
        "reading": lambda: source_content(
            source=victim, url=url, raw=raw, content_type="text/html"
        ),
        "subscription": lambda: subscription.change_filter().passes(
            kind="changed", url=url, sections=[], lines_added=1, lines_removed=0
        ),
    }
    return {name: _best_ms(call, repeat) for name, call in work.items()}


def _best_ms(call, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return best * 1000


def python_re(
    pattern: str, limit: float = 0.2, longest: int = LENGTH
) -> tuple[int, float]:
    """The length of the crafted text at which one search with Python's re
    passes ``limit`` seconds (grown a character at a time), and its time; or the
    full length's time if it never does."""
    compiled = re.compile(pattern)
    took = 0.0
    for length in range(12, longest + 1):
        text = crafted_text(pattern, length)
        started = time.perf_counter()
        compiled.search(text)
        took = time.perf_counter() - started
        if took > limit:
            return length, took
    return longest, took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--deliveries", type=int, default=20, help="deliveries per run (20)"
    )
    parser.add_argument(
        "--length",
        type=int,
        default=LENGTH,
        help=f"characters of each crafted URL and paragraph ({LENGTH})",
    )
    args = parser.parse_args()
    count, length = args.deliveries, args.length
    django_fresh(database=DATABASE, EMBEDDING_BACKEND="hashing")
    victim, attacker, subscription = world()
    deliveries("first", "first", 5)  # connections, caches, the embedder

    print(f"deliveries of {count} new pages of B's, median (p90) per delivery:")
    rows = []
    for index, pattern in enumerate(HOSTILE):
        crafted = crafted_text(pattern, length)
        patterns_save(victim, attacker, subscription, "")
        plain = deliveries(f"none{index}", crafted, count)
        plain_calls = calls(victim, subscription, crafted)
        patterns_save(victim, attacker, subscription, pattern)
        hostile = deliveries(f"hostile{index}", crafted, count)
        hostile_calls = calls(victim, subscription, crafted)
        ratio = statistics.median(hostile) / statistics.median(plain)
        print(
            f"  {pattern:<28} none {_ms(plain)}   saved {_ms(hostile)}   "
            f"ratio {ratio:.2f}"
        )
        rows.append((pattern, plain_calls, hostile_calls))

    print("\nthe calls that run the patterns, best of 50, ms (none -> saved):")
    for pattern, plain_calls, hostile_calls in rows:
        parts = "   ".join(
            f"{name} {plain_calls[name]:.3f} -> {hostile_calls[name]:.3f}"
            for name in plain_calls
        )
        print(f"  {pattern:<28} {parts}")

    print("\nPython's re on the same shape of text, one search:")
    for pattern in HOSTILE:
        found, took = python_re(pattern, longest=length)
        print(f"  {pattern:<28} {took:.2f} s at {found} characters")


def _ms(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return f"{statistics.median(seconds) * 1000:6.1f} ms ({p90 * 1000:6.1f})"


if __name__ == "__main__":
    main()
