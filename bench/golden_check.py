"""Check the golden sets against their corpora: ``python -m bench.golden_check``
(``--goldens DIR`` for golden files of the same names elsewhere).

For each golden file, every expected URL must be a page of its corpus and, where
a question gives an ``expected_phrase``, that phrase must occur in the text of
each expected page (tags stripped, entities unescaped, whitespace collapsed).
Prints one line per problem and a summary; exits non-zero if there is any.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
from pathlib import Path

from bench.corpus import BORG, POSTGRESQL, PYTHON, SPHINX, Corpus

HERE = Path(__file__).resolve().parent
GOLDEN: dict[str, Corpus] = {
    "pg_golden.jsonl": POSTGRESQL,
    "py_golden.jsonl": PYTHON,
    "sphinx_golden.jsonl": SPHINX,
    "borg_golden.jsonl": BORG,
}
_HIDDEN = re.compile(r"<(script|style)\b.*?</\1\s*>", re.DOTALL | re.IGNORECASE)
_TAG = re.compile(r"<[^>]*>")
_SPACE = re.compile(r"\s+")


def page_text(markup: str) -> str:
    """The page's text: tags (and scripts, styles) out, entities in, one space."""
    text = _TAG.sub(" ", _HIDDEN.sub(" ", markup))
    return _SPACE.sub(" ", html.unescape(text)).strip()


def golden_problems(path: Path, corpus: Corpus) -> tuple[int, list[str]]:
    """(questions, problems) of one golden file."""
    if not path.is_file():
        return 0, [f"{path.name}: no such file"]
    texts = {url: page_text(markup) for url, markup in corpus.pages()}
    problems = []
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]
    for number, line in rows:
        where = f"{path.name}:{number}"
        try:
            row = json.loads(line)
            urls = list(row["expected_urls"])
            phrase = row.get("expected_phrase")
        except (ValueError, KeyError, TypeError) as exc:
            problems.append(f"{where}: unreadable: {exc!r}")
            continue
        if phrase is not None and not urls:
            problems.append(f"{where}: a phrase but no expected page")
        for url in urls:
            if url not in texts:
                problems.append(f"{where}: not a page of the corpus: {url}")
            elif phrase is not None and _SPACE.sub(" ", phrase) not in texts[url]:
                problems.append(f"{where}: {phrase!r} not in {url}")
    return len(rows), problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--goldens", type=Path, default=HERE,
                        help=f"the directory of {', '.join(GOLDEN)}")  # fmt: skip
    args = parser.parse_args()
    total = 0
    problems: list[str] = []
    for name, corpus in GOLDEN.items():
        count, found = golden_problems(args.goldens / name, corpus)
        total += count
        problems += found
        for problem in found:
            print(problem)
        print(f"{name}: {count} questions, {len(found)} problems ({corpus.name})")
    print(f"{total} questions in {len(GOLDEN)} golden sets, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
