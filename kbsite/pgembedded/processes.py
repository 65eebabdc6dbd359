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
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return True
    return state == "Z"
