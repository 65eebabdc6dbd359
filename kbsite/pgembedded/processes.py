"""Whether a process is alive, from ``/proc``: its start time tells a live holder
from a new process that was given a dead one's pid.
"""

from __future__ import annotations

import os
from pathlib import Path


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return start_time(pid) != 0.0 and not _is_zombie(pid)


def start_time(pid: int) -> float:
    """The process start time in clock ticks since boot (guards against pid reuse)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return 0.0
    return float(fields[19])


def _is_zombie(pid: int) -> bool:
    """A zombie, or no process at all."""
    return _state(pid) in ("Z", "")


def zombie(pid: int) -> bool:
    """Whether ``pid`` is a process that has died and nobody has reaped: it
    still answers ``kill(pid, 0)``, so PostgreSQL takes it for a live postmaster."""
    return _state(pid) == "Z"


def _state(pid: int) -> str:
    """The process's state letter, from ``/proc`` ("" for no such process)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return ""


def working_in(directory: Path) -> list[int]:
    """Live processes whose working directory is ``directory`` (a PostgreSQL
    server's processes work in its data directory)."""
    target = os.path.realpath(directory)
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "cwd") == target and alive(int(entry.name)):
                found.append(int(entry.name))
        except OSError:  # gone, or not ours to read
            continue
    return found
