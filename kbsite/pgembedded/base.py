from __future__ import annotations

from django.db.backends.postgresql import base

from .server import EmbeddedPostgres


class DatabaseWrapper(base.DatabaseWrapper):
    """PostgreSQL, with the embedded server started before the first connection."""

    def get_connection_params(self):
        params = super().get_connection_params()
        server = EmbeddedPostgres.at(self.settings_dict["EMBEDDED_ROOT"])
        info = server.hold(self.settings_dict["NAME"])
        params["host"] = str(info.socket_dir)
        params["port"] = info.port
        return params
