"""What a notification says: the JSON body of a webhook, and the e-mail digest
made from the same body. Each change in it is the JSON feed's change
(``sources.feeds.change_entry``), with links made absolute with PUBLIC_URL."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.template.loader import render_to_string
from django.urls import reverse

from sources.feeds import change_entry, feed_steps
from sources.models import SYSTEM, PageVersion

# Kinds in a digest's subject, in few words.
SHORT_KINDS = {
    PageVersion.Kind.NEW: "new",
    PageVersion.Kind.CHANGED: "changed",
    PageVersion.Kind.DELETED: "gone",
    PageVersion.Kind.RESTORED: "back",
    PageVersion.Kind.MOVED: "moved",
    PageVersion.Kind.DUPLICATE: "duplicate",
    PageVersion.Kind.OUT_OF_SCOPE: "out of scope",
}
SUBJECT_CHARS = 200


def absolute(path: str) -> str:
    """A path of this site as a URL its readers can open (PUBLIC_URL)."""
    return settings.PUBLIC_URL + path


def payload_build(
    *,
    key: str,
    subscription_id: int,
    subscription_name: str,
    source_id: int,
    source_name: str,
    created_at: datetime,
    change_ids: Iterable[int],
) -> dict[str, Any]:
    """The body of a notification: its id, whose it is, and the changes, newest
    first, as the JSON feed shows them."""
    steps = feed_steps(SYSTEM).filter(pk__in=list(change_ids))
    changes = [change_entry(step, absolute=absolute) for step in steps]
    return {
        "id": key,
        "type": "changes",
        "created_at": created_at.isoformat(),
        "subscription": {"id": subscription_id, "name": subscription_name},
        "source": {
            "id": source_id,
            "name": source_name,
            "feed_url": absolute(reverse("feeds-source-json", args=[source_id])),
        },
        "count": len(changes),
        "changes": changes,
    }


def body_text(payload: dict[str, Any]) -> str:
    """The body as sent: compact JSON in UTF-8 (signed byte for byte)."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def digest_subject(payload: dict[str, Any]) -> str:
    changes, source = payload["changes"], payload["source"]["name"]
    if len(changes) == 1:
        change = changes[0]
        text = f"{source}: {change['title'] or change['page_url']}, {change['summary']}"
    else:
        kinds = Counter(SHORT_KINDS.get(c["kind"], c["kind"]) for c in changes)
        counts = ", ".join(f"{n} {kind}" for kind, n in kinds.most_common())
        text = f"{source}: {len(changes)} changes ({counts})"
    text = " ".join(text.split())  # a header holds no line breaks
    return text if len(text) <= SUBJECT_CHARS else text[: SUBJECT_CHARS - 1] + "…"


def digest_context(payload: dict[str, Any]) -> dict:
    return {
        "payload": payload,
        "changes": payload["changes"],
        "source": payload["source"],
        "subscription": payload["subscription"],
        "feeds_url": absolute(reverse("feeds")),
        "atom_url": absolute(
            reverse("feeds-source-atom", args=[payload["source"]["id"]])
        ),
    }


def digest_texts(payload: dict[str, Any]) -> tuple[str, str]:
    """The digest as plain text and as HTML (scraped titles escaped). It names
    no address: each recipient gets a copy of their own."""
    context = digest_context(payload)
    return (
        render_to_string("ingest/notify/digest.txt", context),
        render_to_string("ingest/notify/digest.html", context),
    )
