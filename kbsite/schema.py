"""Whether the database's tables are the ones the code's models describe."""

from __future__ import annotations

from django.db import DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor


def schema_current(using: str = "default", app: str | None = None) -> bool:
    """Every migration of the code (of ``app``, if given) is applied to the
    database. A system check that
    reads rows through the models asks this first: ``migrate`` runs the checks
    before it migrates, when a database made by an older release still has the
    older tables (a model's query would name columns they lack). False while the
    database cannot say (down, or not made yet)."""
    try:
        executor = MigrationExecutor(connections[using])
        return not executor.migration_plan(executor.loader.graph.leaf_nodes(app))
    except DatabaseError:
        return False
