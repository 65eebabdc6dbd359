"""How the webhook's authentication appears in the OpenAPI schema."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class WebhookTokenScheme(OpenApiAuthenticationExtension):
    target_class = "ingest.delivery.webhook.WebhookTokenAuthentication"
    name = "webhookToken"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "query", "name": "token"}
