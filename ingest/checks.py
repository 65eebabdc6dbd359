from __future__ import annotations

from django.conf import settings
from django.core.checks import Tags, Warning, register
from django.db import DatabaseError

from ingest.fetchers.kinds import kinds_where
from ingest.notify.filters import lines_of, url_pattern
from ingest.notify.models import Subscription
from kbsite.schema import schema_current
from sources.models import Source


def webhook_in_use() -> bool:
    """Whether a source's fetcher delivers to the webhook (Crawlbase's); False
    while the database cannot say (not migrated yet, at an older release's layout,
    or down: ``migrate``, other checks and the first query report that)."""
    kinds = kinds_where(lambda kind: kind.delivers_by_webhook)
    if not schema_current():
        return False
    try:
        return Source.objects.filter(fetcher__in=kinds).exists()
    except DatabaseError:
        return False


@register()
def webhook_token_check(app_configs, **kwargs) -> list[Warning]:
    """Without a token the webhook refuses every delivery: say so at start-up,
    once a source is crawled by Crawlbase (the only one that delivers there)."""
    token = settings.WEBHOOK_TOKEN
    if (token and len(token) >= 16) or not webhook_in_use():
        return []
    if not token:
        return [
            Warning(
                "WEBHOOK_TOKEN is not set: the webhook refuses every delivery, and "
                "a source is crawled by Crawlbase.",
                hint="Set WEBHOOK_TOKEN (or WEBHOOK_TOKEN_FILE) to a long random value "
                "and use it in the crawler's callback URL (?token=...).",
                id="ingest.W001",
            )
        ]
    if len(token) < 16:
        return [
            Warning(
                "WEBHOOK_TOKEN is shorter than 16 characters.",
                hint="Use a long random value, e.g. python -c "
                "'import secrets; print(secrets.token_urlsafe(32))'.",
                id="ingest.W002",
            )
        ]
    return []


@register()
def crawl_contact_check(app_configs, **kwargs) -> list[Warning]:
    """Site owners see the User-Agent: it should say whom to ask about the crawler."""
    if settings.CRAWL_CONTACT_URL:
        return []
    return [
        Warning(
            "CRAWL_CONTACT_URL is not set: sites the crawler visits cannot tell who "
            "runs it.",
            hint="Set CRAWL_CONTACT_URL to a page that names you and how to reach "
            "you, e.g. https://kb.example.com/bot.",
            id="ingest.W003",
        )
    ]


@register(Tags.database)
def refused_url_patterns_check(app_configs, databases=None, **kwargs) -> list[Warning]:
    """Subscription URL patterns saved before RE2 checked them that it cannot run:
    each matches no URL (``ChangeFilter.build``) until an editor rewrites it."""
    if "default" not in (databases or ()):
        return []
    if not schema_current():
        return []  # before ``migrate`` brings the tables to the models' layout
    warnings = []
    for subscription in Subscription.objects.exclude(url_patterns="").order_by("pk"):
        for line in lines_of(subscription.url_patterns):
            try:
                url_pattern(line)
            except ValueError as exc:
                warnings.append(
                    Warning(
                        f"URL patterns: {exc}",
                        hint="Until an editor rewrites it, it matches no URL.",
                        obj=subscription,
                        id="ingest.W004",
                    )
                )
    return warnings
