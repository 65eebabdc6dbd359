"""Release notes and changelogs: pages that mention everything and define nothing.

A changelog line names an option ("`autodoc_typehints_description_target` is
added") without saying what it does, so a question about the option should find
the page that defines it first. Search ranks these pages down unless the question
asks about a version or a change (``retrieval.search``). Recognised by the page's
address or its title, as their sites name them. No database.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

# A path segment, extension aside: changes.html, whatsnew/3.11.html,
# releases/3.2.html, release-15.html, CHANGELOG.md, news/.
PATH = re.compile(
    r"^(?:change-?log|changes|news|whats-?new|release-?notes|releases?)"
    r"(?:[-_.]?\d[\w.-]*)?$",
    re.IGNORECASE,
)
TITLE = re.compile(
    r"^(?:change-?log\b|changes(?:\s+(?:in|since|for)\b|\s*(?:[—–|:-]|$))"
    r"|release notes|release \d|what[’']?s new|version history)",
    re.IGNORECASE,
)


def is_release_notes(*, url: str, title: str) -> bool:
    """Whether the page at ``url`` titled ``title`` is release notes or a
    changelog."""
    for segment in urlsplit(url).path.split("/"):
        stem = segment.rsplit(".", 1)[0] if "." in segment else segment
        if stem and PATH.match(stem):
            return True
    return TITLE.match(title.strip()) is not None
