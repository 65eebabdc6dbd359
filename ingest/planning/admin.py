"""How the admin tells the editor what a crawl or recrawl asked for did, and what
its crawl will not be able to fetch."""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpRequest

from ingest.crawl.preflight import Refusal, source_seeds_check
from ingest.fetchers.safety import ALLOW_HINT
from ingest.planning.recrawl import RecrawlPlan
from kbsite.canonical import canonical_url_or_none
from sources.models import Source

# Refusals a message lists; it counts the rest.
LISTED = 3


def plan_report(
    admin_: admin.ModelAdmin,
    request: HttpRequest,
    plan: RecrawlPlan,
    *,
    what: str = "Recrawl",
) -> None:
    level = messages.WARNING if plan.busy or plan.out_of_scope else messages.SUCCESS
    admin_.message_user(request, f"{what}: {plan}.", level)


def seeds_report(
    admin_: admin.ModelAdmin, request: HttpRequest, source: Source
) -> None:
    """Warn the editor of the seeds the source's crawl cannot fetch, and why (the
    crawler's own reasons). Resolves host names: call it outside a transaction,
    e.g. once the source's save has committed."""
    refusals = source_seeds_check(source=source)
    if refusals:
        message = seeds_refused_message(source, refusals)
        admin_.message_user(request, message, messages.WARNING)


def seeds_refused_message(source: Source, refusals: list[Refusal]) -> str:
    listed = "; ".join(str(refusal) for refusal in refusals[:LISTED])
    more = len(refusals) - LISTED
    if more > 0:
        listed += f"; and {more} more"
    refused = {refusal.url for refusal in refusals}
    seeds = {canonical_url_or_none(seed) or seed for seed in source.seeds}
    if seeds <= refused:
        message = f"The crawl of {source} can fetch none of its seeds: {listed}."
    else:
        message = f"The crawl of {source} cannot fetch {listed}."
    if any(ALLOW_HINT in refusal.reason for refusal in refusals):
        message += (
            " Settings are environment variables, read when the server and its "
            "workers start: set it, restart them, then use Crawl now on this page."
        )
    else:
        message += " Once that is fixed, Crawl now on this page starts it again."
    return message
