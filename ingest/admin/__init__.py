"""The admin of deliveries, pushes and crawls, subscriptions and their
notifications, and ingest's parts of the editors' source and page admins (crawl
actions, overview, version costs), which ``kbsite.admin`` composes with the sources
app's parts and registers. Django imports only this module, so it imports the
module of each admin: importing one registers its model."""

from __future__ import annotations

from ingest.admin import (  # noqa: F401
    crawls,
    deliveries,
    publish,
    pushes,
    subscriptions,
)
