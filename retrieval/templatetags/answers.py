from __future__ import annotations

from collections.abc import Sized

from django import template
from django.utils.safestring import SafeString, mark_safe

from retrieval.rendering import markdown_html

register = template.Library()


@register.filter
def markdown(text: str, citations: Sized | int = 0) -> SafeString:
    """Markdown as HTML, markers linked to the citations (a list, or how many);
    safe because the renderer escapes all raw HTML and keeps only http(s) links
    (retrieval.rendering)."""
    count = citations if isinstance(citations, int) else len(citations)
    return mark_safe(markdown_html(text or "", citations=count))
