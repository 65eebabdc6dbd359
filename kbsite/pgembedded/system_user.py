"""PostgreSQL refuses to run as root: under root the server runs as a dedicated
system user, created on first use, who must be able to reach its directories.
"""

from __future__ import annotations

import logging
import os
import pwd
import stat
import subprocess
from pathlib import Path

logger = logging.getLogger(__name__)

SYSTEM_USER = "kbpostgres"


def server_user() -> str | None:
    """The user the server runs as; None: this process's own."""
    return SYSTEM_USER if os.geteuid() == 0 else None


def system_user_ensure(user: str) -> None:
    try:
        pwd.getpwnam(user)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                user,
            ],
            check=True,
            capture_output=True,
        )


def traversable_ensure(path: Path) -> None:
    """Let the server's user reach ``path``: add o+x to ancestors that lack it."""
    for parent in path.parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            logger.warning("adding o+x to %s so the database user can reach it", parent)
            parent.chmod(mode | stat.S_IXOTH)
