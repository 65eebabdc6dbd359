"""The editors' source and page admins, each composed once from the part each app
owns: the top layer of the code, above ingest, retrieval and sources.

A source's screen needs all three apps: its scope, groups and page counts are the
sources app's, its crawls, deliveries, checks for changes and overview are
ingest's; a page's screen adds to its versions what a change cost in the index,
chunked as retrieval chunks, and the sections pinned to answer readers'
questions. Imports go one way (ingest -> retrieval -> sources), so
no app can hold a whole screen without replacing an admin registered below it.
Each app keeps its part as a ``ModelAdmin`` it does not register
(``sources.admin``, ``ingest.admin``); here the parts become the one admin of each
model.

This is kbsite's ``admin`` module because Django's admin imports the ``admin``
module of every installed app, and kbsite is the installed app that already
stands above the three (its URLs wire their views): the top layer needs no app,
label or setting of its own. No app imports it; an import contract in
``pyproject.toml`` says so. Screens of one app alone stay in that app.
"""

from __future__ import annotations

from django.contrib import admin

from ingest.admin.pages import CrawlingPageAdmin
from ingest.admin.sources import OVERVIEW, CrawlingSourceAdmin
from retrieval.pin_admin import PinnedSectionsPageAdmin
from sources.admin.pages import EditingPageAdmin
from sources.admin.sources import EditingSourceAdmin
from sources.models import Page, Source


# Ingest's part comes first: its queryset, saves and URLs extend the sources app's
# (``super()`` reaches it), and the crawl actions are its own.
@admin.register(Source)
class SourceAdmin(CrawlingSourceAdmin, EditingSourceAdmin):
    list_display = [*EditingSourceAdmin.list_display, "tokens_week"]
    readonly_fields = [*EditingSourceAdmin.readonly_fields, *OVERVIEW]


# Ingest's version costs fill the sources app's hook on the diff page; retrieval
# adds the page's pinned sections.
@admin.register(Page)
class PageAdmin(CrawlingPageAdmin, PinnedSectionsPageAdmin, EditingPageAdmin):
    readonly_fields = [*EditingPageAdmin.readonly_fields, "recent_deliveries", "pins"]
