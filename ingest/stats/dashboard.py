"""The editors' dashboard (``/admin/dashboard/``): what was crawled each day and what
it cost against what other strategies would have cost, how fresh the index is,
which pages were seen longest ago, which sources fail. Charts are SVG drawn here."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from ingest.stats import counts as stats
from kbsite.admin_utils import ago, number, tokens_cost
from kbsite.charts import Series, grouped_bars, horizontal_bars, stacked_bars
from sources.models import Caller

DAY_CHOICES = [7, 14, 30, 90]
OUTCOME_COLOURS = {
    "new": "#1e3a8a",
    "changed": "#2563eb",
    "unchanged": "#16a34a",
    "duplicates": "#0891b2",
    "deleted": "#6b7280",
    "skipped": "#d97706",
    "failed": "#dc2626",
    "rejected": "#a16207",
    "in progress": "#a5b4fc",
}
FIRST_COLOUR = "#c4b5fd"
STRATEGY_COLOURS = {
    "full re-embed": "#9ca3af",
    "page-level hash gating": "#f59e0b",
    "this product": "#2563eb",
}
FRESHNESS_COLOURS = ["#15803d", "#65a30d", "#ca8a04", "#ea580c", "#b91c1c", "#6b7280"]


def dashboard(request: HttpRequest) -> HttpResponse:
    user = request.user
    if not user.has_perm("ingest.view_delivery"):
        raise PermissionDenied
    try:
        days = int(request.GET.get("days", 14))
    except ValueError:
        days = 14
    days = days if days in DAY_CHOICES else 14
    now = timezone.now()
    since = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    since -= timedelta(days=days - 1)
    context = {
        **admin.site.each_context(request),
        "title": "Dashboard",
        "days": days,
        "day_choices": DAY_CHOICES,
        "priced": bool(settings.EMBEDDING_COST_PER_MILLION_TOKENS),
        "price": settings.EMBEDDING_COST_PER_MILLION_TOKENS,
        **_deliveries(since=since, now=now, user=user),
        **_freshness(now=now, user=user),
        "oldest": [
            (page, ago(page.last_verified_at), ago(page.next_crawl_at, empty="—"))
            for page in stats.pages_oldest_unverified(user=user)
        ],
        "failing": stats.sources_failing(now=now, user=user),
        "sources": [
            _source_row(source) for source in stats.sources_tokens(now=now, user=user)
        ],
    }
    return TemplateResponse(request, "admin/dashboard.html", context)


def _deliveries(*, since: Any, now: Any, user: Caller) -> dict[str, Any]:
    days = stats.deliveries_per_day(since=since, now=now, user=user)
    # What the whole index spent: shown to those who see every source.
    usage_shown = all(d.usage is not None for d in days)
    usage = sum(d.usage or 0 for d in days)
    labels = [f"{d.day:%m-%d}" for d in days]
    outcome_series = [
        Series(group, OUTCOME_COLOURS[group], [d.outcomes.get(group, 0) for d in days])
        for group in stats.OUTCOME_GROUPS
    ]
    return {
        "per_day": days,
        "outcome_rows": [
            (d.day, [d.outcomes.get(group, 0) for group in stats.OUTCOME_GROUPS])
            for d in days
        ],
        "token_rows": [
            (
                d.day,
                number(d.first_spent),
                number(d.recrawls),
                number(d.spent),
                number(d.page_gated),
                number(d.full),
                number(d.usage),
            )
            for d in days
        ],  # fmt: skip
        "outcome_groups": [(g, OUTCOME_COLOURS[g]) for g in stats.OUTCOME_GROUPS],
        "outcome_chart": stacked_bars(
            labels=labels, series=outcome_series, title="Deliveries per day by outcome"
        ),
        "token_chart": grouped_bars(
            labels=labels,
            series=_token_series(days),
            title="Embedding tokens per day: first crawls; recrawls by a full "
            "re-embed, page-level hash gating and this product",
        ),
        **_figures(days),
        "usage_total": number(usage),
        "usage_cost": tokens_cost(usage),
        "usage_shown": usage_shown,
    }


def _token_series(days: list[stats.Day]) -> list[Series]:
    recrawls = [
        ("full re-embed", [d.full for d in days]),
        ("page-level hash gating", [d.page_gated for d in days]),
        ("this product", [d.spent for d in days]),
    ]
    return [
        Series("tokens, first crawls", FIRST_COLOUR, [d.first_spent for d in days]),
        *(
            Series(f"tokens of recrawls, {name}", STRATEGY_COLOURS[name], values)
            for name, values in recrawls
        ),
    ]


def _figures(days: list[stats.Day]) -> dict[str, Any]:
    """First crawls apart; recrawls' spending against the two other strategies
    on the same recrawls."""
    spent = sum(d.spent for d in days)
    strategies = {
        "full re-embed": sum(d.full for d in days),
        "page-level hash gating": sum(d.page_gated for d in days),
    }
    first_spent = sum(d.first_spent for d in days)
    return {
        "first": {
            "colour": FIRST_COLOUR,
            "pages": number(sum(d.first_pages for d in days)),
            "tokens": number(first_spent),
            "cost": tokens_cost(first_spent),
        },
        "recrawls": number(sum(d.recrawls for d in days)),
        "strategies": [
            {
                "name": name,
                "colour": STRATEGY_COLOURS[name],
                "tokens": number(tokens),
                "cost": tokens_cost(tokens),
                "share": share_words(spent, tokens),
            }
            for name, tokens in strategies.items()
        ],
        "spent": {
            "colour": STRATEGY_COLOURS["this product"],
            "tokens": number(spent),
            "cost": tokens_cost(spent),
        },
    }


def share_words(spent: int, baseline: int) -> str:
    """What this product spent as a share of what a strategy would have: a
    percentage of it, never over 100% (spending more is said in tokens)."""
    if not baseline:
        return ""
    if spent > baseline:
        return f"this product spent {spent - baseline:,} tokens more"
    return f"this product spent {spent / baseline:.1%} of it"


def _freshness(*, now: Any, user: Caller) -> dict[str, Any]:
    fresh = stats.freshness(now=now, user=user)
    rows = [
        (label, count, colour)
        for (label, count), colour in zip(fresh.buckets, FRESHNESS_COLOURS, strict=True)
    ]
    return {
        "freshness": fresh,
        "freshness_chart": horizontal_bars(
            rows=rows,
            title="Live pages by the age of their last verification",
            width=900,
        ),
    }


def _source_row(source: Any) -> dict[str, Any]:
    return {
        "source": source,
        "deliveries_week": number(source.deliveries_week),
        "tokens_week": number(source.tokens_week),
        "cost_week": tokens_cost(source.tokens_week),
        "tokens_ever": number(source.tokens_ever),
        "cost_ever": tokens_cost(source.tokens_ever),
    }
