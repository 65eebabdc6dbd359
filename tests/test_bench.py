"""Each benchmark's main path on a small made-up site: the scripts under ``bench/``
keep running as the code under them changes. No number is checked (they are for
people: docs/benchmarks.md); each run must finish and print its summary.

The site is the Harbor pages (tests/fixtures/corpus) as HTML, laid out where each
benchmark corpus lives (``BENCH_DATA``) with an index page linking them, and small
golden sets about it. The benchmarks that need a database run in processes of
their own on an embedded PostgreSQL in a temporary ``KB_VAR_DIR``, not the suite's
(they make, empty and drop databases of their own), on free loopback ports.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench import corpus as bench_corpus
from bench import golden_check, schedule
from bench.corpus import POSTGRESQL, Corpus
from kbsite.pgembedded.server import EmbeddedPostgres
from tests.conftest import PYTHON as PYTHON_BIN
from tests.conftest import ROOT, free_port, local_model_require

FIXTURES = Path(__file__).resolve().parent / "fixtures"
HARBOR = "https://docs.harbor.example/"
# A few questions of each kind, for each corpus's golden set.
GOLDEN_QUESTIONS = [
    "HB-5001",
    "How do I pause a queue?",
    "Which Python version does Harbor need?",
    "What is the boiling point of tungsten?",
]
# A phrase of the queues page, as golden_check looks for it in the page's text.
PHRASES = {"How do I pause a queue?": "harbor queue pause NAME stops workers"}
CODE = re.compile(r"`([^`]+)`")


@dataclass(frozen=True)
class Bench:
    env: dict[str, str]
    data: Path
    goldens: Path


def page_html(markdown: str) -> str:
    """A Harbor page as a generator writes one: headings, paragraphs and inline
    code inside ``<main>``, navigation around it."""
    blocks = []
    for block in markdown.strip().split("\n\n"):
        text = CODE.sub(r"<code>\1</code>", html.escape(" ".join(block.split())))
        if block.startswith("#"):
            level = len(block) - len(block.lstrip("#"))
            blocks.append(f"<h{level}>{text.lstrip('# ')}</h{level}>")
        else:
            blocks.append(f"<p>{text}</p>")
    title = re.sub(r"<[^>]+>", "", blocks[0])
    return (
        f"<!DOCTYPE html><html><head><title>{title}</title></head><body>"
        '<nav><a href="index.html">Harbor</a></nav>'
        f"<main>{''.join(blocks)}</main><footer>Harbor docs</footer></body></html>"
    )


def site_write(root: Path) -> None:
    """The Harbor pages under ``root``, with an index.html linking them."""
    root.mkdir(parents=True)
    names = sorted(path.stem for path in (FIXTURES / "corpus").glob("*.md"))
    for name in names:
        markdown = (FIXTURES / "corpus" / f"{name}.md").read_text()
        (root / f"{name}.html").write_text(page_html(markdown))
    links = "".join(f'<li><a href="{name}.html">{name}</a></li>' for name in names)
    (root / "index.html").write_text(
        "<!DOCTYPE html><html><head><title>Harbor</title></head><body><main>"
        f"<h1>Harbor documentation</h1><ul>{links}</ul></main></body></html>"
    )


def golden_write(path: Path, corpus: Corpus) -> None:
    """GOLDEN_QUESTIONS of the fixture golden set, about ``corpus``'s pages."""
    rows = [json.loads(line) for line in (FIXTURES / "golden.jsonl").open()]
    with path.open("w") as out:
        for row in rows:
            if row["question"] not in GOLDEN_QUESTIONS:
                continue
            row["expected_urls"] = [
                corpus.base_url + url.removeprefix(HARBOR).strip("/") + ".html"
                for url in row["expected_urls"]
            ]
            if row["question"] in PHRASES:
                row["expected_phrase"] = PHRASES[row["question"]]
            out.write(json.dumps(row) + "\n")


@pytest.fixture(scope="module")
def bench() -> Iterator[Bench]:
    # Reachable by the embedded server's own user (it runs as another under root).
    top = Path(tempfile.mkdtemp(prefix="kb-bench-"))
    top.chmod(0o755)
    data, goldens, var = top / "data", top / "goldens", top / "var"
    goldens.mkdir()
    for corpus in golden_check.GOLDEN.values():
        site_write(data / corpus.package / corpus.html_dir)
    for name, corpus in golden_check.GOLDEN.items():
        golden_write(goldens / name, corpus)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "EMBEDDED_DB_NAME", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(
        KB_VAR_DIR=str(var),
        BENCH_DATA=str(data),
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
        EMBEDDING_BACKEND="hashing",
    )
    try:
        yield Bench(env=env, data=data, goldens=goldens)
    finally:
        EmbeddedPostgres.at(var).stop()  # if a benchmark that failed left it up
        shutil.rmtree(top, ignore_errors=True)


def run(bench: Bench, *args: str, timeout: int = 300) -> str:
    """What ``python -m bench.NAME ARGS`` printed; it must end well."""
    result = subprocess.run(
        [PYTHON_BIN, "-m", *args],
        cwd=ROOT,
        env=bench.env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, (
        f"{args}: exit {result.returncode}\n{result.stdout[-3000:]}\n"
        f"{result.stderr[-3000:]}"
    )
    return result.stdout


def test_golden_check_finds_each_golden_page_and_phrase_in_its_corpus(
    bench, monkeypatch, capsys
):
    monkeypatch.setattr(bench_corpus, "DATA", bench.data)
    monkeypatch.setattr(sys, "argv", ["golden_check", "--goldens", str(bench.goldens)])

    assert golden_check.main() == 0

    sets = len(golden_check.GOLDEN)
    assert (
        f"{sets * len(GOLDEN_QUESTIONS)} questions in {sets} golden sets, 0 problems"
        in capsys.readouterr().out
    )


def test_schedule_simulates_a_few_days_of_three_schedules(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["schedule", "--pages", "200", "--days", "3"])

    schedule.main()

    out = capsys.readouterr().out
    assert "adaptive, learned:" in out
    assert "a day's plan for 100,000 pages" in out


@pytest.mark.slow
@pytest.mark.bench
def test_recrawl_plan_plans_the_due_pages(bench):
    out = run(bench, "bench.recrawl_plan", "--pages", "60", "--runs", "1")

    assert "planning the due recrawl: median" in out


@pytest.mark.slow
@pytest.mark.bench
def test_database_size_reads_the_database_a_benchmark_left(bench):
    run(bench, "bench.recrawl_plan", "--pages", "20", "--runs", "1")

    out = run(bench, "bench.database_size")

    assert "for 20 live pages" in out


@pytest.mark.slow
@pytest.mark.bench
def test_hnsw_build_builds_an_index_of_a_few_vectors(bench):
    out = run(bench, "bench.hnsw_build", "--dimensions", "8", "--sizes", "300")

    assert "index built in" in out


@pytest.mark.slow
@pytest.mark.bench
def test_vectors_builds_both_precisions_and_scores_them(bench):
    out = run(bench, "bench.vectors", "--sizes", "200", "--queries", "3")

    assert "200 vectors, halfvec: built in" in out
    assert "ef_search 400: recall@10" in out


@pytest.mark.slow
@pytest.mark.bench
def test_patterns_times_deliveries_with_each_hostile_pattern(bench):
    out = run(bench, "bench.patterns", "--deliveries", "2", "--length", "60")

    assert "Python's re on the same shape of text" in out


@pytest.mark.slow
@pytest.mark.bench
def test_changes_times_the_feeds_over_http(bench):
    port = str(free_port())
    out = run(bench, "bench.changes", "--changes", "300", "--requests", "2",
              "--port", port)  # fmt: skip

    assert "Atom, 100 entries" in out


@pytest.mark.slow
@pytest.mark.bench
def test_query_latency_times_the_api_over_a_few_chunks(bench):
    port = str(free_port())
    out = run(bench, "bench.query", "latency", "--chunks", "500", "--queries", "3",
              "--port", port)  # fmt: skip

    assert "a reader who may see 1 % of the chunks: HNSW recall@10" in out
    assert "reference work:" in out


@pytest.mark.slow
@pytest.mark.bench
def test_versus_scores_the_product_and_the_plain_baseline_scoped_and_mixed(bench):
    local_model_require()  # the baseline is the local model
    out = run(bench, "bench.versus", "--sets", "pg,borg",
              "--goldens", str(bench.goldens))  # fmt: skip

    rows = [line.split() for line in out.splitlines() if line.startswith(("pg", " "))]
    table = {(r[0], r[1], r[2], r[3]) for r in rows if len(r) > 4}
    for name in ("pg", "borg"):
        for method in ("plain", "product"):
            for scope in ("scoped", "mixed"):
                assert (name, "all", method, scope) in table, (name, method, scope)


@pytest.mark.slow
@pytest.mark.bench
def test_query_quality_scores_each_golden_set_on_the_three_sites(bench):
    out = run(bench, "bench.query", "quality", "--backends", "hashing",
              "--goldens", str(bench.goldens))  # fmt: skip

    assert "sphinx suggested RELEVANCE_FLOOR" in out


@pytest.mark.slow
@pytest.mark.bench
def test_recrawl_ingests_redelivers_and_counts_round_trips(bench):
    out = run(bench, "bench.recrawl", "--sample", "3")

    assert "round trips per delivery (median; min-max): first" in out


@pytest.mark.slow
@pytest.mark.bench
def test_incremental_compares_the_tokens_of_a_recrawl_three_ways(bench):
    out = run(bench, "bench.incremental")

    assert "(c) this product:" in out
    assert "footer-date-only pages:" in out


@pytest.mark.slow
@pytest.mark.bench
def test_rechecks_asks_again_what_a_recrawl_made_stale(bench):
    out = run(bench, "bench.rechecks", "--questions", "5")

    assert "notifications:" in out


@pytest.mark.slow
@pytest.mark.bench
def test_crawl_crawls_the_site_twice_on_loopback(bench):
    root = bench.data / POSTGRESQL.package / POSTGRESQL.html_dir

    out = run(bench, "bench.crawl", "--root", str(root))

    assert "second crawl:" in out
    assert "fidelity: 11 of 11 pages" in out


@pytest.mark.slow
@pytest.mark.bench
def test_notify_drip_crawls_beside_a_dripping_receiver_and_without(bench):
    out = run(bench, "bench.notify_drip", "--limit", "5", "--receivers", "1",
              "--every", "0.5")  # fmt: skip

    assert "with 1 dripping receivers (medians of 1)" in out


@pytest.mark.slow
@pytest.mark.bench
def test_nodes_crawls_the_site_with_two_worker_nodes(bench):
    out = run(bench, "bench.nodes", "--workers", "1")

    assert "first crawl by 2 worker nodes: 11 pages" in out


@pytest.mark.slow
@pytest.mark.bench
def test_recovery_finishes_acknowledged_deliveries_after_the_kill(bench):
    port = str(free_port())
    out = run(bench, "bench.recovery", "--deliveries", "30", "--rate", "15",
              "--senders", "2", "--kill-after", "10", "--pages", "5",
              "--wait", "120", "--port", port)  # fmt: skip

    assert "last acknowledged delivery done" in out


@pytest.mark.slow
@pytest.mark.bench
def test_webhook_times_acknowledgements_idle_and_under_ingest(bench):
    port = str(free_port())
    out = run(bench, "bench.webhook", "--deliveries", "20", "--senders", "2",
              "--web-workers", "1", "--with-ingest", "--port", port)  # fmt: skip

    assert "idle: 20 deliveries acknowledged" in out
    assert "under ingest: 20 deliveries acknowledged" in out
