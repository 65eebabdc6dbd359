"""Reading fixed pages gives what their reading version recorded.

A page is read again only when its reading key changes (``ingest.reading.rules``),
and the key holds ``READING_VERSION`` (``ingest/reading/content.py``), not the
reading code: a change to what reading makes of a body must move the version, or
pages already read keep the old reading until their text changes. This test says
when. After a meant change, bump ``READING_VERSION`` and record the new output:

    .venv/bin/python -m tests.ingest.reading.test_reading_golden

(it refuses to overwrite a page's recorded reading under the same version).
"""

from __future__ import annotations

import difflib
import gzip
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from ingest.reading import content as reading
from ingest.reading.content import EmptyContent, content_derive
from kbsite.patterns import pattern_compile

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
PAGES = FIXTURES / "reading"
GOLDEN = FIXTURES / "reading_golden.json"
RECORD = ".venv/bin/python -m tests.ingest.reading.test_reading_golden"
SITE = "https://harbor.example/docs"
BODY_LIMIT = 5_000_000


@dataclass(frozen=True)
class Case:
    url: str
    path: Path
    content_type: str
    selector: str = ""
    patterns: tuple[str, ...] = ()
    gzipped: bool = False

    def raw(self) -> bytes:
        body = self.path.read_bytes()
        return gzip.compress(body, mtime=0) if self.gzipped else body


HTML = "text/html; charset=utf-8"
CASES: dict[str, Case] = {
    **{
        f"corpus/{path.stem}": Case(f"{SITE}/{path.stem}/", path, "text/markdown")
        for path in sorted((FIXTURES / "corpus").glob("*.md"))
    },
    "corpus/install, gzip, text/plain": Case(
        f"{SITE}/install/",
        FIXTURES / "corpus" / "install.md",
        "text/plain",
        gzipped=True,
    ),
    "sphinx": Case(f"{SITE}/retries.html", PAGES / "sphinx.html", HTML),
    "sphinx, its body only, a footer pattern": Case(
        f"{SITE}/retries.html",
        PAGES / "sphinx.html",
        HTML,
        selector="div.body",
        patterns=(r"^Copyright \d{4}",),
    ),
    "docbook": Case(f"{SITE}/indexes-partial.html", PAGES / "docbook.html", HTML),
    "sphinx genindex": Case(f"{SITE}/genindex.html", PAGES / "genindex.html", HTML),
    "changelog": Case(f"{SITE}/changelog/", PAGES / "changelog.html", HTML),
}


def reading_of(case: Case) -> dict[str, object]:
    """What reading makes of the case's body: every field of ``Content`` that
    reading decides (the line shapes as one hash, they repeat the lines)."""
    try:
        content = content_derive(
            url=case.url,
            raw=case.raw(),
            content_type=case.content_type,
            selector=case.selector,
            common=set(),
            patterns=[pattern_compile(p) for p in case.patterns],
            limit=BODY_LIMIT,
        )
    except EmptyContent:
        return {"empty": True}
    shapes = json.dumps(sorted(content.shapes.items()), ensure_ascii=False)
    found = content.not_content
    return {
        "title": content.title,
        "markdown": content.markdown,
        "digest": content.digest,
        "shapes": hashlib.sha256(shapes.encode()).hexdigest(),
        "not_content": [found.kind.value, found.reason] if found else None,
        "release_notes": content.release_notes,
    }


def readings() -> dict[str, dict[str, object]]:
    return {name: reading_of(case) for name, case in CASES.items()}


def shown(value: dict[str, object] | None) -> list[str]:
    return json.dumps(value, indent=1, ensure_ascii=False).splitlines()


def test_reading_the_fixed_pages_gives_what_their_reading_version_recorded():
    recorded = json.loads(GOLDEN.read_text())
    assert recorded["reading_version"] == reading.READING_VERSION, (
        f"READING_VERSION is {reading.READING_VERSION}, the readings in {GOLDEN.name} "
        f"were recorded under {recorded['reading_version']}: record them: {RECORD}"
    )
    now, pages = readings(), recorded["pages"]

    changed = [name for name in CASES if now[name] != pages.get(name)]

    first = changed[0] if changed else ""
    diff = difflib.unified_diff(
        shown(pages.get(first)), shown(now.get(first)), "recorded", "now", lineterm=""
    )
    assert not changed, (
        f"Reading changed without READING_VERSION ({reading.READING_VERSION}): "
        f"{', '.join(changed)}. If the change is meant, bump READING_VERSION in "
        f"ingest/reading/content.py (every page is read again at its next delivery) "
        f"and "
        f"record the new readings: {RECORD}\n" + "\n".join(diff)
    )
    assert sorted(pages) == sorted(CASES), f"cases added or gone: {RECORD}"


def test_every_way_of_reading_is_among_the_fixed_pages():
    recorded = json.loads(GOLDEN.read_text())["pages"].values()
    kinds = {tuple(page["not_content"] or ["content"])[0] for page in recorded}

    assert {"content", "index"} <= kinds
    assert any(page["release_notes"] for page in recorded)
    assert all(page["markdown"] for page in recorded), "no page read as empty"


def record() -> int:
    """Write the readings with the current version; refuse to overwrite a page's
    recorded reading under the same version (the test would pass unbumped)."""
    version, now = reading.READING_VERSION, readings()
    if GOLDEN.exists():
        recorded = json.loads(GOLDEN.read_text())
        pages = recorded["pages"]
        same = recorded["reading_version"] == version
        changed = [n for n in now if n in pages and now[n] != pages[n]]
        if same and changed:
            print(
                f"Reading changed under the same READING_VERSION ({version}): "
                f"{', '.join(changed)}. Bump it in ingest/reading/content.py first.",
                file=sys.stderr,
            )
            return 1
    text = json.dumps(
        {"reading_version": version, "pages": now}, indent=1, ensure_ascii=False
    )
    GOLDEN.write_text(text + "\n")
    print(f"{GOLDEN}: {len(now)} pages read under READING_VERSION {version}")
    return 0


if __name__ == "__main__":
    sys.exit(record())
