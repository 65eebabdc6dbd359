"""The ingest app's models, defined in its features' packages: Django finds an
app's models through this module."""

from __future__ import annotations

from ingest.crawl.models import Crawl, CrawlHost, CrawlUrl  # noqa: F401
from ingest.delivery.models import Delivery  # noqa: F401
from ingest.notify.models import (  # noqa: F401
    Notification,
    NotificationAttempt,
    Subscription,
    SubscriptionChange,
)
from ingest.publish.models import (  # noqa: F401
    PublishCheck,
    PublishCheckEntry,
    PublishToken,
)
from ingest.pushing.models import Push  # noqa: F401
