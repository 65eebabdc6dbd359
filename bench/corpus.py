"""A real documentation corpus for the benchmarks: PostgreSQL 15's HTML manual.

Taken from Debian's ``postgresql-doc-15`` package (1,169 pages), downloaded with
``apt-get download`` and unpacked under ``bench/data/`` (git-ignored) on first use.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
PACKAGE = "postgresql-doc-15"
HTML_DIR = DATA / PACKAGE / "usr/share/doc" / PACKAGE / "html"
BASE_URL = "https://www.postgresql.org/docs/15/"


def pages() -> list[tuple[str, str]]:
    """(url, html) for every page of the manual, in a stable order."""
    if not HTML_DIR.is_dir():
        _fetch()
    files = sorted(HTML_DIR.glob("*.html"))
    return [(BASE_URL + path.name, path.read_text(encoding="utf-8")) for path in files]


def _fetch() -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    subprocess.run(["apt-get", "download", PACKAGE], cwd=DATA, check=True)
    (deb,) = sorted(DATA.glob(f"{PACKAGE}_*.deb"))
    subprocess.run(["dpkg-deb", "-x", str(deb), str(DATA / PACKAGE)], check=True)
