"""Real documentation corpora for the benchmarks, from Debian's doc packages.

- the PostgreSQL 15 manual (``postgresql-doc-15``, 1,168 DocBook pages: all but
  the alphabetical index),
- the Python 3.11 documentation (``python3.11-doc``, 493 Sphinx pages: the whole
  site but its generated indexes, search page and full table of contents),
- the Sphinx 5.3 documentation (``sphinx-doc``, 93 Sphinx pages: the same pages
  left out as for Python),
- the BorgBackup 1.2 documentation (``borgbackup-doc``, 48 Sphinx pages: the same
  pages left out as for Python).

Each package is downloaded with ``apt-get download`` and unpacked under
``bench/data/`` (git-ignored) on first use, or under ``BENCH_DATA`` if set: a
directory laid out the same way (the smoke tests put a small made-up site there).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

DATA = Path(os.environ.get("BENCH_DATA") or Path(__file__).resolve().parent / "data")


@dataclass(frozen=True)
class Corpus:
    name: str
    package: str
    html_dir: str  # inside the package
    base_url: str
    pattern: str
    skip: tuple[str, ...] = ()  # file name prefixes that are not content

    @property
    def root(self) -> Path:
        return DATA / self.package / self.html_dir

    def pages(self) -> list[tuple[str, str]]:
        """(url, html) for every page, in a stable order."""
        if not self.root.is_dir():
            _fetch(self.package)
        files = sorted(
            path
            for path in self.root.glob(self.pattern)
            if not any(part.startswith("_") for part in path.parts)
            and not path.name.startswith(self.skip)
        )
        return [
            (self.base_url + path.relative_to(self.root).as_posix(),
             path.read_text(encoding="utf-8"))
            for path in files
        ]  # fmt: skip


POSTGRESQL = Corpus(
    name="PostgreSQL 15 manual",
    package="postgresql-doc-15",
    html_dir="usr/share/doc/postgresql-doc-15/html",
    base_url="https://www.postgresql.org/docs/15/",
    pattern="*.html",
    skip=("bookindex.html",),  # the alphabetical index: links only, like genindex
)
PYTHON = Corpus(
    name="Python 3.11 documentation",
    package="python3.11-doc",
    html_dir="usr/share/doc/python3.11/html",
    base_url="https://docs.python.org/3.11/",
    pattern="**/*.html",
    skip=("genindex", "py-modindex", "search.html", "contents.html"),
)
SPHINX = Corpus(
    name="Sphinx 5.3 documentation",
    package="sphinx-doc",
    html_dir="usr/share/doc/sphinx-doc/html",
    base_url="https://www.sphinx-doc.org/en/5.x/",
    pattern="**/*.html",
    skip=("genindex", "py-modindex", "search.html", "contents.html"),
)
BORG = Corpus(
    name="BorgBackup 1.2 documentation",
    package="borgbackup-doc",
    html_dir="usr/share/doc/borgbackup/html",
    base_url="https://borgbackup.readthedocs.io/en/1.2-maintenance/",
    pattern="**/*.html",
    skip=("genindex", "py-modindex", "search.html", "contents.html"),
)
BASE_URL = POSTGRESQL.base_url


def pages() -> list[tuple[str, str]]:
    """(url, html) for every page of the PostgreSQL manual."""
    return POSTGRESQL.pages()


def _fetch(package: str) -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    subprocess.run(["apt-get", "download", package], cwd=DATA, check=True)
    (deb,) = sorted(DATA.glob(f"{package}_*.deb"))
    subprocess.run(["dpkg-deb", "-x", str(deb), str(DATA / package)], check=True)
