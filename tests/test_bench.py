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
# Second phrasings, for the loop's benchmark (a pin made from one, asked the other).
REPHRASED = {
    "How do I pause a queue?": "How can I stop a queue for a while?",
    "Which Python version does Harbor need?": "What Python must I have to run Harbor?",
}
CODE = re.compile(r"`([^`]+)`")


@dataclass(frozen=True)
class Bench:
    env: dict[str, str]
    data: Path
    goldens: Path


def page_html(markdown: str) -> str:
    """A Harbor page as a generator writes one: headings with ids to link to,
    paragraphs and inline code inside ``<main>``, navigation around it."""
    blocks = []
    for block in markdown.strip().split("\n\n"):
        text = CODE.sub(r"<code>\1</code>", html.escape(" ".join(block.split())))
        if block.startswith("#"):
            level = len(block) - len(block.lstrip("#"))
            heading = text.lstrip("# ")
            slug = "-".join(re.findall(r"[a-z0-9]+", heading.lower()))
            blocks.append(f'<h{level} id="{slug}">{heading}</h{level}>')
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
            if row["question"] in REPHRASED:
                row["rephrased"] = REPHRASED[row["question"]]
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


# Each benchmark's command on the made-up sites, and what its output must hold.
# "{port}", "{goldens}" and "{root}" stand for a free port, the golden sets'
# directory and the first site's pages.
RUNS = [
    ("bench.recrawl_plan --pages 60 --runs 1", ["planning the due recrawl: median"]),
    ("bench.hnsw_build --dimensions 8 --sizes 300", ["index built in"]),
    ("bench.vectors --sizes 200 --queries 3",
     ["200 vectors, halfvec: built in", "ef_search 400: recall@10"]),
    ("bench.patterns --deliveries 2 --length 60",
     ["Python's re on the same shape of text"]),
    ("bench.changes --changes 300 --requests 2 --port {port}", ["Atom, 100 entries"]),
    ("bench.query latency --chunks 500 --queries 3 --port {port}",
     ["a reader who may see 1 % of the chunks: HNSW recall@10", "reference work:"]),
    ("bench.query quality --backends hashing --goldens {goldens}",
     ["sphinx suggested RELEVANCE_FLOOR"]),
    ("bench.recrawl --sample 3",
     ["CPU per page: workers", "cores reach at most",
      "round trips per delivery (median; min-max): first",
      "round trips of one run that recorded 3 of 3 waiting unchanged deliveries"]),
    ("bench.incremental", ["(c) this product:", "footer-date-only pages:"]),
    ("bench.rechecks --questions 5", ["notifications:"]),
    ("bench.crawl --root {root}", ["second crawl:", "fidelity: 11 of 11 pages"]),
    ("bench.notify_drip --limit 5 --receivers 1 --every 0.5",
     ["with 1 dripping receivers (medians of 1)"]),
    ("bench.nodes --workers 1", ["first crawl by 2 worker nodes: 11 pages"]),
    ("bench.recovery --deliveries 30 --rate 15 --senders 2 --kill-after 10 "
     "--pages 5 --wait 120 --port {port}", ["last acknowledged delivery done"]),
    ("bench.webhook --deliveries 20 --senders 2 --web-workers 1 --with-ingest "
     "--port {port}",
     ["idle: 20 deliveries acknowledged", "under ingest: 20 deliveries acknowledged",
      "the web processes' CPU: "]),
    ("bench.webhook --deliveries 20 --rate 50 --web-workers 1 --port {port}",
     ["idle: 20 deliveries acknowledged (0 errors) by 1 web processes arriving at "
      "50/s (Poisson)"]),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.bench
@pytest.mark.parametrize(("command", "printed"), RUNS, ids=[c for c, _ in RUNS])
def test_each_benchmark_runs_on_the_made_up_sites(bench, command, printed):
    root = bench.data / POSTGRESQL.package / POSTGRESQL.html_dir
    args = command.format(port=free_port(), goldens=bench.goldens, root=root).split()

    out = run(bench, *args)

    for line in printed:
        assert line in out, (command, line)
    # A CPU time the run measured is a number, never nothing (the processes
    # were found).
    figures = re.findall(r"the web processes' CPU: (\d+\.\d+) ms", out)
    assert len(figures) == out.count("the web processes' CPU: "), command
    assert all(float(figure) > 0 for figure in figures), (command, figures)


@pytest.mark.slow
@pytest.mark.bench
def test_database_size_reads_the_database_a_benchmark_left(bench):
    run(bench, "bench.recrawl_plan", "--pages", "20", "--runs", "1")

    out = run(bench, "bench.database_size")

    assert "for 20 live pages" in out


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
def test_loop_pins_half_the_questions_and_asks_their_second_phrasings(bench):
    local_model_require()  # the loop is measured with the local model
    out = run(bench, "bench.loop", "--sets", "pg,borg",
              "--goldens", str(bench.goldens))  # fmt: skip

    rows = [line.split() for line in out.splitlines()]
    table = {(r[0], r[1]): r for r in rows if len(r) > 8}
    for name in ("pg", "borg"):
        for scope in ("scoped", "mixed"):
            row = table[(name, scope)]
            assert row[2] == "1", row  # one of the two with a second phrasing
    assert "pins left after the run: 0" in out


@pytest.mark.slow
@pytest.mark.bench
def test_embedding_compares_the_workers_with_one_plain_call_of_the_model(bench):
    local_model_require()  # it measures the local model
    out = run(bench, "bench.embedding", "--limit", "3")

    for name in (
        "worker, end to end",
        "product embedder, one process",
        "plain encode, one call",
        "product embedder, int8",
    ):
        row = re.search(
            rf"{re.escape(name)}: [\d,]+ texts in [\d.]+ s = ([\d.]+) texts/s.*; "
            r"([\d.]+) of the plain call",
            out,
        )
        assert row, (name, out)
        assert float(row[1]) > 0 and float(row[2]) > 0, row[0]


@pytest.mark.slow
@pytest.mark.bench
def test_crawl_with_the_local_model_says_when_a_first_page_was_searchable(bench):
    local_model_require()
    root = bench.data / POSTGRESQL.package / POSTGRESQL.html_dir
    out = run(bench, "bench.crawl", "--root", str(root), "--local")

    assert "fidelity: 11 of 11 pages" in out
    found = re.search(
        r"a first page searchable at (\d+\.\d) s, every page at (\d+\.\d) s", out
    )
    assert found, out
    first, every = (float(value) for value in found.groups())
    assert 0 < first <= every


# A question in a reader's word the made-up site never uses (its retries page says
# "dead letter"), with its second phrasing: first among those with one, so that
# the loop asks it and the words part has a word to suggest.
READERS_WORD = {
    "question": "Where is the graveyard?",
    "page": "retries",
    "rephrased": "Which failed jobs end up in the graveyard?",
}


@pytest.mark.slow
@pytest.mark.bench
def test_loop_accepts_the_suggested_synonyms_and_asks_the_second_phrasings(bench):
    local_model_require()  # the loop is measured with the local model
    goldens = bench.goldens.parent / "goldens-readers-words"
    shutil.copytree(bench.goldens, goldens, dirs_exist_ok=True)
    pg = goldens / "pg_golden.jsonl"
    row = {
        "question": READERS_WORD["question"],
        "expected_urls": [POSTGRESQL.base_url + READERS_WORD["page"] + ".html"],
        "kind": "paraphrase",
        "rephrased": READERS_WORD["rephrased"],
    }
    pg.write_text(json.dumps(row) + "\n" + pg.read_text())

    out = run(bench, "bench.loop", "--sets", "pg,borg", "--goldens", str(goldens))

    rows = [line.split() for line in out.splitlines()]
    table = {(r[1], r[2]): r for r in rows if r[:1] == ["syn"]}
    for name in ("pg", "borg"):
        for scope in ("scoped", "mixed"):
            row = table[(name, scope)]
            assert len(row) == 11, row
    # The reader's word was asked, went unanswered, and was offered and taken.
    asked, offered, accepted = map(int, table[("pg", "scoped")][3:6])
    assert asked >= 1 and offered >= 1 and accepted >= 1, out
    assert "accepted: graveyard → " in out, out
    assert "synonyms left after the run: 0, its logs: 0" in out
