from __future__ import annotations

import os
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

    def init_connection_state(self) -> None:
        super().init_connection_state()
        self._share_niceness()

    def _share_niceness(self) -> None:
        """A niced process (the worker cluster runs at WORKER_NICE) gets its
        database session niced alike. On the embedded server the session is a
        process of this machine, and much of a page's ingest runs there (text
        search vectors, index inserts), so without this the worker's share of the
        cores would not yield to the web server's.

        The server's processes are niced as the process that started it was:
        when a niced worker started it first, a web server's sessions get the
        web server's priority back (where this process may lower a niceness:
        as root, as the embedded server runs under CI).
        """
        if self.connection is None:
            return
        niceness = os.nice(0)
        backend = self.connection.info.backend_pid
        try:
            if os.getpriority(os.PRIO_PROCESS, backend) != niceness:
                os.setpriority(os.PRIO_PROCESS, backend, niceness)
        except OSError:
            pass  # not ours to renice: the session keeps the server's priority
