"""The admin of deliveries, pushes and crawls, subscriptions and their
notifications, and the editors' source and page admins extended with what ingest
does. Django imports only this module, so it imports the module of each admin:
importing one registers its model."""

from __future__ import annotations

from ingest.admin import (  # noqa: F401
    crawls,
    deliveries,
    pages,
    publish,
    pushes,
    sources,
    subscriptions,
)
