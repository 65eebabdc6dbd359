"""Typed readers for settings that come from environment variables.

Each reader names the variable in the error it raises, so a bad value is found at
start-up rather than deep inside a request. ``*_FILE`` variants let secrets come from
files (Docker and Kubernetes secrets) instead of the environment.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from django.core.exceptions import ImproperlyConfigured

TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default).strip()


def env_secret(name: str, default: str = "") -> str:
    """``NAME``, or the contents of the file named by ``NAME_FILE``."""
    path = os.environ.get(f"{name}_FILE", "").strip()
    if not path:
        return env_str(name, default)
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError as exc:
        raise ImproperlyConfigured(
            f"{name}_FILE={path!r} cannot be read: {exc}"
        ) from exc


def env_secret_list(name: str) -> list[str]:
    """``NAME`` (or the file ``NAME_FILE`` names) as a comma-separated list: for a
    list of URLs that carry passwords."""
    return [item.strip() for item in env_secret(name).split(",") if item.strip()]


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use true or false)")


def env_int(
    name: str, default: int, *, minimum: int = 0, maximum: int | None = None
) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a whole number") from None
    if value < minimum or (maximum is not None and value > maximum):
        upper = "" if maximum is None else f" and at most {maximum}"
        raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}{upper}")
    return value


def env_float(name: str, default: float, *, minimum: float, maximum: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None
    if not minimum <= value <= maximum:
        raise ImproperlyConfigured(
            f"{name}={value} must be from {minimum} to {maximum}"
        )
    return value


def env_list(name: str, default: Iterable[str] = ()) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: Iterable[str]) -> str:
    choices = list(choices)
    value = env_str(name, default) or default
    if value not in choices:
        raise ImproperlyConfigured(
            f"{name}={value!r} is not one of: {', '.join(choices)}"
        )
    return value


def env_optional_float(name: str, *, minimum: float, maximum: float) -> float | None:
    """``NAME`` as a number, or None when it is unset or blank: for an override of
    something otherwise learned or derived."""
    if not env_str(name):
        return None
    return env_float(name, 0.0, minimum=minimum, maximum=maximum)


MEMORY_UNITS = {"kB": 1, "MB": 1024, "GB": 1024**2, "TB": 1024**3}
MEMORY = re.compile(r"(\d+)\s*(kB|MB|GB|TB)")
# What PostgreSQL takes for maintenance_work_mem, in kB.
MEMORY_RANGE = (1024, 2147483647)


def env_memory(name: str) -> str:
    """``NAME`` as a size for PostgreSQL's ``maintenance_work_mem``, e.g. ``512MB``
    or ``2GB`` (PostgreSQL's units, case and all: it refuses ``2gb``), from 1MB to
    2TB; '' when unset (the server's own)."""
    value = env_str(name)
    if not value:
        return ""
    found = MEMORY.fullmatch(value)
    if found is None:
        raise ImproperlyConfigured(
            f"{name}={value!r} is not a memory size such as 512MB or 2GB "
            f"(a whole number and one of {', '.join(MEMORY_UNITS)})"
        )
    kilobytes = int(found.group(1)) * MEMORY_UNITS[found.group(2)]
    if not MEMORY_RANGE[0] <= kilobytes <= MEMORY_RANGE[1]:
        raise ImproperlyConfigured(f"{name}={value!r} must be from 1MB to 2TB")
    return value


# What DRF's throttles take: N requests per second, minute, hour or day (DRF reads
# only the unit's first letter; the spellings documented are these).
RATE = re.compile(r"(\d+)/(s|sec|second|m|min|minute|h|hour|d|day)")


def env_rate(name: str, default: str) -> str:
    """``NAME`` as a throttle rate such as ``30/min`` (``N/s``, ``N/min``,
    ``N/hour`` or ``N/day``)."""
    value = env_str(name, default) or default
    if RATE.fullmatch(value) is None:
        raise ImproperlyConfigured(
            f"{name}={value!r} is not a rate such as 30/min "
            "(a whole number, then /s, /min, /hour or /day)"
        )
    return value
