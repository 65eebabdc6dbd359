"""``python -m kbsite.pgembedded status|stop|upgrade``: look at, stop or upgrade the
embedded server (upgrade: data made by PostgreSQL 16, as the next start would)."""

from __future__ import annotations

import os
import sys

import django


def main(argv: list[str]) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbsite.settings")
    django.setup()
    from django.conf import settings

    from kbsite.pgembedded.server import EmbeddedPostgres

    root = settings.DATABASES["default"].get("EMBEDDED_ROOT")
    if root is None:
        print("DATABASE_URL is set: there is no embedded database to manage.")
        return 1
    server = EmbeddedPostgres.at(str(root))
    action = argv[0] if argv else "status"
    if action == "stop":
        print("stopped" if server.stop() else "was not running")
        return 0
    if action == "upgrade":
        kept = server.upgrade()
        if kept is None:
            print(f"nothing to upgrade: {server.data_dir} is PostgreSQL's current one")
        else:
            print(
                f"upgraded {server.data_dir}; the old data is kept in {kept} until "
                "you delete it. Run manage.py migrate next: it updates pgvector."
            )
        return 0
    if action == "status":
        info = server.running()
        if info is None:
            print(f"not running (data in {server.data_dir})")
        else:
            holders = server.live_holders()
            print(
                f"running: pid {info.pid}, socket {info.socket_dir}, held by {holders}"
            )
        return 0
    print("usage: python -m kbsite.pgembedded [status|stop|upgrade]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
