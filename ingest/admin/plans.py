"""How the admin tells the editor what a crawl or recrawl asked for did."""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpRequest

from ingest.recrawl import RecrawlPlan


def plan_report(
    admin_: admin.ModelAdmin, request: HttpRequest, plan: RecrawlPlan
) -> None:
    level = messages.WARNING if plan.busy or plan.out_of_scope else messages.SUCCESS
    admin_.message_user(request, f"Recrawl: {plan}.", level)
