"""The editors' admin for what is indexed. Django imports only this module, so it
imports the module of each admin: importing one registers its models. The source
and page admins are this app's parts of screens that need ingest too: they
register nothing here, and ``kbsite.admin`` registers them composed."""

from __future__ import annotations

from sources.admin import line_shapes, pages, sources, versions  # noqa: F401
