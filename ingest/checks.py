from __future__ import annotations

from django.conf import settings
from django.core.checks import Warning, register


@register()
def webhook_token_check(app_configs, **kwargs) -> list[Warning]:
    """Without a token the webhook refuses every delivery: say so at start-up."""
    token = settings.WEBHOOK_TOKEN
    if not token:
        return [
            Warning(
                "WEBHOOK_TOKEN is not set: the webhook refuses every delivery.",
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
