"""``manage.py evaluate golden.jsonl``: how well the index answers known questions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from kbsite.progress import ProgressBar
from retrieval.evaluation import (
    floor_suggest,
    golden_load,
    golden_run,
    metrics,
    metrics_by_kind,
)
from retrieval.search import SearchMode
from retrieval.spaces import floor_in_force, space_serving
from sources.models import SYSTEM

FLOORS = [
    "recall@5",
    "mrr",
    "abstention_recall",
    "abstention_precision",
    "citation_precision",
    "answer_phrase",
]


class Command(BaseCommand):
    help = (
        "Run each question of a JSON Lines golden set ({question, expected_urls, "
        "kind, expected_phrase?}; an empty expected_urls means the index should "
        "abstain) and print recall@1, recall@5, MRR, abstention precision and "
        "recall, citation precision and the share of answers holding the "
        "expected phrase, overall and per kind."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "golden",
            type=Path,
            nargs="+",
            help="Path of a .jsonl golden set; several are reported one by one.",
        )
        parser.add_argument("--k", type=int, default=5, help="Results per question.")
        parser.add_argument(
            "--mode",
            type=SearchMode,
            choices=list(SearchMode),
            default=SearchMode.HYBRID,
            help="Retrieval to measure (citation precision needs hybrid).",
        )
        parser.add_argument("--json", action="store_true", help="Machine output.")
        parser.add_argument(
            "--suggest-floor",
            action="store_true",
            help="Also print the RELEVANCE_FLOOR that best separates the questions "
            "that should abstain from the others on this set.",
        )
        for name in FLOORS:
            parser.add_argument(
                f"--min-{name.replace('@', '-at-').replace('_', '-')}",
                type=float,
                dest=f"min_{name}",
                help=f"Exit with an error if {name} is below this.",
            )

    def handle(
        self, *args, golden: list[Path], k: int, mode: SearchMode, **options
    ) -> None:
        reports = {str(path): self._evaluate(path, k=k, mode=mode, **options)
                   for path in golden}  # fmt: skip
        if options["json"]:
            self.stdout.write(json.dumps(reports, indent=2))
        else:
            for path, report in reports.items():
                if len(reports) > 1:
                    self.stdout.write(f"{path}:")
                self._print(report)
        named = len(reports) > 1
        failed = [
            f"{f'{path}: ' if named else ''}{name} {report['overall'][name]} "
            f"< {options[f'min_{name}']}"
            for path, report in reports.items()
            for name in FLOORS
            if options[f"min_{name}"] is not None
            and (report["overall"][name] or 0) < options[f"min_{name}"]
        ]
        if failed:
            raise CommandError("below the floor: " + "; ".join(failed))

    def _evaluate(self, path: Path, *, k: int, mode: SearchMode, **options) -> dict:
        try:
            items = golden_load(path)
        except (OSError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        outcomes = []
        bar = ProgressBar(self.stderr, label="questions")
        for number, item in enumerate(items, start=1):
            outcomes.append(golden_run(item, k=k, mode=mode, user=SYSTEM))
            bar.update(number, len(items))
        bar.close()
        report: dict[str, Any] = {
            "overall": metrics(outcomes),
            "by_kind": metrics_by_kind(outcomes),
        }
        if options["suggest_floor"]:
            floor, right = floor_suggest(outcomes)
            report["suggested_floor"] = {
                "relevance_floor": floor,
                "decided_right": right,
                "in_force": floor_in_force(space_serving()),
            }
        return report

    def _print(self, report: dict) -> None:
        names = list(report["overall"])
        self.stdout.write(f"{'':14}" + "".join(f"{n:>22}" for n in names))
        rows = [("overall", report["overall"]), *report["by_kind"].items()]
        for label, values in rows:
            cells = "".join(f"{_fmt(values[n]):>22}" for n in names)
            self.stdout.write(f"{label:14}{cells}")
        if "suggested_floor" in report:
            suggestion = report["suggested_floor"]
            self.stdout.write(
                f"RELEVANCE_FLOOR={suggestion['relevance_floor']} decides "
                f"{suggestion['decided_right']:.0%} of abstentions right "
                f"(in force: {_fmt(suggestion['in_force'])})"
            )


def _fmt(value) -> str:
    return "—" if value is None else str(value)
