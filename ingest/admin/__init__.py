"""The ingest app's admin: each feature's screens (deliveries, crawls, pushes,
checks for changes, subscriptions and their notifications), and ingest's parts of
the editors' source and page admins (crawl actions, overview, version costs), which
``kbsite.admin`` composes with the sources app's parts and registers. Django
imports only this module, so it imports the admin module of each feature:
importing one registers its model."""

from __future__ import annotations

from ingest.crawl import admin as crawl_admin  # noqa: F401
from ingest.delivery import admin as delivery_admin  # noqa: F401
from ingest.notify import admin as notify_admin  # noqa: F401
from ingest.publish import admin as publish_admin  # noqa: F401
from ingest.pushing import admin as pushing_admin  # noqa: F401
