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
VERSION_OR_INDEX = re.compile(r"^(?:v?\d[\w.-]*|index)$", re.IGNORECASE)
TITLE = re.compile(
    r"^(?:change-?log\b|changes(?:\s+(?:in|since|for)\b|\s*(?:[—–|:-]|$))"
    r"|release notes|release \d|what[’']?s new|version history)",
    re.IGNORECASE,
)


def is_release_notes(*, url: str, title: str) -> bool:
    """Whether the page at ``url`` titled ``title`` is release notes or a
    changelog: by the last segment of its path, or the one before a version or an
    index (``releases/3.2.4/``, ``whatsnew/3.11.html``), or by its title."""
    segments = [s for s in urlsplit(url).path.split("/") if s]
    stems = [s.rsplit(".", 1)[0] if "." in s else s for s in segments]
    named = stems[-1:]
    if len(stems) > 1 and VERSION_OR_INDEX.match(stems[-1]):
        named = stems[-2:]
    if any(PATH.match(stem) for stem in named):
        return True
    return TITLE.match(title.strip()) is not None
