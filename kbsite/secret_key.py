"""A SECRET_KEY for installs that set none: generated once and kept in ``var/``,
never in the repository, so that sessions and signed values survive restarts."""

from __future__ import annotations

import secrets
from pathlib import Path


def secret_key_kept(var_dir: Path) -> str:
    """The key kept in ``var_dir``, generated (readable by its owner only) on first
    use."""
    path = var_dir / "secret_key"
    if not path.exists():
        var_dir.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(50))
    return path.read_text().strip()
