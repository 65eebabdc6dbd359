"""Checks of what editors stored. Tagged ``database``: they read rows, so only
``migrate`` and ``check --database default`` run them."""

from __future__ import annotations

from django.core.checks import Tags, Warning, register

from kbsite.schema import schema_current
from sources.models import Source

# What a stored pattern RE2 cannot run does meanwhile (``Source.*_regexes``).
MEANWHILE = {
    "allow_patterns": "it allows no URL",
    "deny_patterns": "it denies every URL of the source, whose pages leave search "
    "as they are delivered",
    "boilerplate_patterns": "it removes no line",
}


@register(Tags.database)
def refused_patterns_check(app_configs, databases=None, **kwargs) -> list[Warning]:
    """Patterns saved before RE2 checked them (or around the form) that it cannot
    run: name each, and say what it does until an editor rewrites it."""
    if "default" not in (databases or ()):
        return []
    if not schema_current():
        return []  # before ``migrate`` brings the tables to the models' layout
    warnings = []
    for source in Source.objects.order_by("pk"):
        for field, problem in source.refused_patterns():
            warnings.append(
                Warning(
                    f"{field.replace('_', ' ')}: {problem}",
                    hint=f"Until an editor rewrites it {MEANWHILE[field]}.",
                    obj=source,
                    id="sources.W001",
                )
            )
    return warnings
