from __future__ import annotations

import subprocess

from django.db.backends.postgresql import base

from .programs import ServerError
from .server import EmbeddedPostgres


class DatabaseWrapper(base.DatabaseWrapper):
    """PostgreSQL, with the embedded server started before the first connection."""

    def get_connection_params(self):
        params = super().get_connection_params()
        server = EmbeddedPostgres.at(self.settings_dict["EMBEDDED_ROOT"])
        try:
            info = server.hold(self.settings_dict["NAME"])
        except (ServerError, subprocess.TimeoutExpired) as exc:
            # A server that cannot start right now (after a crash, PostgreSQL
            # refuses while the old postmaster's lock or memory is still held) is
            # a database that cannot be reached: Django raises OperationalError,
            # and the webhook answers 503 so that the crawler delivers again.
            raise self.Database.OperationalError(str(exc)) from exc
        params["host"] = str(info.socket_dir)
        params["port"] = info.port
        return params
